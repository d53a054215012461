"""cpu-offload: optimizer states or parameters live in host memory and cross the PCIe bus every step.

Also owns the classification of host<->device copies into input batches and offload traffic,
shared with pageable-memcpy (which must not count offload copies twice).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..facts import claims
from ..facts.memory_fit import MIXED_ADAM_BYTES, SAFETY_MARGIN, gpus_needed, state_options
from ..facts.optimizer import OPT_PREFIX
from ..facts.run import num_parameters
from ..facts.device import primary_kernels, primary_memcpy_mask
from ..facts.steps import step_set
from ..facts.model_family import family_of
from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.tables import name_flags
from ..trace.timeline import IDLE_PARTS, is_dataloader
from ..trace.memory import memory_profile
from .base import Detector, events_from, fmt_us, in_steps, option, pct, window_label

_OPT_STEP = OPT_PREFIX
_OFFLOAD_WORDS = re.compile(r"offload|cpu_?adam|cpuadam", re.IGNORECASE)
GB = 1e9
MB = 1e6
# mixed-precision Adam's state per parameter (16 B; memory_fit.STATE_RECIPES says where it comes from)
TRAIN_BYTES_PER_PARAM = MIXED_ADAM_BYTES


@dataclass(frozen=True)
class OffloadTraffic:
    """Which host<->device copies of the analysed steps are offload traffic, and why."""

    mask: np.ndarray  # bool over trace.memcpy rows: the copy is offload traffic
    input_mask: np.ndarray  # bool over trace.memcpy rows: the copy is an input-batch copy
    rule: str  # the rule that fired ("" when it is not offload)
    htod_bytes: float  # non-input host->device bytes per step
    dtoh_bytes: float  # device->host bytes per step
    input_bytes: float  # input-batch host->device bytes per step
    big_htod_copies: float  # non-input host->device copies >= the chunk size, per step
    cpu_opt: pd.DataFrame  # Optimizer.step spans judged to run on the CPU (+ n_kernels column)

    @property
    def is_offload(self) -> bool:
        return bool(self.rule)


def run_config_says_offload(trace) -> bool:
    """True when the run metadata mentions offload (a key or a value); never raises on bad metadata."""
    rc = trace.meta.run_config
    if not isinstance(rc, dict):
        return False
    cfg = rc.get("config")
    if not isinstance(cfg, dict):
        return False
    for k, v in cfg.items():
        if _OFFLOAD_WORDS.search(str(k)) and v not in (None, False, "", 0, "none", "None", "false"):
            return True
        if isinstance(v, str) and _OFFLOAD_WORDS.search(v):
            return True
    return False


def _host_copies(trace) -> pd.DataFrame:
    """HtoD/DtoH copies (not memsets) of the analysed steps on the primary device."""
    mc = trace.memcpy
    if not len(mc):
        return mc
    keep = (~mc["is_memset"].to_numpy()) & mc["kind"].isin(["HtoD", "DtoH"]).to_numpy()
    keep &= primary_memcpy_mask(trace)
    return in_steps(mc[keep], trace)


def _input_copy_mask(trace, hc: pd.DataFrame) -> np.ndarray:
    """Input-batch copies: host->device copies issued after the latest DataLoader __next__ (or step
    start) and before the issuing thread launched any kernel since then (`batch.to(device)` runs
    between `next(loader)` and the forward pass)."""
    out = np.zeros(len(hc), dtype=bool)
    if not len(hc):
        return out
    ops = trace.cpu_ops
    anchors = [trace.steps["start_us"].to_numpy()]
    if len(ops):
        dl = ops[is_dataloader(ops["name"])]
        anchors.append(dl["end_us"].to_numpy())
    anchors = np.sort(np.concatenate(anchors))
    rt = trace.runtime
    k = primary_kernels(trace)
    has_launch = (hc["launch_idx"].to_numpy() >= 0) & (len(rt) > 0)
    t = np.where(has_launch, hc["launch_ts_us"].to_numpy(), hc["ts_us"].to_numpy())
    tid = np.where(has_launch, rt["tid"].to_numpy()[np.maximum(hc["launch_idx"].to_numpy(), 0)] if len(rt) else -1, -1)
    ai = np.searchsorted(anchors, t, side="right") - 1
    a = np.where(ai >= 0, anchors[np.maximum(ai, 0)], -np.inf)
    k_launched = k["launch_idx"].to_numpy() >= 0
    k_t = np.where(k_launched, k["launch_ts_us"].to_numpy(), k["ts_us"].to_numpy())
    k_tid = np.where(k_launched, rt["tid"].to_numpy()[np.maximum(k["launch_idx"].to_numpy(), 0)] if len(rt) else -1, -1)
    is_htod = (hc["kind"] == "HtoD").to_numpy().copy()
    if len(ops):
        # FSDP2 names its parameter transfers (FSDP::pre_forward ...) and its input move
        # (FSDP::inputs_to_device): a copy under any other FSDP:: annotation is never an input batch
        fsdp = ops[
            name_flags(ops["name"], lambda n: n.startswith("FSDP::") and not n.startswith("FSDP::inputs_to_device"))
        ]
        if len(fsdp):
            is_htod &= ~iv.contains(iv.union(fsdp["ts_us"], fsdp["end_us"]), t)
    for th in np.unique(tid):
        sel = tid == th
        kt = np.sort(k_t[k_tid == th])
        n_before = np.searchsorted(kt, t[sel], side="left") - np.searchsorted(kt, a[sel], side="left")
        out[sel] = n_before == 0
    return out & is_htod


@dataclass(frozen=True)
class CpuOffload(Detector):
    """
    What it detects
        Optimizer states or parameters that live in host memory and cross the PCIe bus every step:
        DeepSpeed ZeRO-Offload / ZeRO-Infinity (offload_optimizer / offload_param to cpu or nvme),
        FSDP CPUOffload / CPUOffloadPolicy, accelerate CPU offload. The signature is model-sized
        copy volume (hundreds of MB to GB per step) in both directions (gradients device-to-host,
        updated parameters host-to-device), often split into many parameter-sized chunks, and an
        `Optimizer.step#...` span (e.g. `Optimizer.step#DeepSpeedCPUAdam.step`) that runs for
        milliseconds without launching a kernel: the optimizer runs on the CPU (foreach and fused
        GPU optimizers launch 2 to 5 kernels even for a whole model, so any kernel rules it out).

        Input batches are not offload: host-to-device copies issued after `next(loader)` (or the
        step start) and before the issuing thread launches its first kernel are input copies and
        are excluded (copies under FSDP's own `FSDP::` annotations, other than
        `FSDP::inputs_to_device`, are parameter transfers). Offload is reported when one of these
        holds, per analysed step: both directions carry at least `min_bytes_per_step` and the
        smaller is at least `min_direction_ratio` of the larger (an input batch moves one way); or
        an optimizer step runs on the CPU and both directions carry at least
        `min_bytes_with_cpu_optimizer`; or non-input host-to-device traffic of at least
        `min_bytes_per_step` arrives in at least `min_stream_copies` chunks of at least
        `chunk_bytes` (parameter streaming, e.g. offloaded inference weights); or the run metadata
        mentions offload and a CPU optimizer step or `min_bytes_with_cpu_optimizer` each way is
        seen. The offload copies are then the non-input copies of at least `chunk_bytes`.

    Why it costs time
        PCIe moves 12 (Gen3), 25 (Gen4) or 50 (Gen5) GB/s per direction at best with pinned
        memory, 50-100x less than HBM. A model whose gradients and parameters cross it every step
        pays bytes / bus bandwidth per step, and a CPU Adam step over billions of parameters takes
        hundreds of milliseconds during which the GPU has nothing to do. This is a GPU memory
        capacity limit: offload exists because the training state (about 16 bytes per parameter
        for mixed-precision Adam) does not fit in GPU memory; tuning the offload only narrows the
        gap.

    How time lost is estimated
        GPU time spent only on the offload copies (the timeline's memcpy part inside those
        copies: no kernel running) plus, when an optimizer step runs on the CPU, the GPU idle time
        inside `Optimizer.step#...` spans that the timeline attributes to CPU work (idle_cpu). No
        other idle part is claimed, so nothing is counted twice with dataloader-stall, host-sync
        or launch-bound. This is the time saved if the state fitted on the GPU, minus the GPU
        optimizer step that would replace the CPU one (milliseconds); it is a point estimate.

    How to fix
        This is a hardware capacity limit, not a tuning problem: make the training state fit in
        GPU memory instead of moving it across PCIe every step. Use more GPUs and shard the states
        across them (ZeRO-3 / FSDP full sharding without offload), GPUs with more memory, or
        shrink the state: LoRA / QLoRA (4-bit base weights), 8-bit or paged 8-bit optimizers, a
        smaller model. Pinned offload buffers are only a secondary improvement.

        The evidence sizes each option with the memory model (docs/memory.md): the parameter count
        (from the run configuration, else from the device-to-host gradient copies at 2 bytes per
        parameter), the state at 16 B/parameter as now, 8 B with bf16 states, 10 B with 8-bit Adam
        states, ~0.66 B with QLoRA, plus the measured activations when the trace has memory figures;
        each against 90% of the device's memory. The fix names the least invasive one that fits, or
        how many such GPUs (sharded) or how large a single GPU the current state needs.

        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`, DeepSpeed JSON):

            # before: ZeRO-2 with CPU offload on one GPU
            ds = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
            args = TrainingArguments(..., deepspeed=ds)
            # after: shard across the GPUs you have, without offload, and shrink the state
            ds = {"zero_optimization": {"stage": 3}}
            args = TrainingArguments(..., deepspeed=ds, optim="paged_adamw_8bit", bf16=True)
            # or QLoRA: BitsAndBytesConfig(load_in_4bit=True) + peft LoraConfig(...)

        Plain PyTorch:

            # before
            model = FSDP(model, cpu_offload=CPUOffload(offload_params=True))
            # after: more GPUs, no offload; or an 8-bit optimizer
            model = FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD)
            opt = bnb.optim.AdamW8bit(model.parameters(), lr=1e-4)
            # if offload must stay: pinned buffers ("pin_memory": true in DeepSpeed's
            # offload_optimizer / offload_param) roughly double the copy bandwidth

    False positives
        Very large bidirectional data movement that is not model state (e.g. a pipeline that
        uploads big inputs and downloads big outputs every step, both past the thresholds) can
        look like offload; check that the copies are parameter- or gradient-sized. Activation
        offloading (CPU-offloaded activation checkpointing) produces the same pattern and the same
        capacity diagnosis.

    References
        DeepSpeed ZeRO-Offload / ZeRO-Infinity docs (offload_optimizer, offload_param,
        pin_memory), DeepSpeed issues #6695 and #7253 (bytes per parameter, effective bandwidth);
        PyTorch FSDP CPUOffload / CPUOffloadPolicy; nvbandwidth PCIe measurements.
    """

    code = "TI105"
    fires_on = ("builders_transfer.build_cpu_offload", "builders_transfer.build_fsdp_param_offload")
    silent_on = (
        "builders.build_healthy",
        "builders.build_dataloader_stall",
        "builders_transfer.build_input_copies_only",
        "builders_transfer.build_pageable_outputs",
        "builders_transfer.build_exposed_nccl",
    )

    claims_parts = ("idle_cpu",)
    reserves = ("idle_cpu",)  # the GPU idle under a CPU-side optimizer step
    provides = {"offload traffic": "traffic"}  # read by pageable-memcpy, which leaves that traffic alone
    min_bytes_per_step: float = option(
        128 * MB,
        "bytes per step each direction must carry (both-directions "
        "rule) or host-to-device must carry (parameter streaming)",
    )
    min_direction_ratio: float = option(0.2, "smaller direction / larger direction for the both-directions rule")
    min_bytes_with_cpu_optimizer: float = option(
        16 * MB, "bytes per step each direction must carry when an optimizer step runs on the CPU"
    )
    chunk_bytes: float = option(
        1 << 20,
        "a copy at least this large is a state chunk; smaller copies are "
        "scalars, masks or metrics and are never offload traffic",
    )
    min_stream_copies: float = option(16, "non-input host-to-device chunks per step for the parameter streaming rule")
    min_cpu_opt_us: float = option(
        5000.0,
        "an Optimizer.step span at least this long (us) that launches at most "
        "max_cpu_opt_kernels kernels runs on the CPU",
    )
    max_cpu_opt_kernels: int = option(
        0,
        "most kernels a CPU-side Optimizer.step span may launch (foreach/fused GPU "
        "optimizers launch as few as 2-5 kernels per step)",
    )
    min_frac: float = option(0.02, "minimum share of the step time lost to report")

    # --- classification shared with pageable-memcpy ------------------------------------------------
    def cpu_optimizer_spans(self, trace) -> pd.DataFrame:
        ops = trace.cpu_ops
        if not len(ops):
            return ops
        opt = ops[name_flags(ops["name"], lambda n: n.startswith(_OPT_STEP))]
        opt = in_steps(opt, trace)
        opt = opt[opt["dur_us"] >= self.min_cpu_opt_us]
        if not len(opt):
            return opt.assign(n_kernels=np.zeros(0, dtype=np.int64))
        k = trace.kernels
        rt = trace.runtime
        launched = k[k["launch_idx"] >= 0] if len(k) else k
        kt = launched["launch_ts_us"].to_numpy() if len(launched) else np.zeros(0)
        ktid = rt["tid"].to_numpy()[launched["launch_idx"].to_numpy()] if len(launched) else np.zeros(0, dtype=np.int64)
        opt = opt.assign(n_kernels=_launched_inside(kt, ktid, opt))
        return opt[opt["n_kernels"] <= self.max_cpu_opt_kernels]

    def traffic(self, trace) -> OffloadTraffic:
        n_rows = len(trace.memcpy)
        mask = np.zeros(n_rows, dtype=bool)
        input_mask = np.zeros(n_rows, dtype=bool)
        hc = _host_copies(trace) if trace.has_gpu else trace.memcpy.iloc[0:0]
        n_steps = max(len(trace.steps), 1)
        cpu_opt = self.cpu_optimizer_spans(trace) if trace.has_gpu else trace.cpu_ops.iloc[0:0]
        if not len(hc):
            return OffloadTraffic(mask, input_mask, "", 0.0, 0.0, 0.0, 0.0, cpu_opt)
        inp = _input_copy_mask(trace, hc)
        input_mask[hc.index.to_numpy()[inp]] = True
        is_htod = (hc["kind"] == "HtoD").to_numpy()
        big = hc["size_bytes"].to_numpy() >= self.chunk_bytes
        nbytes = hc["size_bytes"].to_numpy()
        htod = float(nbytes[is_htod & ~inp].sum()) / n_steps
        dtoh = float(nbytes[~is_htod].sum()) / n_steps
        inb = float(nbytes[inp].sum()) / n_steps
        big_htod = float(np.sum(is_htod & ~inp & big)) / n_steps
        lo, hi = min(htod, dtoh), max(htod, dtoh)
        both = lo >= self.min_bytes_per_step and hi > 0 and lo / hi >= self.min_direction_ratio
        with_opt = len(cpu_opt) > 0 and lo >= self.min_bytes_with_cpu_optimizer
        streaming = htod >= self.min_bytes_per_step and big_htod >= self.min_stream_copies
        config = run_config_says_offload(trace) and (lo >= self.min_bytes_with_cpu_optimizer or len(cpu_opt) > 0)
        rule = (
            "both directions"
            if both
            else "CPU optimizer"
            if with_opt
            else "parameter streaming"
            if streaming
            else "run config"
            if config
            else ""
        )
        if rule:
            sel = big & ~inp
            if rule == "parameter streaming":
                sel &= is_htod
            mask[hc.index.to_numpy()[sel]] = True
        return OffloadTraffic(mask, input_mask, rule, htod, dtoh, inb, big_htod, cpu_opt)

    # --- replay model -------------------------------------------------------------------------------
    def whatif(self, graph, finding) -> str:
        """Replay model: the training state lives on the GPU. The offload copies (the finding's
        host<->device chunks) go: no copy on the bus, no host call, no host wait. A CPU-side optimizer
        step becomes a GPU optimizer step at device memory bandwidth: its host time leaves the thread,
        and a fused optimizer on the GPU reads and writes the whole mixed-precision Adam state once,
        2 x 16 B per parameter (memory_fit.MIXED_ADAM_BYTES) over the GPU's memory bandwidth
        (trace/hardware.py mem_gbps); it runs where the last gradient copy before the CPU step ran (same
        stream, same launch). Parameters: the run configuration's num_parameters, else the
        device-to-host copies at 2 B per parameter (bf16 gradients), as the detector counts them. When
        the state does not fit the GPU (the finding's hardware limit), this is what a GPU that holds it
        (or the sharding that makes it fit) would give, and the model says so."""
        trace = graph.trace
        if finding is None or not trace.has_gpu:
            return "no offload found: nothing to change"
        tr = trace.memo(("offload traffic", self), lambda: self.traffic(trace))
        if not tr.is_offload:
            return "no offload traffic: nothing to change"
        copies = graph.op_mask("memcpy", np.flatnonzero(tr.mask))
        n_copies = int(copies.sum())
        opt = tr.cpu_opt if tr.rule != "parameter streaming" else tr.cpu_opt.iloc[0:0]
        peaks = trace.device.peaks if trace.device is not None else None
        nparams = num_parameters(trace) or int(tr.dtoh_bytes / 2)
        opt_us = 2 * nparams * TRAIN_BYTES_PER_PARAM / (peaks.mem_gbps * 1e3) if peaks is not None and nparams else None
        proxy = np.zeros(len(graph.g_ts), bool)
        removed_host = 0.0
        if len(opt) and opt_us is not None:
            removed_host = graph.remove_host_time(opt["ts_us"].to_numpy(), opt["end_us"].to_numpy())
            launched = graph.g_launch >= 0
            at = np.where(launched, graph.h_ts[np.maximum(graph.g_launch, 0)], graph.g_ts)
            for t0 in opt["ts_us"].to_numpy():
                for cand in (copies & launched, launched):
                    c = np.flatnonzero(cand & (at <= t0))
                    if len(c):
                        proxy[c[np.argmax(at[c])]] = True
                        break
        gone = copies & ~proxy
        graph.remove_gpu(gone)
        hosts = np.zeros(len(graph.h_ts), bool)
        hosts[graph.g_launch[(copies | proxy) & (graph.g_launch >= 0)]] = True
        graph.drop_host_calls(hosts)
        if proxy.any():
            graph.g_dur = np.where(proxy, opt_us, graph.g_dur)
            graph.g_slack = np.where(proxy, 0.0, graph.g_slack)
            graph.g_lat = np.where(proxy, 0.0, graph.g_lat)
        text = f"{n_copies} offload cop{'y' if n_copies == 1 else 'ies'} go (state on the GPU)"
        if len(opt):
            if opt_us is None:
                text += "; the CPU optimizer step stays (the GPU's memory bandwidth is unknown)"
            else:
                text += (
                    f"; the CPU optimizer step ({removed_host / max(len(opt), 1) / 1e3:.1f} ms of host work) "
                    f"becomes a GPU step of {opt_us / 1e3:.2f} ms ({nparams / 1e6:.0f} M parameters x "
                    f"2 x {TRAIN_BYTES_PER_PARAM:g} B at {peaks.mem_gbps:g} GB/s, {peaks.name})"
                )
        mem = trace.device.total_mem_bytes if trace.device is not None else None
        options = state_options(nparams, mem) if nparams and mem else []
        if options and not options[0].fits:
            text += (
                f"; the state ({options[0].footprint_bytes / GB:.1f} GB) does not fit in {mem / GB:.0f} GB: "
                "this is the step a GPU that holds it (or sharding that makes it fit) would give"
            )
        return text

    # --- detector -----------------------------------------------------------------------------------
    def reserved(self, trace) -> iv.Set:
        tr = trace.memo(("offload traffic", self), lambda: self.traffic(trace))  # claims.provided's key
        if not tr.is_offload or tr.rule == "parameter streaming" or not len(tr.cpu_opt):
            return iv.EMPTY
        return iv.union(tr.cpu_opt["ts_us"], tr.cpu_opt["end_us"])

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        tr = trace.memo(("offload traffic", self), lambda: self.traffic(trace))
        if not tr.is_offload:
            return
        tl = trace.timeline
        mc = trace.memcpy[tr.mask]
        copy_set = iv.union(mc["ts_us"], mc["end_us"])
        exposed = iv.total(iv.intersect(tl.sets["memcpy"], copy_set))
        opt = tr.cpu_opt if tr.rule != "parameter streaming" else tr.cpu_opt.iloc[0:0]
        opt_idle = opt_idle_all = 0.0
        if len(opt):
            opt_set = iv.intersect(iv.union(opt["ts_us"], opt["end_us"]), step_set(trace))
            opt_claim = iv.intersect(tl.sets["idle_cpu"], opt_set)
            opt_idle = iv.total(opt_claim)
            opt_idle_all = sum(iv.total(iv.intersect(tl.sets[p], opt_set)) for p in IDLE_PARTS)
        lost = exposed + opt_idle
        frac = lost / ctx.window_us if ctx.window_us else 0.0
        if frac < self.min_frac:
            yield self.declined(
                f"offload traffic present ({tr.rule}), stalling the GPU {100 * frac:.1f}% of the "
                f"window, below the {100 * self.min_frac:g}% threshold"
            )
            return
        n = max(ctx.n_steps, 1)
        w = window_label(trace)
        is_htod = (mc["kind"] == "HtoD").to_numpy()
        htod_b, dtoh_b = float(mc["size_bytes"][is_htod].sum()), float(mc["size_bytes"][~is_htod].sum())
        htod_t, dtoh_t = float(mc["dur_us"][is_htod].sum()), float(mc["dur_us"][~is_htod].sum())
        peaks = trace.device.peaks if trace.device is not None else None
        link = peaks.host_link_gbps if peaks is not None else None
        ev = [
            Evidence(label="host-to-device offload copies", value=round(htod_b / n / GB, 3), unit="GB/step", window=w),
            Evidence(label="device-to-host offload copies", value=round(dtoh_b / n / GB, 3), unit="GB/step", window=w),
            Evidence(label="offload copies", value=round(len(mc) / n, 1), unit="copies/step", window=w),
        ]
        for label, b, t in (("host-to-device", htod_b, htod_t), ("device-to-host", dtoh_b, dtoh_t)):
            if b > 0 and t > 0:
                gbps = b / t / 1e3
                ev.append(
                    Evidence(
                        label=f"{label} achieved bandwidth" + (f" (bus ~{link:g} GB/s pinned)" if link else ""),
                        value=round(gbps, 1),
                        unit="GB/s",
                        window=w,
                    )
                )
        if link:
            floor = max(htod_b, dtoh_b) / n / (link * 1e3)
            ev.append(
                Evidence(
                    label="copy time per step even at full bus bandwidth",
                    value=round(floor / 1e3, 1),
                    unit="ms",
                    window=w,
                )
            )
        ev.append(
            Evidence(
                label="GPU busy only with offload copies (exposed)",
                value=round(exposed / n / 1e3, 2),
                unit="ms/step",
                window=w,
            )
        )
        pageable = mc["src_kind"].astype(str).eq("Pageable") | mc["dst_kind"].astype(str).eq("Pageable")
        ev.append(
            Evidence(
                label="offload bytes through pageable memory",
                value=round(100 * float(mc["size_bytes"][pageable.to_numpy()].sum()) / max(htod_b + dtoh_b, 1), 1),
                unit="%",
                window=w,
            )
        )
        if tr.input_bytes > 0:
            ev.append(
                Evidence(
                    label="input-batch copies (excluded)", value=round(tr.input_bytes / MB, 1), unit="MB/step", window=w
                )
            )
        opt_name = ""
        if len(opt):
            opt_name = str(opt["name"].iloc[0])
            ev.append(
                Evidence(
                    label=f"CPU-side optimizer step ({opt_name})",
                    value=round(float(opt["dur_us"].median()) / 1e3, 1),
                    unit="ms (median)",
                    window=w,
                )
            )
            ev.append(Evidence(label="kernels launched inside it", value=int(opt["n_kernels"].max()), unit="max"))
            ev.append(
                Evidence(
                    label="GPU idle during the CPU optimizer step",
                    value=round(opt_idle_all / n / 1e3, 2),
                    unit="ms/step",
                    window=w,
                )
            )
            if opt_idle_all - opt_idle > 1.0:
                ev.append(
                    Evidence(
                        label="of which counted here (timeline: idle on CPU work; the rest is "
                        "attributed to another idle cause)",
                        value=round(opt_idle / n / 1e3, 2),
                        unit="ms/step",
                        window=w,
                    )
                )
        ev.append(Evidence(label="offload rule", value=tr.rule, unit=""))
        dev = trace.device
        mem = dev.total_mem_bytes if dev is not None else None
        prof = memory_profile(trace)
        if prof.source and trace.device_id in prof.devices:
            cap = prof.capacity_bytes.get(trace.device_id)
            mem = int(cap) if cap else mem
        nparams = num_parameters(trace)
        n_source = "run configuration"
        if not nparams and dtoh_b > 0:
            # the gradients leave the GPU once per step: bf16/fp16 gradients are 2 bytes per parameter
            nparams, n_source = int(dtoh_b / n / 2), "device-to-host gradient copies at 2 B/parameter (assumed bf16)"
        acts = 0.0
        if prof.source and trace.device_id in prof.devices:
            rises = [s.rise_bytes for s in prof.device_steps(trace.device_id) if s.rise_bytes is not None]
            acts = max(rises) if rises else 0.0
            how = "capture helper" if prof.source == "capture" else "[memory] events"
            ev.append(
                Evidence(
                    label=f"peak allocated on the GPU with offload ({how})",
                    value=round((prof.peak(trace.device_id) or 0) / GB, 2),
                    unit="GB",
                )
            )
        options = state_options(nparams, mem, acts) if nparams else []
        if nparams:
            ev.append(Evidence(label=f"parameters (from the {n_source})", value=round(nparams / 1e6, 1), unit="M"))
            ev.append(
                Evidence(
                    label=f"training state at ~{TRAIN_BYTES_PER_PARAM:g} B/parameter (mixed-precision Adam)",
                    value=round(nparams * TRAIN_BYTES_PER_PARAM / GB, 1),
                    unit="GB",
                )
            )
        if mem:
            ev.append(Evidence(label="GPU memory", value=round(mem / GB, 1), unit="GB"))
        for o in options:
            verdict = ("fits" if o.fits else "does not fit") + (
                f" under {SAFETY_MARGIN:.0%} of {mem / GB:.0f} GB" if mem else ""
            )
            ev.append(
                Evidence(
                    label=f"{o.recipe}: {o.bytes_per_param:g} B/parameter"
                    + (" + measured activations" if acts else "")
                    + f" ({verdict})",
                    value=round(o.footprint_bytes / GB, 1),
                    unit="GB",
                )
            )
        if options and mem:
            ev.append(
                Evidence(
                    label=f"GPUs of {mem / GB:.0f} GB that hold the current state sharded (ZeRO-3/FSDP)",
                    value=gpus_needed(options[0].footprint_bytes, mem),
                    unit="GPUs",
                )
            )
            ev.append(
                Evidence(
                    label="smallest single GPU that holds the current state without offload",
                    value=round(options[0].footprint_bytes / SAFETY_MARGIN / GB, 0),
                    unit="GB",
                )
            )
        moved = (htod_b + dtoh_b) / n
        title = (
            f"CPU offload moves {moved / GB:.2f} GB per step over PCIe"
            + (f" and runs the optimizer on the CPU ({fmt_us(float(opt['dur_us'].median()))})" if len(opt) else "")
            + f": GPU stalled {fmt_us(lost / n)} per step ({pct(frac)}); the "
            + ("weights do" if tr.rule == "parameter streaming" else "training state does")
            + " not fit"
            + (f" in {mem / GB:.0f} GB of GPU memory" if mem else " in GPU memory")
        )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence="high" if tr.rule in ("both directions", "CPU optimizer") else "medium",
            evidence=ev,
            fix=_fix(ctx.framework, mem, family_of(trace)) + _smallest_change(options, mem, n_source),
            idle_claims={"idle_cpu": opt_claim} if len(opt) else None,
            events=events_from(mc, trace, "memcpy", 2) + events_from(opt, trace, "cpu", 1),
        )


def offload_optimizer_set(trace) -> iv.Set:
    """Host time inside a CPU-side optimizer step of an offloaded run: cpu-offload owns the idle_cpu under it
    (by the run's configured cpu-offload thresholds)."""
    return claims.reserved(trace, CpuOffload.name)


def _smallest_change(options, mem, n_source: str) -> str:
    """The least invasive state recipe that fits, with its footprint; else how much memory it takes."""
    if not options or not mem:
        return ""
    if options[0].fits:
        if n_source == "run configuration":
            return (
                f" By the memory model the state fits as it is ({options[0].footprint_bytes / GB:.1f} GB of "
                f"{mem / GB:.0f} GB at {SAFETY_MARGIN:.0%}): try dropping the offload first."
            )
        return (
            f" Estimated from the gradient copies ({n_source}), the state would fit as it is "
            f"({options[0].footprint_bytes / GB:.1f} GB of {mem / GB:.0f} GB at {SAFETY_MARGIN:.0%}): check "
            "the parameter count (with ZeRO/FSDP sharding each rank copies only its shard) before resizing."
        )
    fit = next((o for o in options if o.fits), None)
    if fit is not None:
        return (
            f" Smallest change that fits: {fit.recipe} (~{fit.footprint_bytes / GB:.1f} GB of "
            f"{mem / GB:.0f} GB at {SAFETY_MARGIN:.0%}; memory model, docs/memory.md)."
        )
    return (
        f" No single-GPU recipe here fits {mem / GB:.0f} GB; shard over "
        f"{gpus_needed(options[0].footprint_bytes, mem)} such GPUs or use one of at least "
        f"{options[0].footprint_bytes / SAFETY_MARGIN / GB:.0f} GB."
    )


def _fix(framework: str, mem: int | None, family: str = "unknown") -> str:
    fits = f"the {mem / GB:.0f} GB of GPU memory" if mem else "GPU memory"
    # adapters (LoRA/QLoRA) are named for language models and runs whose family the trace does not show
    lora = family in ("language", "unknown")
    if framework in ("hf_trainer", "trl", "accelerate", "lightning"):
        how = (
            "remove offload_optimizer/offload_param from the DeepSpeed config (or the FSDP 'offload' option) and "
            f"make the state fit in {fits}: more or larger GPUs with ZeRO-3/FSDP sharding, or a smaller state ("
            + ("LoRA/QLoRA with load_in_4bit, " if lora else "")
            + "an 8-bit optimizer such as optim='paged_adamw_8bit', a smaller model)"
        )
    else:
        how = (
            "drop CPUOffload/CPUOffloadPolicy or DeepSpeed offload_* and make the state fit in "
            f"{fits}: more or larger GPUs with FSDP/ZeRO-3 sharding, or a smaller state ("
            + ("LoRA/QLoRA, " if lora else "")
            + "an 8-bit optimizer such as bitsandbytes AdamW8bit, a smaller model)"
        )
    return (
        "This is a GPU memory capacity limit, not an offload tuning problem: "
        + how
        + "; pinned offload buffers (pin_memory) only narrow the gap."
    )


def _launched_inside(kt: np.ndarray, ktid: np.ndarray, spans: pd.DataFrame) -> np.ndarray:
    """For each span (ts_us, end_us, tid): how many launches at times `kt` on threads `ktid` fall in
    [ts_us, end_us) on its thread (the launches sorted by thread then time, two binary searches a span)."""
    order = np.lexsort((kt, ktid))
    kt, ktid = kt[order], ktid[order]
    ts, end, tid = (spans[c].to_numpy() for c in ("ts_us", "end_us", "tid"))
    lo, hi = np.searchsorted(ktid, tid, side="left"), np.searchsorted(ktid, tid, side="right")
    n = np.zeros(len(spans), dtype=np.int64)
    for i in range(len(spans)):
        block = kt[lo[i] : hi[i]]
        n[i] = max(0, np.searchsorted(block, end[i], side="left") - np.searchsorted(block, ts[i], side="left"))
    return n
