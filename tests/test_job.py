"""The job replay (whatif/job.py, issue 29): the ranks of one run replayed together, joined at their
matched collectives. Builders with a known answer (builders_ranks.write_job solves each all-reduce's
duration across the ranks, as NCCL's spinning kernels make it), and the model's rule on hand-made
summaries."""

from __future__ import annotations

import numpy as np
import pytest

from builders_ranks import JOB_XFER_US, write_job
from traceinspect import api
from traceinspect.trace.ranks import Matched
from traceinspect.whatif import job


def _job(tmp_path, **kw):
    write_job(tmp_path, **kw)
    return api.analyze(tmp_path)


def test_a_backward_straggler_is_named_and_its_200_ms_predicted_back(tmp_path):
    """+200 ms of backward compute on one of 8 ranks: every rank's step looks the same (they all wait in
    the all-reduce), yet the job replay names the rank and gives the 200 ms back within 10%."""
    rep = _job(tmp_path, slow_rank=5, extra_backward_us=200_000)
    steps = [r.median_step_us for r in rep.ranks]
    assert max(steps) - min(steps) < 1e-3 * max(steps)  # per-rank step times look equal
    c = rep.cross_rank
    assert c.gating_rank == 5 and c.straggler == 5
    j = c.job
    assert j.max_error_frac < 0.01
    pace = next(p for p in j.predictions if p.fix is None)
    assert pace.ranks == [5]
    assert pace.saved_per_step_us == pytest.approx(200_000, rel=0.10)
    # one number: the table's job cost, the verdict's and the replay's are the same
    five = next(p for p in c.per_rank if p.rank == 5)
    assert five.job_cost_us_per_step == pytest.approx(pace.saved_per_step_us)
    assert rep.verdict.gating_cost_per_step_us == pytest.approx(pace.saved_per_step_us)
    assert all(p.job_cost_us_per_step < 0.01 * steps[0] for p in c.per_rank if p.rank != 5)


def test_a_dataloader_straggler_fixed_on_its_rank_gives_the_job_its_stall_back(tmp_path):
    rep = _job(tmp_path, slow_rank=3, extra_loader_us=30_000)
    c = rep.cross_rank
    assert c.gating_rank == 3
    fix = next(p for p in c.job.predictions if p.fix == "dataloader-stall" and p.ranks == [3])
    assert fix.saved_per_step_us == pytest.approx(30_000, rel=0.10)
    assert fix.step_us == pytest.approx(c.job.replayed_step_us - fix.saved_per_step_us)
    assert "Replayed as one job" in rep.verdict.headline and "dataloader-stall fixed on rank 3" in rep.verdict.headline
    text = api.render(rep, "text")
    assert "Job replay" in text and "dataloader-stall fixed on rank 3" in text


def test_a_communication_bound_job_has_no_straggler(tmp_path):
    """Long transfers, every rank on time: no rank's delay costs the job anything, nothing gates."""
    rep = _job(tmp_path, xfer_us=20_000)
    c = rep.cross_rank
    assert c.gating_rank is None
    step = c.job.replayed_step_us
    assert all(p.job_cost_us_per_step < 0.01 * step for p in c.per_rank)
    assert all(p.transfer_us_per_step > 0.9 * 2 * 20_000 for p in c.per_rank)  # the time is transfer, not wait
    assert c.job.max_error_frac < 0.01


def test_the_identity_holds_across_clocks(tmp_path):
    """Two hosts whose clocks differ by 250 ms: the replayed steps match the measured ones on every rank."""
    rep = _job(tmp_path, world=4, gpus_per_host=2, slow_rank=1, extra_loader_us=5_000)
    assert rep.cross_rank.clock != "one clock"
    for p in rep.cross_rank.job.per_rank:
        assert p.replayed_us == pytest.approx(p.measured_us, rel=1e-3)


def _summary(f, p, d, dur, start_f, end_f, end_p, end_d):
    ev = lambda f_, p_, d_: {"f": f_, "p": p_, "d": d_}  # noqa: E731
    v = {
        "dur": dur,
        "coll": ev(f, p, d),
        "start": ev(start_f, [-1] * len(start_f), [0.0] * len(start_f)),
        "end": ev(end_f, end_p, end_d),
        "replayed_step_us": [],
    }
    return {"origin_us": 0.0, "variants": {"": v}}


def test_the_rule_on_hand_made_summaries():
    """Two ranks, two all-reduces. Rank 0 arrives at #0 at 10 by its own pace; rank 1 at 30. Transfer:
    the shortest duration, 5 (rank 1's; rank 0 waited 20 + 5). #0 ends at max(10, 30) + 5 = 35. At #1
    rank 0 arrives 2 after #0's end (37), rank 1 at its own pace 50: #1 ends at 50 + 5 = 55; each step
    ends 1 after #1: 56. Without rank 1, #0 ends at 10 + 5 = 15, #1 at 15 + 2 + 5 = 22, rank 0's step
    ends at 23."""
    s0 = _summary([10.0, 0.0], [-1, 0], [0.0, 2.0], [25.0, 18.0], [0.0], [0.0], [1], [1.0])
    s1 = _summary([30.0, 50.0], [-1, -1], [0.0, 0.0], [5.0, 5.0], [0.0], [0.0], [1], [1.0])
    m = Matched(ranks=[0, 1], members=[[0, 0], [1, 1]], names=["allreduce"] * 2, groups=[0, 0], notes=[])
    ji = job.JobInput(summaries={0: s0, 1: s1}, matched=m, offsets={})
    out = job.run(ji)
    assert out[0].tolist() == [56.0] and out[1].tolist() == [56.0]
    assert job.run(ji, without=frozenset({1}))[0].tolist() == [23.0]
    # a clock offset moves a rank's own times onto the common clock: rank 1 10 ahead arrives at 20, 40
    assert job.run(job.JobInput(summaries={0: s0, 1: s1}, matched=m, offsets={1: 10.0}))[0].tolist() == [46.0]


def test_collectives_that_wait_on_each_other_in_a_circle_are_refused():
    s0 = _summary([0.0, 0.0], [1, -1], [1.0, 0.0], [1.0, 1.0], [0.0], [0.0], [-1], [0.0])
    s1 = _summary([0.0, 0.0], [-1, 0], [0.0, 1.0], [1.0, 1.0], [0.0], [0.0], [-1], [0.0])
    m = Matched(ranks=[0, 1], members=[[0, 0], [1, 1]], names=["allreduce"] * 2, groups=[0, 0], notes=[])
    with pytest.raises(job.OrderError):
        job.run(job.JobInput(summaries={0: s0, 1: s1}, matched=m, offsets={}))


def test_the_summary_is_small_and_names_each_collective(tmp_path):
    """A few numbers per collective and step marker, whatever the trace's size."""
    import json

    from traceinspect.analyze import analyze
    from traceinspect.trace.model import load_trace
    from traceinspect.trace.ranks import rank_collectives

    p = write_job(tmp_path, world=2, slow_rank=1, extra_loader_us=5_000)[1]
    t = load_trace(str(p))
    rep = analyze(t)
    s = job.rank_summary(t, list(rep.findings))
    n = len(rank_collectives(t))
    assert n == 6 and set(s["variants"]) >= {"", "dataloader-stall"}
    for v in s["variants"].values():
        assert len(v["dur"]) == len(v["coll"]["f"]) == n and len(v["start"]["f"]) == len(t.steps)
    assert len(json.dumps(s)) < 4000
    assert np.all(np.array(s["variants"][""]["dur"]) >= JOB_XFER_US - 1e-6)


def test_whatif_on_a_folder_replays_the_job_with_a_fix_on_one_rank(tmp_path):
    """`whatif DIR --fix CAUSE@rankN` and api.whatif: the same number as the report's job prediction."""
    import clirun

    write_job(tmp_path, slow_rank=3, extra_loader_us=30_000)
    d = api.whatif(tmp_path, "dataloader-stall@rank3")
    assert d.replayed_step_us == pytest.approx(d.measured_step_us, rel=1e-3)
    assert d.replayed_step_us - d.predicted_step_us == pytest.approx(30_000, rel=0.10)
    by = {r.rank: r for r in d.per_rank}
    assert by[3].fixes == ["dataloader-stall"] and by[0].fixes == []
    rep = api.analyze(tmp_path)
    same = next(p for p in rep.cross_rank.job.predictions if p.fix == "dataloader-stall" and p.ranks == [3])
    assert d.predicted_step_us == pytest.approx(same.step_us)
    # a plain NAME on a folder fixes every rank; ranks where it did not fire say so
    every = api.whatif(tmp_path, "dataloader-stall")
    assert all(r.fixes == ["dataloader-stall"] for r in every.per_rank)
    assert any("rank 0: dataloader-stall did not fire" in n for n in every.notes)
    out = clirun.run(["whatif", tmp_path, "--fix", "dataloader-stall@rank3"])
    assert out.returncode == 0 and "What-if (job replay)" in out.stdout and "dataloader-stall" in out.stdout


@pytest.mark.parametrize(
    "fix,where,says",
    [
        ("dataloader-stall@rank9", "dir", "no rank 9 among the files"),
        ("dataloader-stall@node3", "dir", "@rankN"),
        ("dataloader-stall@rank3", "file", "names a rank of a run's folder"),
    ],
)
def test_whatif_refuses_a_rank_it_cannot_fix_in_one_line(tmp_path, fix, where, says):
    import clirun

    paths = write_job(tmp_path, world=2, slow_rank=1, extra_loader_us=5_000)
    out = clirun.run(["whatif", tmp_path if where == "dir" else paths[0], "--fix", fix])
    assert out.returncode == 2 and says in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_two_ranks_waiting_on_one_collective_is_not_a_circle():
    """Two communicators issued in a different order on different ranks: rank 0 runs c then y; ranks 1
    and 2 run y then c, and their c waits on their y. Resolving rank 0's c first meets y twice (through
    ranks 1 and 2): a shared dependency, not a circle. y ends at 5 + 1 = 6, c at max(0, 6 + 2) + 1 = 9."""
    first = _summary([0.0, 5.0], [-1, -1], [0.0, 0.0], [9.0, 1.0], [0.0], [0.0], [1], [0.0])
    later = _summary([5.0, 0.0], [-1, 0], [0.0, 2.0], [1.0, 1.0], [0.0], [0.0], [1], [0.0])
    m = Matched(ranks=[0, 1, 2], members=[[0, 1, 1], [1, 0, 0]], names=["allreduce"] * 2, groups=[0, 1], notes=[])
    out = job.run(job.JobInput(summaries={0: first, 1: later, 2: later}, matched=m, offsets={}))
    assert out[0].tolist() == [6.0] and out[1].tolist() == [9.0]
