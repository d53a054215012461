"""The library API, for notebooks and scripts; the command line is a thin layer over it (docs/api.md).

    import traceinspect as ti
    trace = ti.load("run.pt.trace.json.gz")        # the events as pandas DataFrames (trace.kernels, ...)
    report = ti.analyze(trace)                     # or ti.analyze(path, config={"ignore": ["TI1"]})
    print(ti.render(report, "text"))               # "md", "json", "html" too
    d = ti.diff("before.json", report)             # saved reports, traces or Reports on either side

Errors are exceptions from traceinspect.errors: UsageError (a bad argument; `param` names it as this
module spells it), TraceError (a trace that cannot be read), DetectorFailed (strict=True). Messages
name parameters, never command-line flags. Nothing here prints, and nothing writes a file unless asked
(analyze's cache=True, annotate's `out`).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from .errors import DetectorFailed, TraceError, UsageError

if TYPE_CHECKING:  # the heavy modules load on first call, not on `import traceinspect`
    from .config import Config
    from .diff import ReportDiff
    from .report import Report, WhatIfRun
    from .trace.model import Trace

PROGRESS_MIN_BYTES = 50 << 20  # smaller traces read in about a second: no progress calls


def trace_paths(path: str | Path) -> list[str]:
    """PATH -> the trace files to analyse: the file itself, or the rank files of the one run in a
    directory (rundir.one_run says which, and refuses a folder of several runs)."""
    from .trace.rundir import one_run

    path = str(path)
    if not path:
        raise UsageError(
            'PATH is empty (""): it names no trace file or directory',
            hint="pass a trace file, or the directory of one run's rank files ('.' for this one)",
        )
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise TraceError(path, "no such file or directory", hint="check the path") from None
    except OSError as e:
        raise TraceError(
            path, f"cannot read it ({e.strerror or e})", hint="check the path and its permissions"
        ) from None
    if stat.S_ISDIR(mode):
        return [str(f.path) for f in one_run(p)]
    if not stat.S_ISREG(mode):
        from .trace.load import not_regular

        raise not_regular(path, mode)
    return [str(p)]


def load(
    path: str | Path,
    *,
    steps: str | None = None,
    jobs: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> "Trace":
    """One trace file (.json or .json.gz) -> Trace: its events as DataFrames (trace.kernels,
    trace.cpu_ops, trace.runtime, trace.memcpy; times in microseconds from the trace start), the steps
    (trace.steps) and the per-step timeline (trace.timeline.per_step). `steps`: a Python slice over
    the steps in time order ('1:' skips the first). `progress(fraction)` is called while reading."""
    from .trace.model import load_trace, parse_step_slice

    if steps:
        parse_step_slice(steps)  # a bad slice fails before the file is read
    paths = trace_paths(path)
    if len(paths) != 1:
        raise UsageError(
            f"{path}: a directory of {len(paths)} rank files; load takes one trace file",
            hint="pass one rank's file, or analyze() the directory",
        )
    trace = load_trace(paths[0], jobs=jobs, progress=progress)
    trace.select_steps(steps)
    return trace


def make_config(config: "Config | str | Path | Mapping | None") -> "Config":
    """A Config from what analyze() accepts: a Config as it is; a path to a TOML file (a pyproject.toml
    with [tool.traceinspect], or the settings at its top level); a dict shaped like that table
    ({"select": [...], "ignore": [...], "launch-bound": {"min_idle_frac": 0.05}}); None: the nearest
    pyproject.toml's [tool.traceinspect] from the working directory up to the repository root (as the
    command line does; never from the trace's directory), else the defaults."""
    from . import config as _config

    if isinstance(config, _config.Config):
        return config
    if isinstance(config, Mapping):
        import dataclasses  # no file: the report's settings name no source

        return dataclasses.replace(_config.from_table(dict(config), "config"), source=None)
    if isinstance(config, (str, Path)):
        return _config.load(config)
    if config is None:
        return _config.load(None)  # from the working directory, never from the trace
    raise UsageError(
        f"is of type {type(config).__name__}; expected a Config, a TOML file path or a dict",
        param="config",
        value=config,
    )


def cache_options(steps: str | None) -> dict:
    """Everything besides the file that changes a report, for the cache key."""
    from .trace import hardware
    from .trace.stream import native_enabled

    # the reader is part of the key: both give the same tables, but a cached report must never
    # hide a difference between them; so is the peak table's override file (TRACEINSPECT_HARDWARE):
    # it changes the efficiency numbers
    return {"steps": steps, "native": native_enabled(), "hardware": hardware.override_signature()}


def analyze(
    source: "str | Path | Trace",
    config: "Config | str | Path | Mapping | None" = None,
    *,
    steps: str | None = None,
    rank: int | str | None = None,
    strict: bool = False,
    jobs: int | None = None,
    scheduler: str | None = None,
    cache: bool = False,
    progress: Callable[[float], None] | None = None,
) -> "Report":
    """A trace file, the directory of one run's rank files, or a loaded Trace -> Report.

    config: see make_config (None: the nearest pyproject.toml's settings, as the command line).
    steps: a slice over the steps ('1:'); with a Trace it re-selects the steps of that Trace.
    rank: for a directory, the report of this rank only (None or 'all': the job's report, led by the
    rank that gates the step); for a file, a check that the file is that rank.
    strict: a detector that fails raises DetectorFailed instead of being reported.
    jobs: parallel workers; scheduler: a Dask scheduler address for many rank files.
    cache: read and write the report cache (traces of 32 MB of JSON or more; see cache.py).
    progress(fraction): called while a trace file of 50 MB of JSON or more is read."""
    from .trace.model import Trace, parse_step_slice

    if steps:
        parse_step_slice(steps)  # a bad slice fails before any file is read
    keep = _rank(rank)
    if isinstance(source, Trace):
        return _analyze_trace(source, make_config(config), steps=steps, rank=keep, strict=strict)
    paths = trace_paths(source)
    cfg = make_config(config)
    if len(paths) == 1:
        return _analyze_file(
            paths[0], cfg, steps=steps, rank=keep, strict=strict, jobs=jobs, cache=cache, progress=progress
        )
    if cfg.non_default():
        raise UsageError(
            f"{source}: detector settings ({cfg.source or 'options'}) apply to one trace file "
            "so far, not to a directory of rank files",
            hint="analyse one rank file at a time",
        )
    from .multirank import analyze_many

    mapper = None
    if scheduler:
        from .distributed import dask_mapper

        mapper = dask_mapper(scheduler)
    return analyze_many(paths, steps=steps, strict=strict, jobs=jobs, mapper=mapper, keep_rank=keep)


def _rank(rank: int | str | None) -> int | None:
    if rank in (None, "all"):
        return None
    try:
        return int(rank)
    except (TypeError, ValueError):
        raise UsageError(": expected a rank number or 'all'", param="rank", value=rank) from None


def _analyze_trace(trace: "Trace", cfg: "Config", *, steps, rank, strict) -> "Report":
    from .analyze import analyze as run

    trace.select_steps(steps)
    report = run(trace, strict=strict, config=cfg)  # leaves the Trace as it was: analyze() twice gives one report
    _check_rank(report, rank, trace.meta.path)
    return report


def _analyze_file(path: str, cfg: "Config", *, steps, rank, strict, jobs, cache, progress) -> "Report":
    from . import cache as _cache
    from .trace.load import estimate_json_bytes

    json_size = estimate_json_bytes(path)  # a FIFO or device: a TraceError at once, never a blocking open
    settings = cfg.non_default()
    key = (
        _cache.key_for(path, {**cache_options(steps), **({"settings": settings} if settings else {})})
        if cache and json_size >= _cache.MIN_BYTES
        else None
    )
    report = _cache.load(key)
    if report is not None:
        if strict and report.failures:
            raise DetectorFailed(f"detector {report.failures[0].name} failed: {report.failures[0].error}")
    else:  # the analyzer (and pandas) load only on a cache miss
        from .analyze import analyze as run
        from .trace.model import load_trace

        trace = load_trace(path, jobs=jobs, progress=progress if json_size > PROGRESS_MIN_BYTES else None)
        trace.select_steps(steps)
        report = run(trace, strict=strict, config=cfg)
        _cache.store(key, report.to_dict())
    _check_rank(report, rank, path)
    return report


def _check_rank(report: "Report", rank: int | None, path: str) -> None:
    from .report import known

    if rank is not None and rank != known(report.trace.rank):
        raise UsageError(f": {path} is rank {known(report.trace.rank)}", param="rank", value=rank)


def report_of(
    side: "str | Path | Report | Trace",
    *,
    steps: str | None = None,
    config: "Config | str | Path | Mapping | None" = None,
    cache: bool = False,
) -> "Report":
    """One side of a comparison: a Report as it is; a saved JSON report (analyze's "json" format)
    read back; a Trace or any other path analysed (with `steps` and `config`)."""
    from .report import Report

    if isinstance(side, Report):
        return side
    if isinstance(side, (str, Path)):
        from .diff import load_saved_report

        saved = load_saved_report(side)
        if saved is not None:
            return saved
    return analyze(side, config, steps=steps, cache=cache)


def diff(
    before: "str | Path | Report | Trace",
    after: "str | Path | Report | Trace",
    *,
    steps: str | None = None,
    config: "Config | str | Path | Mapping | None" = None,
    cache: bool = False,
) -> "ReportDiff":
    """Compare two runs -> ReportDiff (step time, speedup and noise, findings resolved and new,
    breakdown, kernels, environment). Each side: see report_of. `d.regression(pct)` is the
    --fail-on-regression gate; `d.to_dict()` the JSON form."""
    from .diff import diff as run

    return run(
        report_of(before, steps=steps, config=config, cache=cache),
        report_of(after, steps=steps, config=config, cache=cache),
    )


FORMATS = ("text", "md", "json", "html")


def render(
    obj: "Report | ReportDiff",
    format: str = "text",
    *,
    width: int = 100,
    assets: str | Path | None = None,
    relative_to: str | Path | None = None,
) -> str:
    """A Report or ReportDiff as a document: "text", "md", "json" or "html". `assets` (with "md"):
    also write the charts as image files into that directory, linked relative to `relative_to` (the
    Markdown file's path). Control characters from the trace are shown as visible escapes."""
    from .inert import document
    from .report import Report

    if format not in FORMATS:
        raise UsageError(f"is not a format; known: {', '.join(FORMATS)}", param="format", value=format)
    if isinstance(obj, Report):
        from .render import RENDERERS

        if format not in RENDERERS:
            raise UsageError("is not available in this installation", param="format", value=format)
        if format == "md" and assets:
            from .render.markdown import render_with_assets

            return document(
                render_with_assets(obj, assets_dir=str(assets), relative_to=str(relative_to) if relative_to else None)
            )
        return document(RENDERERS[format][0](obj, width=width))
    from .render.diff import DIFF_RENDERERS

    return document(DIFF_RENDERERS[format][0](obj, width=width))


def _whatif_job(paths: list[str], names: tuple, where: dict, steps: str | None):
    """`whatif DIR`: each rank's file read in turn (one trace held at a time), summarised with the fixes
    that apply to it, then the job replayed (whatif/job.py). A plain NAME applies to every rank."""
    from .analyze import analyze as run
    from .trace.ranks import align, rank_collectives
    from .whatif import job

    colls, sums, measured, per_rank, notes = {}, {}, {}, {}, []
    asked = {int(at[4:]) for at in where.values() if at.startswith("rank")}
    for p in paths:
        trace = load(p, steps=steps)
        r = trace.meta.rank
        if r is None or r in colls:
            raise UsageError(f"{p}: rank {r} is not one rank of the run; whatif DIR needs one file per rank")
        findings = run(trace).findings
        mine = tuple(n.partition("@")[0] for n in names if where[n] in ("", "all") or where[n] == f"rank{r}")
        fired = {f.name for f in findings}
        notes += [
            f"rank {r}: {n} did not fire; its transformation changes only what it finds"
            for n in mine
            if n.partition(":")[0] not in fired
        ]
        colls[r] = rank_collectives(trace) if trace.has_gpu else []
        sums[r] = job.rank_summary(trace, list(findings), mine)
        measured[r] = float(trace.steps["dur_us"].median()) if len(trace.steps) else 0.0
        per_rank[r] = mine
        del trace
    missing = sorted(asked - set(colls))
    if missing:
        raise UsageError(
            f": no rank {', '.join(map(str, missing))} among the files (ranks: {sorted(colls)})",
            param="fixes",
            value=",".join(names),
        )
    cross = align(colls)
    if not cross or not all(sums[r].get("variants") for r in cross.ranks):
        raise UsageError(
            f"{paths[0]}: the ranks' collectives cannot be aligned or replayed (no collectives in the "
            "analysed steps on some rank); analyse the folder for the cross-rank section's notes"
        )
    ji = job.job_input(cross, colls, sums)
    try:
        return job.whatif(ji, measured, list(names), per_rank, notes + list(cross.notes))
    except job.OrderError as e:
        raise UsageError(f"{paths[0]}: {e}; the job cannot be replayed") from None


def annotate(
    path: str | Path,
    out: str | Path,
    *,
    steps: str | None = None,
    strict: bool = False,
    jobs: int | None = None,
    config: "Config | str | Path | Mapping | None" = None,
) -> "Report":
    """Analyse one trace file and write it to `out` (.json or .json.gz) with the findings drawn in as
    tracks (open it in Perfetto); returns the report."""
    from .annotate import annotate_file
    from .config import Config

    paths = trace_paths(path)
    if len(paths) != 1:
        raise UsageError(f"{path}: annotate takes one trace file, not a directory of {len(paths)} traces")
    from .safeio import refuse_inputs

    refuse_inputs([out], [paths[0]])  # by (st_dev, st_ino): a hard link or symlink of the source too
    trace = load(paths[0], steps=steps, jobs=jobs)
    cfg = Config() if config is None else make_config(config)
    report = _analyze_trace(trace, cfg, steps=None, rank=None, strict=strict)
    annotate_file(paths[0], str(out), trace, report)
    return report


def whatif(path: str | Path, fixes: str | tuple[str, ...] | list[str], *, steps: str | None = None) -> "WhatIfRun":
    """Predict the step time after `fixes` (detector names, applied in order) by replaying one trace
    file (docs/whatif.md) -> a typed WhatIfRun (`.to_dict()` is the `whatif -f json` form)."""
    from .analyze import analyze as run
    from .whatif.engine import summary, transforms, valid_fix

    names = tuple(n.strip() for n in (fixes.split(",") if isinstance(fixes, str) else fixes) if n.strip())
    known = transforms()
    bad = [n for n in names if not valid_fix(n.partition("@")[0])]
    if bad or not names:
        raise UsageError(
            f": no replay transformation for {', '.join(bad) or 'an empty list'}; known: {', '.join(sorted(known))}"
            + "".join(
                f"; {n} variants: "
                + ", ".join(f"{n}:{v}" for v in known[n].variants)
                + (f", {n}:batch=N (2 <= N <= 4096)" if "batch" in known[n].variants else "")
                for n in sorted(known)
                if getattr(known[n], "variants", ())
            ),
            param="fixes",
            value=fixes,
        )
    if steps:
        from .trace.model import parse_step_slice

        parse_step_slice(steps)
    where = {n: n.partition("@")[2] for n in names}
    for n, at in where.items():
        if at and at != "all" and not (at.startswith("rank") and at[4:].isdigit()):
            raise UsageError(f": {n}: a fix applies @rankN (e.g. @rank5) or @all", param="fixes", value=fixes)
    paths = trace_paths(path)
    if len(paths) > 1:
        return _whatif_job(paths, names, where, steps)
    if any(where.values()):
        raise UsageError(f"{path}: NAME@rankN names a rank of a run's folder; pass the folder of rank files")
    trace = load(paths[0], steps=steps)
    if not trace.has_gpu or not len(trace.steps):
        raise UsageError(f"{paths[0]}: no GPU activity or no steps to replay; capture with ProfilerActivity.CUDA")
    return summary(trace, run(trace).findings, names)
