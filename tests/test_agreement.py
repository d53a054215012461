"""Detector and transformation agree on whether a cause's pattern is present (issue 26: "they share one
finder"), on builders with a known answer; tests/test_invariants.py checks the same on every real trace.
A cause reported, or declined below its threshold with its signature measured, is one its transformation
finds something to change for (and the replay's inputs change); a cause its detector did not find is one
the transformation leaves alone."""

import builders
import builders_host
import pytest

from traceinspect.analyze import analyze
from traceinspect.trace.model import load_trace
from traceinspect.whatif import engine as E
from traceinspect.whatif.hold import graph_of

BUILDERS = [
    pytest.param(
        builders.build_healthy,
        marks=pytest.mark.xfail(
            strict=True,
            reason="open (issue 26): host-bound declines 2 us of GPU idle that lies inside a cudaMemcpyAsync "
            "call's own time, which its transformation (host work in the gaps between calls) cannot move; "
            "the claim should leave out idle time inside a runtime call",
        ),
    ),
    builders.build_dataloader_stall,
    builders.build_launch_bound,
    builders_host.build_busy_short_kernels,
    builders_host.build_item_sync,
    builders_host.build_end_of_step_sync,
    builders_host.build_unfused_optimizer,
    builders_host.build_fused_optimizer,
    builders_host.build_host_bound,
    builders_host.build_launch_bound_eager_attention,
]


@pytest.mark.parametrize("make", BUILDERS, ids=lambda m: getattr(m, "__name__", "builder"))
def test_detector_and_transformation_agree(tmp_path, make):
    tr = load_trace(make().write(tmp_path / "t.pt.trace.json"))
    rep = analyze(tr)
    fired = {f.name for f in rep.findings}
    declined = {s.name for s in rep.skipped if s.checked}
    base = graph_of(tr)
    bad = []
    for name in E.transforms():
        a = E.apply(tr, rep.findings, (name,))
        model = a.models.get(name, "")
        seen = "nothing to change" not in model
        present = name in fired or name in declined
        changed = not E._same_replay_inputs(a.graph, base)
        if seen != present or (not seen and changed):
            state = "reported" if name in fired else "declined" if name in declined else "not found"
            bad.append(f"{name}: detector {state}, transformation {model!r}, graph changed: {changed}")
    assert not bad, bad


def test_a_declined_host_sync_is_replayed_on_top_of_the_fixes():
    """The DataLoader builder's syncs starve the GPU 3 us/step now (host-sync declines); once the stall is
    fixed the host runs ahead and each sync drains the queue: the re-diagnosis replays the declined
    cause's transformation (the same finder) and lists what it would save then."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        tr = load_trace(builders.build_dataloader_stall().write(Path(d) / "t.pt.trace.json"))
        rep = analyze(tr)
    assert any(s.name == "host-sync" and s.checked for s in rep.skipped)
    again = {r.fix: r for r in rep.verdict.rediagnosed}
    assert "host-sync" in again and again["host-sync"].saved_per_step_us > 0
    to = E.predict(tr, rep.findings, tuple(again["host-sync"].after) + ("host-sync",), with_path=False).median_us
    assert abs(to - again["host-sync"].to_us) <= 1e-6 * to
