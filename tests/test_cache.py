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


# --- the cache is untrusted storage (issue 11, class 6) ---------------------------------------------

import stat
import subprocess
import sys


def _key(p):
    """The key api.analyze(cache=True) uses for a plain `analyze p` (no --steps)."""
    from traceinspect.api import cache_options

    return cache.key_for(p, cache_options(None))


def test_directory_is_0700_and_entries_0600(tmp_path, cached):
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    _run("analyze", p, "--format", "json")
    assert stat.S_IMODE(cached.stat().st_mode) == 0o700
    entries = list(cached.iterdir())
    assert [e.name for e in entries] == [f"{_key(p)}.json"]  # no temp file left behind
    assert stat.S_IMODE(entries[0].stat().st_mode) == 0o600


def test_a_directory_others_can_write_is_not_used(tmp_path, cached):
    cached.mkdir(mode=0o700)
    os.chmod(cached, 0o777)  # e.g. a shared /tmp folder: anyone could plant or swap entries
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    assert "dataloader-stall" in _run("analyze", p)
    assert list(cached.iterdir()) == []


def test_a_directory_of_another_user_is_not_used(tmp_path, cached):
    cached.mkdir(mode=0o700)
    try:
        os.chown(cached, os.geteuid() + 1, -1)  # needs root; elsewhere the check above covers the idea
    except PermissionError:
        pytest.skip("only root can give a directory to another user")
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    assert "dataloader-stall" in _run("analyze", p)
    assert list(cached.iterdir()) == []


def test_symlinks_at_the_temp_and_entry_names_are_not_followed(tmp_path, cached):
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    key = _key(p)
    cached.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    # the old temp name was predictable (.<key>.<pid>.tmp): plant links at it for a range of pids,
    # and at the entry name itself
    for pid in range(os.getpid() - 50, os.getpid() + 50):
        os.symlink(victim, cached / f".{key}.{pid}.tmp")
    os.symlink(victim, cached / f"{key}.json")
    out = _run("analyze", p, "--format", "json")
    assert victim.read_text() == "precious"
    entry = cached / f"{key}.json"
    assert not entry.is_symlink() and json.loads(entry.read_text())["report"] == json.loads(out)


def _poison(entry, key, good):
    rank_html = json.loads(json.dumps(good))
    rank_html["trace"]["rank"] = "<img src=https://x.invalid/p.png>"
    return {
        "a list": [1, 2, 3],
        "report not wrapped": good,
        "another key": {"format": 1, "key": "0" * 64, "report": good},
        "rank as raw HTML": {"format": 1, "key": key, "report": rank_html},
        "findings of the wrong type": {"format": 1, "key": key, "report": dict(good, findings="none")},
        "missing breakdown": {"format": 1, "key": key, "report": {k: v for k, v in good.items() if k != "breakdown"}},
    }[entry]


@pytest.mark.parametrize(
    "entry",
    [
        "a list",
        "report not wrapped",
        "another key",
        "rank as raw HTML",
        "findings of the wrong type",
        "missing breakdown",
        "truncated JSON",
    ],
)
def test_an_entry_of_the_wrong_shape_is_a_miss(tmp_path, cached, entry):
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    good = json.loads(_run("analyze", p, "--format", "json"))
    path = cached / f"{_key(p)}.json"
    path.write_text(
        '{"format": 1, "key": "' if entry == "truncated JSON" else json.dumps(_poison(entry, _key(p), good))
    )
    assert json.loads(_run("analyze", p, "--format", "json")) == good  # analysed again, no error
    assert json.loads(path.read_text())["report"] == good  # and the entry was rewritten


def test_a_fifo_planted_as_the_entry_does_not_hang(tmp_path, cached):
    p = build_dataloader_stall().write(tmp_path / "t.pt.trace.json")
    cached.mkdir(mode=0o700)
    os.mkfifo(cached / f"{_key(p)}.json")
    code = (
        "import sys; from traceinspect import cache; cache.MIN_BYTES = 0; "
        "from traceinspect.cli import main; sys.argv = ['traceinspect', 'analyze', sys.argv[1]]; main()"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(p)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, TRACEINSPECT_CACHE_DIR=str(cached)),
    )
    assert proc.returncode == 0 and "dataloader-stall" in proc.stdout, proc.stderr


def test_a_change_that_keeps_size_mtime_and_both_ends_is_a_miss(tmp_path, cached):
    """The events sit between two 1.5 MiB padding keys (ignored by the reader), so the first and last
    MiB, the size and the mtime stay the same when the first step is renumbered in the middle."""
    doc = build_dataloader_stall(steps=4).build()  # steps ProfilerStep#10..#13
    pad = "x" * (3 << 19)
    text = json.dumps({"padA": pad, **doc, "padZ": pad})
    p = tmp_path / "t.pt.trace.json"
    p.write_text(text)
    first = json.loads(_run("analyze", p, "--format", "json"))
    st = p.stat()
    changed = text.replace('"ProfilerStep#10"', '"ProfilerStep#20"')  # same length
    assert changed != text and len(changed) == len(text)
    p.write_text(changed)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert p.stat().st_size == st.st_size and p.stat().st_mtime_ns == st.st_mtime_ns
    second = json.loads(_run("analyze", p, "--format", "json"))
    assert [r["step"] for r in first["steps"]["per_step"]] == [10, 11, 12, 13]
    assert [r["step"] for r in second["steps"]["per_step"]] == [20, 11, 12, 13]
