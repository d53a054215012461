"""Run the CLI as a test: `python -m traceinspect ARGS` in a fresh process, or, in the fast development
run, the same click command inside this process (no interpreter start and no pandas import per case:
about 0.45 s of the 0.5 s a tiny trace takes).

The full run (`pytest --full`, what CI and the README's test command run) always uses real processes,
so the exit codes, the one-line errors and the timeouts are checked there as a user meets them. The
fast run checks the same assertions in-process; what only a process has (a timeout on a hang, a
preexec_fn such as an address-space limit, a closed stdout descriptor) always runs in a process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

IN_PROCESS = False  # set by conftest.pytest_configure: True unless --full


def run(argv, *, env: dict | None = None, cwd=None, timeout: float = 120, preexec_fn=None, input=None):
    """A subprocess.CompletedProcess of `traceinspect ARGV` (text stdout/stderr). `env` is the whole
    environment, as subprocess.run takes it (None: this one)."""
    argv = [str(a) for a in argv]
    if IN_PROCESS and preexec_fn is None:
        return _in_process(argv, env=env, cwd=cwd, input=input)
    return subprocess.run(
        [sys.executable, "-m", "traceinspect", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
        preexec_fn=preexec_fn,
        input=input,
    )


@contextlib.contextmanager
def _environ(env: dict | None, cwd):
    old_env, old_cwd = dict(os.environ), os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)


def _in_process(argv, *, env, cwd, input):
    from click.testing import CliRunner

    from traceinspect.cli import cli

    with _environ(env, cwd):
        result = CliRunner().invoke(cli, argv, prog_name="traceinspect", input=input, catch_exceptions=True)
    stderr = result.stderr
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):  # escaped the CLI: what a process would print
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(exc))
    return subprocess.CompletedProcess(["traceinspect", *argv], result.exit_code, result.stdout, stderr)
