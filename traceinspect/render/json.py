"""JSON: the canonical form (sorted keys, schema_version).

Strings keep their characters (json escapes control characters), except lone surrogates (a file name
that is not UTF-8), shown as escapes such as \\xff so that the output is valid UTF-8 and I-JSON.
"""

from __future__ import annotations

import json

from ..inert import valid_unicode


def render(report, *, width: int = 100, color: bool = False) -> str:
    return json.dumps(valid_unicode(report.to_dict()), indent=2, sort_keys=True, default=_default) + "\n"


def _default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
