"""docs/tables.md names every column of every table, and nothing else."""

import re
from pathlib import Path

from builders import build_healthy
from traceinspect.trace.model import load_trace

DOC = (Path(__file__).resolve().parents[1] / "docs" / "tables.md").read_text()


def _documented(section: str) -> set[str]:
    body = DOC.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([a-z_]+)`", body))


def test_documented_columns_match_the_tables(tmp_path):
    tr = load_trace(build_healthy().write(tmp_path / "t.json"))
    for table in ("kernels", "memcpy", "runtime", "cpu_ops", "memory"):
        cols = set(getattr(tr, table).columns)
        missing = cols - _documented(table)
        assert not missing, f"{table}: columns not in docs/tables.md: {missing}"
    both = _documented("gpu_annotations` and `sync_events")
    assert set(tr.gpu_annotations.columns) <= both and set(tr.sync_events.columns) <= both
    assert set(tr.python.columns) <= _documented("python")
    assert set(tr.flows.columns) <= _documented("flows")
    per = tr.timeline.per_step.columns
    assert set(per) <= _documented("steps` and `timeline.per_step")


def _rows(section: str) -> set[str]:
    """The names in the first cell of each row of the section's column table."""
    body = DOC.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([a-z_]+)`", line.split("|")[1]))
    return names


def test_every_documented_column_exists(tmp_path):
    """The other direction: the page names no column that the tables do not have."""
    tr = load_trace(build_healthy().write(tmp_path / "t.json"))
    for table in ("kernels", "memcpy", "runtime", "cpu_ops", "memory"):
        extra = _rows(table) - set(getattr(tr, table).columns)
        assert not extra, f"docs/tables.md documents {table} columns that do not exist: {extra}"
    assert _documented("python") == set(tr.python.columns)
    body = DOC.split("## `gpu_annotations` and `sync_events`", 1)[1].split("\n## ", 1)[0]
    both = set(re.findall(r"`([a-z_]+)`", body.split("Both have", 1)[1].split(". ", 1)[0]))
    sync_only = set(re.findall(r"`([a-z_]+)`", body.split("also has", 1)[1].split(":", 1)[0]))
    assert both == set(tr.gpu_annotations.columns)
    assert both | sync_only == set(tr.sync_events.columns)
