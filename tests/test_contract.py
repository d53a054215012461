"""Contracts: the detector registry, each detector's doc page and builders, generated docs, layering."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import traceinspect.detectors as registry
from traceinspect.analyze import analyze
from traceinspect.detectors.base import DOC_SECTIONS, Detector
from traceinspect.docs import detector_page
from traceinspect.findings import Finding
from traceinspect.trace.model import load_trace

PKG = Path(registry.__file__).parent
REPO = PKG.parents[1]


def _all_detector_classes():
    found = set()
    for m in pkgutil.iter_modules([str(PKG)]):
        mod = importlib.import_module(f"traceinspect.detectors.{m.name}")
        for obj in vars(mod).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Detector)
                and obj is not Detector
                and obj.__module__ == mod.__name__
            ):
                found.add(obj)
    return found


def test_every_detector_is_registered_once():
    assert _all_detector_classes() == set(registry.ALL)
    assert len(set(registry.ALL)) == len(registry.ALL)


def test_codes_and_names_are_unique_and_well_formed():
    codes = [d.code for d in registry.ALL]
    names = [d.name for d in registry.ALL]
    assert len(set(codes)) == len(codes) and len(set(names)) == len(names)
    for d in registry.ALL:
        assert re.fullmatch(r"TI\d{3}", d.code), d
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", d.name), d
        assert d.summary and not d.summary.endswith(".")


@pytest.mark.parametrize("det", registry.ALL, ids=lambda d: d.name)
def test_doc_page_has_every_section_in_order(det):
    doc = det.doc()
    pos = [doc.find(f"\n{s}\n") if i else doc.find(f"{s}\n") for i, s in enumerate(DOC_SECTIONS)]
    assert all(p >= 0 for p in pos), f"{det.name}: missing sections {[s for s, p in zip(DOC_SECTIONS, pos) if p < 0]}"
    assert pos == sorted(pos)
    for name, default, doc_ in det.options():
        assert doc_, f"{det.name}.{name} has no doc string"


def _builder(ref: str):
    mod, fn = ref.rsplit(".", 1)
    return getattr(importlib.import_module(mod), fn)


_CASES = [(d, ref, True) for d in registry.ALL for ref in d.fires_on] + [
    (d, ref, False) for d in registry.ALL for ref in d.silent_on
]


def test_every_detector_lists_builders_both_ways():
    for d in registry.ALL:
        assert d.fires_on, f"{d.name} lists no builder it fires on"
        assert d.silent_on, f"{d.name} lists no builder it stays silent on"


@pytest.mark.parametrize(
    "det,ref,fires", _CASES, ids=[f"{d.name}-{r}-{'fires' if f else 'silent'}" for d, r, f in _CASES]
)
def test_builders_fire_or_stay_silent(det, ref, fires, tmp_path):
    trace = load_trace(_builder(ref)().write(tmp_path / "b.json"))
    rep = analyze(trace, detectors=[det], strict=True)
    got = [f for f in rep.findings if f.name == det.name]
    if fires:
        assert got, f"{det.name} did not fire on {ref}"
        f: Finding = got[0]
        assert 0 < f.time_lost_us <= trace.window_us
        assert f.evidence and f.fix and f.title
    else:
        assert not got, f"{det.name} fired on {ref}: {got[0].title}"


@pytest.mark.parametrize("det", registry.ALL, ids=lambda d: d.name)
def test_generated_docs_are_up_to_date(det):
    page = REPO / "docs" / "detectors" / f"{det.name}.md"
    assert page.exists(), "run: python -m traceinspect.docs docs/detectors"
    assert page.read_text() == detector_page(det), "stale; run: python -m traceinspect.docs docs/detectors"


LAYERS = ["trace", "facts", "detectors", "analyze", "report", "render", "cli"]
# module (relative to the package) -> layer; lower index may not import a higher one
_LAYER_OF = {
    "trace": 0,
    "findings": 0,
    "sections": 0,  # the report's section Structs: msgspec only, so every producer may build them
    "errors": 0,
    "facts": 0.5,
    "detectors": 1,
    "analyze": 2,
    "causes": 2,  # analyze's parts: running the causes, the explained-time account, the verdict
    "account": 2,
    "verdict": 2,
    "multirank": 2.5,  # the folder of rank files: reduces analyze()s reports into the job's
    "report": 2,
    "diff": 3,
    "docs": 3,
    "tensorboard": 3,
    "distributed": 3,
    "render": 4,
    "cli": 5,
    "capture": 0,
    "__init__": 5,
    "__main__": 5,
    "timeline_sample": 2,
    "cache": 3,
    "annotate": 3,
    "tb_plugin": 5,
    "whatif": 1.5,
    "safeio": 0,  # atomic writes and the output-is-not-an-input check: stdlib and errors only
    "inert": 0,  # whatif: above the detectors (it applies their fixes), below analyze
    "config": 1.5,
    "api": 4.5,
    "catalogue": 0,  # the detectors' codes, names and summaries: standard library only
}  # config: detector options; api: the library calls the CLI makes
# facts: derived facts shared by detectors (device selection, kernel classes, claims), below them


def _layer(rel: Path) -> str:
    return rel.parts[0].removesuffix(".py")


def test_layering_imports_flow_one_way():
    pkg = REPO / "traceinspect"
    bad = []
    between = set()  # (detector module, detector module it imports)
    for f in pkg.rglob("*.py"):
        rel = f.relative_to(pkg)
        me = _layer(rel)
        if me not in _LAYER_OF:
            bad.append(f"{rel}: a module with no layer (add it to _LAYER_OF)")
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(rel.parts[:-1])[: len(rel.parts) - node.level]
                mod = ".".join(base + ([node.module] if node.module else []))
                targets = [mod] if node.module else [".".join(base + [a.name]) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("traceinspect."):
                targets = [node.module.removeprefix("traceinspect.")]
            elif isinstance(node, ast.ImportFrom) and node.module == "traceinspect":
                targets = [a.name for a in node.names]  # the package root: a submodule or a root name
            elif isinstance(node, ast.Import):
                targets = [
                    a.name.removeprefix("traceinspect.").removeprefix("traceinspect")
                    for a in node.names
                    if a.name == "traceinspect" or a.name.startswith("traceinspect.")
                ]
            for t in targets:
                other = t.split(".")[0] if t else "__init__"
                if not ((pkg / f"{other}.py").exists() or (pkg / other).is_dir()) and other != "__version__":
                    other = "__init__"  # a name the package root re-exports (analyze, Report, ...)
                if me == "detectors" and other == "detectors":
                    between.add((rel.stem, t.split(".")[1] if "." in t else t))
                if other == "cli" and me not in ("cli", "__main__"):
                    bad.append(f"{rel} imports cli")
                if other in _LAYER_OF and me in _LAYER_OF and _LAYER_OF[other] > _LAYER_OF[me] and me != "__init__":
                    bad.append(f"{rel} ({me}) imports {t} ({other})")
    assert not bad, bad
    # a detector imports base (and facts/), never another detector: what they share is a fact, and who
    # claims which idle time is facts/claims.py's resolution, not a call into the other detector
    shared = {"base", "__init__", "detectors"}
    found = {(a, b) for a, b in between if b not in shared and a not in shared}
    assert not found, f"a detector imports another: {sorted(found)}"


def _module_of(pkg: Path, dotted: str) -> str | None:
    """The module file a dotted name inside the package is: 'render.text' -> 'render/text.py',
    'render' -> 'render/__init__.py'; None where it is no module (a name a module defines)."""
    p = pkg.joinpath(*dotted.split(".")) if dotted else pkg
    if p.with_suffix(".py").is_file():
        return str(p.with_suffix(".py").relative_to(pkg))
    if (p / "__init__.py").is_file():
        return str((p / "__init__.py").relative_to(pkg))
    return None


def _imports(pkg: Path, f: Path) -> set[str]:
    """The package's modules `f` imports, at module level or inside a function (a lazy import is still a
    dependency), leaving out what only a type checker reads (`if TYPE_CHECKING:`)."""
    rel = f.relative_to(pkg)
    here = list(rel.parts[:-1])  # the package `f` is in
    tree = ast.parse(f.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        bases = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                dotted = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "traceinspect" or node.module.startswith("traceinspect.")):
                dotted = node.module.removeprefix("traceinspect").removeprefix(".")
            else:
                continue
            for a in node.names:  # `from X import a`: the module X.a where there is one, else X
                bases.append(_module_of(pkg, f"{dotted}.{a.name}".strip(".")) or _module_of(pkg, dotted))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "traceinspect" or a.name.startswith("traceinspect."):
                    bases.append(_module_of(pkg, a.name.removeprefix("traceinspect").removeprefix(".")))
        out |= {b for b in bases if b and b != str(rel)}
    return out


def test_the_import_graph_has_no_circle():
    """No module imports, even lazily, a module that imports it back through any chain: each part of the
    house can be read, tested and replaced from the bottom up."""
    pkg = REPO / "traceinspect"
    graph = {str(f.relative_to(pkg)): _imports(pkg, f) for f in pkg.rglob("*.py")}
    assert "report.py" in graph and "render/text.py" in graph["render/__init__.py"]  # the graph is read
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                circles.append(" -> ".join(path[path.index(n) :] + [m, n]) if n in path else f"{m} -> {n}")
            elif n not in state:
                visit(n, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not circles, circles
