"""The bad-input corpus through the CLI (a subprocess, as a user runs it; in-process in the fast run:
tests/clirun.py): bounded resources and honest
partial data. Each case asserts the exit code and that the one-line error names the file and the
problem. Big inputs (gzip bombs, absurd names, cut traces) are generated here; tests/corpus holds
the small files (see its README)."""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import zlib
from pathlib import Path

import pytest

import clirun
from builders import build_healthy
from corpus.bombs import write_bomb
from traceinspect import load_trace
from traceinspect.errors import TraceError
from traceinspect.trace import load as L

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "corpus"


def _env(tmp_path, **extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["TRACEINSPECT_CACHE_DIR"] = str(tmp_path / "cache")
    env.pop("TRACEINSPECT_DEBUG", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cli(tmp_path, path, *args, preexec_fn=None, timeout=120, **env):
    r = clirun.run(["analyze", path, *args], env=_env(tmp_path, **env), timeout=timeout, preexec_fn=preexec_fn)
    return r.returncode, r.stdout, r.stderr


def assert_error(tmp_path, path, code: int, problem: str, *args, **kw) -> str:
    rc, out, err = cli(tmp_path, path, *args, **kw)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert rc == code, (rc, err)
    assert lines[0].startswith("error: ") and str(path) in lines[0], err  # names the file
    assert re.search(problem, lines[0]), err  # and the problem
    assert lines[1].startswith("hint: "), err  # and what to do
    return lines[0]


# --- not a trace: exit 3, never a report of zeros ---------------------------------------------------


@pytest.mark.parametrize(
    "name, problem",
    [
        ("empty_events.json", "has no trace events"),
        ("ints.json", "none of its 3 events .* not a torch.profiler trace"),
        ("memory_timeline.json", "none of its 2 events .* not a torch.profiler trace"),
        ("nul_prefix.json", "is not JSON"),
    ],
)
def test_corpus_file_is_exit_3(tmp_path, name, problem):
    assert_error(tmp_path, CORPUS / name, 3, problem)


# --- non-regular files: exit 3 at once, never a blocking open ----------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_refused_not_read(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    # a blocking open would wait for a writer forever: the timeout turns that hang into a failure
    assert_error(tmp_path, fifo, 3, "is a FIFO .* not a regular file", timeout=60)


def test_character_device_is_refused(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    assert_error(tmp_path, "/dev/zero", 3, "is a character device, not a regular file", timeout=60)


# --- gzip bombs ----------------------------------------------------------------------------------------


def test_bomb_generator_is_a_real_bomb(tmp_path):
    """The generator's output is what it claims: a gzip that inflates to exactly its stated content."""
    p = tmp_path / "small_bomb.json.gz"
    size = write_bomb(p, b"[", b" ", 32 << 20)
    data = gzip.decompress(p.read_bytes())  # also checks the CRC and size trailer
    assert len(data) == size == 1 + (32 << 20) and data[:1] == b"[" and data[1:].strip() == b""
    assert size / p.stat().st_size > 500


@pytest.mark.parametrize(
    "prefix, fill",
    [(b'{"traceEvents": [', b"\0"), (b"", b" "), (b"[", b" ")],
    ids=["nul-after-array", "leading-spaces", "spaces-in-array"],
)
def test_gzip_bomb_is_stopped_by_the_inflation_bound(tmp_path, prefix, fill):
    p = tmp_path / "bomb.json.gz"
    write_bomb(p, prefix, fill, 256 << 20)
    line = assert_error(tmp_path, p, 3, r"inflates more than 200x .* TRACEINSPECT_MAX_INFLATE=200")
    assert "of gzip gave" in line


def _limit_address_space(limit: int):
    def apply():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


AS_LIMIT = 1536 << 20  # 1.5 GiB of address space for the whole CLI process


@pytest.mark.slow  # each inflates up to 1.5 GiB
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced as documented on Linux")
@pytest.mark.parametrize(
    "prefix, fill, bound",
    [
        (b'{"traceEvents": [', b"\0", {}),  # the inflation bound stops it
        (b'{"traceEvents": [', b"\0", {"TRACEINSPECT_MAX_INFLATE": 0}),  # bound off: the per-event bound
        (b"", b" ", {"TRACEINSPECT_MAX_INFLATE": 0}),  # bound off: whitespace is dropped
    ],
    ids=["nul-bounded", "nul-ratio-off", "spaces-ratio-off"],
)
def test_bomb_under_an_address_space_limit(tmp_path, prefix, fill, bound):
    """Peak memory follows the events kept, not the inflated bytes: a bomb that inflates to 2 GiB is
    refused (exit 3, never MemoryError / exit 5 / a kill) inside 1.5 GiB of address space, even with
    the ratio bound turned off. The control, a real trace, analyses fine under the same limit."""
    control = build_healthy(steps=3).write(tmp_path / "control.json.gz")
    rc, out, err = cli(tmp_path, control, "--no-cache", preexec_fn=_limit_address_space(AS_LIMIT), MALLOC_ARENA_MAX=2)
    assert rc == 0, err
    p = tmp_path / "bomb.json.gz"
    assert write_bomb(p, prefix, fill, 2 << 30) >= 2 << 30 > AS_LIMIT
    problem = (
        "TRACEINSPECT_MAX_INFLATE"
        if not bound
        else ("TRACEINSPECT_MAX_EVENT_BYTES" if prefix else "contains only whitespace")
    )
    assert_error(
        tmp_path,
        p,
        3,
        problem,
        "--no-cache",
        preexec_fn=_limit_address_space(AS_LIMIT),
        MALLOC_ARENA_MAX=2,
        timeout=300,
        **bound,
    )


def test_bounds_are_overridable_and_validated(tmp_path):
    p = tmp_path / "bomb.json.gz"
    write_bomb(p, b"[", b" ", 64 << 20)
    # a higher ratio lets this one through to the next bound: the per-event bound, set low here
    assert_error(
        tmp_path,
        p,
        3,
        "TRACEINSPECT_MAX_EVENT_BYTES=1048576",
        TRACEINSPECT_MAX_INFLATE=5000,
        TRACEINSPECT_MAX_EVENT_BYTES=1 << 20,
    )
    rc, _, err = cli(tmp_path, p, TRACEINSPECT_MAX_INFLATE="lots")
    assert rc == 2 and "TRACEINSPECT_MAX_INFLATE='lots'" in err and "Traceback" not in err


def test_plain_file_over_the_size_bound(tmp_path):
    p = build_healthy(steps=2).write(tmp_path / "t.json")
    assert_error(tmp_path, p, 3, "beyond the bound TRACEINSPECT_MAX_JSON_BYTES=1000 ", TRACEINSPECT_MAX_JSON_BYTES=1000)


# --- absurd names --------------------------------------------------------------------------------------


def _with_kernel_name(tmp_path, name: str, file: str) -> Path:
    b = build_healthy(steps=3)
    next(e for e in b.events if e.get("cat") == "kernel")["name"] = name
    return b.write(tmp_path / file)


def test_event_over_the_event_bound_is_exit_3(tmp_path):
    """One 3 MiB kernel name against a 1 MiB event bound (the default is 32 MiB; the mechanism is the
    same): the reader stops after the bound, not after the name."""
    p = _with_kernel_name(tmp_path, "k" * (3 << 20), "huge_name.json")
    assert_error(
        tmp_path,
        p,
        3,
        r"holds more than 1\.0 MiB with no event boundary.*"
        "TRACEINSPECT_MAX_EVENT_BYTES=1048576",
        TRACEINSPECT_MAX_EVENT_BYTES=1 << 20,
    )


def test_long_name_is_cut_and_said(tmp_path):
    """A name over MAX_NAME_CHARS is kept as its first MAX_NAME_CHARS characters (every pattern match
    over names is then bounded); the text made of 'cutlass' repeats is the input that made the old
    `cutlass.*tensorop` pattern quadratic."""
    from traceinspect.trace.model import MAX_NAME_CHARS

    name = "cutlass" * (3 * MAX_NAME_CHARS // 7)
    tr = load_trace(_with_kernel_name(tmp_path, name, "long.json"))
    names = [str(n) for n in tr.kernels["name"].cat.categories]
    cut = [n for n in names if n.startswith("cutlass")]
    assert len(cut) == 1 and cut[0].startswith(name[:MAX_NAME_CHARS]) and len(cut[0]) < MAX_NAME_CHARS + 100
    assert f"{len(name):,} characters" in cut[0]
    assert any("was cut to that length" in w and f"{len(name):,}" in w for w in tr.warnings)


def test_kernel_patterns_are_linear_on_adversarial_names():
    """No timing here (bench/ has it): the inputs are ones that made the replaced patterns quadratic
    (hours at this size); with linear ones this returns at once, so a regression hangs the suite."""
    from traceinspect.facts.kernels import classify_name

    for unit in ("cutlass", "compute", "cutlass_compute_<a, ", "<  ,"):
        classify_name.cache_clear()
        assert classify_name(unit * (200_000 // len(unit))).kind
    # a GEMM name, so the precision's template scan runs: `<` then many blank arguments made the old
    # template pattern backtrack exponentially (18 s for 16 arguments; this has 60,000)
    classify_name.cache_clear()
    assert classify_name("void gemm_kernel<" + "  ," * 60_000 + " x>(int)").kind == "gemm"


@pytest.mark.parametrize(
    "name, first",
    [
        ("k<int, float, double>", "float"),
        ("k<int, 4, c10::BFloat16>", "c10::BFloat16"),
        ("k<  ,  ,  , x>", None),
        ("k<int, 4>", None),
        ("k<Params<128, 64>, __half>", None),  # an argument with its own list ends the scan, as before
    ],
)
def test_first_float_template_argument(name, first):
    from traceinspect.facts.kernels import _first_float_template

    assert _first_float_template(name) == first


# --- truncated files: say what was lost, analyse only complete steps ---------------------------------

HOST_CATS = ("cpu_op", "user_annotation", "python_function")


def kineto_ordered(steps: int = 6):
    """A builder trace serialised the way Kineto writes it: metadata, then every host op, then the GPU
    section (runtime calls, kernels and copies interleaved in time order), one event per line."""
    doc = build_healthy(steps=steps).build()
    evs = doc.pop("traceEvents")
    host = [e for e in evs if e.get("cat") in HOST_CATS or e.get("ph") == "M"]
    gpu = sorted((e for e in evs if e not in host), key=lambda e: e["ts"])
    events = host + gpu
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n'
    lines = [json.dumps(e) for e in events]
    body = head + ",\n".join(lines) + "\n]}\n"
    # byte offset where each event's line ends
    ends, pos = [], len(head)
    for ln in lines:
        pos += len(ln)
        ends.append(pos)
        pos += 2
    return body.encode(), events, ends, len(host)


def expected_steps(events: list[dict], kept: int) -> tuple[list[int], list[int]]:
    """Steps whose span, runtime calls and GPU work are all among the first `kept` events, and that
    end before the kept data does (the GPU section is in time order: a step is known to be over only
    if something after it was kept). Derived from the builder's events, independently of the reader."""
    have = {id(e) for e in events[:kept]}
    gpu_kept = [e["ts"] for e in events[:kept] if e.get("cat") in ("cuda_runtime", "kernel", "gpu_memcpy")]
    data_end = max(gpu_kept, default=float("-inf"))
    by_corr = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")}
    complete, cut = [], []
    for s in (e for e in events if e["name"].startswith("ProfilerStep#")):
        lo, hi = s["ts"], s["ts"] + s["dur"]
        rts = [e for e in events if e.get("cat") == "cuda_runtime" and lo <= e["ts"] <= hi]
        work = [by_corr[r["args"]["correlation"]] for r in rts if r["args"]["correlation"] in by_corr]
        ok = id(s) in have and all(id(e) in have for e in rts + work) and hi <= data_end
        (complete if ok else cut).append(int(s["name"].split("#")[1]))
    return complete, cut


def _ranges(nums: list[int]) -> str:
    return f"#{nums[0]}-#{nums[-1]}" if len(nums) > 1 else f"#{nums[0]}"


def _report(tmp_path, p) -> dict:
    rc, out, err = cli(tmp_path, p, "-f", "json", "--no-cache")
    assert rc == 0 and "Traceback" not in err, err
    return json.loads(out)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip-cut-mid-stream"])
def test_truncated_trace_keeps_complete_steps_and_says_what_was_lost(tmp_path, gz):
    body, events, ends, n_host = kineto_ordered(steps=6)
    # cut in the middle of an event 60% of the way into the GPU section
    victim = n_host + int(0.6 * (len(events) - n_host))
    cut_at = ends[victim] - 20
    p = tmp_path / ("cut.json.gz" if gz else "cut.json")
    if gz:
        whole = gzip.compress(body)
        p.write_bytes(whole[: int(len(whole) * cut_at / len(body))])
        readable = zlib.decompressobj(31).decompress(p.read_bytes())  # what any reader can get back
    else:
        p.write_bytes(body[:cut_at])
        readable = body[:cut_at]
    kept_events = sum(1 for e in ends if e + 1 <= len(readable))  # events whose line is complete
    complete, dropped = expected_steps(events, kept_events)
    assert complete and dropped  # the cut really falls inside the steps

    tr = load_trace(p)
    assert tr.steps["step"].tolist() == complete
    assert tr.meta.truncated and list(tr.meta.steps_dropped) == dropped
    r = _report(tmp_path, p)
    w = " ".join(r["warnings"])
    assert r["steps"]["count"] == len(complete)
    assert f"{len(complete)} of {len(complete) + len(dropped)} kept ({_ranges(complete)})" in w
    assert f"dropped because the cut reaches into them: {_ranges(dropped)}" in w
    assert "not recorded" in w  # what is not known is said, not guessed
    if gz:
        assert "size trailer is gone" in w
    lost_true = len(events) - kept_events
    m = re.search(r"an estimated ([\d,]+) events .*estimate", w)
    assert m, w
    est = int(m.group(1).replace(",", ""))
    assert 0.75 * lost_true <= est <= 1.25 * lost_true, (est, lost_true)  # uniform steps: close


def test_cut_before_the_gpu_section_is_exit_3_and_names_the_lost_gpu(tmp_path):
    body, events, ends, n_host = kineto_ordered(steps=4)
    p = tmp_path / "early_cut.json"
    p.write_bytes(body[: ends[n_host // 2] - 10])  # half the host ops, no GPU event
    line = assert_error(tmp_path, p, 3, r"is truncated and none of its \d+ steps is complete")
    assert "H100" in line and "lost, not absent" in line and "ProfilerActivity" not in line


def test_gzip_missing_only_its_trailer_is_complete(tmp_path):
    body, events, _, _ = kineto_ordered(steps=3)
    p = tmp_path / "no_trailer.json.gz"
    p.write_bytes(gzip.compress(body)[:-8])
    tr = load_trace(p)
    assert not tr.meta.truncated and len(tr.steps) == 3
    assert any("nothing was lost" in w for w in tr.warnings)


def test_loader_error_names_file_for_empty_event_list(tmp_path):
    p = tmp_path / "e.json"
    p.write_text('{"traceEvents": []}')
    with pytest.raises(TraceError) as ei:
        load_trace(p)
    assert str(p) in str(ei.value) and ei.value.hint


def test_limits_defaults_are_the_documented_ones(monkeypatch):
    for k in ("TRACEINSPECT_MAX_INFLATE", "TRACEINSPECT_MAX_JSON_BYTES", "TRACEINSPECT_MAX_EVENT_BYTES"):
        monkeypatch.delenv(k, raising=False)
    lim = L.limits()
    assert (lim.max_inflate, lim.max_json_bytes, lim.max_event_bytes) == (200, 64 << 30, 32 << 20)
    monkeypatch.setenv("TRACEINSPECT_MAX_INFLATE", "0")
    assert L.limits().max_inflate == float("inf")


def test_headline_never_says_no_gpu_activity_when_a_gpu_is_named(tmp_path):
    """A complete trace that names a GPU but has no GPU events: the verdict and the warnings say the
    GPU events are absent, never 'No GPU activity: capture with ProfilerActivity.CUDA'."""
    from builders import TraceBuilder

    t = TraceBuilder("V100")
    for _ in range(3):
        with t.step():
            t.op("aten::mm", cpu_us=2000)
    r = _report(tmp_path, t.write(tmp_path / "host_only.json"))
    text = json.dumps(r)
    assert "ProfilerActivity" not in text
    assert "Tesla V100" in r["verdict"]["headline"] and "no GPU events" in r["verdict"]["headline"]


def test_corrupt_gzip_midway_keeps_what_came_before_and_says_the_rest_cannot_be_decoded(tmp_path):
    """A byte-aligned invalid deflate block (BTYPE=11) after 90% of the trace: every complete event
    inflated before it is kept, the steps it cuts are dropped, and the warning says what is unknown."""
    body, events, ends, n_host = kineto_ordered(steps=6)
    cut = ends[int(0.9 * len(events))] - 20
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    p = tmp_path / "corrupt.json.gz"
    p.write_bytes(c.compress(body[:cut]) + c.flush(zlib.Z_FULL_FLUSH) + b"\x07" + b"\x00" * 100)
    kept_events = sum(1 for e in ends if e + 1 <= cut)
    complete, dropped = expected_steps(events, kept_events)
    tr = load_trace(p)
    assert tr.meta.truncated and tr.steps["step"].tolist() == complete and list(tr.meta.steps_dropped) == dropped
    w = " ".join(tr.warnings)
    assert "corrupt" in w and "cannot be decoded" in w


def test_truncated_trace_without_steps_clips_the_window(tmp_path):
    """No ProfilerStep spans ('whole trace'): the window ends where the data ends, and says so."""
    body, events, ends, n_host = kineto_ordered(steps=4)
    doc_events = [e for e in events if not e["name"].startswith("ProfilerStep#")]
    doc = build_healthy(steps=1).build()
    doc["traceEvents"] = doc_events
    text = json.dumps(doc, indent=1).encode()
    p = tmp_path / "nosteps.json"
    p.write_bytes(text[: int(len(text) * 0.8)])
    tr = load_trace(p)
    assert tr.step_source == "whole trace" and len(tr.steps) == 1
    gpu_end = max(float(df["end_us"].max()) for df in (tr.kernels, tr.memcpy) if len(df))
    assert float(tr.steps["end_us"].iloc[0]) <= gpu_end
    assert any("window ends where the truncated data ends" in w for w in tr.warnings)
