"""Compare two bench/snapshot.py outputs leaving out named sections (those a change meant to alter):
what remains must be identical. Usage: python3 bench/snapshot_except.py BEFORE AFTER [html-ids]
(default: the five sections render/view.py first took over in issue 31)."""

import re
import sys
from pathlib import Path

A, B = Path(sys.argv[1]), Path(sys.argv[2])
SECT = (
    set(sys.argv[3].split(",")) if len(sys.argv) > 3 else {"memory", "trace-quality", "failures", "warnings", "skipped"}
)
TXT = ("Trace quality", "Device memory", "Detectors that failed", "Data-quality warnings", "Checked", "Not applicable")
MD = (
    "### Trace quality",
    "### Device memory",
    "### Detectors that failed",
    "### Data-quality warnings",
    "### Checked below",
)


def txt(s):
    return [b for b in re.split(r"\n\n+", s.strip()) if not b.startswith(TXT)]


def md(s):
    parts = re.split(r"(?m)^(?=### |#### |<details>)", s)
    return [p.strip() for p in parts if not p.startswith(MD)]


def html(s):
    ids = "|".join(map(re.escape, SECT))
    return re.sub(r'<section id="(%s)">.*?</section>\n?' % ids, "", s, flags=re.S)


n = bad = 0
for fa in sorted(A.rglob("*")):
    if not fa.is_file():
        continue
    fb = B / fa.relative_to(A)
    a, b = fa.read_text(errors="replace"), fb.read_text(errors="replace")
    n += 1
    f = {".txt": txt, ".md": md, ".html": html}.get(fa.suffix, lambda s: s)
    if f(a) != f(b):
        bad += 1
        print("differs outside the moved sections:", fa.relative_to(A))
print(f"{n} files compared, {bad} differ outside the moved sections")
