"""Render every trace under a folder in all four formats, to compare reports before and after a change.

    python bench/snapshot.py OUT_DIR [--traces ../shared/traces] [--builders [--diffs] [--whatif]]
    diff -r BEFORE_DIR AFTER_DIR           # or: python bench/snapshot.py --compare BEFORE_DIR AFTER_DIR

Each trace file (and each directory of rank files) gives OUT_DIR/<relative path>.{txt,md,json,html}, rendered
as `traceinspect analyze --no-cache -o FILE` would (width 100). With --builders it also renders the
golden builders (tests/test_goldens.py's inputs), and with --diffs the `diff` of each builder report
against the next (both ways; the before side fresh and read back from its saved JSON), and with --whatif
`traceinspect whatif` on each builder (every transformation, three at a time). A trace the CLI
refuses gives a `.error` file holding the one-line message and exit code, so a change in refusal is a
change too. Deterministic: no wall-clock time and no absolute path reaches the output (paths are printed
relative to the traces folder).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _inputs(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz")) and p.name != "EXPECTED.json":
            out.append(p)
    return out


def _render_all(report, dest: Path) -> None:
    from traceinspect.render import RENDERERS

    dest.parent.mkdir(parents=True, exist_ok=True)
    for fmt, (render, ext) in RENDERERS.items():
        Path(str(dest) + ext).write_text(render(report, width=100), encoding="utf-8")


def snapshot(out: Path, traces: Path | None, builders: bool, diffs: bool = False, whatifs: bool = False) -> int:
    try:  # the library API; the default settings (no pyproject.toml lookup), no cache
        from traceinspect.api import analyze as _analyze
        from traceinspect.config import Config

        def build_report(path: str, use_cache: bool = False):
            return _analyze(path, Config(), cache=use_cache)
    except ImportError:  # a checkout from before traceinspect.api
        from traceinspect.cli import build_report
    from traceinspect.errors import TraceinspectError

    n = 0
    if traces is not None and traces.is_dir():
        os.chdir(traces)  # relative paths in the reports
        for p in _inputs(traces):
            rel = p.relative_to(traces)
            dest = out / rel
            try:
                report = build_report(str(rel), use_cache=False)
            except TraceinspectError as e:
                dest.parent.mkdir(parents=True, exist_ok=True)
                Path(str(dest) + ".error").write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
                continue
            _render_all(report, dest)
            n += 1
        dirs = sorted({p.parent for p in _inputs(traces)})
        for d in dirs:  # a folder of several trace files is also analysed as one run (its rank files)
            if sum(1 for p in _inputs(traces) if p.parent == d) < 2:
                continue
            rel = d.relative_to(traces)
            dest = out / rel / "_run"
            try:
                report = build_report(str(rel), use_cache=False)
            except TraceinspectError as e:
                dest.parent.mkdir(parents=True, exist_ok=True)
                Path(str(dest) + ".error").write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
                continue
            _render_all(report, dest)
            n += 1
    if builders:  # every builder trace (tests/builders*.py: build_* functions without arguments)
        import importlib
        import inspect
        import tempfile

        sys.path.insert(0, str(REPO / "tests"))
        from traceinspect.analyze import analyze
        from traceinspect.trace.model import load_trace

        made = []  # (label, report) in a fixed order, for --diffs
        for mod_path in sorted((REPO / "tests").glob("builders*.py")):
            mod = importlib.import_module(mod_path.stem)
            for name, make in sorted(vars(mod).items()):
                if not (name.startswith("build_") and inspect.isfunction(make) and make.__module__ == mod.__name__):
                    continue
                if any(p.default is inspect.Parameter.empty for p in inspect.signature(make).parameters.values()):
                    continue
                with tempfile.TemporaryDirectory() as d:
                    try:
                        built = make()
                        path = built.write(Path(d) / f"{name}.pt.trace.json")
                        report = analyze(load_trace(str(path)))
                    except Exception as e:  # a builder that is not a plain trace builder
                        (out / "builders").mkdir(parents=True, exist_ok=True)
                        (out / "builders" / f"{mod_path.stem}.{name}.error").write_text(f"{type(e).__name__}\n")
                        continue
                    if whatifs:
                        n += _whatifs(out / "whatif", f"{mod_path.stem}.{name}", path)
                _render_all(report, out / "builders" / f"{mod_path.stem}.{name}")
                made.append((f"{mod_path.stem}.{name}", report))
                n += 1
        if diffs:
            n += _diffs(out / "diffs", made)
    return n


def _whatifs(out: Path, label: str, path: Path) -> int:
    """`traceinspect whatif` on one builder trace with every fix that has a transformation (and the
    launch-bound batch variant), three fixes at a time, as text and JSON (a refusal as its message)."""
    import json

    from traceinspect.api import whatif
    from traceinspect.errors import TraceinspectError
    from traceinspect.render.text import render_whatif
    from traceinspect.whatif.engine import transforms

    out.mkdir(parents=True, exist_ok=True)
    fixes = sorted(transforms()) + ["launch-bound:batch"]
    n = 0
    for i in range(0, len(fixes), 3):
        key = out / f"{label}.{'+'.join(fixes[i : i + 3])}"
        try:
            d = whatif(str(path), fixes[i : i + 3])
        except TraceinspectError as e:
            msg = str(e).replace(str(path), path.name)  # no temporary path in the output
            Path(str(key) + ".error").write_text(f"{type(e).__name__}: {msg}\n", encoding="utf-8")
            continue
        doc = d.to_dict() if hasattr(d, "to_dict") else d  # a checkout from before the typed WhatIfRun
        Path(str(key) + ".json").write_text(json.dumps(doc, sort_keys=True, indent=1), encoding="utf-8")
        Path(str(key) + ".txt").write_text(render_whatif(d), encoding="utf-8")
        n += 1
    return n


def _diffs(out: Path, made: list) -> int:
    """`traceinspect diff` of each builder report against the next one, both ways, with the before side
    fresh and read back from its saved JSON (Report.from_dict), in the four formats."""
    import json

    from traceinspect.diff import diff
    from traceinspect.render.diff import DIFF_RENDERERS
    from traceinspect.report import Report

    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for (la, ra), (lb, rb) in zip(made, made[1:]):
        for (x, lx), (y, ly) in (((ra, la), (rb, lb)), ((rb, lb), (ra, la))):
            saved = Report.from_dict(json.loads(json.dumps(x.to_dict(), default=float)))
            for before, tag in ((x, ""), (saved, ".saved")):
                d = diff(before, y)
                for render, ext in DIFF_RENDERERS.values():
                    (out / f"{lx}__{ly}{tag}{ext}").write_text(render(d, width=100), encoding="utf-8")
                n += 1
    return n


def compare(a: Path, b: Path) -> int:
    diffs = []

    def walk(c: filecmp.dircmp, rel: str) -> None:
        for x in c.left_only + c.right_only:
            diffs.append(f"only on one side: {rel}{x}")
        for x in c.diff_files:
            diffs.append(f"differs: {rel}{x}")
        for x in c.funny_files:
            diffs.append(f"cannot compare: {rel}{x}")
        for name, sub in c.subdirs.items():
            walk(sub, f"{rel}{name}/")

    walk(filecmp.dircmp(a, b), "")
    # dircmp's shallow compare uses size+mtime; confirm byte equality of the rest
    for p in a.rglob("*"):
        q = b / p.relative_to(a)
        if (
            p.is_file()
            and q.is_file()
            and p.read_bytes() != q.read_bytes()
            and f"differs: {p.relative_to(a)}" not in diffs
        ):
            diffs.append(f"differs: {p.relative_to(a)}")
    files = sum(1 for p in a.rglob("*") if p.is_file())
    print("\n".join(sorted(set(diffs))))
    print(f"{files} files compared, {len(set(diffs))} differ")
    return 1 if diffs else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--traces", default=str(REPO.parent / "shared" / "traces"))
    ap.add_argument("--builders", action="store_true")
    ap.add_argument("--diffs", action="store_true", help="with --builders: also diffs of consecutive builder reports")
    ap.add_argument("--whatif", action="store_true", help="with --builders: also `whatif` runs on every builder")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        return compare(Path(a.compare[0]), Path(a.compare[1]))
    if not a.out:
        ap.error("OUT_DIR is required")
    n = snapshot(Path(a.out).resolve(), Path(a.traces).resolve(), a.builders, a.diffs, a.whatif)
    print(f"{n} reports, diffs and whatif runs rendered into {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
