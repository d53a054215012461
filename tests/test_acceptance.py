"""Acceptance over the real traces in ../shared/traces and their EXPECTED.json (skipped where absent)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SHARED, shared_available
from traceinspect.analyze import analyze
from traceinspect.multirank import analyze_many
from traceinspect.errors import TraceError
from traceinspect.report import SCHEMA_VERSION
from traceinspect.trace import intervals as iv
from traceinspect.trace.model import load_trace
from traceinspect.trace.timeline import is_dataloader

pytestmark = pytest.mark.skipif(not shared_available(), reason="../shared/traces is not present")

_EXP = json.loads((SHARED / "EXPECTED.json").read_text()) if shared_available() else {"traces": [], "directories": []}
_JUDGED = [t for t in _EXP["traces"] if not t.get("load_only")]
_ALL_FILES = (
    sorted(
        str(p.relative_to(SHARED))
        for p in SHARED.rglob("*")
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".gz")) and p.name != "EXPECTED.json"
    )
    if shared_available()
    else []
)

_cache: dict = {}


def report_for(rel: str):
    if rel not in _cache:
        _cache[rel] = analyze(load_trace(SHARED / rel))
    return _cache[rel]


@pytest.mark.parametrize("rel", _ALL_FILES)
def test_every_shared_file_loads_or_gets_the_documented_error(rel):
    try:
        tr = load_trace(SHARED / rel)
    except TraceError as e:
        assert rel.split("/")[-1] in str(e) and e.hint
        return
    rep = analyze(tr)
    assert rep.to_dict()["schema_version"] == SCHEMA_VERSION
    if tr.has_gpu:
        per = tr.timeline.per_step
        parts = per[[c for c in per.columns if c.endswith("_us") and c not in ("start_us", "end_us", "dur_us")]]
        assert np.allclose(parts.sum(axis=1), per["dur_us"], rtol=1e-9, atol=1e-3)


@pytest.mark.parametrize("case", _JUDGED, ids=[t["path"].split("/")[-1] for t in _JUDGED])
def test_expected_conclusions(case):
    rep = report_for(case["path"])
    names = [f.name for f in rep.findings]
    failed = [f.name for f in rep.failures]
    assert not failed, f"detectors failed: {rep.failures}"
    for must in case.get("must", []):
        assert must in names, f"{must} not reported; got {names}"
    for must_not in case.get("must_not", []):
        assert must_not not in names, (
            f"{must_not} reported but must not be: {[(f.name, f.title) for f in rep.findings]}"
        )
    if case.get("top"):
        assert names and names[0] == case["top"], f"top is {names[:3]}, expected {case['top']}"
    if case.get("not_top"):
        assert not names or names[0] != case["not_top"]


@pytest.mark.parametrize(
    "case", [t for t in _EXP["traces"] if t.get("load_only")], ids=lambda t: t["path"].split("/")[-1]
)
def test_load_only_traces(case):
    """No findings are promised for these, only a report: one analysed without a detector failing, or a
    one-line input error (exit 3) naming the file."""
    path = SHARED / case["path"]
    try:
        rep = analyze(load_trace(path), strict=True)
    except TraceError as e:
        assert e.exit_code == 3 and path.name in str(e) and "\n" not in str(e), str(e)
        return
    assert not rep.failures, rep.failures
    assert rep.trace and rep.steps is not None


def test_resnet50_num_workers_0_dataloader_share_per_step():
    """The DataLoader annotations cover 38 to 42 percent of each of the 6 steps (issue acceptance)."""
    tr = load_trace(
        SHARED / "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    )
    st = tr.steps
    assert len(st) == 6
    dl = tr.cpu_ops[is_dataloader(tr.cpu_ops["name"])]
    share = (
        iv.per_window(iv.union(dl["ts_us"], dl["end_us"]), st["start_us"].to_numpy(), st["end_us"].to_numpy())
        / st["dur_us"].to_numpy()
    )
    assert ((share >= 0.38) & (share <= 0.42)).all(), share
    rep = report_for("pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    f = next(f for f in rep.findings if f.name == "dataloader-stall")
    # the GPU idles during most, not all, of the DataLoader time (it finishes the previous step first)
    assert 0.25 < f.time_lost_frac <= share.max()


@pytest.mark.parametrize("case", _EXP.get("directories", []), ids=lambda d: d["path"].split("/")[-1])
def test_rank_directories_combine_into_one_report(case):
    d = SHARED / case["path"]
    files = sorted(str(p) for p in d.iterdir() if p.name.endswith((".json", ".json.gz")))
    rep = analyze_many(files, jobs=2)
    ranks = [r["rank"] for r in rep.ranks]
    assert len(ranks) == len(files) and len(set(ranks)) == len(files)
    assert sum(r["slowest"] for r in rep.ranks) == 1
    slow = next(r for r in rep.ranks if r["slowest"])
    assert slow["median_step_us"] == max(r["median_step_us"] for r in rep.ranks)
