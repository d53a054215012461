"""The job replay: the ranks of one run replayed together, joined by their collectives.

Each rank's own graph (graph.py) is replayed where its trace is (a worker process), and reduced to a
summary of the events the job couples: its collectives' arrivals (kernel starts) and its step markers.
Per event the summary keeps two numbers (docs/multi-rank.md, "Job replay"):

- `f`, the event's time in the rank's replay with every collective taking no time at all: the earliest
  the rank's own work allows, whatever the other ranks do (a replay is monotone in its durations);
- `p` and `d`: the collective whose end the event waited on in the rank's replay (the first collective
  met walking back along the edges that bound each start, as the critical path does), and the time from
  that end to the event. An event whose bound chain meets no collective has p = -1.

The job is then replayed over the summaries, one collective at a time: a rank arrives at collective k at
A = max(f, E(p) + d); a collective matched across ranks ends on every rank at once, when the last rank
arrives plus its transfer time (the shortest duration of the collective over the ranks: the last to
arrive does not wait), E = max over ranks of A + transfer; a collective no other rank matched keeps its
own duration. Step markers follow the same rule, and a rank's step is from its start marker to its end
marker. Unmodified, this reproduces each rank's replay where the last to arrive also has the shortest
duration; its error per rank is reported. A fix is a rank's summary taken from its graph with the fix
applied (engine.apply); "without rank g" leaves rank g out of every collective's last arrival (the
job paced by the other ranks, as a straggler study simulates it).

The summaries are small (a few numbers per collective and step), so the job is replayed without ever
holding two ranks' tables at once. Not modelled: a fix that changes a collective's own transfer time,
and the GPU-work hold of the per-rank prediction (hold.hold).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np

from ..findings import Finding
from ..sections import JobPrediction, JobRank, JobReplay, WhatIfJob, WhatIfJobRank
from ..trace.model import Trace
from ..trace.ranks import Matched, collective_kernels, match
from .engine import apply, transforms
from .graph import Graph
from .hold import graph_of, identity_replay
from .replay import LAUNCH, STREAM, THREAD, WAIT, XSTREAM, XTHREAD, replay

MODEL = "job replay: per-rank replays joined at their matched collectives (docs/multi-rank.md)"
MAX_FIXES = 3  # per rank, the summaries of this many of its top causes with a transformation


def rank_summary(trace: Trace, findings: list[Finding], fixes: tuple[str, ...] | None = None) -> dict:
    """What the job replay needs of one rank, as JSON: for the measured graph ("") and for each of the
    rank's top causes with a transformation (or, given `fixes`, for those applied in order, keyed by
    their names joined with "+"), the two numbers per collective and per step marker."""
    k = collective_kernels(trace)
    if not len(k) or not len(trace.steps) or not trace.has_gpu:
        return {}
    g0 = graph_of(trace)
    if len(g0.markers) < 2:
        return {}
    rows = trace.kernels.index.get_indexer(k.index)
    nodes = g0.kernel_nodes(rows)
    if (rows < 0).any() or (nodes < 0).any():
        return {}
    origin = trace.meta.clock_origin_us
    if fixes is None:
        known = transforms()
        causes = [f.name for f in findings if f.name in known and f.time_lost_us > 0]
        variants = {c: (c,) for c in causes[:MAX_FIXES]}
    else:
        variants = {"+".join(fixes): tuple(fixes)} if fixes else {}
    out = {"origin_us": origin, "variants": {"": _summarise(g0, nodes, origin, identity_replay(trace))}}
    for key, fx in variants.items():
        out["variants"][key] = _summarise(apply(trace, findings, fx).graph, nodes, origin)
    return out


def _summarise(g: Graph, nodes: np.ndarray, origin: float, r=None) -> dict:
    r = replay(g) if r is None else r
    free = g.copy()
    free.g_dur = free.g_dur.copy()
    free.g_dur[nodes] = 0.0
    rf = replay(free)
    row_of = {int(n): j for j, n in enumerate(nodes)}
    walk = _Walk(g, r, row_of)
    starts, ends = g.markers[:-1], g.m_end

    def events(times: np.ndarray, free_times: np.ndarray, keys) -> dict:
        p = [walk.anchor(key) for key in keys]
        d = [float(t - r.g_end[nodes[j]]) if j >= 0 else 0.0 for t, j in zip(times, p)]
        return {"f": [float(x) + origin for x in free_times], "p": p, "d": d}

    return {
        "dur": [float(x) for x in (r.g_end[nodes] - r.g_start[nodes])],
        "coll": events(r.g_start[nodes], rf.g_start[nodes], [("g", int(n), 0) for n in nodes]),
        "start": events(r.h_start[starts], rf.h_start[starts], [("h", int(n), 0) for n in starts]),
        "end": events(r.h_start[ends], rf.h_start[ends], [("h", int(n), 0) for n in ends]),
        "replayed_step_us": [float(x) for x in r.step_us],
    }


class _Walk:
    """Walk back from an event along the edge that bound each start (and each end: a wait's awaited op,
    else the call's own start) to the first collective whose end it meets: that collective's row, or -1
    (the chain reaches a fixed time). Memoised over the states a walk passes."""

    def __init__(self, g: Graph, r, row_of: dict[int, int]):
        self.g, self.r, self.row_of, self.memo = g, r, row_of, {}

    def anchor(self, state: tuple) -> int:
        path, found = [], None
        while found is None:
            if state in self.memo:
                found = self.memo[state]
                break
            path.append(state)
            state, found = self._step(state)
        for s in path:
            self.memo[s] = found
        return found

    def _step(self, state: tuple):
        g, r = self.g, self.r
        side, n, at_end = state
        if side == "g":
            if at_end:
                return (None, self.row_of[n]) if n in self.row_of else (("g", n, 0), None)
            b = int(r.g_bind[n])
            if b == LAUNCH:
                return ("h", int(g.g_launch[n]), 0), None
            if b == STREAM:
                return ("g", int(g.g_prev[n]), 1), None
            if b == XSTREAM:
                return ("g", int(g.g_xprev[n]), 1), None
            return None, -1
        if at_end:
            if int(r.h_end_bind[n]) == WAIT:
                return ("g", int(g.h_wait[n]), 1), None
            return ("h", n, 0), None
        b = int(r.h_bind[n])
        if b == THREAD:
            return ("h", int(g.h_prev[n]), 1), None
        if b == XTHREAD:
            return ("h", int(g.h_xprev[n]), 1), None
        return None, -1  # FIXED: the measured time itself


# --- the job, over the summaries --------------------------------------------------------------------


@dataclass
class JobInput:
    """The ranks' summaries with the matching and the clock offsets (alignment of trace/ranks.py)."""

    summaries: dict[int, dict]
    matched: Matched
    offsets: dict[int, float]  # rank -> its clock minus the common clock (us)


def job_input(cross, colls: dict[int, list[dict]], sums: dict[int, dict]) -> JobInput:
    """The aligned ranks' summaries, their collectives matched as align matched them, and the clock
    offsets align estimated (cross: its CrossRank)."""
    return JobInput(
        summaries={r: sums[r] for r in cross.ranks},
        matched=match(colls),
        offsets={p.rank: p.clock_offset_us for p in cross.per_rank},
    )


class OrderError(ValueError):
    """The ranks' collectives wait on each other in a circle: the matching is not one order."""


def run(job: JobInput, choice: dict[int, str] | None = None, without: frozenset = frozenset()) -> dict[int, np.ndarray]:
    """Each rank's replayed steps (us) with rank r's summary taken from variant choice[r] ("" for the
    measured graph), and the ranks in `without` left out of every collective's last arrival."""
    return _Job(job, choice or {}, without).steps()


class _Job:
    """One replay of the job. A collective is keyed ("m", i) when matched across ranks, ("l", r, j)
    when only rank r has it (row j); `ends` holds each one's end on the common clock once known."""

    def __init__(self, job: JobInput, choice: dict[int, str], without: frozenset):
        m = job.matched
        self.var = {r: job.summaries[r]["variants"][choice.get(r, "")] for r in job.summaries}
        self.off = {r: float(job.offsets.get(r, 0.0)) for r in self.var}
        self.without = without
        self.members = {i: [(r, j) for r, j in zip(m.ranks, row) if r in self.var] for i, row in enumerate(m.members)}
        self.node = {rj: i for i, rows in self.members.items() for rj in rows}
        # the transfer: the shortest duration over the ranks (the last to arrive does not wait)
        self.transfer = {
            i: min((self.var[r]["dur"][j] for r, j in rows), default=0.0) for i, rows in self.members.items()
        }
        self.ends: dict = {}

    def key(self, r: int, j: int) -> tuple:
        return ("m", self.node[(r, j)]) if (r, j) in self.node else ("l", r, j)

    def at(self, r: int, which: str, j: int) -> float:
        """An event's time: max(its own pace, the end it waited on + the gap), once that end is known."""
        ev = self.var[r][which]
        a = ev["f"][j] - self.off[r]
        p = ev["p"][j]
        return a if p < 0 else max(a, self.ends[self.key(r, p)] + ev["d"][j])

    def end(self, key: tuple) -> float:
        if key[0] == "l":
            return self.at(key[1], "coll", key[2]) + self.var[key[1]]["dur"][key[2]]
        rows = self.members[key[1]]
        arr = [self.at(r, "coll", j) for r, j in rows if r not in self.without]
        if not arr:  # every member left out: the collective runs at its members' own pace
            arr = [self.at(r, "coll", j) for r, j in rows]
        return max(arr) + self.transfer[key[1]]

    def deps(self, key: tuple) -> list:
        rows = [(key[1], key[2])] if key[0] == "l" else self.members[key[1]]
        return [self.key(r, p) for r, j in rows if (p := self.var[r]["coll"]["p"][j]) >= 0]

    def resolve(self, key: tuple) -> None:
        """Depth first: the stack is the path of collectives waiting on each other, so a collective met
        again on it is a circle."""
        path, on = [key], {key}
        while path:
            k = path[-1]
            d = next((d for d in self.deps(k) if d not in self.ends), None)
            if d is None:
                self.ends[k] = self.end(k)
                on.discard(path.pop())
            elif d in on:
                raise OrderError("the ranks' collectives wait on each other in a circle")
            else:
                path.append(d)
                on.add(d)

    def steps(self) -> dict[int, np.ndarray]:
        for r, v in self.var.items():
            for j in range(len(v["dur"])):
                if self.key(r, j) not in self.ends:
                    self.resolve(self.key(r, j))
        out = {}
        for r, v in self.var.items():
            s = [self.at(r, "start", j) for j in range(len(v["start"]["f"]))]
            e = [self.at(r, "end", j) for j in range(len(v["end"]["f"]))]
            out[r] = np.array(e) - np.array(s)
        return out


def _ranks_label(have: list[int], ranks: list[int]) -> str:
    if have == ranks:
        return f"all {len(ranks)} ranks"
    return ("ranks " + ", ".join(map(str, have))) if len(have) <= 4 else f"{len(have)} ranks"


# --- the report's numbers ---------------------------------------------------------------------------


def job_step(steps: dict[int, np.ndarray], ranks) -> float:
    """The job's step: the slowest rank's median step (the ranks move in lock-step at the collectives)."""
    vals = [float(np.median(steps[r])) for r in ranks if r in steps and len(steps[r])]
    return max(vals) if vals else 0.0


MAX_PACE_RANKS = 64  # "keeps pace" is replayed for every rank up to this many, else for the straggler only


def pace_costs(job: JobInput, ranks) -> dict[int, float]:
    """Per rank: what the job's step would lose if that rank kept pace with the others (left out of
    every collective's last arrival), from the job replay."""
    base = run(job)
    out = {}
    for g in ranks:
        keep = [r for r in sorted(job.summaries) if r != g]
        out[g] = job_step(base, keep) - job_step(run(job, without=frozenset({g})), keep)
    return out


def report(job: JobInput, measured: dict[int, float], gating: int | None, top_cause: str | None) -> JobReplay:
    """The cross-rank section's job replay: the identity's error per rank, and the job step after fixing
    top_cause (the gating rank's top cause, else the slowest rank's) on the gating rank, after fixing it on
    every rank that has it, and with the gating rank keeping pace."""
    base = run(job)
    ranks = sorted(job.summaries)
    replayed = job_step(base, ranks)
    meas = max(measured[r] for r in ranks)
    per = [
        JobRank(
            rank=r,
            measured_us=measured[r],
            replayed_us=float(np.median(base[r])),
            error_frac=abs(float(np.median(base[r])) - measured[r]) / measured[r] if measured[r] else 0.0,
        )
        for r in ranks
    ]
    preds = []

    def add(what: str, fix: str | None, on: list[int], steps: dict, keep) -> None:
        to = job_step(steps, keep)
        preds.append(
            JobPrediction(
                what=what,
                fix=fix,
                ranks=on,
                step_us=to,
                saved_per_step_us=replayed - to,
                saved_frac=(replayed - to) / replayed if replayed else 0.0,
            )
        )

    if top_cause:
        if gating is not None and top_cause in job.summaries[gating]["variants"]:
            add(f"{top_cause} fixed on rank {gating}", top_cause, [gating], run(job, {gating: top_cause}), ranks)
        have = [r for r in ranks if top_cause in job.summaries[r]["variants"]]
        if len(have) > 1 or (have and gating is None):
            fixed = run(job, {r: top_cause for r in have})
            add(f"{top_cause} fixed on {_ranks_label(have, ranks)}", top_cause, have, fixed, ranks)
    if gating is not None:  # measured on the other ranks: what rank g's delay costs them
        keep = [r for r in ranks if r != gating]
        add(f"rank {gating} keeps pace with the others", None, [gating], run(job, without=frozenset({gating})), keep)
        p = preds[-1]
        was = job_step(base, keep)
        preds[-1] = msgspec.structs.replace(
            p, saved_per_step_us=was - p.step_us, saved_frac=(was - p.step_us) / was if was else 0.0
        )
    return JobReplay(
        model=MODEL,
        measured_step_us=meas,
        replayed_step_us=replayed,
        max_error_frac=max((p.error_frac for p in per), default=0.0),
        per_rank=per,
        predictions=preds,
    )


def whatif(
    job: JobInput, measured: dict[int, float], asked: list[str], per_rank: dict[int, tuple], notes: list[str]
) -> WhatIfJob:
    """The job replayed with per_rank[r] (fix names, in order) applied to rank r's graph: each summary
    carries that variant under the names joined with "+"."""
    ranks = sorted(job.summaries)
    base = run(job)
    fixed = run(job, {r: "+".join(per_rank[r]) for r in ranks if per_rank.get(r)})
    return WhatIfJob(
        model=MODEL,
        fixes=list(asked),
        measured_step_us=max(measured[r] for r in ranks),
        replayed_step_us=job_step(base, ranks),
        predicted_step_us=job_step(fixed, ranks),
        per_rank=[
            WhatIfJobRank(
                rank=r,
                fixes=list(per_rank.get(r, ())),
                measured_us=measured[r],
                replayed_us=float(np.median(base[r])),
                predicted_us=float(np.median(fixed[r])),
            )
            for r in ranks
        ],
        notes=notes,
    )
