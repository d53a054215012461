"""traceinspect: why is my fine-tuning run slow? Ranked root causes, with numbers, from a torch.profiler trace.

Public API: load_trace, analyze, diff, Report, Finding.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .findings import Evidence, EventRef, Failure, Finding, Skipped  # noqa: E402
from .report import Report  # noqa: E402
from .trace.model import Trace, load_trace  # noqa: E402
from .analyze import analyze  # noqa: E402  (the function shadows the module name, on purpose)
from .diff import diff  # noqa: E402

__all__ = ["load_trace", "analyze", "diff", "Report", "Finding", "Evidence", "EventRef", "Skipped", "Failure",
           "Trace", "__version__"]
