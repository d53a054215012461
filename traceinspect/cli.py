"""The command line: adapts arguments to the library, writes output, maps errors to exit codes.

Exit codes: 0 ok; 1 a finding at or above --fail-on (or a diff regression); 2 usage; 3 the trace cannot
be read; 4 a detector failed under --strict; 5 internal error (a bug: please report it).
Holds no analysis logic. Nothing imports this module.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import click

from . import __version__
from .errors import TraceError, TraceinspectError, UsageError

EXIT_FINDING = 1
EXIT_INTERNAL = 5


def _renderers():
    from .render import RENDERERS
    return RENDERERS


class _Group(click.Group):
    """Turns every exception into one line on stderr and an exit code; no traceback reaches users."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TraceError as e:
            _fail(f"error: {e}", e.hint, e.exit_code)
        except TraceinspectError as e:
            _fail(f"error: {e}", e.hint, e.exit_code)
        except MemoryError:
            _fail("error: out of memory while reading the trace",
                  "analyse one rank at a time (--rank N) or a shorter capture (fewer active steps)", 3)
        except OSError as e:  # reading an input (output errors are UsageErrors with their own message)
            where = f"{e.filename}: " if e.filename else ""
            _fail(f"error: {where}cannot read ({e.strerror or e})", "check the path and its permissions", 3)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            _fail("interrupted", "", 130)
        except Exception as e:  # a bug: say so in one line, keep the traceback behind a variable
            if os.environ.get("TRACEINSPECT_DEBUG"):
                raise
            _fail(f"internal error: {type(e).__name__}: {e}",
                  "this is a traceinspect bug; rerun with TRACEINSPECT_DEBUG=1 and attach the output to an issue",
                  EXIT_INTERNAL)


def _say(msg: str) -> None:
    """One line on stderr. Messages echo file names and trace values: control characters and terminal
    escapes are shown as visible escapes (inert.text), and nothing the terminal cannot encode raises."""
    from .inert import text
    _echo(text(msg) + "\n", err=True)


def _echo(s: str, *, err: bool = False) -> None:
    stream = click.get_text_stream("stderr" if err else "stdout")
    enc = getattr(stream, "encoding", None) or "utf-8"
    click.echo(s.encode(enc, "backslashreplace").decode(enc), nl=False, err=err)


def _fail(msg: str, hint: str, code: int):
    _say(msg)
    if hint:
        _say(f"hint: {hint}")
    sys.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceinspect")
def cli():
    """Why is this training run slow? Ranked root causes, with numbers, from a torch.profiler trace."""


def _write(text: str, output: str | None) -> None:
    """Every report and diff leaves through here: a last guard keeps only \\n and \\t of the control
    characters (terminal escapes, also in a file: `cat report.txt` replays them) and no lone surrogate."""
    from .inert import document
    text = document(text)
    if output and output != "-":
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot write {output}: {e.strerror or e}") from None
    else:
        _echo(text)


def _choose_format(fmt: str | None, output: str | None, formats=None) -> str:
    """--format if given; else from -o's extension (an extension that names no format is a usage
    error, never a silent plain-text file); else text (also for a name without an extension, such
    as /dev/null)."""
    from .render import RENDERERS, format_for_path
    if fmt:
        return fmt
    if output and output != "-" and Path(output).suffix:
        guess = format_for_path(output)
        if guess is None or (formats is not None and guess not in formats):
            known = ", ".join(f"{ext} ({name})" for name, (_, ext) in RENDERERS.items()
                              if formats is None or name in formats)
            raise UsageError(f"-o {output}: the extension names no output format (known: {known})",
                             hint="use one of these extensions, or give the format with --format")
        return guess
    return "text"


def _trace_paths(path: str) -> list[str]:
    """PATH -> the trace files to analyse: the file itself, or the rank files of the one run in a
    directory (rundir.one_run says which, and refuses a folder of several runs)."""
    import stat
    from .trace.rundir import one_run
    if not path:
        raise UsageError("PATH is empty (\"\"): it names no trace file or directory",
                         hint="pass a trace file, or the directory of one run's rank files ('.' for this one)")
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise TraceError(path, "no such file or directory", hint="check the path") from None
    except OSError as e:
        raise TraceError(path, f"cannot read it ({e.strerror or e})", hint="check the path and its permissions") from None
    if stat.S_ISDIR(mode):
        return [str(f.path) for f in one_run(p)]
    if not stat.S_ISREG(mode):
        from .trace.load import not_regular
        raise not_regular(path, mode)
    return [str(p)]


class _Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal and the work is long."""

    def __init__(self, label: str, enabled: bool):
        from .inert import text
        self.label = text(label)       # a file name: no terminal escapes
        self.enabled = enabled and sys.stderr.isatty()
        self.last = -1

    def __call__(self, frac: float) -> None:
        if not self.enabled:
            return
        pct = int(frac * 100)
        if pct == self.last:
            return
        self.last = pct
        bar = "#" * (pct // 4)
        sys.stderr.write(f"\r{self.label[:40]:<40} [{bar:<25}] {pct:3d}%")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and self.last >= 0:
            sys.stderr.write("\r" + " " * 75 + "\r")
            sys.stderr.flush()


def cache_options(steps: str | None) -> dict:
    """Everything besides the file that changes a report, for the cache key."""
    from .trace import hardware
    from .trace.stream import native_enabled
    # the reader is part of the key: both give the same tables, but a cached report must never
    # hide a difference between them; so is the peak table's override file (TRACEINSPECT_HARDWARE):
    # it changes the efficiency numbers
    return {"steps": steps, "native": native_enabled(), "hardware": hardware.override_signature()}


def build_report(path: str, *, rank: str | None = None, steps: str | None = None, strict: bool = False,
                 jobs: int | None = None, scheduler: str | None = None, use_cache: bool = True, config=None):
    """PATH (file or directory of rank files) -> Report. `config`: a traceinspect.config.Config."""
    from . import cache
    from .analyze import analyze, analyze_many
    from .errors import DetectorFailed
    from .trace.load import estimate_json_bytes
    from .trace.model import load_trace, parse_step_slice
    if steps:
        parse_step_slice(steps)  # a bad --steps is a usage error before any file is read
    paths = _trace_paths(path)
    if len(paths) == 1:
        json_size = estimate_json_bytes(paths[0])  # a FIFO or device: exit 3 at once, never a blocking open
        settings = config.non_default() if config is not None else {}
        key = (cache.key_for(paths[0], {**cache_options(steps), **({"settings": settings} if settings else {})})
               if use_cache and json_size >= cache.MIN_BYTES else None)
        report = cache.load(key)
        if report is not None:
            if strict and report.failures:
                raise DetectorFailed(f"detector {report.failures[0].name} failed: {report.failures[0].error}")
        else:
            bar = _Progress(f"reading {Path(paths[0]).name}", json_size > (50 << 20))
            try:
                trace = load_trace(paths[0], jobs=jobs, progress=bar)
            finally:
                bar.done()
            trace.select_steps(steps)
            report = analyze(trace, strict=strict, config=config)
            cache.store(key, report.to_dict())
        if rank not in (None, "all") and int(rank) != report.trace.get("rank"):
            raise UsageError(f"--rank {rank}: {paths[0]} is rank {report.trace.get('rank')}")
        return report
    if config is not None and config.non_default():
        raise UsageError(f"{path}: detector settings ({config.source or 'options'}) apply to one trace file "
                         "so far, not to a directory of rank files", hint="analyse one rank file at a time")
    mapper = None
    if scheduler:
        from .distributed import dask_mapper
        mapper = dask_mapper(scheduler)
    report = analyze_many(paths, steps=steps, strict=strict, jobs=jobs, mapper=mapper,
                          keep_rank=None if rank in (None, "all") else int(rank))
    return report


_FORMATS = ["text", "md", "json", "html"]


@cli.command()
@click.argument("path", type=click.Path())
@click.option("-f", "--format", "fmt", type=click.Choice(_FORMATS), default=None,
              help="Output format (default: from -o's extension, else text).")
@click.option("-o", "--output", default=None, help="Write the report to this file instead of stdout.")
@click.option("--rank", default=None, help="For a directory of rank files: N, or 'all' (default).")
@click.option("--steps", default=None, help="Steps to analyse, a Python slice over steps in time order, e.g. '1:' or '2:5'.")
@click.option("--fail-on", type=float, default=None,
              help="Exit 1 if a finding loses at least this fraction of the step time (e.g. 0.1).")
@click.option("--strict", is_flag=True, help="Exit 4 if a detector fails instead of reporting the failure.")
@click.option("-j", "--jobs", type=int, default=None, help="Parallel workers (1: none): processes for rank files (default: cores); for one "
                   "file, chunk decoders: threads with the native scanner (default: cores, up to 4), "
                   "else processes (default: 1 below 4 cores, where they do not pay).")
@click.option("--assets", default=None, type=click.Path(), help="With --format md: also write charts as image files here.")
@click.option("--tensorboard", "tb_logdir", default=None, type=click.Path(),
              help="Also write the report and key numbers into a TensorBoard event file in this directory.")
@click.option("--scheduler", default=None, help="Dask scheduler address for many rank files (optional extra).")
@click.option("--no-cache", is_flag=True,
              help="Do not read or write the report cache (used for single files of 32 MB of JSON or more).")
@click.option("--annotate", "annotate_out", default=None, type=click.Path(),
              help="Also write the trace with the findings drawn in as tracks (see 'annotate'), e.g. out.json.gz.")
@click.option("--config", "config_file", default=None, type=click.Path(),
              help="Settings file (default: [tool.traceinspect] of the nearest pyproject.toml above the trace).")
@click.option("--select", multiple=True, help="Run only these detectors: codes, code prefixes or names (comma-separated).")
@click.option("--ignore", multiple=True, help="Do not run these detectors (codes, code prefixes or names).")
@click.option("--set", "settings", multiple=True, metavar="DETECTOR.OPTION=VALUE",
              help="A detector threshold, e.g. launch-bound.min_idle_frac=0.05 (see 'traceinspect detectors').")
def analyze(path, fmt, output, rank, steps, fail_on, strict, jobs, assets, tb_logdir, scheduler, no_cache,
            annotate_out, config_file, select, ignore, settings):
    """Analyse a trace file (.json or .json.gz) or the directory of one run's rank files."""
    if rank not in (None, "all"):
        try:
            int(rank)
        except ValueError:
            raise UsageError(f"--rank {rank!r}: expected a rank number or 'all'") from None
    if fail_on is not None and not 0 <= fail_on <= 1:
        raise UsageError("--fail-on takes a fraction between 0 and 1, e.g. 0.1 for 10%")
    fmt = _choose_format(fmt, output)  # a bad -o name fails before the analysis, not after
    if annotate_out:
        report = _annotate(path, annotate_out, steps=steps, strict=strict, jobs=jobs)
    else:
        report = build_report(path, rank=rank, steps=steps, strict=strict, jobs=jobs, scheduler=scheduler,
                              use_cache=not no_cache, config=_config(path, config_file, select, ignore, settings))
    renderers = _renderers()
    if fmt not in renderers:
        raise UsageError(f"--format {fmt} is not available in this installation")
    render, _ = renderers[fmt]
    width = shutil.get_terminal_size((100, 24)).columns if not output else 100
    if fmt == "md" and assets:
        from .render.markdown import render_with_assets
        text = render_with_assets(report, assets_dir=assets,
                                  relative_to=output if output and output != "-" else None)
    else:
        text = render(report, width=width)
    _write(text, output)
    if tb_logdir:
        from .tensorboard import write_report
        write_report(report, tb_logdir)
    if fail_on is not None and any(f.time_lost_frac >= fail_on for f in report.findings):
        worst = report.findings[0]
        _say(f"fail-on: {worst.name} loses {100 * worst.time_lost_frac:.1f}% of the step time "
                   f"(threshold {100 * fail_on:.1f}%)")
        sys.exit(EXIT_FINDING)


def _config(path, config_file, select, ignore, settings):
    """The analyze command's settings: the file's, with --select / --ignore / --set on top."""
    from . import config
    split = lambda vs: [v for x in vs for v in x.split(",") if v.strip()]  # noqa: E731
    return config.override(config.load(config_file, start=path), select=split(select), ignore=split(ignore),
                           settings=settings)


def _report_or_trace(path: str, steps: str | None):
    """One side of `diff`: a saved JSON report as it is, anything else analysed as a trace."""
    from .diff import load_saved_report
    saved = load_saved_report(path)
    return saved if saved is not None else build_report(path, steps=steps)


@cli.command()
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option("-f", "--format", "fmt", type=click.Choice(_FORMATS), default=None,
              help="Output format (default: from -o's extension, else text).")
@click.option("-o", "--output", default=None, help="Write the comparison to this file instead of stdout.")
@click.option("--steps", default=None, help="Steps to analyse in each trace (not in saved reports), e.g. '1:'.")
@click.option("--fail-on-regression", "fail_pct", type=float, default=None, metavar="PCT",
              help="Exit 1 if the median step time got more than PCT percent slower and, with 2+ steps "
                   "on each side, more than the step-to-step noise (2 standard errors).")
def diff(before, after, fmt, output, steps, fail_pct):
    """Compare two runs: each a trace, or a report saved with 'analyze --format json -o x.json'."""
    from .diff import diff as diff_reports
    from .render.diff import DIFF_RENDERERS
    if fail_pct is not None and not 0 <= fail_pct < float("inf"):
        raise UsageError("--fail-on-regression takes a percentage >= 0, e.g. 5 for 5%")
    fmt = _choose_format(fmt, output, DIFF_RENDERERS)
    d = diff_reports(_report_or_trace(before, steps), _report_or_trace(after, steps))
    render, _ = DIFF_RENDERERS[fmt]
    width = shutil.get_terminal_size((100, 24)).columns if not output else 100
    _write(render(d, width=width), output)
    if fail_pct is not None:
        gate = d.regression(fail_pct)
        click.echo(gate.message, err=True)
        if gate.regressed:
            sys.exit(EXIT_FINDING)


def _annotate(path: str, out: str, *, steps: str | None, strict: bool = False, jobs: int | None = None):
    """Analyse one trace file and write it, findings drawn in, to out; returns the report."""
    from .analyze import analyze as run
    from .annotate import annotate_file
    from .trace.model import load_trace
    paths = _trace_paths(path)
    if len(paths) != 1:
        raise UsageError(f"{path}: annotate takes one trace file, not a directory of {len(paths)} traces")
    if Path(out).resolve() == Path(paths[0]).resolve():
        raise UsageError(f"{out}: the annotated trace must not overwrite its source; choose another -o")
    trace = load_trace(paths[0], jobs=jobs)
    trace.select_steps(steps)
    report = run(trace, strict=strict)
    annotate_file(paths[0], out, trace, report)
    return report


@cli.command()
@click.argument("trace", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Where to write the annotated trace (.json, or .json.gz to compress).")
@click.option("--steps", default=None, help="Steps to analyse, e.g. '1:'.")
def annotate(trace, output, steps):
    """Write TRACE with a "traceinspect" process added: one track per finding, slices over the time it
    claims, and a marker per step; open it in Perfetto or chrome://tracing."""
    report = _annotate(trace, output, steps=steps)
    _say(f"wrote {output}: {len(report.findings)} finding track(s) and {report.steps.get('count', 0)} step marker(s)")


@cli.command()
@click.argument("path", type=click.Path())
@click.option("--fix", "fixes", required=True, metavar="NAME[,NAME...]",
              help="Detector fixes to apply, in order (names from 'traceinspect detectors'; NAME:VARIANT picks "
                   "a variant: launch-bound:cuda-graphs (the default) or launch-bound:batch).")
@click.option("-f", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
@click.option("--steps", default=None, help="Steps to analyse, e.g. '1:'.")
def whatif(path, fixes, fmt, steps):
    """Predict the step time after fixes by replaying a trace file (docs/whatif.md)."""
    from .analyze import analyze as analyze_trace
    from .render.text import render_whatif
    from .trace.model import load_trace, parse_step_slice
    from .whatif.engine import summary, transforms, valid_fix
    names = tuple(n.strip() for n in fixes.split(",") if n.strip())
    known = transforms()
    bad = [n for n in names if not valid_fix(n)]
    if bad or not names:
        raise UsageError(f"--fix {fixes!r}: no replay transformation for {', '.join(bad) or 'an empty list'}; "
                         f"known: {', '.join(sorted(known))}")
    if steps:
        parse_step_slice(steps)
    paths = _trace_paths(path)
    if len(paths) != 1:
        raise UsageError(f"{path}: whatif replays one trace file; pass one rank's file")
    trace = load_trace(paths[0])
    trace.select_steps(steps)
    if not trace.has_gpu or not len(trace.steps):
        raise UsageError(f"{paths[0]}: no GPU activity or no steps to replay; capture with ProfilerActivity.CUDA")
    d = summary(trace, analyze_trace(trace).findings, names)
    _echo(json.dumps(d, sort_keys=True, indent=1) if fmt == "json" else render_whatif(d))


@cli.command()
def detectors():
    """List the detector catalogue."""
    from .detectors import ALL
    for d in ALL:
        click.echo(f"{d.code}  {d.name:<22} {d.summary}")


@cli.command()
@click.argument("what")
def explain(what):
    """Print a detector's documentation page (by code or name)."""
    from .detectors import BY_KEY
    from .docs import detector_page
    d = BY_KEY.get(what) or BY_KEY.get(what.upper())
    if d is None:
        raise UsageError(f"unknown detector {what!r}; run 'traceinspect detectors' for the list")
    click.echo(detector_page(d))


def main():
    cli(prog_name="traceinspect")


if __name__ == "__main__":  # pragma: no cover
    main()
