"""padding-waste: GPU work spent on pad tokens of batches padded to the longest sequence or to a fixed max length."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..facts import kernels as K
from ..findings import Evidence
from ..trace import intervals as iv
from ..trace.tables import name_flags
from ..trace.timeline import is_comm_kernel
from .base import Detector, events_from, fmt_us, in_steps, option, pct, step_kernels, window_label

_VARLEN = re.compile(r"flash_attn_varlen_forward|FlashAttnVarlenFunc|varlen_fwd", re.I)
_OPTIMIZER = re.compile(r"^Optimizer\.(?:step|zero_grad)#")
_ROUND_LENGTHS = frozenset({128, 256, 384, 512, 768, 1024, 2048, 3072, 4096, 8192, 16384, 32768})


@dataclass(frozen=True)
class PaddingWaste(Detector):
    """
    What it detects
        Batches of variable-length sequences padded to the longest sequence of the batch (or to a
        fixed max_length) without packing, so that GEMMs, norms and attention run on pad tokens.
        Evidence, strongest first: (a) the capture metadata's per-step `real_tokens` /
        `padded_tokens` (attention-mask sums, written by traceinspect's capture helpers): exact;
        (b) FlashAttention varlen calls (`flash_attn::_flash_attn_varlen_forward`) whose q holds
        fewer tokens than the batch's B x L (HF's unpad path: attention skips the pads, every other
        layer does not); (c) `aten::scaled_dot_product_attention` called with an attention mask
        (4th input [B, 1, L, L]), which HF only materialises when some token is masked and which
        keeps SDPA off its flash backend, together with the token shape [B, L] of `aten::embedding`
        that varies step to step (pad to longest) or is pinned at a round max length.

    Why it costs time
        Every pad token costs the same GEMM, norm and elementwise work as a real one, and padded
        attention cost grows with L^2. With pad-to-longest batching of widely varying lengths, or a
        fixed max_length far above the typical length, pad tokens can be half of the batch or more.
        The mask also keeps SDPA off its flash kernel.

    How time lost is estimated
        Padding share p = 1 - real / padded tokens over the analysed steps. Time lost = p x the GPU
        time of token-proportional kernels: all non-communication kernels of the steps except those
        launched by the optimizer (`Optimizer.step#` / `zero_grad#`), which do not depend on tokens.
        GEMMs, norms and elementwise kernels scale linearly with tokens and padded attention at least
        linearly, so applying p to all of them is conservative for attention. With varlen evidence
        (b) the attention kernels already skip pads and are left out. With mask and shape evidence
        only (c) the real token count is unknown: p is assumed from the batch size B as
        (B - 1) / (2B) (lengths spread evenly up to the batch's longest) or 1/2 for a pinned max
        length, the confidence is low and the estimate is flagged as an upper bound of a range
        starting at 0; capture with traceinspect's helpers to measure it. What the GPU time on pad tokens
        gives back as step time is the replay's (see fp32-gemm).

    How to fix
        HF Trainer / TRL:

            # before
            args = SFTConfig(..., packing=False)
            # after: pack examples into full rows (TRL), or pad-free batches with flash attention
            args = SFTConfig(..., packing=True)
            args = SFTConfig(..., padding_free=True)          # model: attn_implementation="flash_attention_2"
            # plain Trainer: flatten instead of padding, or at least batch similar lengths together
            collator = DataCollatorWithFlattening()           # needs flash_attention_2
            args = TrainingArguments(..., group_by_length=True)

        Plain PyTorch:

            # before
            batch = pad_sequence(seqs, batch_first=True)      # every row padded to the longest
            # after (a): pack: one row of all sequences, attention bounded by cu_seqlens
            ids = torch.cat(seqs)[None]
            lens = torch.tensor([len(s) for s in seqs])
            cu = torch.nn.functional.pad(lens.cumsum(0), (1, 0)).int().cuda()
            out = flash_attn_varlen_func(q, k, v, cu, cu, int(lens.max()), int(lens.max()), causal=True)
            # after (b): bucket by length so each batch pads little
            order = sorted(range(len(ds)), key=lambda i: len(ds[i]["input_ids"]))
            batches = [order[i:i + bs] for i in range(0, len(order), bs)]
            random.shuffle(batches)
            loader = DataLoader(ds, batch_sampler=batches, collate_fn=pad_collate)

    False positives
        A 4-D mask can also be a custom or block-diagonal (packed) mask; without the capture
        metadata such findings are low confidence. A fixed sequence length alone (synthetic or
        pre-chunked data) is not treated as padding.

    References
        HF docs "Padding-free / packing" (DataCollatorWithFlattening, TRL SFTConfig packing and
        padding_free); HF modeling_flash_attention_utils (_upad_input); PyTorch SDPA backend
        constraints.
    """

    code = "TI102"
    fires_on = (
        "builders_compute.build_padding_metadata",
        "builders_compute.build_padded_shapes",
        "builders_compute.build_padded_varlen",
    )
    silent_on = ("builders.build_healthy", "builders_compute.build_packed", "builders_compute.build_fixed_length")

    min_share: float = option(0.10, "minimum share of padded tokens")
    min_saving_frac: float = option(0.01, "minimum GPU time spent on pad tokens, as a share of the analysed window")

    def whatif(self, graph, finding) -> str:
        """Replay model: the token-proportional kernels of the steps (non-communication kernels not
        launched by the optimizer, less the attention kernels when varlen attention already skips the
        pads) run `1 - p` of their time, p the padding share the finding measured (or assumed, for an
        upper-bound finding). Communication, optimizer and the host's launches stay as they are: packing
        changes how many tokens each kernel sees, not how many kernels run."""
        share = None
        varlen = False
        for e in finding.evidence if finding is not None else ():
            if e.label == "padding share":
                share = float(e.value) / 100.0
            elif e.label == "assumed padding share (range)" and share is None:
                share = float(str(e.value).split("..")[-1]) / 100.0
            elif e.label.startswith("tokens in FlashAttention varlen"):
                varlen = True
        if share is None or not 0.0 < share < 1.0:
            return "no padding share measured: nothing to change"
        _, _, kin = _token_time(graph.trace)
        if varlen and len(kin):
            kin = kin[K.classify(kin["name"])["kind"].to_numpy() != K.ATTENTION]
        node = graph.kernel_nodes(kin.index.to_numpy())
        sel = np.zeros(len(graph.g_ts), dtype=bool)
        sel[node[node >= 0]] = True
        graph.scale_gpu(sel, 1.0 - share)
        return (
            f"{int(sel.sum())} token-proportional kernel(s) run {1.0 - share:.3f} of their time (real / padded tokens)"
        )

    def detect(self, trace, ctx):
        if not trace.has_gpu or not len(trace.kernels):
            yield self.skip("no GPU kernels in the trace")
            return
        rc = trace.meta.run_config if isinstance(trace.meta.run_config, dict) else {}
        cfg = rc.get("config") if isinstance(rc.get("config"), dict) else {}
        win = window_label(trace)
        n = ctx.n_steps or 1
        exact = _metadata_tokens(rc.get("steps"), trace.steps["step"].to_numpy())
        ev: list[Evidence] = []
        upper = False
        if exact is not None:
            real, padded, used = exact
            share = 1.0 - real / padded
            unpadded_attention = False
            conf = "high"
            how = f"{real:,} real of {padded:,} tokens"
            ev += [
                Evidence(
                    label="real / padded tokens (capture metadata)",
                    value=f"{real} / {padded}",
                    unit="tokens",
                    window=f"{used} step(s) of the run config",
                ),
                Evidence(label="padding share", value=round(100 * share, 1), unit="%", window=win),
            ]
        else:
            if cfg.get("packing") or cfg.get("padding_free"):
                return
            shapes = _embedding_shapes(trace)
            varlen = _varlen_tokens(trace)
            masked = _masked_sdpa(trace)
            if varlen is not None and shapes:
                bl = sum(b * l for b, l in shapes.values())
                share = 1.0 - varlen / bl if bl else 0.0
                unpadded_attention = True
                conf = "medium"
                how = f"{varlen:,} real of {bl:,} tokens, varlen attention q vs the embedding's B x L"
                ev += [
                    Evidence(
                        label="tokens in FlashAttention varlen q vs batch B x L",
                        value=f"{varlen} / {bl}",
                        unit="tokens",
                        window=win,
                    ),
                    Evidence(label="padding share", value=round(100 * share, 1), unit="%", window=win),
                ]
            elif masked and shapes:
                ls = [l for _, l in shapes.values()]
                bs = [b for b, _ in shapes.values()]
                b = int(np.median(bs))
                pinned = len(set(ls)) == 1 and (len(ls) >= 2 or ls[0] in _ROUND_LENGTHS)
                if pinned:
                    share = 0.5
                elif b >= 2:
                    share = (b - 1) / (2 * b)
                else:
                    return
                unpadded_attention = False
                conf = "low"
                upper = True
                how = (
                    f"to a fixed length {ls[0]}"
                    if pinned
                    else f"to the longest sequence, L {min(ls)}..{max(ls)} across steps"
                )
                ev += [
                    Evidence(
                        label="token shape [B, L] per step (aten::embedding)",
                        value=", ".join(f"[{bb}, {ll}]" for bb, ll in shapes.values()),
                        unit="",
                        window=win,
                    ),
                    Evidence(
                        label="SDPA calls with an attention mask (keeps SDPA off flash)",
                        value=masked["calls"],
                        unit="calls",
                        window=win,
                    ),
                    Evidence(label="mask shape", value=masked["shape"], unit=""),
                    Evidence(
                        label="assumed padding share (range)", value=f"0..{100 * share:.0f}", unit="%", window=win
                    ),
                ]
            else:
                return
        # the share the finding states (its evidence, to the digit printed) is the one the cost and the
        # transformation both use, so that the replay of the fix is the finding's cost
        share = round(share, 2) if upper else round(share, 3)
        if share < self.min_share:
            yield self.declined(
                f"padding measured or assumed at {100 * share:.1f}% of the tokens, below the "
                f"{100 * self.min_share:g}% threshold"
            )
            return
        token_us, attn_us, kin = _token_time(trace)
        base_us = max(token_us - attn_us, 0.0) if unpadded_attention else token_us
        gpu_saving = share * base_us
        if gpu_saving < self.min_saving_frac * ctx.window_us:
            yield self.declined(
                f"padding at {100 * share:.0f}% of the tokens would save "
                f"{100 * gpu_saving / ctx.window_us:.1f}% of the window, below the "
                f"{100 * self.min_saving_frac:g}% threshold"
            )
            return
        per_token = np.ones(len(kin), dtype=bool)
        if unpadded_attention:
            per_token = K.classify(kin["name"])["kind"].to_numpy() != K.ATTENTION
        lost, critical = ctx.step_saving(kin[per_token], share * kin["dur_us"].to_numpy()[per_token])
        ev += [
            Evidence(
                label="GPU time of token-proportional kernels",
                value=round(base_us / n / 1e3, 2),
                unit="ms/step",
                window=win,
            ),
            Evidence(
                label="GPU time spent on pad tokens", value=round(gpu_saving / n / 1e3, 2), unit="ms/step", window=win
            ),
            Evidence(
                label="share of it the replay gives back as step time (the host waits on the GPU)",
                value=round(100 * critical, 1),
                unit="%",
                window=win,
            ),
        ]
        if cfg.get("max_seq_length") is not None:
            ev.append(Evidence(label="max_seq_length (run config)", value=cfg.get("max_seq_length"), unit="tokens"))
        if upper:
            title = (
                f"Batches are padded {how} (SDPA gets a padding mask), not packed: assuming ~{pct(share)} "
                f"padding (real tokens not recorded), up to {fmt_us(lost / n)} per step of GPU work goes to pad tokens"
            )
        else:
            title = (
                f"{pct(share)} of the tokens are padding ({how}): ~{fmt_us(lost / n)} per step of GPU work "
                f"is spent on pad tokens"
            )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence=conf,
            evidence=ev,
            fix=_fix(ctx.framework),
            upper_bound=upper,
            events=events_from(kin, trace, "kernel"),
        )


def _metadata_tokens(steps, trace_steps: np.ndarray):
    """(real, padded, steps used) summed over the run-config step entries of the analysed steps."""
    if not isinstance(steps, list):
        return None
    rows = []
    for e in steps:
        if not isinstance(e, dict):
            continue
        r, p = e.get("real_tokens"), e.get("padded_tokens")
        if (
            isinstance(r, bool)
            or isinstance(p, bool)
            or not isinstance(r, (int, float))
            or not isinstance(p, (int, float))
        ):
            continue
        if p <= 0 or r < 0 or r > p:
            continue
        rows.append((e.get("step"), float(r), float(p)))
    if not rows:
        return None
    wanted = {int(s) for s in trace_steps}
    matched = [x for x in rows if isinstance(x[0], int) and not isinstance(x[0], bool) and x[0] in wanted]
    use = matched or rows  # step numbering may differ from ProfilerStep#: then use every entry
    return int(sum(x[1] for x in use)), int(sum(x[2] for x in use)), len(use)


def _token_time(trace):
    """GPU time of kernels whose work scales with tokens (non-comm, not launched by the optimizer),
    the fused-attention part of it, and those kernels."""
    k = step_kernels(trace)
    if not len(k):
        return 0.0, 0.0, k
    keep = ~is_comm_kernel(k["name"])
    ops = trace.cpu_ops
    if len(ops):
        opt = ops[name_flags(ops["name"], lambda n: bool(_OPTIMIZER.match(n)))]
        if len(opt):
            spans = iv.union(opt["ts_us"], opt["end_us"])
            launch = k["launch_ts_us"].to_numpy()
            inside = iv.contains(spans, np.nan_to_num(launch, nan=-1.0))
            keep &= ~inside
    k = k[keep]
    cls = K.classify(k["name"])
    dur = k["dur_us"].to_numpy()
    return float(dur.sum()), float(dur[cls["kind"].to_numpy() == K.ATTENTION].sum()), k


def _step_of(trace, ts: np.ndarray) -> np.ndarray:
    st = trace.steps
    i = np.searchsorted(st["start_us"].to_numpy(), ts, side="right") - 1
    ok = (i >= 0) & (ts < st["end_us"].to_numpy()[np.maximum(i, 0)])
    return np.where(ok, st["step"].to_numpy()[np.maximum(i, 0)], -1)


def _embedding_shapes(trace) -> dict:
    """step -> (B, L): the largest token-index input of aten::embedding in each analysed step."""
    ops = trace.cpu_ops
    if not len(ops) or "input_dims_raw" not in ops.columns:
        return {}
    emb = ops[name_flags(ops["name"], lambda n: n == "aten::embedding")]
    if not len(emb):
        return {}
    steps = _step_of(trace, emb["ts_us"].to_numpy())
    out: dict = {}
    for s, raw in zip(steps, emb["input_dims_raw"].to_numpy()):
        if s < 0 or raw is None:
            continue
        d = trace.shapes(raw)
        if not (isinstance(d, list) and len(d) >= 2 and isinstance(d[1], list) and len(d[1]) == 2):
            continue
        b, l = (int(x) for x in d[1])
        if b * l > out.get(int(s), (0, 0))[0] * out.get(int(s), (0, 0))[1]:
            out[int(s)] = (b, l)
    return out


def _varlen_tokens(trace) -> int | None:
    """Total q tokens of the first FlashAttention varlen forward call of each analysed step."""
    ops = trace.cpu_ops
    if not len(ops) or "input_dims_raw" not in ops.columns:
        return None
    vl = ops[name_flags(ops["name"], lambda n: bool(_VARLEN.search(n)) and "backward" not in n.lower())]
    if not len(vl):
        return None
    steps = _step_of(trace, vl["ts_us"].to_numpy())
    seen: dict = {}
    for s, raw in zip(steps, vl["input_dims_raw"].to_numpy()):
        if s < 0 or s in seen or raw is None:
            continue
        d = trace.shapes(raw)
        if isinstance(d, list) and d and isinstance(d[0], list) and len(d[0]) == 3:
            seen[int(s)] = int(d[0][0])
    return sum(seen.values()) if seen else None


def _masked_sdpa(trace) -> dict | None:
    """SDPA calls in the steps that received an attention mask (4th input non-empty)."""
    ops = trace.cpu_ops
    if not len(ops) or "input_dims_raw" not in ops.columns:
        return None
    sd = ops[name_flags(ops["name"], lambda n: n == "aten::scaled_dot_product_attention")]
    if not len(sd):
        return None
    sd = in_steps(sd, trace)
    calls, shape = 0, None
    for raw in sd["input_dims_raw"].to_numpy():
        d = trace.shapes(raw) if raw is not None else None
        if isinstance(d, list) and len(d) >= 4 and isinstance(d[3], list) and len(d[3]) >= 2:
            calls += 1
            shape = shape or "[" + ", ".join(str(x) for x in d[3]) + "]"
    return {"calls": calls, "shape": shape} if calls else None


def _fix(framework: str) -> str:
    if framework == "trl":
        return 'Pack the dataset: SFTConfig(packing=True), or padding_free=True with attn_implementation="flash_attention_2".'
    if framework == "hf_trainer":
        return (
            'Stop padding: use DataCollatorWithFlattening with attn_implementation="flash_attention_2" (or TRL '
            "packing=True); at least set group_by_length=True so batches hold similar lengths."
        )
    return (
        "Pack sequences into full rows and use a varlen attention kernel (flash_attn_varlen_func with cu_seqlens), "
        "or bucket samples by length so each batch pads little."
    )
