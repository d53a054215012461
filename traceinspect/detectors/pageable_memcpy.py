"""pageable-memcpy: host<->device copies from or to pageable (unpinned) host memory."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..facts import claims
from ..facts.device import primary_memcpy_mask
from ..findings import Evidence
from ..trace import intervals as iv
from .base import Detector, events_from, fmt_us, in_steps, option, pct, window_label

MB = 1e6
# pinned PCIe Gen3 x16, per direction, measured (SIGNATURES.md section 10): the reference when neither
# the trace (pinned copies) nor the GPU table gives one
DEFAULT_PINNED_GBPS = 12.0
_DIRS = (("HtoD", "host-to-device"), ("DtoH", "device-to-host"))
# idle under a blocking copy call that this detector claims (as allocator-churn does for its calls):
# idle_sync stays host-sync's, idle_dataloader dataloader-stall's, idle_unknown (queued work) nobody's
CLAIMED_IDLE = ("idle_launch", "idle_cpu")


@dataclass(frozen=True)
class PageableMemcpy(Detector):
    """
    What it detects
        Host-to-device and device-to-host copies whose host side is pageable memory
        (`Memcpy HtoD (Pageable -> Device)`, `Memcpy DtoH (Device -> Pageable)`): input batches
        without `pin_memory`, `.cpu()` / `.numpy()` of outputs and logits. Evidence: copies and
        bytes per step, achieved bandwidth against what pinned copies reach on the same bus, the
        host time blocked in the copy calls, and the GPU time in which only these copies ran.
        Copies classified as CPU offload traffic (cpu-offload) are left to that detector.

    Why it costs time
        The GPU's copy engines can only read pinned memory, so the driver stages a pageable
        buffer through a pinned bounce buffer chunk by chunk: roughly half the bus bandwidth, the
        host thread blocks until the copy is done (`cudaMemcpyAsync` becomes synchronous), and
        the copy cannot overlap with host work or be prefetched. A pinned copy with
        `non_blocking=True` runs at bus speed while the host keeps launching kernels.

    How time lost is estimated
        Two parts, added. (1) The GPU idle time while the host is blocked in these copy calls: a
        pageable copy call is synchronous, so it is counted as allocator-churn counts its blocking
        calls: the idle time inside the call that the timeline attributes to the host being late
        (its idle_launch and idle_cpu parts; idle of a synchronising call is left to host-sync,
        DataLoader waits to dataloader-stall, and gaps whose next GPU op was already queued are
        the GPU's own). Pinned memory with `non_blocking=True` returns at once, so the host keeps
        the GPU fed. (2) For each direction, the GPU time in which only these copies ran (the
        timeline's memcpy part inside them) times (1 - pageable bandwidth / pinned bandwidth): the
        exposed time a copy at pinned speed would save. The pinned bandwidth is what pinned copies
        of the same direction achieve in this trace when there are enough of them, else the GPU's
        practical pinned PCIe figure. Only copies of at least `min_copy_bytes` count (smaller ones are latency-bound;
        host-sync covers their blocking). The further overlap pinned copies would allow is not
        counted, so this is a conservative point estimate.

    How to fix
        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`):

            # before
            args = TrainingArguments(..., dataloader_pin_memory=False)
            # after (the default; also keep the loader fed)
            args = TrainingArguments(..., dataloader_pin_memory=True, dataloader_num_workers=4)

        Plain PyTorch:

            # before
            loader = DataLoader(ds, batch_size=64)
            x = x.to("cuda")
            preds.append(logits.cpu())                        # every step, into pageable memory
            # after
            loader = DataLoader(ds, batch_size=64, pin_memory=True)
            x = x.to("cuda", non_blocking=True)
            host = torch.empty(logits.shape, dtype=logits.dtype, pin_memory=True)  # once
            host.copy_(logits, non_blocking=True)             # or keep results on the GPU and
                                                              # copy them once per epoch

    False positives
        Copies the program needs to see on the host right away (a metric that drives control
        flow) still block after pinning; the estimate counts only the bandwidth part. ROCm traces
        name all host memory "Host" and are skipped.

    References
        CUDA Runtime API "API synchronization behavior" (pageable staging); NVIDIA blog "How to
        Optimize Data Transfers in CUDA C/C++"; Nsight Systems `cuda_memcpy_async` rule; PyTorch
        pin_memory / non_blocking docs.
    """

    code = "TI204"
    fires_on = ("builders_transfer.build_input_copies_only", "builders_transfer.build_pageable_outputs")
    silent_on = (
        "builders.build_healthy",
        "builders_transfer.build_cpu_offload",
        "builders_transfer.build_exposed_nccl",
    )

    min_frac: float = option(0.01, "minimum share of the step time the estimate must reach to report")
    min_copy_bytes: float = option(1 << 20, "copies smaller than this are latency-bound and not estimated")
    min_pinned_ref_bytes: float = option(
        16 << 20,
        "pinned bytes (in copies >= min_copy_bytes) of one direction needed to use this trace's own pinned bandwidth",
    )

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        mc = trace.memcpy
        if not len(mc):
            return
        host = (~mc["is_memset"].to_numpy()) & mc["kind"].isin(["HtoD", "DtoH"]).to_numpy()
        src, dst = mc["src_kind"].astype(str).to_numpy(), mc["dst_kind"].astype(str).to_numpy()
        if not (host & ((src == "Pageable") | (dst == "Pageable"))).any():
            if host.any() and np.any(((src == "Host") | (dst == "Host")) & host):
                yield self.skip("host memory is named 'Host' without the pageable/pinned distinction (ROCm)")
            return
        pg, big = self._copies(trace)
        if not len(big):
            return
        tl = trace.timeline
        n = max(ctx.n_steps, 1)
        w = window_label(trace)
        peaks = trace.device.peaks if trace.device is not None else None
        lost = 0.0
        ev = []
        for kind, label in _DIRS:
            d = big[(big["kind"] == kind).to_numpy()]
            if not len(d):
                continue
            bw = float(d["size_bytes"].sum()) / float(d["dur_us"].sum()) / 1e3 if d["dur_us"].sum() > 0 else 0.0
            ref, ref_src = self._pinned_ref(trace, host, src, dst, kind, peaks)
            ref = max(ref, bw)
            exposed = iv.total(iv.intersect(tl.sets["memcpy"], iv.union(d["ts_us"], d["end_us"])))
            lost += exposed * (1.0 - bw / ref) if ref > 0 else 0.0
            ev += [
                Evidence(
                    label=f"pageable {label} copies >= {self.min_copy_bytes / MB:.0f} MB",
                    value=f"{len(d) / n:.1f}/step, {float(d['size_bytes'].sum()) / n / MB:.1f} MB/step",
                    unit="",
                    window=w,
                ),
                Evidence(
                    label=f"pageable {label} achieved bandwidth (pinned: {ref:.1f} GB/s, {ref_src})",
                    value=round(bw, 1),
                    unit="GB/s",
                    window=w,
                ),
                Evidence(
                    label=f"GPU busy only with these {label} copies (exposed)",
                    value=round(exposed / n / 1e3, 2),
                    unit="ms/step",
                    window=w,
                ),
            ]
        idle = blocked_idle(trace, big)
        lost += idle
        frac = lost / ctx.window_us if ctx.window_us else 0.0
        if frac < self.min_frac:
            yield self.declined(
                f"{len(big)} pageable copies of {self.min_copy_bytes / 2**20:g} MB or more, costing "
                f"{100 * frac:.1f}% of the window, below the {100 * self.min_frac:g}% threshold"
            )
            return
        blocked = float(big["launch_dur_us"].fillna(0.0).sum())
        ev.append(
            Evidence(
                label="host blocked in the copy calls", value=round(blocked / n / 1e3, 2), unit="ms/step", window=w
            )
        )
        ev.append(
            Evidence(
                label="GPU idle while the host is blocked in the copy calls (claimed)",
                value=round(idle / n / 1e3, 2),
                unit="ms/step",
                window=w,
            )
        )
        small = len(pg) - len(big)
        if small:
            ev.append(
                Evidence(
                    label="smaller pageable copies (not estimated)",
                    value=round(small / n, 1),
                    unit="copies/step",
                    window=w,
                )
            )
        kinds = set(big["kind"].astype(str))
        what = "input" if kinds == {"HtoD"} else "output" if kinds == {"DtoH"} else "host"
        mb = float(big["size_bytes"].sum()) / n / MB
        cnt = len(big) / n
        title = (
            f"{cnt:.0f} pageable {what} cop{'y' if round(cnt) == 1 else 'ies'} per step ({mb:.0f} MB) run at "
            f"pageable speed and block "
            f"the host: {fmt_us(lost / n)} per step ({pct(frac)}) recoverable with pinned memory"
        )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence="medium",
            evidence=ev,
            fix=_fix(ctx.framework, kinds),
            events=events_from(big, trace, "memcpy", 3),
        )

    def _copies(self, trace):
        """The pageable host copies of the analysed steps on the primary device that are not offload
        traffic, and those of at least min_copy_bytes (the ones estimated)."""
        mc = trace.memcpy
        host = (~mc["is_memset"].to_numpy()) & mc["kind"].isin(["HtoD", "DtoH"]).to_numpy()
        src, dst = mc["src_kind"].astype(str).to_numpy(), mc["dst_kind"].astype(str).to_numpy()
        pageable = host & ((src == "Pageable") | (dst == "Pageable"))
        pageable &= primary_memcpy_mask(trace)
        pageable &= ~claims.provided(trace, "offload traffic").mask
        pg = in_steps(mc[pageable], trace)
        return pg, pg[pg["size_bytes"] >= self.min_copy_bytes]

    def whatif(self, graph, finding) -> str:
        """Replay model: the pageable copies this detector estimates (>= min_copy_bytes, not offload
        traffic) become pinned copies with non_blocking=True: the host call no longer waits for the copy
        (it returns after its own launch cost), and the copy itself runs at the pinned bandwidth: its
        duration scales by (pageable bandwidth achieved / pinned bandwidth), per direction, the pinned
        figure being what pinned copies of that direction reach in this trace, else the GPU's practical
        pinned PCIe figure (trace/hardware.py), else 12 GB/s (PCIe Gen3 x16). The copy keeps its place in
        its stream, so the kernels queued behind it still wait for it. Source: CUDA Runtime API,
        "API synchronization behavior" (pageable copies are staged and synchronous)."""
        trace = graph.trace
        if not trace.has_gpu or not len(trace.memcpy):
            return "no pageable copies estimated: nothing to change"
        mc = trace.memcpy
        _, big = self._copies(trace)
        if not len(big):
            return "no pageable copies estimated: nothing to change"
        host = (~mc["is_memset"].to_numpy()) & mc["kind"].isin(["HtoD", "DtoH"]).to_numpy()
        src, dst = mc["src_kind"].astype(str).to_numpy(), mc["dst_kind"].astype(str).to_numpy()
        peaks = trace.device.peaks if trace.device is not None else None
        parts, n = [], 0
        for kind, label in _DIRS:
            d = big[(big["kind"] == kind).to_numpy()]
            if not len(d) or d["dur_us"].sum() <= 0:
                continue
            bw = float(d["size_bytes"].sum()) / float(d["dur_us"].sum()) / 1e3
            ref, ref_src = self._pinned_ref(trace, host, src, dst, kind, peaks)
            ref = max(ref, bw)
            sel = graph.op_mask("memcpy", d.index.to_numpy())
            graph.g_dur = np.where(sel, graph.g_dur * (bw / ref), graph.g_dur)
            launches = graph.g_launch[sel & (graph.g_launch >= 0)]
            waits = np.zeros(len(graph.h_ts), bool)
            waits[launches] = True
            graph.stop_waiting(waits)
            n += int(sel.sum())
            parts.append(f"{label} at {ref:.1f} GB/s ({ref_src}) instead of {bw:.1f}")
        return f"{n} pageable cop{'y' if n == 1 else 'ies'} become pinned and non-blocking: " + "; ".join(parts)

    def _pinned_ref(self, trace, host, src, dst, kind, peaks) -> tuple[float, str]:
        mc = trace.memcpy
        pinned = host & ((src == "Pinned") | (dst == "Pinned")) & (mc["kind"] == kind).to_numpy()
        p = mc[pinned & (mc["size_bytes"].to_numpy() >= self.min_copy_bytes)]
        if len(p) and float(p["size_bytes"].sum()) >= self.min_pinned_ref_bytes and p["dur_us"].sum() > 0:
            return float(p["size_bytes"].sum()) / float(p["dur_us"].sum()) / 1e3, "pinned copies in this trace"
        if peaks is not None and peaks.host_link_gbps:
            return float(peaks.host_link_gbps), f"{peaks.name} practical PCIe"
        return DEFAULT_PINNED_GBPS, "PCIe Gen3 assumed"


def blocked_idle(trace, copies) -> float:
    """GPU idle time inside the copies' (synchronous) runtime calls, in the idle parts the timeline
    blames on the host being late (launch, cpu)."""
    ok = copies["launch_ts_us"].notna().to_numpy()
    if not ok.any():
        return 0.0
    start = copies["launch_ts_us"].to_numpy()[ok]
    end = start + copies["launch_dur_us"].fillna(0.0).to_numpy()[ok]
    sets = trace.timeline.sets
    host_late = [sets[p] for p in CLAIMED_IDLE]
    gaps = iv.union(np.concatenate([h[0] for h in host_late]), np.concatenate([h[1] for h in host_late]))
    return iv.total(iv.intersect(gaps, iv.union(start, end)))


def _fix(framework: str, kinds: set) -> str:
    hf = framework in ("hf_trainer", "trl", "accelerate")
    parts = []
    if "HtoD" in kinds:
        parts.append(
            "Pin the input batches: dataloader_pin_memory=True"
            if hf
            else "Pin the input batches: DataLoader(pin_memory=True) and .to(device, non_blocking=True)"
        )
    if "DtoH" in kinds:
        parts.append(
            "copy outputs into a preallocated pinned buffer (non_blocking=True) or keep them on the GPU "
            "instead of copying to host every step"
        )
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."
