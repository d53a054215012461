"""Saved reports and cache entries are untrusted input: mutated valid reports (huge integers, wrong
types, deep nesting) are refused with one line (diff: exit 3) or are a cache miss, never exit 5
(issue 28). Bounded: a fixed seed and a fixed number of mutations."""

from __future__ import annotations

import copy
import json
import random

import pytest
from click.testing import CliRunner

from builders import build_dataloader_stall, build_launch_bound
from traceinspect import cache
from traceinspect.api import render
from traceinspect.cli import cli
from traceinspect.report import Report

HUGE = int("9" * 401)


def _leaves(o, path=()):
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o[:3]):
            yield from _leaves(v, path + (i,))
    else:
        yield path


def _set(doc, path, value):
    o = doc
    for k in path[:-1]:
        o = o[k]
    o[path[-1]] = value


def _nest(depth):
    v = 1
    for _ in range(depth):
        v = [v]
    return v


MUTATIONS = [HUGE, -HUGE, 1 << 64, 1.5, -1, "x\x1b[31m", None, [], {}, True, float("inf"), _nest(500)]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("reports")
    out = []
    for b in (build_dataloader_stall, build_launch_bound):
        t = b().write(d / f"{b.__name__}.json")
        r = CliRunner().invoke(cli, ["analyze", str(t), "-f", "json", "--no-cache"])
        assert r.exit_code == 0
        out.append(json.loads(r.output))
    return out


def _mutants(reports, n=150, seed=28):
    rng = random.Random(seed)
    for _ in range(n):
        base = rng.choice(reports)
        doc = copy.deepcopy(base)
        path = rng.choice(list(_leaves(doc)))
        _set(doc, path, rng.choice(MUTATIONS))
        yield path, doc


def test_a_mutated_saved_report_is_read_or_refused_with_a_value_error(reports):
    for path, doc in _mutants(reports):
        try:
            r = Report.from_dict(doc)
        except ValueError:
            continue
        for fmt in ("text", "md", "html", "json"):  # what was accepted renders
            render(r, fmt)


@pytest.mark.parametrize("value", [HUGE, -HUGE, 1 << 63])
def test_diff_of_a_saved_report_with_an_integer_beyond_64_bits_is_exit_3(reports, tmp_path, value):
    doc = copy.deepcopy(reports[0])
    doc["breakdown"]["compute"]["per_step_us"] = value  # a float field: float(value) overflowed (exit 5)
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    r = CliRunner().invoke(cli, ["diff", str(p), str(p)])
    assert r.exit_code == 3, r.output
    assert "out of range" in r.output and "$.breakdown.compute.per_step_us" in r.output


def test_a_report_nested_deeper_than_a_report_is_refused(reports):
    doc = copy.deepcopy(reports[0])
    doc["warnings"] = _nest(100)
    with pytest.raises(ValueError, match="nested deeper"):
        Report.from_dict(doc)


def test_a_mutated_cache_entry_is_a_miss(reports, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path / "cache"))
    key = "0" * 64
    cache.store(key, reports[0])
    assert cache.load(key) is not None  # the unmutated entry is a hit
    for i, (path, doc) in enumerate(_mutants(reports, n=60, seed=29)):
        cache.store(key, doc)
        try:
            r = cache.load(key)
        except Exception as e:  # noqa: BLE001 - the point: nothing escapes the cache reader
            pytest.fail(f"mutation at {path}: {type(e).__name__}: {e}")
        if r is not None:
            render(r, "text")
    doc = copy.deepcopy(reports[0])
    doc["steps"]["count"] = HUGE
    cache.store(key, doc)
    assert cache.load(key) is None
