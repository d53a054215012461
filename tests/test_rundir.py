"""A directory -> the rank files of one run (trace/rundir.py): what the head and tail of each file
say, without parsing events; and the same one-run rule after the full parse (multirank.reduce_ranks)."""

import gzip
import json

import pytest

from builders import build_dataloader_stall
from traceinspect.multirank import analyze_many
from traceinspect.errors import TraceError, UsageError
from traceinspect.trace.rundir import HEAD_BYTES, find_trace_files, one_run, sniff


def doc(rank=None, world=None, steps=2):
    b = build_dataloader_stall(steps=steps, load_us=5_000)
    b.rank, b.world_size = rank, world
    return b.build()


def write(path, d, *, events_first=False, gz=False):
    """events_first: traceEvents before every other key (a re-saved trace: distributedInfo at the end)."""
    if events_first:
        d = {"traceEvents": d["traceEvents"], **{k: v for k, v in d.items() if k != "traceEvents"}}
    data = json.dumps(d).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("events_first", [False, True])
def test_rank_is_read_from_the_head_or_the_tail(tmp_path, gz, events_first):
    p = write(tmp_path / "x.json.gz", doc(rank=5, world=8), events_first=events_first, gz=gz)
    info = sniff(p)
    assert (info.rank, info.rank_source, info.world_size, info.problem) == (5, "distributedInfo", 8, None)


def test_a_long_head_is_read_only_up_to_its_bound(tmp_path):
    """distributedInfo after 2 MiB of other metadata and the events: found in the tail, not the head."""
    d = doc(rank=3, world=4)
    d = {"padding": "x" * (2 * HEAD_BYTES), "traceEvents": d["traceEvents"], "distributedInfo": d["distributedInfo"]}
    assert sniff(write(tmp_path / "x.json.gz", d, gz=True)).rank == 3


def test_rank_from_the_name_and_the_handler_worker(tmp_path):
    info = sniff(write(tmp_path / "worker7.1700000000123.pt.trace.json", doc()))
    assert info.worker == "worker7" and info.rank == 7 and info.rank_source == "file name"
    info = sniff(write(tmp_path / "node1_4242.1700000000123.pt.trace.json.gz", doc(), gz=True))
    assert (info.worker, info.rank, info.rank_source) == ("node1_4242", 0, "default")
    info = sniff(write(tmp_path / "plain.json", doc()))
    assert (info.worker, info.rank, info.rank_source) == (None, 0, "default")


def test_a_file_that_cannot_be_sniffed_is_kept_with_its_problem(tmp_path):
    p = tmp_path / "bad.pt.trace.json.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03not deflate at all")
    info = sniff(p)
    assert info.problem and "rank" not in info.problem


def test_only_the_folder_given_is_searched(tmp_path):
    for r in range(2):
        write(tmp_path / f"rank{r}.pt.trace.json", doc(rank=r, world=2))
    (tmp_path / "old").mkdir()
    write(tmp_path / "old" / "rank0.pt.trace.json", doc(rank=0, world=2))
    assert [f.name for f in find_trace_files(tmp_path)] == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    assert [i.rank for i in one_run(tmp_path)] == [0, 1]


def test_generic_json_that_is_not_a_trace_is_not_a_rank(tmp_path):
    write(tmp_path / "trace.json", doc())
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    (tmp_path / "report.json").write_text('{"schema_version": 1, "findings": [], "breakdown": {}}')
    assert [i.name for i in one_run(tmp_path)] == ["trace.json"]


def test_a_folder_without_traces_is_exit_3(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(TraceError, match="no"):
        one_run(tmp_path)


def test_ranks_that_only_the_full_parse_can_tell_apart_are_checked_again(tmp_path):
    """The sniff reads only the head and the tail: a distributedInfo between the events and 2 MiB of
    padding is invisible to it. The full parse sees it, and the same rule refuses two rank-1 files
    (here through analyze_many, the library path, which has no sniff at all)."""
    paths = []
    for name in ("a", "b"):
        d = doc(rank=1, world=2)
        d = {
            "traceEvents": d["traceEvents"],
            "distributedInfo": d["distributedInfo"],
            "padding": "x" * (2 * HEAD_BYTES),
        }
        paths.append(str(write(tmp_path / f"{name}.json.gz", d, gz=True)))
    with pytest.raises(UsageError, match="rank 1") as e:
        analyze_many(paths, jobs=1)
    assert "a.json.gz" in str(e.value) and "b.json.gz" in str(e.value)
