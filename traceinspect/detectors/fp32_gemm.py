"""fp32-gemm: matmuls and convolutions in fp32 on CUDA cores of a GPU whose tensor cores would run them far faster."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..facts import kernels as K
from ..facts.device import primary_kernels
from ..findings import Evidence
from ..trace.hardware import KNOWN, peaks_for
from ..trace.tables import name_flags
from ..trace.timeline import is_comm_kernel
from .base import Claim, Detector, events_from, fmt_us, option, pct, step_kernels, window_label

_ROCM_ISA = re.compile(r"ISA(9[0-9][0-9a-f])", re.I)
_ROCM_ISA_PEAKS = {"90a": "mi250", "940": "mi300", "941": "mi300", "942": "mi300", "950": "mi300"}


@dataclass(frozen=True)
class Fp32Gemm(Detector):
    """
    What it detects
        Matrix multiplications and convolutions that run in fp32 on the CUDA cores (SIMT FFMA) of a
        GPU with tensor cores: cuBLAS `volta_sgemm_*` / `turing_sgemm_*` / `ampere_sgemm_*`,
        `sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_*`, CUTLASS `simt_sgemm`, cuDNN
        `implicit_convolve_sgemm`, `*scudnn*`, `dgrad_engine<float>` / `wgrad_alg0_engine<float>` /
        fp32 Winograd, and ROCm Tensile `Cijk_..._S_*` / `_SB_*` kernels. The precision is read from
        the kernel name; kernels whose name does not tell it are counted when the launching op
        (`aten::mm`, `addmm`, `bmm`, `linear`, convolution) recorded `Input type` "float". fp16, bf16,
        TF32 and fp8 kernels are never counted; on sm80+ a convolution of unknown precision is
        assumed TF32 (cuDNN's default, torch.backends.cudnn.allow_tf32). Tensor cores: fp16 from
        sm70 (V100, T4, RTX 20xx), TF32 and bf16 from sm80 (A100, RTX 30xx/40xx, H100), matrix
        cores on AMD MI200/MI300.

    Why it costs time
        A dense fp32 GEMM on CUDA cores runs at the fp32 peak (V100 15.7, A100 19.5, H100 67
        TFLOP/s), while the same GEMM on tensor cores runs at the fp16/bf16 peak (V100 125,
        A100 312, H100 989 TFLOP/s) or the TF32 peak (A100 156, H100 495). PyTorch leaves
        `torch.backends.cuda.matmul.allow_tf32` off since 1.12, so an fp32 model without autocast
        runs every matmul on CUDA cores.

    How time lost is estimated
        For each counted kernel: its duration x (1 - 1/s), with s the achievable speedup
        s = min(max_speedup, efficiency x tensor_peak / fp32_peak), tensor_peak the device's best
        of bf16/fp16 and TF32 tensor peaks (trace.device.peaks). Tensor-core GEMMs reach a smaller
        share of their peak than SIMT GEMMs do of theirs, and mixed precision keeps some work in
        fp32, so the peak ratio (8x on V100, 16x on A100/H100) is scaled by `efficiency` (0.5) and
        capped at `max_speedup` (4x), in line with the up-to-3x end-to-end speedups NVIDIA's
        mixed-precision guide reports for convnets and transformers. What that GPU-time saving gives
        back as step time is the replay's (docs/whatif.md): the kernels run faster in a copy of the
        trace's dependency graph, which is replayed. Where the GPU waits on the host (launch
        overhead, DataLoader, other CPU work) faster kernels give back nothing (the idle gaps just
        grow); where the host waits on the GPU in a synchronising call they give back up to what it
        waited. Time lost is that wall-time saving; the GPU-time saving, which a host-bound run only
        gets once its host side is fixed (the re-diagnosis, next bottlenecks), is given as evidence
        and decides whether the detector fires. A point estimate, not an upper bound; without
        deviceProperties the architecture comes from kernel-name prefixes (`volta_` = sm70) and
        confidence is low.

    How to fix
        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`):

            # before
            args = TrainingArguments(...)
            # after: Ampere / Hopper / MI200 / MI300
            args = TrainingArguments(..., bf16=True)            # or tf32=True as a first step
            # after: Volta / Turing (V100, T4, RTX 2080 Ti): no bf16 tensor cores
            args = TrainingArguments(..., fp16=True)

        Plain PyTorch:

            # before
            loss = model(x).loss
            # after (Ampere+): bf16 autocast, or at least TF32 for fp32 matmuls
            torch.backends.cuda.matmul.allow_tf32 = True      # = torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).loss
            # Volta / Turing: fp16 autocast with loss scaling
            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).loss
            scaler.scale(loss).backward(); scaler.step(opt); scaler.update()

    False positives
        Models that must stay in fp32 for accuracy (some scientific codes) are reported too; TF32 is
        then the cautious step. Small GEMMs (tiny batch, small hidden size) are bound by memory or
        launch overhead and gain less than modelled; the critical-path check above removes most of that.
        FFT convolutions (cgemm) and matrix-vector kernels (gemv) are not counted.

    References
        PyTorch notes on TF32 (numerical_accuracy, cuda.html#tensorfloat-32-tf32-on-ampere-devices);
        NVIDIA Mixed Precision Training guide; the TensorBoard profiler plugin's Tensor Cores rule.
    """

    code = "TI106"
    fires_on = (
        "builders_compute.build_fp32_gemm",
        "builders_compute.build_fp32_gemm_v100",
        "builders_compute.build_fp32_unknown_name",
    )
    silent_on = (
        "builders.build_healthy",
        "builders_compute.build_bf16_gemm",
        "builders_compute.build_tf32_gemm",
        "builders_compute.build_fp32_gemm_pascal",
    )

    min_share: float = option(0.05, "minimum share of the GPU's compute-kernel time spent in fp32 GEMM/conv kernels")
    min_saving_frac: float = option(
        0.001, "minimum GPU-time saving of the fp32 kernels, as a share of the analysed window"
    )
    efficiency: float = option(0.5, "tensor-core efficiency relative to SIMT fp32: scales the peak ratio")
    max_speedup: float = option(4.0, "cap on the per-kernel speedup from tensor cores")

    def whatif(self, graph, finding) -> str:
        """Replay model: the fp32 GEMM/convolution kernels (named fp32 precision) run `s` times faster, s
        the modelled tensor-core speedup of the traced GPU (`speedup`, the figure the finding states, to
        its two decimals), whether the detector reported them or declined them as below its threshold."""
        k = graph.trace.kernels
        hw = _hardware(graph.trace, primary_kernels(graph.trace)["name"]) if len(k) else None
        s = round(self.speedup(hw), 2) if hw is not None and hw["tensor_cores"] else 1.0
        if not len(k) or s <= 1.0:
            return "no fp32 GEMM speedup modelled: nothing to change"
        cls = K.classify(k["name"])
        kind, prec = cls["kind"].to_numpy(), cls["precision"].to_numpy()
        sel = graph.kernel_mask(np.flatnonzero(((kind == K.GEMM) | (kind == K.CONV)) & (prec == K.FP32)))
        if not sel.any():
            return "no fp32 GEMM/convolution kernels: nothing to change"
        graph.g_dur = np.where(sel, graph.g_dur / s, graph.g_dur)
        return f"{int(sel.sum())} fp32 GEMM/convolution kernel(s) run {s:.2f}x faster on tensor cores"

    def detect(self, trace, ctx):
        if not trace.has_gpu or not len(trace.kernels):
            yield self.skip("no GPU kernels in the trace")
            return
        k = primary_kernels(trace)
        hw = _hardware(trace, k["name"])
        if hw is None:
            yield self.skip("unknown GPU architecture (no deviceProperties and no arch in kernel names)")
            return
        if not hw["tensor_cores"]:
            yield self.skip(f"{hw['label']} has no tensor cores")
            return
        picked = self._select(trace, hw)
        if picked is None:
            return
        kin, kind, compute_us, by_name, by_op, op_float, op_total, sel = picked
        dur = kin["dur_us"].to_numpy()
        fp32_us = float(dur[sel].sum())
        share = fp32_us / compute_us
        if share < self.min_share:
            yield self.declined(
                f"fp32 GEMM/convolution present, {100 * share:.1f}% of GPU compute, below the "
                f"{100 * self.min_share:g}% threshold"
            )
            return
        s = self.speedup(hw)
        delta = dur[sel] * (1.0 - 1.0 / s)
        gpu_saving = float(delta.sum())
        if gpu_saving < self.min_saving_frac * ctx.window_us:
            yield self.declined(
                f"fp32 GEMM/convolution present ({fmt_us(fp32_us / max(ctx.n_steps, 1))}/step), tensor "
                f"cores would save {100 * gpu_saving / ctx.window_us:.1f}% of the window, below the "
                f"{100 * self.min_saving_frac:g}% threshold"
            )
            return
        lost, critical = ctx.step_saving(kin[sel], delta)
        conv_us = float(dur[sel & (kind == K.CONV)].sum())
        gemm_us = fp32_us - conv_us
        n = ctx.n_steps or 1
        win = window_label(trace)
        top = kin[sel].groupby("name", observed=True)["dur_us"].sum().sort_values(ascending=False)
        ev = [
            Evidence(
                label="fp32 GEMM/convolution kernel time", value=round(fp32_us / n / 1e3, 2), unit="ms/step", window=win
            ),
            Evidence(label="share of GPU compute-kernel time", value=round(100 * share, 1), unit="%", window=win),
            Evidence(label="of which convolution", value=round(100 * conv_us / fp32_us, 1), unit="%", window=win),
            Evidence(label="GPU", value=hw["label"], unit=""),
            Evidence(label="peak fp32 vs tensor/matrix cores", value=hw["peaks_label"], unit="TFLOP/s"),
            Evidence(label="modelled speedup of these kernels", value=round(s, 2), unit="x"),  # = whatif's
            Evidence(
                label="GPU time these kernels would save",
                value=round(gpu_saving / n / 1e3, 2),
                unit="ms/step",
                window=win,
            ),
            Evidence(
                label="share of that time the replay gives back as step time (the host waits on the GPU)",
                value=round(100 * critical, 1),
                unit="%",
                window=win,
            ),
            Evidence(label="top fp32 kernel", value=str(top.index[0])[:120], unit=""),
        ]
        if int(by_op.sum()):
            ev.append(
                Evidence(
                    label="kernels counted from the launching op's Input type 'float'",
                    value=int(by_op.sum()),
                    unit="kernels",
                    window=win,
                )
            )
        if op_total:
            ev.append(
                Evidence(
                    label="GEMM/conv ops with Input type float (up to 500 sampled)",
                    value=f"{op_float} of {op_total}",
                    unit="ops",
                    window=win,
                )
            )
        cfg = (trace.meta.run_config or {}).get("config") if isinstance(trace.meta.run_config, dict) else None
        amp_on = isinstance(cfg, dict) and bool(cfg.get("bf16") or cfg.get("fp16") or cfg.get("autocast_dtype"))
        if amp_on:
            ev.append(
                Evidence(
                    label="run config mixed precision",
                    value=f"bf16={cfg.get('bf16')} fp16={cfg.get('fp16')} autocast={cfg.get('autocast_dtype')}",
                    unit="",
                )
            )
        conf = "high" if hw["source"] == "deviceProperties" and not hw["approximate"] and share >= 0.2 else "medium"
        if hw["source"] != "deviceProperties" or by_op.sum() > by_name.sum():
            conf = "low"
        what = "GEMM" if conv_us < 0.5 * fp32_us else ("convolution" if gemm_us < 0.1 * fp32_us else "GEMM/convolution")
        title = (
            f"{pct(share)} of GPU compute ({fmt_us(fp32_us / n)} per step) is fp32 {what} on {hw['simt']} "
            f"of a {hw['short']} with {hw['tc_label']}: ~{fmt_us(lost / n)} per step recoverable"
        )
        if lost < 0.5 * gpu_saving:
            title = (
                f"{pct(share)} of GPU compute ({fmt_us(fp32_us / n)} per step) is fp32 {what} on {hw['simt']} "
                f"of a {hw['short']} with {hw['tc_label']}: tensor cores would save {fmt_us(gpu_saving / n)} of "
                f"GPU time per step, but the replay gives back only {pct(critical)} of it as step time (the GPU then "
                f"waits on the host), so ~{fmt_us(lost / n)} per step now"
            )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence=conf,
            evidence=ev,
            fix=_fix(ctx.framework, hw, amp_on),
            events=events_from(kin[sel], trace, "kernel"),
        )

    def speedup(self, hw: dict) -> float:
        """The modelled tensor-core speedup of fp32 GEMM/convolution kernels on this GPU."""
        return float(min(self.max_speedup, max(1.0, hw["speedup_ratio"] * self.efficiency)))

    def _select(self, trace, hw):
        """The fp32 GEMM/convolution kernels inside the steps, and what detect() needs to judge them."""
        kin = step_kernels(trace)
        if not len(kin):
            return None
        cls = K.classify(kin["name"])
        comm = is_comm_kernel(kin["name"])
        compute_us = float(kin["dur_us"].to_numpy()[~comm].sum())
        if compute_us <= 0:
            return None
        kind = cls["kind"].to_numpy()
        prec = cls["precision"].to_numpy()
        mm = (kind == K.GEMM) | (kind == K.CONV)
        by_name = mm & (prec == K.FP32)
        by_op, op_float, op_total = _by_op_type(trace, kin, mm & (prec == K.UNKNOWN), kind, hw)
        sel = by_name | by_op
        if not sel.any():
            return None
        return kin, kind, compute_us, by_name, by_op, op_float, op_total, sel

    def claims(self, trace, ctx, finding):
        # the fp32 kernels themselves (this finding claims no idle time); each carries a share of time lost
        # proportional to the GPU time it would save (its duration)
        k = primary_kernels(trace)
        hw = _hardware(trace, k["name"])
        picked = self._select(trace, hw) if hw else None
        if picked is None:
            return None
        kin, sel = picked[0], picked[-1]
        a = kin["ts_us"].to_numpy()[sel]
        dur = kin["dur_us"].to_numpy()[sel]
        total = float(dur.sum())
        lost = dur * (finding.time_lost_us / total) if total > 0 else np.zeros_like(dur)
        return Claim(what="fp32 GEMM/convolution kernel", start_us=a, end_us=a + dur, lost_us=lost)


def _hardware(trace, names: pd.Series) -> dict | None:
    """Architecture, tensor-core availability and the fp32 -> tensor peak ratio of the traced GPU."""
    dev = trace.device
    rocm = bool(trace.is_rocm or (dev is not None and dev.is_rocm))
    source = "deviceProperties"
    peaks = dev.peaks if dev is not None else None
    major = None if (dev is None or rocm) else dev.compute_major
    name = dev.name if dev is not None else "unknown GPU"
    if rocm:
        if peaks is None:
            isa = None
            for c in pd.Categorical(names).categories:
                m = _ROCM_ISA.search(str(c))
                if m:
                    isa = m.group(1).lower()
                    break
            key = _ROCM_ISA_PEAKS.get(isa or "")
            if key is None:
                return None
            peaks = dict(KNOWN)[key]
            source = "kernel names"
        tc = True
        tc_label = "matrix cores"
        simt = "vector units"
        short = (
            peaks.name if "unknown" in name.lower() or "radeon" in name.lower() else name.replace("AMD Instinct ", "")
        )
    else:
        if major is None:
            floor = K.arch_floor(names)
            if not floor:
                return None
            major = floor // 10
            source = "kernel names"
            peaks = peaks_for("", major)
        if peaks is None:
            peaks = peaks_for(name, major)
        tc = major >= 7
        simt = "CUDA cores"
        tc_label = "fp16 tensor cores" if major < 8 else "TF32/bf16 tensor cores"
        short = (
            name.replace("NVIDIA ", "").replace("Tesla ", "").replace("GeForce ", "")
            if source == "deviceProperties"
            else f"sm{major}x GPU (from kernel names)"
        )
    if peaks is None:
        return {
            "tensor_cores": tc,
            "label": name,
            "source": source,
            "approximate": True,
            "speedup_ratio": 8.0,
            "peaks_label": "unknown",
            "major": major,
            "rocm": rocm,
            "tc_label": tc_label,
            "short": short,
            "simt": simt,
        }
    tensor = max(peaks.half_tflops, peaks.tf32_tflops)
    arch = "ROCm" if rocm else (dev.arch if source == "deviceProperties" and dev is not None else f"sm{major}x")
    label = f"{name} ({arch}, {'from kernel names' if source != 'deviceProperties' else 'deviceProperties'})"
    return {
        "tensor_cores": tc and tensor > 0,
        "label": label,
        "source": source,
        "approximate": peaks.approximate or source != "deviceProperties",
        "speedup_ratio": tensor / peaks.fp32_tflops if peaks.fp32_tflops else 1.0,
        "peaks_label": f"{peaks.fp32_tflops:g} vs {tensor:g}" + (" (approximate)" if peaks.approximate else ""),
        "major": major,
        "rocm": rocm,
        "tc_label": tc_label,
        "short": short,
        "bf16": peaks.bf16,
        "simt": simt,
    }


def _by_op_type(trace, kin: pd.DataFrame, unknown: np.ndarray, kind: np.ndarray, hw: dict, sample: int = 500):
    """GEMM/conv kernels of unknown precision whose launching op recorded fp32 inputs; and, for evidence,
    how many of (a sample of) the GEMM/conv ops that launched kernels recorded Input type float."""
    ops = trace.cpu_ops
    out = np.zeros(len(kin), dtype=bool)
    op_idx = kin["op_idx"].to_numpy()
    if not len(ops) or "input_type_raw" not in ops.columns:
        return out, 0, 0
    is_mm_op = name_flags(ops["name"], lambda n: n in K.MATMUL_OPS or n in K.CONV_OPS)
    is_conv_op = name_flags(ops["name"], lambda n: n in K.CONV_OPS)
    raw = ops["input_type_raw"].to_numpy()
    cache: dict = {}

    def fp32_input(r: int):
        if r not in cache:
            types = trace.shapes(raw[r]) if is_mm_op[r] and raw[r] is not None else None
            first = (
                next((t for t in types if isinstance(t, str) and t and t not in ("Scalar", "ScalarList")), None)
                if types
                else None
            )
            cache[r] = None if first is None else first == "float"
        return cache[r]

    mm_kernel = (kind == K.GEMM) | (kind == K.CONV)
    rows = np.unique(op_idx[(op_idx >= 0) & mm_kernel])[:sample]
    seen = [fp32_input(int(r)) for r in rows]
    total = sum(v is not None for v in seen)
    n_float = sum(bool(v) for v in seen)
    # fp32 convolutions on sm80+ run TF32 by default (torch.backends.cudnn.allow_tf32 is True)
    tf32_conv = (not hw["rocm"]) and (hw["major"] or 0) >= 8
    for i in np.flatnonzero(unknown & (op_idx >= 0)):
        r = int(op_idx[i])
        if not fp32_input(r):
            continue
        if tf32_conv and (kind[i] == K.CONV or is_conv_op[r]):
            continue
        out[i] = True
    return out, n_float, total


def _fix(framework: str, hw: dict, amp_on: bool = False) -> str:
    old = not hw["rocm"] and (hw["major"] or 0) < 8
    if amp_on:
        return (
            "Mixed precision is on, yet these matmuls run in fp32: find the layers or custom matmuls outside "
            "autocast (top kernels / their ops) and run them in bf16/fp16, or enable TF32 for them "
            "(torch.backends.cuda.matmul.allow_tf32 = True)."
            if not old
            else "Mixed precision is on, yet these matmuls run in fp32: find the layers or custom matmuls outside "
            "autocast (top kernels / their ops) and run them under torch.autocast('cuda', dtype=torch.float16)."
        )
    if framework in ("hf_trainer", "trl"):
        if old:
            return (
                "Train in mixed precision: TrainingArguments(fp16=True) (this GPU has fp16 tensor cores but no "
                "bf16/TF32)."
            )
        return (
            "Train in mixed precision: TrainingArguments(bf16=True); as a no-risk first step, tf32=True lets "
            "fp32 matmuls use TF32 tensor cores."
            if not hw["rocm"]
            else "Train in mixed precision: TrainingArguments(bf16=True)."
        )
    if old:
        return (
            "Wrap forward and loss in torch.autocast('cuda', dtype=torch.float16) with a "
            "torch.amp.GradScaler('cuda') (fp16 tensor cores; this GPU has no bf16/TF32)."
        )
    if hw["rocm"]:
        return "Wrap forward and loss in torch.autocast('cuda', dtype=torch.bfloat16)."
    return (
        "Wrap forward and loss in torch.autocast('cuda', dtype=torch.bfloat16), or at least set "
        "torch.backends.cuda.matmul.allow_tf32 = True (torch.set_float32_matmul_precision('high'))."
    )
