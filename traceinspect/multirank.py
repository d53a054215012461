"""The multi-rank path: each rank file is analysed by a pure function (file -> the rank's result),
run in a process pool or on a Dask cluster, then the results are reduced into one report for the job,
led by the rank that gates the step (trace/ranks.py aligns the collectives, whatif/job.py replays the
job). Renders nothing.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import msgspec
import numpy as np

from .analyze import analyze
from .detectors.base import fmt_us
from .errors import TraceError, UsageError
from .report import Report, known
from .sections import CrossRank, RankSummary, Verdict
from .trace.model import default_rank_warning, load_trace
from .trace.ranks import align, rank_collectives
from .trace.rundir import RankFile, check_one_run
from .whatif import job


class RankResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker sends back for one rank file, and all the reduction holds of it: the rank's row of
    the job's table (its own part; the cross-rank columns are the reduction's), the few facts the
    reduction judges by, the rank's whole report packed (zlib over msgpack, a few tens of KB; decoded
    for the rank that leads the job's report only), its collectives and its job-replay summary. So the
    parent's memory grows by these per rank, never by a rank's tables or its report's objects."""

    row: RankSummary
    rank_source: str
    world_size: int | None
    top_cause: str | None  # the rank's verdict's top cause
    packed: bytes
    collectives: list
    summary: dict  # whatif/job.py rank_summary

    def report(self) -> Report:
        return Report.from_dict(msgspec.msgpack.decode(zlib.decompress(self.packed)))


class RankFailed(msgspec.Struct, frozen=True):
    """A rank file that could not be read: skipped with a warning, the others go on."""

    path: str
    reason: str
    hint: str


def analyze_file(
    path: str, steps: str | None = None, strict: bool = False, warn_default_rank: bool = False
) -> RankResult:
    """Pure function: one trace file -> its RankResult (what a process pool or Dask maps)."""
    trace = load_trace(path, warn_default_rank=warn_default_rank, jobs=1)  # ranks are the parallel unit
    trace.select_steps(steps)
    rep = analyze(trace, strict=strict)
    colls = rank_collectives(trace) if trace.has_gpu else []
    busy = rep.breakdown.get("gpu_busy")
    return RankResult(
        row=RankSummary(
            rank=rep.trace.rank,
            file=rep.trace.file,
            median_step_us=rep.steps.median_us,
            mean_step_us=rep.steps.mean_us,
            steps=rep.steps.count,
            gpu_busy_frac=known(busy.frac) if busy else None,
            top_finding=rep.findings[0].name if rep.findings else None,
            slowest=False,
        ),
        rank_source=known(rep.trace.rank_source),
        world_size=known(rep.trace.world_size),
        top_cause=known(rep.verdict.top) if rep.verdict else None,
        packed=zlib.compress(msgspec.msgpack.encode(rep.to_dict()), 6),
        collectives=colls,
        summary=job.rank_summary(trace, list(rep.findings)) if colls else {},
    )


STRAGGLER_MIN_FRAC = 0.01  # a rank gates the step when the job loses at least 1% of the median step to it


def _safe_analyze_file(args) -> RankResult | RankFailed:
    """analyze_file, where a file that cannot be read is a value (RankFailed): one bad rank file is
    skipped with a warning, it does not fail the others. The parts stay separate, so the reduction
    never parses a message."""
    path, steps, strict = args
    try:
        return analyze_file(path, steps, strict, warn_default_rank=True)
    except TraceError as e:
        return RankFailed(e.path, e.reason, e.hint)
    except OSError as e:
        return RankFailed(path, f"cannot read the file ({e.strerror or e})", "check the file and its permissions")
    except MemoryError:
        return RankFailed(
            path, "out of memory while reading it", "analyse this rank on its own, or capture fewer active steps"
        )


def analyze_many(
    paths: Sequence[str],
    *,
    steps: str | None = None,
    strict: bool = False,
    jobs: int | None = None,
    mapper: Callable | None = None,
    keep_rank: int | None = None,
) -> Report:
    """Analyse rank files in parallel and reduce them into one report led by the rank that gates the
    step, else the slowest."""
    work = [(str(p), steps, strict) for p in paths]
    if mapper is not None:
        results = list(mapper(_safe_analyze_file, work))
    else:
        jobs = min(jobs or os.cpu_count() or 1, len(work))  # never more workers than files
        if jobs <= 1 or len(work) == 1:
            results = [_safe_analyze_file(w) for w in work]
        else:
            with ProcessPoolExecutor(max_workers=jobs) as ex:
                results = list(ex.map(_safe_analyze_file, work))
    if keep_rank is not None:
        for r in results:
            if isinstance(r, RankResult) and r.row.rank == keep_rank:
                return r.report()
        found = sorted(r.row.rank for r in results if isinstance(r, RankResult))
        raise UsageError(f": no such rank among the files (ranks found: {found})", param="rank", value=keep_rank)
    return reduce_ranks(results)


def reduce_ranks(results: list) -> Report:
    """One report for the job: led by the rank that gates the step (the one most often last to arrive at
    the collectives, weighted by the wait it causes the others) when the collectives can be aligned,
    else by the rank with the slowest median step. The ranks are reduced from their RankResults; only
    the leading rank's report is unpacked."""
    ranks = [r for r in results if isinstance(r, RankResult)]
    bad = [r for r in results if isinstance(r, RankFailed)]
    if not ranks:
        raise TraceError(bad[0].path, bad[0].reason, hint=bad[0].hint)
    # the rank each file claims is known for sure only now (the sniff before the parse reads the
    # head and tail only): two files with the same rank are not one run
    check_one_run(
        [
            RankFile(
                path=Path(r.row.file), rank=r.row.rank, rank_source=r.rank_source, world_size=r.world_size, worker=None
            )
            for r in ranks
        ],
        "the rank files",
    )
    ranks.sort(key=lambda r: r.row.rank)
    colls = {r.row.rank: r.collectives for r in ranks}
    sums = {r.row.rank: r.summary for r in ranks}
    med = [r.row.median_step_us for r in ranks]
    slow = int(np.argmax(med))
    cross = align(colls, n_steps=min(int(r.row.steps or 1) for r in ranks)) if len(ranks) > 1 else CrossRank()
    cross, replayed = _job_replay(cross, colls, sums)
    gate = _gating_rank(cross, med)
    if replayed is not None:
        cross = msgspec.structs.replace(cross, job=_job_section(replayed, cross, ranks, gate))
    lead_i = next(i for i, r in enumerate(ranks) if r.row.rank == gate) if gate is not None else slow
    lead = ranks[lead_i].report()
    per = {p.rank: p for p in cross.get("per_rank", [])}

    def summary(i: int, r: RankResult) -> RankSummary:
        c = per.get(r.row.rank)
        return msgspec.structs.replace(
            r.row,
            slowest=i == slow,
            **(
                {}
                if c is None
                else {
                    "gating": r.row.rank == gate,
                    "last_arrivals": c.last_arrivals,
                    "collective_wait_us_per_step": c.wait_us_per_step,
                    "collective_transfer_us_per_step": c.transfer_us_per_step,
                    "clock_offset_us": c.clock_offset_us,
                }
            ),
        )

    lead = msgspec.structs.replace(lead, ranks=[summary(i, r) for i, r in enumerate(ranks)])
    warnings = [w for w in (_missing_ranks(ranks), None if gate is not None else _slowest(ranks, slow, cross)) if w]
    if cross:
        cross = msgspec.structs.replace(cross, gating_rank=gate)
        lead = msgspec.structs.replace(lead, cross_rank=cross)
        if cross.clock != "one clock":
            warnings.append(
                f"the ranks' clocks differ (different hosts, or clocks not synchronised): offsets "
                f"against rank {cross.ranks[0]} estimated from the collectives' end times and "
                f"removed before comparing arrivals ({_clock_groups(cross)})"
            )
        warnings += cross.notes
    if gate is not None:
        lead = msgspec.structs.replace(lead, verdict=_straggler_verdict(lead, cross))
    warnings += lead.warnings
    for b in bad:
        warnings.append(f"rank file skipped, {b.path}: {b.reason}")
    for i, r in enumerate(ranks):  # a rank that was assumed: its rank_source says so, not its warning text
        if i != lead_i and r.rank_source == "default":
            warnings.append(default_rank_warning(r.row.file))
    return msgspec.structs.replace(lead, warnings=warnings)


def _missing_ranks(ranks: list[RankResult]) -> str | None:
    """The warning for a world size larger than the ranks analysed, naming the absent ranks."""
    ws = max((r.world_size or 0) for r in ranks)
    present = {r.row.rank for r in ranks}
    missing = sorted(set(range(ws)) - present) if ws else []
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:16])) + (", ..." if len(missing) > 16 else "")
    return (
        f"world size is {ws} but {len(present)} rank file(s) were analysed (missing rank(s): "
        f"{shown}): the rank that gates the step may be one that is absent; add its trace"
    )


def _slowest(ranks: list[RankResult], slow: int, cross: CrossRank) -> str | None:
    """Without a gating rank: whose findings the report shows (the slowest rank's), and why no rank gates."""
    if len(ranks) < 2:
        return None
    med = [r.row.median_step_us for r in ranks]
    fastest = float(np.min(med))
    why = f"arrivals within {fmt_us(cross.max_arrival_skew_us)}" if cross else "no collectives to align across ranks"
    return (
        f"{len(ranks)} ranks analysed; the findings below are rank {ranks[slow].row.rank}'s, the slowest "
        f"(median step {med[slow] / 1e3:.1f} ms vs fastest {fastest / 1e3:.1f} ms, "
        f"{(med[slow] / fastest - 1) * 100 if fastest else 0:.0f}% slower); no rank gates the collectives ({why})"
    )


MAX_CLOCK_GROUPS = 16  # clocks named in the warning; the table has every rank's offset


def _clock_groups(cross: CrossRank) -> str:
    """The ranks' clock offsets, runs of ranks within the tolerance of each other's clock as one
    ("ranks 0-7 +0.000 ms"): a host's ranks share a clock, and 512 ranks make one line per host."""
    groups: list[list] = []
    for p in cross.per_rank:
        g = groups[-1] if groups else None
        if g and abs(p.clock_offset_us - g[2]) <= cross.clock_tolerance_us:
            g[1] = p.rank
        else:
            groups.append([p.rank, p.rank, p.clock_offset_us])
    said = [
        f"{'rank' if a == b else 'ranks'} {a if a == b else f'{a}-{b}'} {off / 1e3:+.3f} ms"
        for a, b, off in groups[:MAX_CLOCK_GROUPS]
    ]
    if len(groups) > MAX_CLOCK_GROUPS:
        said.append(f"... {len(groups)} clocks in all, every rank's in the collectives table")
    return ", ".join(said)


def _job_replay(cross: CrossRank, colls: dict, sums: dict):
    """(cross, job input): where every aligned rank sent its replay summary, the job replay's cost of each
    rank's delay replaces the arrival-lead estimate in per_rank (one number for "what the job loses to
    this rank": the table, the gating judgement and the headline read it), and the straggler is the rank
    whose delay costs the job most. Else (cross, None), with a note saying why when there were ranks."""
    if not cross:
        return cross, None
    if not all(sums.get(r, {}).get("variants") for r in cross.ranks):
        return msgspec.structs.replace(
            cross, notes=[*cross.notes, "job replay: not every rank's replay could be summarised; not replayed"]
        ), None
    ji = job.job_input(cross, colls, sums)
    try:
        ranks = cross.ranks if len(cross.ranks) <= job.MAX_PACE_RANKS else [cross.straggler]
        costs = job.pace_costs(ji, [r for r in ranks if r is not None])
    except job.OrderError as e:
        return msgspec.structs.replace(cross, notes=[*cross.notes, f"job replay: {e}; not replayed"]), None
    per = [
        msgspec.structs.replace(p, job_cost_us_per_step=max(costs[p.rank], 0.0)) if p.rank in costs else p
        for p in cross.per_rank
    ]
    best = max(per, key=lambda p: (p.job_cost_us_per_step, p.caused_wait_us_per_step))
    straggler = best.rank if best.job_cost_us_per_step > 0 else cross.straggler
    return msgspec.structs.replace(cross, per_rank=per, straggler=straggler), ji


def _job_section(ji, cross: CrossRank, ranks: list[RankResult], gate: int | None):
    """The job replay's section: the gating rank's top cause (else the slowest rank's) fixed on the gating
    rank and on every rank that has it, and the gating rank keeping pace."""
    by_rank = {r.row.rank: r for r in ranks}
    measured = {r: float(by_rank[r].row.median_step_us) for r in cross.ranks}
    lead = gate if gate is not None else max(cross.ranks, key=lambda r: measured[r])
    return job.report(ji, measured, gate, by_rank[lead].top_cause)


def _gating_rank(cross: CrossRank, medians: list[float]) -> int | None:
    """The straggler when it costs the job at least STRAGGLER_MIN_FRAC of the median step."""
    s = cross.straggler if cross else None
    if s is None:
        return None
    p = next(p for p in cross.per_rank if p.rank == s)
    median = float(np.median(medians))
    return s if median and p.job_cost_us_per_step >= STRAGGLER_MIN_FRAC * median else None


def _straggler_verdict(lead: Report, cross: CrossRank) -> Verdict:
    """The job's headline: the gating rank, the wait it costs, and its own top cause as the reason."""
    s = cross.straggler
    p = next(p for p in cross.per_rank if p.rank == s)
    others = [q for q in cross.per_rank if q.rank != s]
    mean_wait = float(np.mean([q.wait_us_per_step for q in others])) if others else 0.0
    part = lead.breakdown.get("gpu_busy")
    busy = known(part.frac) if part else None
    v = lead.verdict
    top = known(v.top)
    busy_s = f"{100 * busy:.0f}% GPU busy" if busy is not None else "GPU busy unknown"
    cause = (
        f"The cause is rank {s}'s own: {top}, {busy_s} ({known(v.top_title, '').rstrip('.')})"
        if top
        else f"Rank {s} has no finding of its own ({busy_s}): look at its input pipeline, host and data balance"
    )
    headline = (
        f"Rank {s} gates the step: it is last to arrive at {p.last_arrivals} of {cross.matched} "
        f"collectives, the other ranks wait {fmt_us(mean_wait)} per step on average in collectives, and "
        f"the job loses {fmt_us(p.job_cost_us_per_step)} per step to it. {cause}. The other ranks' "
        f"collective time is waiting for rank {s}, not communication to tune."
    )
    j = known(cross.job)
    if j:
        said = "; ".join(f"{x.what}: {fmt_us(x.step_us)}" for x in j.predictions if x.fix)
        if said:
            headline += f" Replayed as one job (step {fmt_us(j.replayed_step_us)}): {said}."
    return msgspec.structs.replace(
        v,
        headline=headline,
        gating_rank=s,
        gating_cost_per_step_us=p.job_cost_us_per_step,
        gating_caused_wait_per_step_us=p.caused_wait_us_per_step,
        rank_headline=known(v.headline, ""),
    )
