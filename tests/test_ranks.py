"""Many ranks (issue 18): collectives aligned across ranks, clock offsets, the rank that gates the step,
communication bytes per dtype. Expected numbers are derived from the builders' inputs, and on the DLRM
folder from the raw events in the test itself."""

from __future__ import annotations

import json

import pytest

import builders_ranks as br
from conftest import SHARED
from traceinspect.multirank import analyze_many
from traceinspect.detectors.exposed_communication import bus_factor, dtype_bytes
from traceinspect.render import RENDERERS
from traceinspect.trace.ranks import align

DLRM = SHARED / "facebookresearch__param/et_replay/tests/data/dlrm_kineto"


def _run(tmp_path, **kw) -> tuple:
    d = tmp_path / "run"
    d.mkdir(parents=True)
    paths = br.write_run(d, **kw)
    return analyze_many([str(p) for p in paths], jobs=1), paths


def test_builder_straggler_cost_and_clock_offsets(tmp_path):
    rep, _ = _run(tmp_path, world=4, slow_rank=2, steps=3, gpus_per_host=2)
    c = rep.cross_rank
    assert c["gating_rank"] == 2 and rep.trace["rank"] == 2  # the report is the gating rank's
    per = {p["rank"]: p for p in c["per_rank"]}
    # rank 2 arrives SLOW_US after the others at collective #1 of each step, every step
    assert per[2]["last_arrivals"] == 3
    assert per[2]["job_cost_us_per_step"] == pytest.approx(br.SLOW_US, abs=1e-3)
    # each of the 3 other ranks waits SLOW_US for it per step; it waits for nobody
    assert per[2]["caused_wait_us_per_step"] == pytest.approx(3 * br.SLOW_US, abs=1e-3)
    assert per[2]["wait_us_per_step"] == pytest.approx(0.0, abs=1e-3)
    for r in (0, 1, 3):
        assert per[r]["last_arrivals"] == 0
        assert per[r]["wait_us_per_step"] == pytest.approx(br.SLOW_US, abs=1e-3)
        # the rest of their collective time is the transfer: XFER_US per collective
        assert per[r]["transfer_us_per_step"] == pytest.approx(br.COLLECTIVES_PER_STEP * br.XFER_US, abs=1e-3)
    # ranks 2 and 3 live on host 1, whose clock runs HOST_OFFSET_US ahead of host 0's
    assert c["clock"] != "one clock"
    for r in range(4):
        assert per[r]["clock_offset_us"] == pytest.approx((r // 2) * br.HOST_OFFSET_US, abs=1e-3)
    said = next(w for w in rep.warnings if "clocks differ" in w)
    assert f"(ranks 0-1 +0.000 ms, ranks 2-3 +{br.HOST_OFFSET_US / 1e3:.3f} ms)" in said  # one entry per clock
    assert c["max_arrival_skew_us"] == pytest.approx(br.SLOW_US, abs=1e-3)
    h = rep.verdict["headline"]
    assert h.startswith("Rank 2 gates the step") and "3.0 ms per step" in h and "dataloader-stall" in h
    assert next(r for r in rep.ranks if r["rank"] == 2)["gating"]


def test_one_clock_is_left_alone(tmp_path):
    rep, _ = _run(tmp_path, world=4, slow_rank=1, gpus_per_host=4)
    assert rep.cross_rank["clock"] == "one clock" and rep.cross_rank["gating_rank"] == 1
    assert all(p["clock_offset_us"] == 0.0 for p in rep.cross_rank["per_rank"])
    assert not any("clocks differ" in w for w in rep.warnings)


def test_each_rank_own_base_time_is_one_host_clock(tmp_path):
    """Kineto writes ts relative to the process's baseTimeNanoseconds: ranks that started seconds apart
    have ts seconds apart for one instant. On one host that is one clock, not offsets to estimate."""
    rep, _ = _run(tmp_path, world=4, slow_rank=1, gpus_per_host=4, base_step_s=3)
    c = rep.cross_rank
    assert c["clock"] == "one clock" and c["gating_rank"] == 1
    assert all(p["clock_offset_us"] == 0.0 for p in c["per_rank"])
    # two hosts, each rank with its own base: only the hosts' offset remains
    rep, _ = _run(tmp_path / "two", world=4, slow_rank=1, gpus_per_host=2, base_step_s=3)
    per = {p["rank"]: p["clock_offset_us"] for p in rep.cross_rank["per_rank"]}
    for r in range(4):
        assert per[r] == pytest.approx((r // 2) * br.HOST_OFFSET_US, abs=0.5)


def test_no_straggler_when_ranks_arrive_together(tmp_path):
    rep, _ = _run(tmp_path, world=2, slow_rank=None, gpus_per_host=2)
    assert rep.cross_rank["gating_rank"] is None
    assert all(p["last_arrivals"] == 0 for p in rep.cross_rank["per_rank"])
    assert "gates the step" not in rep.verdict.get("headline", "")


def test_missing_rank_is_a_clear_warning(tmp_path):
    rep, _ = _run(tmp_path, world=4, slow_rank=2, skip=(3,))
    w = rep.warnings[0]
    assert "world size is 4 but 3 rank file(s)" in w and "missing rank(s): 3" in w


def test_mismatched_collectives_are_matched_up_to_the_difference():
    rows = [
        {"ts_us": 0.0, "end_us": 10.0, "collective": "allreduce", "group": 0},
        {"ts_us": 20.0, "end_us": 30.0, "collective": "allreduce", "group": 0},
    ]
    other = [dict(rows[0], ts_us=5.0), dict(rows[1], collective="allgather")]
    out = align({0: rows, 1: other})
    assert out["matched"] == 1 and any("differs between ranks" in n for n in out["notes"])
    assert out["straggler"] == 1 and out["per_rank"][1]["job_cost_us_per_step"] == 5.0


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_multi_rank_reports_lead_with_the_straggler(tmp_path, fmt):
    rep, _ = _run(tmp_path, world=4, slow_rank=2)
    out = RENDERERS[fmt][0](rep, width=100, color=False)
    first = out.find("gates the step")
    assert first >= 0
    # it comes before the per-step breakdown and the findings
    for later in ("GPU compute", "exposed-communication", "dataloader-stall"):
        i = out.find(later)
        assert i == -1 or first < i, later


@pytest.mark.parametrize(
    "name,size",
    [
        ("BFloat16", 2),
        ("c10::BFloat16", 2),
        ("bf16", 2),
        ("Half", 2),
        ("float", 4),
        ("Float", 4),
        ("double", 8),
        ("Long", 8),
        ("int8_t", 1),
        ("Float8_e4m3fn", 1),
        ("torch.float16", 2),
        ("nonsense", None),
        (None, None),
    ],
)
def test_bytes_per_dtype(name, size):
    assert dtype_bytes(name) == size


def test_bus_bandwidth_factors_follow_nccl_tests():
    n = 8
    assert bus_factor("allreduce", n) == pytest.approx(2 * 7 / 8)
    assert bus_factor("allgather", n) == bus_factor("reduce_scatter", n) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", n) == 1.0 and bus_factor("unknown", n) is None


def _dlrm_arrivals() -> dict[int, list[float]]:
    """Each rank's NCCL kernel start times, from the raw events (one host clock)."""
    out = {}
    for f in sorted(DLRM.glob("*.json")):
        doc = json.loads(f.read_text())
        ks = sorted(
            (e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"].lower()),
            key=lambda e: e["ts"],
        )
        out[doc["distributedInfo"]["rank"]] = [float(e["ts"]) for e in ks]
    return out


@pytest.mark.skipif(not DLRM.is_dir(), reason="shared DLRM traces absent")
def test_dlrm_rank7_gates_the_step():
    arr = _dlrm_arrivals()
    n = len(next(iter(arr.values())))
    ranks = sorted(arr)
    last = [max(ranks, key=lambda r: arr[r][c]) for c in range(n)]
    # the job's cost of the last rank: how much later it arrived than the next-latest one
    cost = {r: 0.0 for r in ranks}
    for c in range(n):
        times = sorted(arr[r][c] for r in ranks)
        cost[last[c]] += times[-1] - times[-2]
    expected = max(ranks, key=lambda r: cost[r])
    rep = analyze_many(sorted(str(p) for p in DLRM.glob("*.json")), jobs=2)
    c = rep.cross_rank
    assert c["clock"] == "one clock" and c["matched"] == n
    assert c["gating_rank"] == expected == 7
    per = {p["rank"]: p for p in c["per_rank"]}
    assert per[7]["last_arrivals"] == last.count(7)
    # each collective's cost in the table: how much later its last rank arrived than the next-latest one
    assert sum(r["job_cost_us"] for r in c["collectives"] if r["last_rank"] == 7) == pytest.approx(cost[7], abs=0.5)
    # the rank's cost to the job is the job replay's (whatif/job.py): rank 7 keeping pace, the other
    # ranks' step; never more than the sum of its leads (an earlier end moves each later end by at most
    # as much), and here less: the steps of the other ranks do not all end on the collectives
    j = c["job"]
    pace = next(p for p in j["predictions"] if p["fix"] is None)
    assert per[7]["job_cost_us_per_step"] == pytest.approx(pace["saved_per_step_us"])
    assert 0 < per[7]["job_cost_us_per_step"] <= cost[7] + 0.5
    assert j["max_error_frac"] < 0.01
    # the rank that enters the step first waits longest; it is not the one named
    assert rep.trace["rank"] == 7 and rep.verdict["headline"].startswith("Rank 7 gates the step")


def test_different_sizes_of_one_all_reduce_stop_the_matching():
    a = {"ts_us": 0.0, "end_us": 10.0, "collective": "allreduce", "group": 0, "nelems": 1000}
    out = align({0: [a, dict(a, ts_us=20.0, end_us=30.0)], 1: [a, dict(a, ts_us=20.0, end_us=30.0, nelems=999)]})
    assert out["matched"] == 1 and any("different element counts" in n for n in out["notes"])


MI300X_DDP = SHARED / "AMD-AGI__TraceLens/tests/traces/mi300/resnet_act_checkpoint.json.gz"


@pytest.mark.skipif(not MI300X_DDP.exists(), reason="shared MI300X DDP trace absent")
def test_mi300x_ddp_bandwidth_from_bf16():
    """The all-reduce algbw from the raw events: each long RCCL kernel's launch (by correlation) lies in
    a record_param_comms op whose `dtype` and `In msg nelems` give its bytes."""
    import gzip

    from traceinspect.analyze import analyze
    from traceinspect.trace.model import load_trace

    evs = json.loads(gzip.decompress(MI300X_DDP.read_bytes()))["traceEvents"]
    size = {"BFloat16": 2, "Float": 4}
    rpc = [e for e in evs if e.get("name") == "record_param_comms" and "In msg nelems" in e.get("args", {})]
    launch = {
        e["args"]["correlation"]: e
        for e in evs
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    trace = load_trace(str(MI300X_DDP))
    rep = analyze(trace)
    st = rep.steps["per_step"]
    lo, hi = st[0]["start_us"] + trace.meta.origin_us, st[-1]["start_us"] + st[-1]["dur_us"] + trace.meta.origin_us
    total_b = total_t = 0.0
    dtypes = set()
    for k in evs:
        if k.get("cat") != "kernel" or "nccl" not in k["name"].lower() or k["dur"] < 1000:
            continue
        if not (k["ts"] < hi and k["ts"] + k["dur"] > lo) or k["args"]["device"] != trace.timeline.device:
            continue
        rt = launch.get(k["args"]["correlation"])
        op = next((o for o in rpc if rt and o["tid"] == rt["tid"] and o["ts"] <= rt["ts"] <= o["ts"] + o["dur"]), None)
        if op is None:
            continue
        dtypes.add(op["args"]["dtype"])
        total_b += op["args"]["In msg nelems"] * size[op["args"]["dtype"]]
        total_t += k["dur"]
    assert dtypes == {"BFloat16"} and total_t > 0
    f = next(f for f in rep.findings if f.name == "exposed-communication")
    algbw = next(e for e in f.evidence if e.label.startswith("collective algorithm bandwidth"))
    assert "dtype from the trace" in algbw.label
    assert algbw.value == pytest.approx(total_b / total_t / 1e3, rel=0.01)
    busbw = next(e for e in f.evidence if e.label.startswith("bus bandwidth"))
    assert busbw.value == pytest.approx(total_b / total_t / 1e3 * 2 * 7 / 8, rel=0.01)  # all-reduce, 8 ranks


def test_an_unreadable_rank_file_is_skipped_with_its_path_and_reason(tmp_path):
    """One bad rank file does not fail the job: the others are analysed and a warning names the file and
    what is wrong, from the error's own parts (no message is parsed); when no file can be read, the
    first file's error is the error, path and reason intact."""
    from traceinspect.errors import TraceError

    d = tmp_path / "run: 2 ranks"  # ": " in the path: nothing may split a message on it
    d.mkdir()
    paths = br.write_run(d, world=2, slow_rank=1, steps=3, gpus_per_host=2)
    bad = d / "rank_9.pt.trace.json"
    bad.write_text("[1, 2: not json", encoding="utf-8")
    rep = analyze_many([str(p) for p in paths] + [str(bad)], jobs=1)
    skipped = [w for w in rep.warnings if w.startswith("rank file skipped, ")]
    assert len(skipped) == 1 and skipped[0].startswith(f"rank file skipped, {bad}: ")
    with pytest.raises(TraceError) as e:
        analyze_many([str(bad)], jobs=1)
    assert e.value.path == str(bad) and skipped[0] == f"rank file skipped, {bad}: {e.value.reason}"


def test_a_damaged_base_time_leaves_the_ts_alone(tmp_path):
    """baseTimeNanoseconds is added to the origin only when it is a time on a 64-bit ns clock."""
    import dataclasses

    from traceinspect.trace.model import load_trace

    b = br.build_rank(0, 2, slow_rank=None, steps=1)
    meta = load_trace(str(b.write(tmp_path / "r.pt.trace.json"))).meta
    assert meta.clock_origin_us == pytest.approx(meta.origin_us + b.base_time_ns / 1e3)
    for bad in (-5, 2**70):
        assert dataclasses.replace(meta, base_time_ns=bad).clock_origin_us == meta.origin_us
