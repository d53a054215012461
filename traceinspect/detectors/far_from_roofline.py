"""far-from-roofline: op shapes whose kernels run at a small share of what the GPU can do for them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..facts.efficiency import ShapeRow, shape_table, shapes_advice
from ..facts.model_family import family_of
from ..findings import Evidence
from ..trace import roofline as rl
from .base import Detector, events_from, fmt_us, in_steps, option, window_label

_TILE = 64  # tensor-core GEMM tiles are 64-256 wide: a dimension below this leaves most of a tile idle
_OUT_TILE = 128  # a typical GEMM / attention output tile edge: one thread block (CTA) per tile
_ALIGN = {"bf16": 8, "fp16": 8, "fp8": 16, "fp32": 4}  # elements: 16-byte vector loads / tensor-core K steps


@dataclass(frozen=True)
class FarFromRoofline(Detector):
    """
    What it detects
        Op shapes (an aten op with one set of input shapes and types) whose kernels reach a small
        share of the device's roofline for them: the time the op would take at the GPU's peak
        compute rate for its dtype or at its peak memory bandwidth, whichever bounds it, divided
        by the measured kernel time. FLOPs and bytes come from `Input Dims` and `Input type`
        (docs/roofline.md gives the model per op family). Each reported shape says why it is
        slow when the shape tells: tiny matrices (a GEMM dimension below a tensor-core tile),
        huge batch counts of such matrices, dimensions that are not multiples of 8 (bf16/fp16)
        or 16 (fp8), convolutions with a channel count that is not a multiple of 8, and calls
        with fewer 128-row output tiles than the GPU has SMs / CUs (too little work per call).

    Why it costs time
        Library kernels reach 30-80% of the roofline on well-shaped problems. A batched matmul
        of 37,632 8x64 matrices, a GEMM whose K is 3137, or a bf16 batch norm in NCHW on a GPU
        whose library has no fast kernel for it run one to two orders of magnitude below: the
        tiles are mostly padding, loads are unaligned, or the kernel is a generic fallback.

    How time lost is estimated
        For each shape below `max_share` of its roofline, with calls of at least `min_call_us`
        (shorter calls are launch- and latency-bound: launch-bound covers them) and at least
        `min_step_frac` of the step: measured kernel time minus the time at `reachable_share` of
        the roofline. The roofline is an upper bound on speed, so the share is a lower bound on
        efficiency; the reachable share is an assumption (what tuned kernels reach on good
        shapes), so the estimate is a point estimate, not an upper bound. Confidence is medium
        when the shape explains the inefficiency, low otherwise.

    How to fix
        Tiny matrices in a huge batch: reshape so the batch folds into M, one large GEMM instead
        of many small ones, or fuse the whole block:

            # before: 37,632 GEMMs of 8x64 @ 64x8
            scores = torch.bmm(q, k.transpose(1, 2))          # q, k: [B*T, 8, 64]
            # after: one fused kernel (or let the compiler pick one)
            out = F.scaled_dot_product_attention(q, k, v)
            model = torch.compile(model)

        Too little work per call (batch 1, short sequences): a larger batch or micro-batch; when
        it cannot grow, CUDA graphs (`torch.compile(mode="reduce-overhead")`) at least remove
        the launch gaps between the small calls.

        Odd dimensions: pad them to multiples of 8 (bf16/fp16) or 16 (fp8), e.g. the sequence
        length or vocabulary (`pad_to_multiple_of=8` in HF tokenizers / data collators,
        `resize_token_embeddings(n, pad_to_multiple_of=64)`).

        Convolutions and batch norm: channels-last memory format and channel counts that are
        multiples of 8:

            model = model.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)
            torch.backends.cudnn.benchmark = True                # pick the fastest algorithm per shape

        Memory-bound elementwise and normalisation chains: fuse them with `torch.compile`. A
        different backend (cuDNN vs MIOpen / hipBLASLt tuning, `PYTORCH_TUNABLEOP_ENABLED=1` on
        ROCm) can also reach a better kernel for the same shape.

    False positives
        The model counts the minimum work: an fp32 matmul where TF32 is enabled, a causal
        attention kernel (half the FLOPs counted), a convolution whose grad_input was not needed
        (the first layer), or an op whose kernels overlap with other streams look less efficient
        than they are. Shapes the trace does not record (`record_shapes=False`) are not judged.

    References
        Williams, Waterman, Patterson, "Roofline: an insightful visual performance model" (CACM
        2009); NVIDIA "Matrix Multiplication Background User's Guide" (tile and alignment
        effects); TraceLens (AMD) per-shape performance tables; docs/roofline.md.
    """

    code = "TI107"
    fires_on = ("builders_roofline.build_tiny_bmm",)
    silent_on = ("builders.build_healthy", "builders_roofline.build_big_gemm", "builders.build_launch_bound")

    max_share: float = option(0.05, "report shapes below this share of their roofline (time at roofline / measured)")
    reachable_share: float = option(
        0.5, "share of the roofline a fixed shape is assumed to reach (the estimate's target)"
    )
    min_call_us: float = option(20.0, "ignore shapes whose calls are shorter (launch- and latency-bound)")
    min_step_frac: float = option(0.005, "ignore shapes taking less than this share of the step")
    min_frac: float = option(0.01, "minimum share of the window the estimate must reach to report")

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        dev = trace.device
        if dev is None or dev.peaks is None:
            yield self.skip("the GPU is not in the peak table; set TRACEINSPECT_HARDWARE (docs/roofline.md)")
            return
        rows = shape_table(trace)
        if not rows:
            if not trace.meta.profiler.get("record_shapes"):
                yield self.skip("the trace has no input shapes (capture with record_shapes=True)")
            else:
                yield self.skip(f"no op of the analysed steps has a FLOP and byte model; {shapes_advice(trace)}")
            return
        n = max(ctx.n_steps, 1)
        step_us = ctx.window_us / n
        slow = []
        for r in rows:
            if r.share_of_peak is None or r.share_of_peak >= self.max_share or r.us_per_call < self.min_call_us:
                continue
            if r.gpu_us_per_step < self.min_step_frac * step_us:
                continue
            target = r.roofline_us_per_step / self.reachable_share
            if r.gpu_us_per_step > target:
                slow.append((r.gpu_us_per_step - target, r, target))
        lost = sum(s[0] for s in slow) * n
        frac = lost / ctx.window_us if ctx.window_us else 0.0
        if not slow or frac < self.min_frac:
            return
        slow.sort(key=lambda s: -s[0])
        w = window_label(trace)
        peak = dev.peaks
        ev = []
        for gain, r, target in slow[:4]:
            why = shape_issues(r, dev.num_sms)
            ev.append(
                Evidence(
                    label=f"{r.op} {r.shape} ({r.dtype}, {_calls(r.calls_per_step)}, {r.bound}-bound)",
                    value=(
                        f"{_rate(r)} = {100 * r.share_of_peak:.1f}% of roofline; {r.gpu_us_per_step / 1e3:.2f} ms/step, "
                        f"{target / 1e3:.2f} ms at {100 * self.reachable_share:.0f}%"
                        + (f"; {'; '.join(why)}" if why else "")
                    ),
                    unit="",
                    window=w,
                )
            )
        if len(slow) > 4:
            ev.append(Evidence(label="more shapes below the threshold", value=len(slow) - 4, unit="shapes", window=w))
        ev.append(
            Evidence(
                label=f"roofline peaks ({peak.name}{', approximate' if peak.approximate else ''})",
                value=f"{slow[0][1].peak_tflops:g} TFLOP/s ({slow[0][1].peak_unit}), {slow[0][1].peak_tbps:g} TB/s",
                unit="",
                window=w,
            )
        )
        _, top, top_target = slow[0]
        why = shape_issues(top, dev.num_sms)
        title = (
            f"{top.op} on {top.shape} ({top.dtype}) runs at {100 * top.share_of_peak:.1f}% of the "
            f"{peak.name} roofline ({_rate(top)}): {fmt_us(top.gpu_us_per_step)} per step"
            + (f", {why[0]}" if why else "")
            + (
                f"; {len(slow)} shapes far from the roofline lose {fmt_us(lost / n)} per step"
                if len(slow) > 1
                else f"; {fmt_us(lost / n)} per step recoverable"
            )
        )
        k = in_steps(trace.kernels, trace)
        names = {r.kernel for _, r, _ in slow[:3]}
        k = k[np.isin(k["name"].astype(str).to_numpy(), list(names))]
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence="medium" if why else "low",
            evidence=ev,
            fix=_fix(top, why, family_of(trace)),
            events=events_from(k, trace, "kernel", 3),
        )


def _rate(r: ShapeRow) -> str:
    return f"{r.tflops:.2f} TFLOP/s, {1e3 * r.tbps:.0f} GB/s"


def shape_issues(r: ShapeRow, sms: int | None = None) -> list[str]:
    """What in the shape explains a low share: tiny matrices, huge batch counts, odd alignment, or too
    few output tiles to give every SM / CU (sms of them) one."""
    d = r.dims
    out = []
    tiles = None
    if r.family in (rl.GEMM, rl.BMM) and all(x in d for x in "MNK"):
        tiles = d.get("B", 1) * -(-d["M"] // _OUT_TILE) * -(-d["N"] // _OUT_TILE)
    elif r.family == rl.ATTENTION and all(x in d for x in ("B", "H", "Lq")):
        tiles = d["B"] * d["H"] * -(-d["Lq"] // _OUT_TILE)
    if tiles is not None and sms and tiles < sms:
        out.append(
            f"only {tiles} output tiles of {_OUT_TILE} rows for {sms} SMs/CUs (too little work per call: "
            "a larger batch fills the GPU)"
        )
    if r.family in (rl.GEMM, rl.BMM) and all(x in d for x in "MNK"):
        small = [f"{x}={d[x]}" for x in "MNK" if d[x] < _TILE]
        if small:
            out.append(f"tiny matrices ({', '.join(small)}: below one {_TILE}-wide tensor-core tile)")
        if d.get("B", 1) >= 1024 and d["M"] * d["N"] <= _TILE * _TILE:
            out.append(f"a batch of {d['B']:,} such matrices (fold the batch into M)")
        a = _ALIGN.get(r.dtype)
        odd = [f"{x}={d[x]}" for x in "MNK" if a and d[x] >= _TILE and d[x] % a]
        if odd:
            out.append(f"{', '.join(odd)} not a multiple of {a}")
    elif r.family == rl.CONV:
        a = _ALIGN.get(r.dtype)
        odd = [f"{x}={d[x]}" for x in ("C", "K") if a and x in d and d[x] % a]
        if odd:
            out.append(f"{', '.join(odd)} channels: not a multiple of {a}")
    elif r.family == rl.ATTENTION and d.get("D") and d["D"] % 8:
        out.append(f"head dimension {d['D']} not a multiple of 8")
    return out


def _fix(r: ShapeRow, why: list[str], family: str = "unknown") -> str:
    if any(w.startswith("only ") for w in why) and not any("batch of" in w for w in why):
        return (
            "Give each call more work: a larger batch (or gradient accumulation with a larger micro-batch), "
            "or CUDA graphs / torch.compile(mode='reduce-overhead') when the batch cannot grow."
        )
    if r.family in (rl.GEMM, rl.BMM):
        if any("batch of" in w for w in why):
            return (
                "Reshape the batched matmul so its batch folds into M (one large GEMM), or replace the block with "
                "a fused kernel (F.scaled_dot_product_attention) or torch.compile."
            )
        if any("not a multiple" in w for w in why):
            return "Pad the matmul dimensions to multiples of 8 (bf16/fp16) or 16 (fp8)" + (
                ": the sequence length or vocabulary (pad_to_multiple_of=8 in the tokenizer / data collator)."
                if family == "language"
                else ": the layer widths, or the batch."
            )
        return "Try torch.compile or another GEMM backend for this shape (cuBLASLt / hipBLASLt tuning, TunableOp)."
    if r.family == rl.CONV:
        return (
            "Use channels-last (model.to(memory_format=torch.channels_last)), channel counts that are multiples "
            "of 8, and torch.backends.cudnn.benchmark=True."
        )
    if r.family == rl.ATTENTION:
        return "Use a head dimension that is a multiple of 8 and a fused attention backend that supports it."
    return (
        "Fuse these memory-bound ops with torch.compile; for batch norm, use channels-last memory format or a "
        "different backend."
    )


def _calls(per_step: float) -> str:
    """'4 calls/step', '1 call/step', '0.5 calls/step': two significant digits, so an op that runs in
    some steps only does not read as 0 calls."""
    t = f"{per_step:.2g}"
    return f"{t} call/step" if t == "1" else f"{t} calls/step"
