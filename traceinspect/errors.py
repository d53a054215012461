"""The exception tree; each class knows its exit code. Only cli.py turns these into exit codes.

    TraceinspectError (exit 1 is never used for errors)
    ├── UsageError            exit 2: bad arguments (wrong --steps, unknown detector)
    ├── TraceError            exit 3: a trace cannot be read (path, reason, hint)
    └── DetectorFailed        exit 4: a detector crashed and --strict was given

Messages and hints are made inert on the way in (inert.text): they echo file names and trace values,
and whoever prints them (the CLI, a notebook, a log) must not replay a terminal escape.
"""
from __future__ import annotations

from .inert import text


class TraceinspectError(Exception):
    exit_code = 1
    hint = ""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(text(message))
        if hint:
            self.hint = text(hint)


class UsageError(TraceinspectError):
    exit_code = 2


class TraceError(TraceinspectError):
    """A trace that cannot be read. The message names the file and what is wrong."""

    exit_code = 3
    hint = ("capture the trace again with torch.profiler (see README, 'Capturing a trace') "
            "and pass the .pt.trace.json or .pt.trace.json.gz file")

    def __init__(self, path: str, reason: str, *, hint: str = "") -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}", hint=hint)


class DetectorFailed(TraceinspectError):
    exit_code = 4
