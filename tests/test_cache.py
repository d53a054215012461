"""The report cache: a second analyze of the same file is served from it, and it never serves a
report for a changed file, other options, or when asked not to."""
import json
import os

import pytest
from click.testing import CliRunner

from builders import build_dataloader_stall
from traceinspect import cache
from traceinspect.cli import cli


@pytest.fixture
def cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)  # builder traces are small
    return tmp_path / "cache"


def _run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


def test_second_analyze_is_served_from_the_cache(tmp_path, cached, monkeypatch):
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    first = _run("analyze", p, "--format", "json")
    assert len(list(cached.glob("*.json"))) == 1

    import traceinspect.trace.model as model

    def no_load(*a, **k):
        raise AssertionError("the trace was parsed again")

    monkeypatch.setattr(model, "load_trace", no_load)
    assert _run("analyze", p, "--format", "json") == first
    # other options are another key: the trace must be parsed (and our stub says so)
    r = CliRunner().invoke(cli, ["analyze", str(p), "--steps", "1:", "--format", "json"])
    assert r.exit_code == 5 and "parsed again" in r.output


def test_a_changed_file_or_no_cache_misses(tmp_path, cached):
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    first = json.loads(_run("analyze", p, "--format", "json"))
    build_dataloader_stall(load_us=5_000).write(p)  # same name, new content
    os.utime(p, ns=(1, 1))
    second = json.loads(_run("analyze", p, "--format", "json"))
    assert second["findings"][0]["time_lost_us"] != first["findings"][0]["time_lost_us"]
    n = len(list(cached.glob("*.json")))
    _run("analyze", p, "--format", "json", "--no-cache", "--steps", "1:")
    assert len(list(cached.glob("*.json"))) == n


def test_an_unwritable_cache_is_only_a_miss(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    p = build_dataloader_stall().write(tmp_path / "t.json")
    assert "dataloader-stall" in _run("analyze", p)
