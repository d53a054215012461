"""JSON: the canonical form (sorted keys, schema_version)."""
from __future__ import annotations

import json


def render(report, *, width: int = 100, color: bool = False) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True, default=_default) + "\n"


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
