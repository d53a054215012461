"""host-sync: synchronising calls inside the step that drain the GPU queue and leave it idle."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..facts.device import primary_kernels, primary_memcpy
from ..facts.steps import idle_in_steps
from ..findings import EventRef, Evidence
from ..trace import intervals as iv
from ..trace.tables import name_flags
from ..trace.timeline import SYNC_CALLS, SYNC_RELAUNCH_US
from .base import Detector, fmt_us, in_steps, option, pct, window_label

LOOKBACK = 20_000  # ops / frames scanned back from a sync to find its enclosing ones
MAX_EXPLAINED = 500  # syncs whose causing op / Python line is looked up (the costliest first)
_LIBRARY_FRAME = re.compile(
    r"^(torch/|<built-in|<string>|nn\.Module:|threading\.py|multiprocessing/|runpy\.py|"
    r"contextlib\.py|functools\.py|site-packages/torch/)"
)
_ITEM = re.compile(r"aten::(item|_local_scalar_dense|is_nonzero)$")
_NONZERO = re.compile(r"aten::(nonzero|masked_select|unique|_unique2|index|masked_scatter|repeat_interleave)$")
_COPY = re.compile(r"aten::(copy_|to|_to_copy|cpu|tolist)$")


def starved_sync_pieces(trace) -> tuple[np.ndarray, np.ndarray]:
    """The timeline's idle_sync inside the analysed steps, restricted to pieces after which the next GPU
    op had not been issued yet (the GPU was starved because the host was blocked). Gaps that open
    while the host waits but whose next op was already queued are kernel-to-kernel gaps or GPU-side
    waits (another stream or process), not the sync's doing."""
    s, e = idle_in_steps(trace, "idle_sync")
    if s.size == 0:
        return s, e
    k, m = primary_kernels(trace), primary_memcpy(trace)
    g_ts = np.concatenate((k["ts_us"].to_numpy(), m["ts_us"].to_numpy()))
    g_l = np.concatenate((k["launch_ts_us"].to_numpy(), m["launch_ts_us"].to_numpy()))
    order = np.argsort(g_ts, kind="stable")
    g_ts, g_l = g_ts[order], g_l[order]
    nxt = np.searchsorted(g_ts, e - 1e-6, side="left")
    has = nxt < g_ts.size
    late = ~has
    late[has] = g_l[nxt[has]] > s[has]  # NaN launch (unlinked op) compares False: not claimed
    return s[late], e[late]


class Starving(NamedTuple):
    """What `starving_syncs` finds: the starved idle pieces, the sync each is charged to (an index into
    `rows`, -1: none), the sync calls (positions in trace.runtime), and per sync the GPU idle it is
    charged with (min(its blocked time, its bubble)) and its bubble."""

    starts: np.ndarray
    ends: np.ndarray
    owner: np.ndarray
    rows: np.ndarray
    lost: np.ndarray
    bubble: np.ndarray


def starving_syncs(trace) -> Starving | None:
    """The finder detect() and whatif() share, or None where no sync starved the GPU. Each starved piece
    is charged to the sync whose [start, end + relaunch allowance] holds its start, else to the one
    before it that reaches furthest."""

    def compute():
        ps, pe = starved_sync_pieces(trace)
        rt = trace.runtime
        if ps.size == 0 or not len(rt):
            return None
        rows = np.flatnonzero(name_flags(rt["name"], SYNC_CALLS))
        if not rows.size:
            return None
        syncs = rt.iloc[rows]
        s_ts = syncs["ts_us"].to_numpy()
        s_end = syncs["end_us"].to_numpy() + SYNC_RELAUNCH_US
        run_max = np.maximum.accumulate(s_end)
        run_arg = np.array([0], dtype=np.int64) if s_end.size == 1 else _running_argmax(s_end)
        j = np.searchsorted(s_ts, ps, side="right") - 1
        ok = j >= 0
        own = np.where(ok, j, 0)
        inside = ok & (ps <= s_end[own])
        other = ok & ~inside & (ps <= run_max[own])
        owner = np.full(ps.size, -1, dtype=np.int64)
        owner[inside] = own[inside]
        owner[other] = run_arg[own[other]]
        bubble = np.bincount(owner[owner >= 0], weights=(pe - ps)[owner >= 0], minlength=len(syncs))
        return Starving(ps, pe, owner, rows, np.minimum(syncs["dur_us"].to_numpy(), bubble), bubble)

    return trace.memo("facts: starving syncs", compute)


def _enclosing(ts: np.ndarray, end: np.ndarray, i_hi: int, t0: float, t1: float) -> np.ndarray:
    """Indices (outermost first) of rows among the LOOKBACK rows before i_hi that enclose [t0, t1]."""
    lo = max(0, i_hi - LOOKBACK)
    # 0.01 us slack: ns-resolution traces let children overrun their parents by a few ns
    sel = np.nonzero((ts[lo:i_hi] <= t0 + 0.01) & (end[lo:i_hi] >= t1 - 0.01))[0] + lo
    return sel


@dataclass(frozen=True)
class HostSync(Detector):
    """
    What it detects
        Synchronising calls inside the training step (cudaStreamSynchronize, cudaDeviceSynchronize,
        cudaEventSynchronize, blocking cudaMemcpy, hip* twins), the CPU ops that issued them
        (`aten::item` -> `aten::_local_scalar_dense` for `.item()`, `aten::is_nonzero` for
        `if tensor:`, `aten::nonzero` for boolean-mask indexing, `aten::copy_` for `.cpu()`), and
        the GPU idle time that follows them.

    Why it costs time
        A sync makes the host wait until the GPU has drained its queue; when it returns the GPU is
        empty and stays idle until the host has run the Python after the sync and launched the next
        kernel. The host's lead over the GPU, which normally hides Python and launch overhead, is lost
        at every sync.

    How time lost is estimated
        From the timeline's idle_sync part (GPU idle while the host was blocked in a sync or within
        its relaunch allowance, 100 us, after it), keeping only the pieces after which the next GPU op
        had not yet been launched. For each sync the loss is min(host time blocked in the call, GPU idle it
        caused): when the GPU is the bottleneck the idle bubble after the sync is what a sync-free
        loop saves; when the host is the bottleneck (launch-bound) only the time the host spent
        waiting is lost, the rest of the bubble being launch overhead it would pay anyway. Summed over
        the analysed steps; a point estimate.

    How to fix
        HF Trainer / TRL (`TrainingArguments` / `SFTConfig`):

            # before: logging_nan_inf_filter (on by default) evaluates torch.isnan(loss) in a
            # Python `if` every micro-step, and a callback prints loss.item() every step
            args = TrainingArguments(..., logging_steps=1)
            # after: no per-step sync, log less often
            args = TrainingArguments(..., logging_steps=50, logging_nan_inf_filter=False)

        Plain PyTorch:

            # before
            for step, batch in enumerate(loader):
                loss = model(**batch).loss
                print(loss.item())                      # sync every step
                x = hidden[mask]                        # boolean mask -> aten::nonzero sync
            # after
            running = torch.zeros((), device="cuda")
            for step, batch in enumerate(loader):
                loss = model(**batch).loss
                running += loss.detach()                # stays on the GPU
                if step % 50 == 0:
                    print((running / 50).item()); running.zero_()
                x = torch.where(mask[..., None], hidden, 0)  # static shape, no sync
            batch = {k: v.to("cuda", non_blocking=True) for k, v in batch.items()}  # pinned memory

    False positives
        One sync per step (end-of-step logging, benchmarking loops that call
        torch.cuda.synchronize() once) usually costs little; the share threshold keeps it quiet.
        Syncs whose GPU gap was caused by queued work waiting on another stream or process are not
        counted.

    References
        CUDA C Programming Guide (synchronous calls, implicit synchronisation); Nsight Systems
        expert rules cuda_api_sync / cuda_memcpy_sync; PyTorch performance tuning guide (avoid
        unnecessary CPU-GPU synchronisation).
    """

    code = "TI201"
    fires_on = ("builders_host.build_item_sync", "builders_host.build_nonzero_sync")
    silent_on = ("builders.build_healthy", "builders_host.build_end_of_step_sync", "builders.build_launch_bound")

    claims_parts = ("idle_sync",)
    min_frac: float = option(0.03, "minimum share of the analysed steps lost to syncs")

    def whatif(self, graph, finding) -> str:
        """Replay model: two kinds of synchronising call stop waiting for the GPU (the value is read later,
        or without a sync, or the explicit synchronize goes): those this detector charges with starved GPU
        time (the finder `starving_syncs`, reported or declined below the threshold), and those made inside
        the ops it blames (`.item()`, `nonzero`, copies to the CPU), which starve the GPU once the host
        keeps ahead of it (a next bottleneck after other fixes). Their own host cost stays; other syncs
        keep waiting."""
        trace = graph.trace
        found = starving_syncs(trace)
        starving = np.zeros(len(graph.h_ts), dtype=bool)
        if found is not None and (found.lost > 0).any():
            starving = graph.host_call_mask(found.rows[found.lost > 0])
        ops = trace.cpu_ops
        pat = lambda n: bool(_ITEM.match(n) or _NONZERO.match(n) or _COPY.match(n))  # noqa: E731
        blamed = ops[name_flags(ops["name"], pat)] if len(ops) else ops
        s, e = iv.union(blamed["ts_us"].to_numpy(), blamed["end_us"].to_numpy())
        j = np.searchsorted(s, graph.h_ts, side="right") - 1
        inside = (j >= 0) & (graph.h_ts < e[np.maximum(j, 0)]) if len(s) else np.zeros(len(graph.h_ts), bool)
        calls = graph.structural("sync calls", lambda: np.array(["Synchroniz" in n for n in graph.h_name], dtype=bool))
        sync = graph.host_in_steps() & (starving | (calls & inside))
        if not sync.any():
            return "no synchronising call starves the GPU or sits in a blamed op in the steps: nothing to change"
        graph.stop_waiting(sync)
        return f"{int(sync.sum())} synchronising call(s) in the steps stop waiting for the GPU"

    def detect(self, trace, ctx):
        if not trace.has_gpu:
            yield self.skip("no GPU activity in the trace")
            return
        rt = trace.runtime
        if not len(rt):
            yield self.skip("no CUDA/HIP runtime events: synchronising calls are not visible")
            return
        syncs = rt[name_flags(rt["name"], SYNC_CALLS)]
        if not len(syncs):
            return
        found = starving_syncs(trace)
        if found is None:
            idle = iv.total(
                iv.intersect(trace.timeline.sets["idle_sync"], iv.union(trace.steps["start_us"], trace.steps["end_us"]))
            )
            if idle > 0:
                yield self.declined(
                    f"{len(syncs)} sync call(s), GPU idle during them {fmt_us(idle / max(ctx.n_steps, 1))}"
                    "/step, but the next GPU op was already queued: the GPU waited on a dependency "
                    "(event, other stream or process), not on the blocked host"
                )
            return
        ps, pe, owner, lost_each, bubble = found.starts, found.ends, found.owner, found.lost, found.bubble
        lost = float(lost_each.sum())
        frac = lost / ctx.window_us if ctx.window_us else 0.0
        if frac < self.min_frac:
            queued = iv.total(
                iv.intersect(trace.timeline.sets["idle_sync"], iv.union(trace.steps["start_us"], trace.steps["end_us"]))
            ) - float((pe - ps).sum())
            more = (
                f"; GPU idle {fmt_us(queued / max(ctx.n_steps, 1))}/step during syncs had its next op already "
                "queued: it waited on a dependency (event, other stream or process), not on the blocked host"
                if queued > lost
                else ""
            )
            yield self.declined(
                f"{len(syncs)} sync call(s) leave the GPU idle {fmt_us(lost / max(ctx.n_steps, 1))}/step "
                f"({100 * frac:.1f}%), below the {100 * self.min_frac:g}% threshold" + more
            )
            return
        n = ctx.n_steps
        w = window_label(trace)
        in_win = in_steps(syncs.assign(lost_us=lost_each, bubble_us=bubble), trace)
        by_name = in_win["name"].astype(str).value_counts()
        causes, cause_lost, callers = self._explain(trace, in_win)
        ev = [
            Evidence(label="GPU idle caused by syncs", value=round(lost / n / 1e3, 3), unit="ms/step", window=w),
            Evidence(label="share of step time", value=round(100 * frac, 1), unit="%", window=w),
            Evidence(
                label="sync calls per step",
                value=", ".join(f"{k} {v / n:.1f}" for k, v in by_name.items()),
                unit="calls/step",
                window=w,
            ),
            Evidence(
                label="host blocked in sync calls",
                value=round(float(in_win["dur_us"].sum()) / n / 1e3, 3),
                unit="ms/step",
                window=w,
            ),
            Evidence(
                label="GPU idle after syncs (before the min with host wait)",
                value=round(float(in_win["bubble_us"].sum()) / n / 1e3, 3),
                unit="ms/step",
                window=w,
            ),
        ]
        if causes:
            ev.append(
                Evidence(
                    label="ops that issued the syncs",
                    unit="calls",
                    window=w,
                    value=", ".join(f"{c} x{v}" for c, v in causes.most_common(4)),
                )
            )
        if callers:
            ev.append(
                Evidence(
                    label="Python callers (with_stack)",
                    unit="calls",
                    window=w,
                    value="; ".join(f"{c} x{v}" for c, v in callers.most_common(3)),
                )
            )
        top_cause = _short(max(cause_lost, key=cause_lost.get)) if cause_lost else "synchronising calls"
        title = (
            f"{len(in_win) / n:.0f} host sync(s) per step, mostly {top_cause}, leave the GPU idle "
            f"{fmt_us(lost / n)} per step ({pct(frac)})"
        )
        events = tuple(
            EventRef(
                name=str(r.name),
                ts_us=round(float(r.ts_us), 3),
                dur_us=round(float(r.dur_us), 3),
                track=f"CPU thread {int(r.tid)}",
            )
            for r in in_win.nlargest(3, "lost_us").itertuples(index=False)
        )
        yield self.finding(
            ctx,
            title=title,
            time_lost_us=lost,
            confidence="high" if frac >= 0.1 else "medium",
            evidence=ev,
            fix=self._fix(ctx, causes),
            events=events,
            # the starved pieces the syncs own, scaled to the time lost (min of wait and bubble)
            idle_claims={"idle_sync": ((ps[owner >= 0], pe[owner >= 0]), lost / max(float(bubble.sum()), 1e-9))},
        )

    @staticmethod
    def _explain(trace, syncs: pd.DataFrame) -> tuple[Counter, Counter, Counter]:
        """The CPU-op chain (outermost > ... > innermost op, last three) and the innermost user Python
        frame around each of the costliest syncs: counts per cause, time lost per cause, callers."""
        causes: Counter = Counter()
        cause_lost: Counter = Counter()
        callers: Counter = Counter()
        top = syncs.nlargest(MAX_EXPLAINED, "lost_us")
        ops = trace.cpu_ops
        ops = ops[~ops["is_annotation"].to_numpy()] if len(ops) else ops
        py = trace.python
        by_tid_ops = {t: g for t, g in ops.groupby("tid", sort=False)} if len(ops) else {}
        by_tid_py = {t: g for t, g in py.groupby("tid", sort=False)} if len(py) else {}
        for r in top.itertuples(index=False):
            g = by_tid_ops.get(r.tid)
            chain: list[str] = []
            if g is not None:
                ts, end = g["ts_us"].to_numpy(), g["end_us"].to_numpy()
                i = int(np.searchsorted(ts, r.ts_us + 0.01, side="right"))
                sel = _enclosing(ts, end, i, r.ts_us, r.end_us)
                chain = [str(x) for x in g["name"].to_numpy()[sel]]
            chain = [c for c in chain if not c.startswith("ProfilerStep#")]
            cause = " > ".join(chain[-3:]) if chain else f"{r.name} (no op: torch.cuda.synchronize() or a library)"
            causes[cause] += 1
            cause_lost[cause] += float(r.lost_us)
            p = by_tid_py.get(r.tid)
            if p is not None:
                ts, end = p["ts_us"].to_numpy(), p["end_us"].to_numpy()
                i = int(np.searchsorted(ts, r.ts_us + 0.01, side="right"))
                sel = _enclosing(ts, end, i, r.ts_us, r.end_us)
                frames = [str(x) for x in p["name"].to_numpy()[sel] if not _LIBRARY_FRAME.match(str(x))]
                if frames:
                    callers[frames[-1]] += 1
        return causes, cause_lost, callers

    @staticmethod
    def _fix(ctx, causes: Counter) -> str:
        names = " ".join(causes)
        hf = ctx.framework in ("hf_trainer", "trl")
        parts = []
        if "is_nonzero" in names or "item" in names or "_local_scalar_dense" in names:
            parts.append(
                "remove per-step .item() / print / `if tensor:` on GPU values (accumulate on the GPU and log "
                "every N steps" + ("; set logging_nan_inf_filter=False" if hf else "") + ")"
            )
        if any(_NONZERO.search(c.split(" > ")[-1]) or "nonzero" in c for c in causes):
            parts.append(
                "replace torch.nonzero / boolean-mask indexing in the hot loop with torch.where or masked "
                "ops of static shape"
            )
        if any(_COPY.search(c.split(" > ")[-1]) for c in causes):
            parts.append("copy with non_blocking=True from pinned memory and keep metrics on the GPU")
        if "(no op" in names:
            parts.append("drop torch.cuda.synchronize() from the loop (time with CUDA events)")
        if not parts:
            parts.append(
                "remove the synchronising calls from the step (no .item(), .cpu(), nonzero or "
                "synchronize in the hot loop)"
            )
        s = "; ".join(parts)
        return s[0].upper() + s[1:] + "."


_USER_FACING = re.compile(r"^aten::(is_nonzero|item|nonzero|masked_select|unique|_unique2|tolist|cpu)$")


def _short(cause: str) -> str:
    """The op a user recognises in a cause chain: a known syncing op if present, else the outermost."""
    if " (no op" in cause:
        return cause.split(" (no op")[0] + " (torch.cuda.synchronize)"
    chain = cause.split(" > ")
    return next((c for c in chain if _USER_FACING.match(c)), chain[0])


def _running_argmax(a: np.ndarray) -> np.ndarray:
    """For each i, the index of the largest a[0..i] (the latest on ties)."""
    out = np.empty(a.size, dtype=np.int64)
    best = 0
    for i in range(a.size):
        if a[i] >= a[best]:
            best = i
        out[i] = best
    return out
