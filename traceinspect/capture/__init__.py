"""Capture torch.profiler traces that traceinspect can explain (torch is an optional extra).

* plain loops: :func:`profile_steps` (``traceinspect.capture.loop``)
* transformers Trainer / TRL: :class:`TraceinspectCallback` (``traceinspect.capture.hf``)

Both write a gzipped Kineto trace (``*.pt.trace.json.gz``) whose top-level ``"traceinspect"``
key carries the run's configuration and per-step token counts (schema: docs/capture.md).
Importing this package needs neither torch nor transformers; they are imported on use.
"""

from __future__ import annotations

from typing import Any

from .meta import (
    CONFIG_KEYS,
    METADATA_KEY,
    SCHEMA_VERSION,
    build_metadata,
    read_metadata,
    token_counts,
)

__all__ = [
    "CONFIG_KEYS",
    "METADATA_KEY",
    "SCHEMA_VERSION",
    "StepCapture",
    "TraceinspectCallback",
    "attach",
    "build_metadata",
    "profile_steps",
    "read_metadata",
    "token_counts",
]


def __getattr__(name: str) -> Any:
    if name in ("profile_steps", "StepCapture"):
        from . import loop

        return getattr(loop, name)
    if name in ("TraceinspectCallback", "attach"):
        from . import hf

        return getattr(hf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
