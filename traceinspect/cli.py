"""The command line: adapts arguments to the library, writes output, maps errors to exit codes.

Exit codes: 0 ok; 1 a finding at or above --fail-on (or a diff regression); 2 usage; 3 the trace cannot
be read; 4 under --strict (or `strict = true` in the configuration) a detector failed or the trace quality
is poor (docs/trace-quality.md); 5 internal error (a bug: please report it).
Holds no analysis logic: it parses flags and calls traceinspect.api. Nothing imports this module.
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
EXIT_STRICT = 4  # DetectorFailed's code too (errors.py)


# library parameter -> the flag that sets it, where the two are not spelled alike (UsageError.param)
FLAGS = {"fixes": "--fix", "format": "--format", "logdir": "--tensorboard"}


class _Group(click.Group):
    """Turns every exception into one line on stderr and an exit code; no traceback reaches users."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TraceError as e:
            _fail(f"error: {e}", e.hint, e.exit_code)
        except UsageError as e:  # the library names the parameter; here it is a flag
            _fail(f"error: {e.flag_message(FLAGS)}", e.hint, e.exit_code)
        except TraceinspectError as e:
            _fail(f"error: {e}", e.hint, e.exit_code)
        except MemoryError:
            _fail(
                "error: out of memory while reading the trace",
                "analyse one rank at a time (--rank N) or a shorter capture (fewer active steps)",
                3,
            )
        except BrokenPipeError:  # stdout's reader went away (| head): stop quietly, as a SIGPIPE'd tool does
            _stdout_gone()
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
            _fail(
                f"internal error: {type(e).__name__}: {e}",
                "this is a traceinspect bug; rerun with TRACEINSPECT_DEBUG=1 and attach the output to an issue",
                EXIT_INTERNAL,
            )


def _stdout_gone() -> None:
    """Exit 141 (128 + SIGPIPE) without a word: the reader of stdout closed it, which is no error of the
    trace. stdout is pointed at /dev/null first so the interpreter's final flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout descriptor (a test runner): nothing to flush
        pass
    sys.exit(141)


def _say(msg: str) -> None:
    """One line on stderr. Messages echo file names and trace values: control characters and terminal
    escapes are shown as visible escapes (inert.text), and nothing the terminal cannot encode raises."""
    from .inert import text

    _echo(text(msg) + "\n", err=True)


def _echo(s: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout  # what click.echo writes to (get_text_stream: deprecated in 8.5)
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
        from .safeio import write_atomic

        write_atomic(output, text.encode("utf-8"))
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
            known = ", ".join(
                f"{ext} ({name})" for name, (_, ext) in RENDERERS.items() if formats is None or name in formats
            )
            raise UsageError(
                f"-o {output}: the extension names no output format (known: {known})",
                hint="use one of these extensions, or give the format with --format",
            )
        return guess
    return "text"


class _Progress:
    """A one-line progress bar on stderr, only when stderr is a terminal and the work is long."""

    def __init__(self, label: str, enabled: bool):
        from .inert import text

        self.label = text(label)  # a file name: no terminal escapes
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


_FORMATS = ["text", "md", "json", "html"]


@cli.command()
@click.argument("path", type=click.Path())
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(_FORMATS),
    default=None,
    help="Output format (default: from -o's extension, else text).",
)
@click.option("-o", "--output", default=None, help="Write the report to this file instead of stdout.")
@click.option("--rank", default=None, help="For a directory of rank files: N, or 'all' (default).")
@click.option(
    "--steps", default=None, help="Steps to analyse, a Python slice over steps in time order, e.g. '1:' or '2:5'."
)
@click.option(
    "--fail-on",
    type=float,
    default=None,
    help="Exit 1 if a finding loses at least this fraction of the step time (e.g. 0.1).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 4 if a detector fails (instead of reporting the failure) or the trace quality is poor.",
)
@click.option(
    "-j",
    "--jobs",
    type=int,
    default=None,
    help="Parallel workers (1: none): processes for rank files (default: cores); for one "
    "file, chunk decoders: threads with the native scanner (default: cores, up to 4), "
    "else processes (default: 1 below 4 cores, where they do not pay).",
)
@click.option(
    "--assets", default=None, type=click.Path(), help="With --format md: also write charts as image files here."
)
@click.option(
    "--tensorboard",
    "tb_logdir",
    default=None,
    type=click.Path(),
    help="Also write the report and key numbers into a TensorBoard event file in this directory.",
)
@click.option("--scheduler", default=None, help="Dask scheduler address for many rank files (optional extra).")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Do not read or write the report cache (used for single files of 32 MB of JSON or more).",
)
@click.option(
    "--annotate",
    "annotate_out",
    default=None,
    type=click.Path(),
    help="Also write the trace with the findings drawn in as tracks (see 'annotate'), e.g. out.json.gz.",
)
@click.option(
    "--config",
    "config_file",
    default=None,
    type=click.Path(),
    help="Settings file (default: [tool.traceinspect] of the nearest pyproject.toml from the working "
    "directory up to the repository root; never from the trace's directory).",
)
@click.option("--isolated", is_flag=True, help="Ignore every configuration file (as ruff's --isolated).")
@click.option(
    "--select", multiple=True, help="Run only these detectors: codes, code prefixes or names (comma-separated)."
)
@click.option("--ignore", multiple=True, help="Do not run these detectors (codes, code prefixes or names).")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="DETECTOR.OPTION=VALUE",
    help="A detector threshold, e.g. launch-bound.min_idle_frac=0.05 (see 'traceinspect detectors').",
)
def analyze(
    path,
    fmt,
    output,
    rank,
    steps,
    fail_on,
    strict,
    jobs,
    assets,
    tb_logdir,
    scheduler,
    no_cache,
    annotate_out,
    config_file,
    isolated,
    select,
    ignore,
    settings,
):
    """Analyse a trace file (.json or .json.gz) or the directory of one run's rank files."""
    from . import api

    if rank not in (None, "all"):
        try:
            int(rank)
        except ValueError:
            raise UsageError(f"--rank {rank!r}: expected a rank number or 'all'") from None
    if fail_on is not None and not 0 <= fail_on <= 1:
        raise UsageError("--fail-on takes a fraction between 0 and 1, e.g. 0.1 for 10%")
    fmt = _choose_format(fmt, output)  # a bad -o name fails before the analysis, not after
    from .safeio import refuse_inputs

    charts = []
    if assets and fmt == "md":
        from .render.markdown import ASSET_FILES

        charts = [Path(assets) / name for name, _ in ASSET_FILES]
    # before any work: never write over an input (the TensorBoard writer only creates new files)
    refuse_inputs([output, annotate_out, *charts], [path, config_file])
    if annotate_out:
        report = api.annotate(path, annotate_out, steps=steps, strict=strict, jobs=jobs)
    else:
        cfg = _config(config_file, select, ignore, settings, isolated)
        strict = strict or cfg.strict
        bar = _Progress(f"reading {Path(path).name}", True)
        try:
            report = api.analyze(
                path,
                cfg,
                rank=rank,
                steps=steps,
                strict=strict,
                jobs=jobs,
                scheduler=scheduler,
                cache=not no_cache,
                progress=bar,
            )
        finally:
            bar.done()
    width = shutil.get_terminal_size((100, 24)).columns if not output else 100
    text = api.render(
        report,
        fmt,
        width=width,
        assets=assets if fmt == "md" else None,
        relative_to=output if output and output != "-" else None,
    )
    _write(text, output)
    if tb_logdir:
        from .tensorboard import write_report

        write_report(report, tb_logdir)
    if strict and report.trace_quality.get("status") == "poor":  # the report is written first, then refused
        _fail(
            f"error: {path}: {report.trace_quality.line}",
            "the report says what this trace can show; capture again as docs/trace-quality.md says, or drop --strict",
            EXIT_STRICT,
        )
    if fail_on is not None and any(f.time_lost_frac >= fail_on for f in report.findings):
        worst = report.findings[0]
        _say(
            f"fail-on: {worst.name} loses {100 * worst.time_lost_frac:.1f}% of the step time "
            f"(threshold {100 * fail_on:.1f}%)"
        )
        sys.exit(EXIT_FINDING)


def _config(config_file, select, ignore, settings, isolated=False):
    """The analyze command's settings: the file's, with --select / --ignore / --set on top."""
    from . import config

    if isolated and config_file:
        raise UsageError("--isolated ignores every configuration file; it cannot be given with --config")
    split = lambda vs: [v for x in vs for v in x.split(",") if v.strip()]  # noqa: E731
    return config.override(
        (config.Config() if isolated else config.load(config_file)),
        select=split(select),
        ignore=split(ignore),
        settings=settings,
    )


@cli.command()
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(_FORMATS),
    default=None,
    help="Output format (default: from -o's extension, else text).",
)
@click.option("-o", "--output", default=None, help="Write the comparison to this file instead of stdout.")
@click.option("--steps", default=None, help="Steps to analyse in each trace (not in saved reports), e.g. '1:'.")
@click.option(
    "--fail-on-regression",
    "fail_pct",
    type=float,
    default=None,
    metavar="PCT",
    help="Exit 1 if the median step time got more than PCT percent slower and, with 2+ steps "
    "on each side, more than the step-to-step noise (2 standard errors).",
)
def diff(before, after, fmt, output, steps, fail_pct):
    """Compare two runs: each a trace, or a report saved with 'analyze --format json -o x.json'."""
    from . import api
    from .config import Config
    from .render.diff import DIFF_RENDERERS

    if fail_pct is not None and not 0 <= fail_pct < float("inf"):
        raise UsageError("--fail-on-regression takes a percentage >= 0, e.g. 5 for 5%")
    fmt = _choose_format(fmt, output, DIFF_RENDERERS)
    from .safeio import refuse_inputs

    refuse_inputs([output], [before, after])
    # each side with the default settings and the cache, as before configuration existed
    d = api.diff(before, after, steps=steps, config=Config(), cache=True)
    width = shutil.get_terminal_size((100, 24)).columns if not output else 100
    _write(api.render(d, fmt, width=width), output)
    if fail_pct is not None:
        gate = d.regression(fail_pct)
        click.echo(gate.message, err=True)
        if gate.regressed:
            sys.exit(EXIT_FINDING)


@cli.command()
@click.argument("trace", type=click.Path())
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(),
    help="Where to write the annotated trace (.json, or .json.gz to compress).",
)
@click.option("--steps", default=None, help="Steps to analyse, e.g. '1:'.")
def annotate(trace, output, steps):
    """Write TRACE with a "traceinspect" process added: one track per finding, slices over the time it
    claims, and a marker per step; open it in Perfetto or chrome://tracing."""
    from .api import annotate as run
    from .report import known

    report = run(trace, output, steps=steps)
    _say(f"wrote {output}: {len(report.findings)} finding track(s) and {known(report.steps.count, 0)} step marker(s)")


@cli.command()
@click.argument("path", type=click.Path())
@click.option(
    "--fix",
    "fixes",
    required=True,
    metavar="NAME[,NAME...]",
    help="Detector fixes to apply, in order (names from 'traceinspect detectors'; NAME:VARIANT picks "
    "a variant: launch-bound:cuda-graphs (the default) or launch-bound:batch). On a run's folder, "
    "NAME@rankN fixes one rank and NAME (or NAME@all) every rank: the job is replayed.",
)
@click.option("-f", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format.")
@click.option("--steps", default=None, help="Steps to analyse, e.g. '1:'.")
def whatif(path, fixes, fmt, steps):
    """Predict the step time after fixes by replaying a trace file, or a run's folder (docs/whatif.md)."""
    from .api import whatif as predict
    from .render.text import render_whatif, render_whatif_job

    d = predict(path, fixes, steps=steps)
    text = render_whatif_job if type(d).__name__ == "WhatIfJob" else render_whatif
    _echo(json.dumps(d.to_dict(), sort_keys=True, indent=1) if fmt == "json" else text(d))


@cli.command()
def detectors():
    """List the detector catalogue."""
    from .catalogue import CATALOGUE  # the standard library only: no pandas, no detector module

    for d in CATALOGUE:
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
