"""Detector documentation pages, generated from the detector classes (docstring + thresholds).

`traceinspect explain` prints them; docs/detectors/*.md are the same text, checked by a test.
Regenerate with: python -m traceinspect.docs docs/detectors
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path


def detector_page(cls) -> str:
    lines = [f"# {cls.name} ({cls.code})", "", cls.summary, ""]
    doc = cls.doc()
    from .detectors.base import DOC_SECTIONS

    body = doc.splitlines()
    for line in body:
        stripped = line.strip()
        if stripped in DOC_SECTIONS and not line.startswith(" "):
            lines += ["", f"## {stripped}", ""]
        else:
            lines.append(line[4:] if line.startswith("    ") else line)
    wf = getattr(cls, "whatif", None)
    if callable(wf) and wf.__doc__:  # the fix as a replay transformation (docs/whatif.md)
        lines += ["", "## What-if (replay)", "", inspect.cleandoc(wf.__doc__)]
    opts = cls.options()
    if opts:
        lines += ["", "## Thresholds", "", "| option | default | meaning |", "|---|---|---|"]
        for name, default, d in opts:
            lines.append(f"| `{name}` | `{default}` | {d} |")
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip() + "\n"


def write_all(out_dir: str | Path) -> list[Path]:
    from .detectors import ALL

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    index = [
        "# Detector catalogue",
        "",
        "Generated from the detector classes by `python -m traceinspect.docs docs/detectors`; do not edit by hand.",
        "",
        "| code | name | what it finds |",
        "|---|---|---|",
    ]
    for cls in ALL:
        p = out / f"{cls.name}.md"
        p.write_text(detector_page(cls), encoding="utf-8")
        written.append(p)
        index.append(f"| {cls.code} | [{cls.name}]({cls.name}.md) | {cls.summary} |")
    idx = out / "README.md"
    idx.write_text("\n".join(index) + "\n", encoding="utf-8")
    written.append(idx)
    return written


if __name__ == "__main__":  # pragma: no cover
    for p in write_all(sys.argv[1] if len(sys.argv) > 1 else "docs/detectors"):
        print(p)
