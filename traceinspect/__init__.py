"""traceinspect: why is my fine-tuning run slow? Ranked root causes, with numbers, from a torch.profiler trace.

Public API (docs/api.md; defined in traceinspect.api): load, analyze, diff, Config, Report, ReportDiff,
Trace, Finding; load_trace is the older name of a plain load. Rendering: traceinspect.api.render
(not a root name: the root's `render` is the renderers' subpackage).

The names are loaded on first use (PEP 562 module `__getattr__`), so that `import traceinspect.capture`
in a training process and `traceinspect --help` load neither pandas nor the analyzer.
"""

from __future__ import annotations

import sys
import types

__version__ = "0.1.0"

# public name -> (module, attribute); `analyze` and `diff` are the API's functions, which shadow the
# modules of the same name on purpose
_LAZY = {
    "Evidence": ("findings", "Evidence"),
    "EventRef": ("findings", "EventRef"),
    "Failure": ("findings", "Failure"),
    "Finding": ("findings", "Finding"),
    "Skipped": ("findings", "Skipped"),
    "Report": ("report", "Report"),
    "ReportDiff": ("diff", "ReportDiff"),
    "Config": ("config", "Config"),
    "Trace": ("trace.model", "Trace"),
    "load_trace": ("trace.model", "load_trace"),
    "load": ("api", "load"),
    "analyze": ("api", "analyze"),
    "diff": ("api", "diff"),
}

__all__ = [
    "load",
    "analyze",
    "diff",
    "Config",
    "Report",
    "ReportDiff",
    "Trace",
    "Finding",
    "Evidence",
    "EventRef",
    "Skipped",
    "Failure",
    "load_trace",
    "__version__",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'traceinspect' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value  # later lookups skip __getattr__ (and replace the submodule binding)
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Root(types.ModuleType):
    """Importing the submodule `traceinspect.analyze` (or `.diff`) binds it on the package; the public
    name stays the function, as when the root imported them eagerly."""

    def __setattr__(self, name, value):
        if name in ("analyze", "diff") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Root
