"""traceinspect: why is my fine-tuning run slow? Ranked root causes, with numbers, from a torch.profiler trace.

Public API: load_trace, analyze, diff, Report, Finding.

The names are loaded on first use (PEP 562 module `__getattr__`), so that `import traceinspect.capture`
in a training process and `traceinspect --help` load neither pandas nor the analyzer.
"""
from __future__ import annotations

import sys
import types

__version__ = "0.1.0"

# public name -> (module, attribute); `analyze` is the function, which shadows its module on purpose
_LAZY = {
    "Evidence": ("findings", "Evidence"), "EventRef": ("findings", "EventRef"),
    "Failure": ("findings", "Failure"), "Finding": ("findings", "Finding"), "Skipped": ("findings", "Skipped"),
    "Report": ("report", "Report"),
    "Trace": ("trace.model", "Trace"), "load_trace": ("trace.model", "load_trace"),
    "analyze": ("analyze", "analyze"),
    "diff": ("diff", "diff"),
}

__all__ = ["load_trace", "analyze", "diff", "Report", "Finding", "Evidence", "EventRef", "Skipped", "Failure",
           "Trace", "__version__"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'traceinspect' has no attribute {name!r}")
    import importlib
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value   # later lookups skip __getattr__ (and replace the submodule binding)
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
