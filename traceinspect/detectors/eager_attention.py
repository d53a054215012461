"""eager-attention: attention computed as separate bmm / softmax / mask / dropout / bmm kernels instead of one fused kernel."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..facts import kernels as K
from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.tables import name_flags
from .base import Detector, current, events_from, fmt_us, option, pct, step_kernels, window_label

# innermost CPU ops that launch GEMM / convolution kernels (their kernels carry these ops' External id)
_GEMMISH = K.MATMUL_OPS | K.CONV_OPS | frozenset({"aten::_scaled_mm", "aten::_int_mm"})
_SOFTMAX_FWD = frozenset({"aten::_softmax", "aten::softmax", "aten::_safe_softmax"})


@dataclass(frozen=True)
class EagerAttention(Detector):
    """
    What it detects
        Attention computed "eagerly": a batched matmul for Q.K^T, then scaling, masking, a softmax
        over the key axis, dropout, and a second batched matmul for P.V, each a separate kernel that
        writes and reads the full [batch, heads, L, L] score matrix. Recognised from the CPU ops: an
        `aten::softmax` / `aten::_softmax` (or `aten::_softmax_backward_data`) whose nearest
        GEMM-launching ops on the same thread, before and after, are both `aten::bmm` /
        `aten::baddbmm`, and whose input, when shapes are recorded, is at least 3-D
        ([B, H, Lq, Lk] or [B*H, Lq, Lk]). A softmax over [batch, classes] (a classifier head) or a
        log_softmax for the loss is not attention. Kernels: `softmax_warp_forward`,
        `cunn_SoftMaxForward` (CUDA and ROCm), their backward twins, `fused_dropout_kernel_vec`,
        `masked_fill`, and the cuBLAS / Tensile batched GEMMs.

    Why it costs time
        Eager attention moves O(B.H.L^2) bytes through GPU memory several times per layer (scores
        out of the first bmm, through scale, mask, softmax and dropout, into the second bmm), and the
        softmax kernels are bandwidth-bound. Fused kernels (FlashAttention 2/3, PyTorch SDPA flash,
        memory-efficient and cuDNN backends, ROCm AOTriton / CK fmha) keep each score tile on chip
        and run at tensor-core speed; the softmax, mask and dropout passes disappear.

    How time lost is estimated
        The GPU time of every kernel launched between the Q.K^T bmm and the P.V bmm (both included)
        of each eager attention, forward and backward, minus a model of the fused kernel:
        fused time = `fused_gemm_fraction` (0.5) x the time of those bmm kernels. The fused kernel
        does the same matmul FLOPs on tensor cores without writing the L x L scores, and the eager
        bmms with a head dimension of 64-128 are themselves memory-bound on that score matrix, so a
        fused kernel typically takes a fraction of their time. What that GPU-time saving gives
        back as step time is the replay's, as for fp32-gemm: nothing where the GPU waits on the
        host, up to what the host waited where it waits on the GPU. A point estimate; the
        second bmm of each backward matmul pair falls outside the block, so it errs low.

    How to fix
        HF Trainer / TRL (the model is loaded by you, then handed to the trainer):

            # before
            model = AutoModel.from_pretrained(name)                      # eager attention
            # after
            model = AutoModel.from_pretrained(name, attn_implementation="sdpa")
            # or, with flash-attn installed and fp16/bf16 weights:
            model = AutoModel.from_pretrained(name, attn_implementation="flash_attention_2",
                                              torch_dtype=torch.bfloat16)

        Plain PyTorch:

            # before
            scores = q @ k.transpose(-2, -1) * scale
            attn = torch.softmax(scores + mask, dim=-1)
            out = torch.dropout(attn, p, train) @ v
            # after
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p if train else 0.0, is_causal=causal)

    False positives
        Models whose attention variant has no fused kernel (relative-position biases materialised
        per head, some custom masks) must stay eager; the flash backend also rejects arbitrary
        masks (the memory-efficient backend accepts them). Without record_shapes the attention test
        relies on the bmm neighbours only (medium confidence).

    References
        PyTorch scaled_dot_product_attention docs (backends and their constraints); HF
        "attn_implementation" docs; FlashAttention (Dao et al., 2022).
    """

    code = "TI103"
    fires_on = (
        "builders_compute.build_eager_attention",
        "builders_compute.build_eager_attention_no_shapes",
        "builders_compute.build_eager_attention_training",
        "builders_compute.build_sdpa_math_fallback",
    )
    silent_on = (
        "builders.build_healthy",
        "builders_compute.build_sdpa_flash",
        "builders_compute.build_classifier_softmax",
    )

    min_saving_frac: float = option(
        0.01, "minimum GPU-time saving of a fused kernel, as a share of the analysed window"
    )
    min_calls: int = option(2, "minimum eager attention softmax calls (forward + backward) in the window")
    fused_gemm_fraction: float = option(0.5, "fused-attention time as a fraction of the eager bmm time it replaces")

    def whatif(self, graph, finding) -> str:
        """Replay model: each eager attention block (the kernels launched from its Q.K^T bmm to its P.V bmm,
        forward and backward) becomes one fused kernel, in place of the block's first kernel, of duration
        `fused_gemm_fraction` x the block's bmm kernel time (the model of "How time lost is estimated");
        the block's other kernels no longer run and their launches leave the host (each launch call and
        the host gap before it: the op's dispatch). Source of the fused time: FlashAttention (Dao et
        al., 2022) does the eager block's matmul FLOPs on tensor cores without writing or re-reading
        the L x L scores, so it costs about the bmm time at the matmul rate the trace achieves, less the
        score traffic those bmms spend (the 0.5 and its derivation: "How time lost is estimated"). Where
        blocks overlap on a thread they merge and get one fused kernel."""
        blk = eager_blocks(graph.trace)  # the finder the detector uses: present whether or not it fired
        if blk is None:
            return "no eager attention block: nothing to change"
        k, _, _, in_block, is_gemm, block_id = blk
        node = graph.kernel_nodes(k.index.to_numpy())
        ok = in_block & (node >= 0)
        dur, bid, node, gemm = k["dur_us"].to_numpy()[ok], block_id[ok], node[ok], is_gemm[ok]
        if not len(node):
            return "no eager attention block in the replayed device: nothing to change"
        order = np.argsort(graph.g_ts[node], kind="stable")
        dur, bid, node, gemm = dur[order], bid[order], node[order], gemm[order]
        ids, first = np.unique(bid, return_index=True)
        fused = self.fused_gemm_fraction * np.bincount(
            np.searchsorted(ids, bid), weights=np.where(gemm, dur, 0.0), minlength=len(ids)
        )
        keep = node[first]
        drop = np.zeros(len(graph.g_ts), dtype=bool)
        drop[node] = True
        drop[keep] = False
        graph.drop_ops(drop, keep_launches=graph.g_launch[keep][graph.g_launch[keep] >= 0])
        graph.g_dur[keep] = fused
        return (
            f"{len(ids)} eager attention block(s) become one fused kernel each "
            f"({self.fused_gemm_fraction:g} x their bmm time, {fused.sum() / 1e3:.1f} ms in all); "
            f"{int(drop.sum())} kernel launches go"
        )

    def detect(self, trace, ctx):
        if not trace.has_gpu or not len(trace.kernels):
            yield self.skip("no GPU kernels in the trace")
            return
        ops = trace.cpu_ops
        if not len(ops):
            yield self.skip("no CPU ops: attention softmax cannot be told from other softmax")
            return
        blk = eager_blocks(trace)
        if blk is None:
            return
        k, kind, attn, in_block, is_gemm, _ = blk
        names = ops["name"].to_numpy()
        dur = k["dur_us"].to_numpy()
        block_us = float(dur[in_block].sum())
        gemm_us = float(dur[is_gemm].sum())
        soft_us = float(dur[in_block & (kind == K.SOFTMAX)].sum())
        other_us = block_us - gemm_us - soft_us
        fused_us = self.fused_gemm_fraction * gemm_us
        gpu_saving = block_us - fused_us
        n_calls = len(attn)
        if n_calls < self.min_calls or gpu_saving < self.min_saving_frac * ctx.window_us:
            yield self.declined(
                f"eager attention present ({n_calls} softmax call(s)), a fused kernel would save "
                f"{fmt_us(gpu_saving / max(ctx.n_steps, 1))}/step of GPU time "
                f"({100 * gpu_saving / ctx.window_us:.1f}%), below the {100 * self.min_saving_frac:g}% "
                f"threshold" + (f" or under {self.min_calls} calls" if n_calls < self.min_calls else "")
            )
            return
        # per kernel: the bmm keeps fused_gemm_fraction of its time, everything else in the block goes
        delta = np.where(is_gemm, (1.0 - self.fused_gemm_fraction) * dur, dur)[in_block]
        lost, critical = ctx.step_saving(k[in_block], delta)
        # The host is the bottleneck when most of the GPU saving is off the critical path: then the
        # block's extra launches (one fused kernel per call replaces them) cost host time now. What the
        # GPU saving is worth once the host keeps up is the re-diagnosis's replay (next bottlenecks).
        extra = int(in_block.sum()) - n_calls
        spacing = _launch_spacing(k)
        host_limited = lost < 0.5 * gpu_saving
        launch_cost = max(extra, 0) * spacing if host_limited else 0.0
        lost_now = min(lost + launch_cost, gpu_saving + launch_cost)
        n_fwd = sum(1 for s in attn if str(names[s]) in _SOFTMAX_FWD)
        shapes = _shape_summary(trace, ops, [s for s in attn if str(names[s]) in _SOFTMAX_FWD][:64])
        fused_ops = int(name_flags(ops["name"], K.is_fused_attention_op).sum())
        fused_k_us = float(dur[kind == K.ATTENTION].sum())
        compute_us = float(dur.sum())
        n = ctx.n_steps or 1
        win = window_label(trace)
        ev = [
            Evidence(
                label="eager attention kernel time (bmm + scale/mask + softmax + dropout + bmm)",
                value=round(block_us / n / 1e3, 2),
                unit="ms/step",
                window=win,
            ),
            Evidence(
                label="share of GPU kernel time", value=round(100 * block_us / compute_us, 1), unit="%", window=win
            ),
            Evidence(label="softmax kernels", value=round(soft_us / n / 1e3, 2), unit="ms/step", window=win),
            Evidence(label="attention bmm kernels", value=round(gemm_us / n / 1e3, 2), unit="ms/step", window=win),
            Evidence(
                label="scale / mask / dropout / copy kernels between them",
                value=round(other_us / n / 1e3, 2),
                unit="ms/step",
                window=win,
            ),
            Evidence(
                label="eager attention softmax calls (forward / backward)",
                value=f"{n_fwd} / {n_calls - n_fwd}",
                unit="calls",
                window=win,
            ),
            Evidence(
                label="modelled fused-attention time", value=round(fused_us / n / 1e3, 2), unit="ms/step", window=win
            ),
            Evidence(
                label="GPU time a fused kernel would save",
                value=round(gpu_saving / n / 1e3, 2),
                unit="ms/step",
                window=win,
            ),
            Evidence(
                label="share of that GPU saving the replay gives back as step time (the host waits on the GPU)",
                value=round(100 * critical, 1),
                unit="%",
                window=win,
            ),
        ]
        if host_limited:
            ev.append(
                Evidence(
                    label="extra kernel launches of the eager blocks (a fused kernel launches one per call)",
                    value=round(extra / n, 1),
                    unit="launches/step",
                    window=win,
                )
            )
            ev.append(
                Evidence(
                    label="host time per launch (median spacing of kernel launches)",
                    value=round(spacing, 1),
                    unit="us",
                    window=win,
                )
            )
            ev.append(
                Evidence(
                    label="host time of the extra launches now",
                    value=round(launch_cost / n / 1e3, 3),
                    unit="ms/step",
                    window=win,
                )
            )
        if shapes:
            ev.append(Evidence(label="attention score shape (softmax input)", value=shapes["shape"], unit=""))
            if shapes.get("score_mb") is not None:
                ev.append(
                    Evidence(label="score matrix written and re-read per layer", value=shapes["score_mb"], unit="MB")
                )
        ev.append(
            Evidence(
                label="fused attention in the trace (SDPA flash/efficient/cuDNN, flash_attn, xformers)",
                value=f"{fused_ops} ops, {fmt_us(fused_k_us / n)} kernel time per step",
                unit="",
                window=win,
            )
        )
        math_sdpa = int(name_flags(ops["name"], lambda x: x == "aten::_scaled_dot_product_attention_math").sum())
        if math_sdpa:
            ev.append(
                Evidence(
                    label="SDPA calls that fell back to the math (eager) backend",
                    value=math_sdpa,
                    unit="calls",
                    window=win,
                )
            )
        confident = shapes is not None and shapes.get("ndim", 0) >= 3
        conf = "high" if confident and not fused_ops and not fused_k_us else "medium"
        title = (
            f"Attention runs eagerly (bmm + softmax + bmm, {n_fwd} forward softmax calls): "
            f"{fmt_us(block_us / n)} per step, {pct(block_us / compute_us)} of GPU kernel time; "
            f"a fused kernel would save ~{fmt_us(lost_now / n)} per step"
        )
        if host_limited:
            title += (
                f" now, in its {extra / n:.0f} extra launches per step: the replay gives back only {pct(critical)} "
                f"of its {fmt_us(gpu_saving / n)} of GPU saving per step as step time"
            )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost_now,
            confidence=conf,
            evidence=ev,
            fix=_fix(ctx.framework, math_sdpa > 0).rstrip(".") + current(trace, "attn_implementation") + ".",
            events=events_from(k[in_block & (kind == K.SOFTMAX)], trace, "kernel"),
        )


def eager_blocks(trace):
    """The eager attention blocks of the analysed steps, or None: (kernels of the steps, their kind, the
    attention softmax op row -> (bmm row before, bmm row after), in_block and is_gemm masks over those
    kernels, block id per kernel (-1 outside; one id per merged span from a first bmm to its second bmm))."""
    ops = trace.cpu_ops
    if not trace.has_gpu or not len(trace.kernels) or not len(ops):
        return None
    k = step_kernels(trace)
    if not len(k):
        return None
    cls = K.classify(k["name"])
    kind = cls["kind"].to_numpy()
    op_idx = k["op_idx"].to_numpy()
    soft_rows = np.unique(op_idx[(kind == K.SOFTMAX) & (op_idx >= 0)])
    if not soft_rows.size:
        return None
    names = ops["name"].to_numpy()
    op_names = names[soft_rows].astype(str)
    keep = np.array([("log_softmax" not in n) and (n in K.SOFTMAX_OPS) for n in op_names], dtype=bool)
    soft_rows = soft_rows[keep]
    if not soft_rows.size:
        return None
    # innermost GEMM-launching ops (rows some kernel points at), per thread, in time order
    g_rows = np.unique(op_idx[op_idx >= 0])
    g_rows = g_rows[name_flags(ops["name"], lambda x: x in _GEMMISH)[g_rows]]
    attn = _attention_softmax(trace, ops, soft_rows, g_rows)
    if not attn:
        return None
    # blocks: from the bmm before to the bmm after each attention softmax, per thread
    ts = ops["ts_us"].to_numpy()
    tid = ops["tid"].to_numpy()
    in_block = np.zeros(len(k), dtype=bool)
    block_id = np.full(len(k), -1, dtype=np.int64)
    has_op = op_idx >= 0
    k_tid = np.where(has_op, tid[np.maximum(op_idx, 0)], -1)
    k_opts = np.where(has_op, ts[np.maximum(op_idx, 0)], np.nan)
    by_tid: dict = {}
    for s, (pre, post) in attn.items():
        # kernels of the ops that start from the first bmm up to the second bmm, both included
        by_tid.setdefault(int(tid[s]), []).append((ts[pre], ts[post]))
    base = 0
    for t, spans in by_tid.items():
        lo, hi = zip(*spans)
        blocks = iv.union(np.array(lo), np.array(hi) + 1e-3)
        sel = has_op & (k_tid == t)
        inside = iv.contains(blocks, k_opts[sel])
        in_block[sel] = inside
        b = np.searchsorted(blocks[0], k_opts[sel], side="right") - 1 + base
        block_id[sel] = np.where(inside, b, -1)
        base += len(blocks[0])
    if not in_block.any():
        return None
    is_bmm_op = K.flags_by_category(ops["name"], lambda x: x in K.BATCHED_MATMUL_OPS)
    bmm_names = is_bmm_op[np.maximum(op_idx, 0)] & has_op
    is_gemm = in_block & ((kind == K.GEMM) | bmm_names)
    return k, kind, attn, in_block, is_gemm, block_id


def _launch_spacing(k: pd.DataFrame) -> float:
    """Median host time between consecutive kernel launches (us): what one more launch costs the host."""
    lt = np.sort(k["launch_ts_us"].to_numpy()) if "launch_ts_us" in k.columns else np.empty(0)
    lt = lt[~np.isnan(lt)]
    d = np.diff(lt)
    d = d[d > 0]
    return float(np.median(d)) if d.size else 0.0


def _attention_softmax(trace, ops: pd.DataFrame, soft_rows: np.ndarray, g_rows: np.ndarray) -> dict:
    """softmax op row -> (bmm row before, bmm row after) for the softmaxes that are attention."""
    ts = ops["ts_us"].to_numpy()
    tid = ops["tid"].to_numpy()
    names = ops["name"].to_numpy()
    dims = ops["input_dims_raw"].to_numpy() if "input_dims_raw" in ops.columns else None
    out = {}
    g_tid = tid[g_rows]
    per_tid = {}
    for t in np.unique(tid[soft_rows]):
        rows = g_rows[g_tid == t]
        rows = rows[np.argsort(ts[rows], kind="stable")]
        per_tid[int(t)] = (rows, ts[rows])
    for s in soft_rows:
        rows, rts = per_tid.get(int(tid[s]), (np.empty(0, dtype=np.int64), np.empty(0)))
        if not rows.size:
            continue
        i = np.searchsorted(rts, ts[s], side="left")
        if i == 0 or i >= rows.size:
            continue
        pre, post = int(rows[i - 1]), int(rows[i])
        if str(names[pre]) not in K.BATCHED_MATMUL_OPS or str(names[post]) not in K.BATCHED_MATMUL_OPS:
            continue
        if dims is not None and dims[s] is not None:
            d = trace.shapes(dims[s])
            first = d[0] if isinstance(d, list) and d else None
            if isinstance(first, list) and len(first) < 3:
                continue  # [batch, classes]: a classifier softmax, not attention
        out[int(s)] = (pre, post)
    return out


def _shape_summary(trace, ops: pd.DataFrame, rows: list) -> dict | None:
    if not rows or "input_dims_raw" not in ops.columns:
        return None
    dims = ops["input_dims_raw"].to_numpy()
    types = ops["input_type_raw"].to_numpy() if "input_type_raw" in ops.columns else None
    best = None
    for r in rows:
        d = trace.shapes(dims[r]) if dims[r] is not None else None
        if not (isinstance(d, list) and d and isinstance(d[0], list) and len(d[0]) >= 2):
            continue
        shape = [int(x) for x in d[0] if isinstance(x, (int, float))]
        numel = int(np.prod(shape)) if shape else 0
        if best is None or numel > best[1]:
            best = (shape, numel, r)
    if best is None:
        return None
    shape, numel, r = best
    size = 4
    if types is not None and types[r] is not None:
        t = trace.shapes(types[r])
        if isinstance(t, list) and t and t[0] in ("c10::BFloat16", "c10::Half"):
            size = 2
    return {
        "shape": "[" + ", ".join(str(x) for x in shape) + "]",
        "ndim": len(shape),
        "score_mb": round(numel * size / 1e6, 1),
    }


def _fix(framework: str, math_fallback: bool = False) -> str:
    if math_fallback:
        return (
            "scaled_dot_product_attention fell back to its math backend: give it fp16/bf16 q/k/v with "
            "head_dim <= 256 and either no mask (is_causal=True) or a mask the memory-efficient backend "
            "accepts, so a fused kernel runs."
        )
    if framework in ("hf_trainer", "trl"):
        return (
            'Load the model with a fused attention kernel: from_pretrained(..., attn_implementation="sdpa") '
            'or "flash_attention_2" (bf16/fp16 weights).'
        )
    return (
        "Replace the matmul-softmax-matmul attention with torch.nn.functional.scaled_dot_product_attention(q, k, v, "
        'attn_mask=..., dropout_p=..., is_causal=...) (for HF models: attn_implementation="sdpa").'
    )
