"""Cross-rank alignment of collectives: each rank's collective kernels as plain rows, matched across
ranks by their order per communicator, clock offsets from their end times, and who arrives last.

Pure data over numbers (no findings, no rendering): multirank.reduce_ranks turns it into the verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..sections import CollectiveRow, CrossRank, RankAlignment
from . import intervals as iv
from .timeline import is_comm_kernel

_KERNEL_COLL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_CANON = {
    "allreduce": "allreduce",
    "all_reduce": "allreduce",
    "allgather": "allgather",
    "all_gather": "allgather",
    "_allgather_base": "allgather",
    "allgather_into_tensor_coalesced": "allgather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast": "broadcast",
    "sendrecv": "send/recv",
    "send": "send/recv",
    "recv": "send/recv",
    "alltoall": "all_to_all",
    "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
}

# Ranks on one host share one clock and their collectives end within microseconds of each other;
# offsets estimated above this are a second clock (another host, or unsynchronised clocks).
CLOCK_TOLERANCE_US = 50.0
MAX_ROWS = 500  # collectives listed in the report (the sums use all of them)
# collectives whose buffer is the same size on every rank (all-to-all and gathers may be uneven)
SAME_SIZE = {"allreduce", "broadcast", "reduce"}


def collective_names(k: pd.DataFrame) -> np.ndarray:
    """The collective of each comm kernel: the 'Collective name' arg, else parsed from the kernel name."""
    out = []
    for coll, name in zip(k["collective"].to_numpy(), k["name"].astype(str).to_numpy()):
        if isinstance(coll, str) and coll:
            out.append(_CANON.get(coll.lower(), coll.lower()))
            continue
        m = _KERNEL_COLL.search(name)
        g = m.group(1).lower() if m else ""
        if not g or g == "generic":
            low = name.lower()
            g = next(
                (c for c in ("all_reduce", "allreduce", "all_gather", "reduce_scatter", "all_to_all") if c in low),
                "cross_device_reduce" if "cross_device_reduce" in low else "unknown",
            )
        out.append(_CANON.get(g, g))
    return np.array(out, dtype=object)


def collective_kernels(trace) -> pd.DataFrame:
    """This rank's collective kernels in the analysed steps (the primary device's), in start order: the
    rows rank_collectives lists, in its order, indexed by their position in trace.kernels."""
    k = trace.kernels
    if not len(k) or not len(trace.steps):
        return k.iloc[:0]
    tl = trace.timeline
    if tl.device is not None:
        k = k[k["device"].to_numpy() == tl.device]
    k = k[is_comm_kernel(k["name"])] if len(k) else k
    if not len(k):
        return k
    st = trace.steps
    inside = iv.per_window(iv.union(st["start_us"], st["end_us"]), k["ts_us"].to_numpy(), k["end_us"].to_numpy()) > 0
    return k[inside].sort_values("ts_us", kind="stable")


def rank_collectives(trace) -> list[dict]:
    """This rank's collective kernels in the analysed steps, in start order, as plain rows (they travel
    from a worker process as JSON): start/end, collective, and the communicator as the index of its
    stream in order of first use (each process group has its own NCCL stream; stream ids are per rank)."""
    k = collective_kernels(trace)
    if not len(k):
        return []
    names = collective_names(k)
    # ts_us is relative to this file's own origin: back to the profiler's clock, shared by the ranks of a host
    origin = trace.meta.clock_origin_us
    order: dict[int, int] = {}
    rows = []
    for r, coll in zip(k.itertuples(index=False), names):
        g = order.setdefault(int(r.stream), len(order))
        rows.append(
            {
                "ts_us": origin + float(r.ts_us),
                "end_us": origin + float(r.end_us),
                "collective": str(coll),
                "group": g,
                "nelems": max(int(r.in_msg_nelems), int(r.out_msg_nelems)),
            }
        )
    return rows


@dataclass(frozen=True)
class Matched:
    """The collectives matched across ranks: members[i][j] is the row, in rank ranks[j]'s list, of the
    i-th matched collective (names[i] on communicator groups[i])."""

    ranks: list[int]
    members: list[list[int]]
    names: list[str]
    groups: list[int]
    notes: list[str]


def match(per_rank: dict[int, list[dict]]) -> Matched | None:
    """The k-th collective of each communicator, matched across the ranks that recorded collectives, up
    to the first that differs between them (kind, or element count where every rank sends the same), or
    None when fewer than two ranks have collectives."""
    ranks = sorted(r for r, rows in per_rank.items() if rows)
    if len(ranks) < 2:
        return None
    notes: list[str] = []
    members, names, gids = [], [], []
    for g in sorted({row["group"] for r in ranks for row in per_rank[r]}):
        at = {r: [j for j, row in enumerate(per_rank[r]) if row["group"] == g] for r in ranks}
        seqs = {r: [per_rank[r][j] for j in at[r]] for r in ranks}
        n = min(len(s) for s in seqs.values())
        if any(len(s) != n for s in seqs.values()):
            counts = ", ".join(f"rank {r}: {len(s)}" for r, s in seqs.items())
            notes.append(
                f"communicator {g}: the ranks recorded different numbers of collectives ({counts}); "
                f"the first {n} were matched"
            )
        for i in range(n):
            kinds = {seqs[r][i]["collective"] for r in ranks} - {"unknown"}
            if len(kinds) > 1:
                notes.append(
                    f"communicator {g}: collective #{i} differs between ranks ({', '.join(sorted(kinds))}); "
                    f"matching stopped there"
                )
                break
            sizes = {seqs[r][i].get("nelems", -1) for r in ranks} - {-1}
            if kinds & SAME_SIZE and len(sizes) > 1:
                notes.append(
                    f"communicator {g}: collective #{i} ({next(iter(kinds))}) has different element counts "
                    f"on different ranks ({', '.join(map(str, sorted(sizes)))}); matching stopped there"
                )
                break
            members.append([at[r][i] for r in ranks])
            names.append(next(iter(kinds), "unknown"))
            gids.append(g)
    return Matched(ranks=ranks, members=members, names=names, groups=gids, notes=notes)


def align(per_rank: dict[int, list[dict]], n_steps: int = 1, tolerance_us: float = CLOCK_TOLERANCE_US) -> CrossRank:
    """Match the k-th collective of each communicator across ranks, estimate clock offsets from the end
    times (a collective ends together on every rank), and measure who arrives last and what it costs.
    Returns an empty CrossRank when fewer than two ranks have collectives."""
    m = match(per_rank)
    if m is None:
        return CrossRank()
    ranks, members, names, gids, notes = m.ranks, m.members, m.names, m.groups, m.notes
    starts = [[per_rank[r][j]["ts_us"] for r, j in zip(ranks, row)] for row in members]
    ends = [[per_rank[r][j]["end_us"] for r, j in zip(ranks, row)] for row in members]
    if not starts:
        return CrossRank()
    s, e = np.array(starts), np.array(ends)
    # offsets against the first rank: the median of the end-time differences is robust to a few
    # collectives whose end is late on one rank (a kernel tail, a preempted stream)
    offsets = np.median(e - e[:, :1], axis=0)
    two_clocks = bool(np.max(np.abs(offsets)) > tolerance_us)
    if not two_clocks:
        offsets = np.zeros(len(ranks))
    a = s - offsets
    en = e - offsets
    last = a.max(axis=1)
    first = a.min(axis=1)
    dur = np.maximum(en - a, 0.0)
    wait = np.clip(last[:, None] - a, 0.0, dur)
    lag = a.argmax(axis=1)
    srt = np.sort(a, axis=1)
    cost = srt[:, -1] - srt[:, -2]  # what the job would save if the last rank came with the next one
    lag = np.where(cost > 0, lag, -1)  # a tie for last: nobody is last
    caused = wait.sum(axis=1) - wait[np.arange(len(a)), lag]
    n_steps = max(int(n_steps), 1)
    per = []
    for j, r in enumerate(ranks):
        mine = lag == j
        per.append(
            RankAlignment(
                rank=r,
                last_arrivals=int(mine.sum()),
                caused_wait_us_per_step=float(caused[mine].sum()) / n_steps,
                job_cost_us_per_step=float(cost[mine].sum()) / n_steps,
                wait_us_per_step=float(wait[:, j].sum()) / n_steps,
                transfer_us_per_step=float((dur[:, j] - wait[:, j]).sum()) / n_steps,
                clock_offset_us=float(offsets[j]),
            )
        )
    best = max(per, key=lambda p: (p.caused_wait_us_per_step, p.last_arrivals))
    rows = [
        CollectiveRow(
            index=i,
            group=int(gids[i]),
            collective=names[i],
            arrival_skew_us=float(last[i] - first[i]),
            last_rank=ranks[int(lag[i])] if lag[i] >= 0 else None,
            job_cost_us=float(cost[i]),
        )
        for i in range(min(len(a), MAX_ROWS))
    ]
    return CrossRank(
        matched=int(len(a)),
        ranks=ranks,
        steps=n_steps,
        clock="offsets estimated from collective end times" if two_clocks else "one clock",
        clock_tolerance_us=tolerance_us,
        straggler=best.rank if best.caused_wait_us_per_step > 0 else None,
        gating_rank=None,  # the job's judgement (multirank.reduce_ranks: the straggler, when it costs enough)
        per_rank=per,
        collectives=rows,
        notes=notes,
        max_arrival_skew_us=float((last - first).max()),
    )
