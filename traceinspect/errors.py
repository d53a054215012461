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
    """Bad arguments. When one parameter is at fault, `param` names it (as the library spells it:
    "steps", "rank") and `value` holds what was given; the message then reads `steps='9:' selects no
    step`, and the command line words it as its flag (`--steps '9:' selects no step`, see flag_message)."""

    exit_code = 2
    param: str | None = None

    def __init__(self, message: str, *, hint: str = "", param: str | None = None, value=None) -> None:
        self.param, self.value, self.detail = param, value, text(message)
        if param is not None:
            message = f"{param}={value!r}{_sep(message)}{message}"
        super().__init__(message, hint=hint)

    def flag_message(self, flags: dict[str, str]) -> str:
        """The message with the parameter worded as the command-line flag `flags` maps it to."""
        if self.param is None:
            return str(self)
        flag = flags.get(self.param, "--" + self.param.replace("_", "-"))
        value = self.value if isinstance(self.value, (int, float)) else repr(self.value)
        return text(f"{flag} {value}{_sep(self.detail)}{self.detail}")


def _sep(message: str) -> str:
    return "" if message[:1] in (":", ",", ";") else " "


class TraceError(TraceinspectError):
    """A trace that cannot be read. The message names the file and what is wrong."""

    exit_code = 3
    hint = (
        "capture the trace again with torch.profiler (see README, 'Capturing a trace') "
        "and pass the .pt.trace.json or .pt.trace.json.gz file"
    )

    def __init__(self, path: str, reason: str, *, hint: str = "") -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}", hint=hint)


class DetectorFailed(TraceinspectError):
    exit_code = 4
