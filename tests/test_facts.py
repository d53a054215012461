"""The derived-facts layer (traceinspect/facts): facts on builders, computed once per trace, one device
selection, and the explicit time claims resolved in one place with the run's configured thresholds."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from builders import TraceBuilder, build_launch_bound
from builders_host import build_fused_optimizer, build_unfused_optimizer
from traceinspect import config as C
from traceinspect.analyze import analyze
from traceinspect.detectors import ALL
from traceinspect.facts import claims, device, host, run
from traceinspect.trace import intervals as iv
from traceinspect.trace.model import load_trace


def _load(tmp_path, builder, name="t.json"):
    return load_trace(builder.write(tmp_path / name))


def test_primary_device_is_the_device_with_most_kernel_time_and_is_computed_once(tmp_path, monkeypatch):
    t = TraceBuilder()
    with t.step():
        t.op("aten::mm", kernels=[("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", 400.0)])
        t.kernel("vectorized_elementwise_kernel", 5.0, args={"device": 1})
        t.kernel("vectorized_elementwise_kernel", 5.0, args={"device": 1})
    trace = _load(tmp_path, t)
    k = device.primary_kernels(trace)
    assert len(trace.kernels) == 3 and len(k) == 1 and set(k["device"]) == {0}  # 400 us on 0 beats 10 us on 1
    assert device.primary_kernels(trace) is k  # computed once per trace (Trace.memo)
    m = device.primary_memcpy(trace)
    assert device.primary_memcpy(trace) is m and len(m) == 0


def test_one_selection_of_the_primary_device():
    """No detector filters a table by device itself: they read facts.device (the same device everywhere)."""
    pkg = Path(__file__).resolve().parents[1] / "traceinspect"
    rx = re.compile(r"""\[["']device["']\][^\n]*==""")
    hits = [
        f"{f.relative_to(pkg)}:{i}"
        for f in sorted((pkg / "detectors").glob("*.py")) + [pkg / "facts" / "efficiency.py"]
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if rx.search(line)
    ]
    assert hits == [], hits


def test_launch_rows_find_launch_calls_and_unnamed_cupti_launches(tmp_path):
    trace = _load(tmp_path, build_launch_bound(steps=2, kernels_per_step=10))
    rows = host.launch_rows(trace.runtime)
    assert len(rows) == 20 and set(rows["name"].astype(str)) <= host.LAUNCH_CALLS


@pytest.mark.parametrize(
    "value,want",
    [
        (7_000_000_000, 7_000_000_000),
        (7e9, 7_000_000_000),
        (125, 125),
        (True, None),
        (0, None),
        (-3, None),
        (1e20, None),
        ("7B", None),
        (None, None),
    ],
)
def test_one_num_parameters(tmp_path, value, want):
    t = build_launch_bound(steps=2, kernels_per_step=4)
    if value is not None:
        t.meta["traceinspect"] = {
            "schema_version": 1,
            "source": "loop",
            "framework": {},
            "config": {"num_parameters": value},
            "steps": [],
        }
    trace = _load(tmp_path, t)
    assert run.num_parameters(trace) == want


def test_every_detector_declares_what_it_claims_and_the_order_names_only_claimers():
    by_name = {d.name: d for d in ALL}
    for part, order in claims.ORDER.items():
        for name in order:
            assert part in by_name[name].claims_parts, (part, name)
        for name in order[:-1]:  # everyone but the last reserves what it takes first
            assert part in by_name[name].reserves, (part, name)
    for d in ALL:
        assert set(d.reserves) <= set(d.claims_parts), d.name


def test_an_undeclared_claim_is_refused(tmp_path):
    from traceinspect.detectors.base import Context
    from traceinspect.detectors.launch_bound import LaunchBound

    trace = _load(tmp_path, build_launch_bound(steps=2, kernels_per_step=4))
    with pytest.raises(ValueError, match="not declared"):
        LaunchBound().finding(
            Context.of(trace),
            title="x",
            time_lost_us=1.0,
            confidence="low",
            evidence=(),
            fix="",
            idle_claims={"idle_sync": (np.array([0.0]), np.array([1.0]))},
        )


def test_findings_never_claim_the_same_idle_time_twice(tmp_path):
    for i, b in enumerate((build_launch_bound(), build_unfused_optimizer())):
        rep = analyze(_load(tmp_path, b, f"{i}.json"))
        assert rep.account["overlap_us"] == pytest.approx(0.0, abs=1e-6)


def _claims(rep, name):
    f = next((f for f in rep.findings if f.name == name), None)
    return dict(f.idle_claims_us) if f is not None else {}


def test_launch_bound_threshold_decides_whether_host_bound_claims_the_launch_gaps(tmp_path):
    """host-bound takes the short launch gaps only when launch-bound does not report them, by launch-bound's
    configured threshold (it used to ask a default LaunchBound(), so --set launch-bound.min_idle_frac left
    those gaps unclaimed)."""
    trace = _load(tmp_path, build_launch_bound())
    rep = analyze(trace)
    assert _claims(rep, "launch-bound").get("idle_launch", 0) > 0
    assert _claims(rep, "host-bound").get("idle_launch", 0) == 0
    quiet = C.Config(options={"launch-bound": {"min_idle_frac": 0.99}, "host-bound": {"min_frac": 0.0}})
    rep = analyze(trace, config=quiet)
    assert not _claims(rep, "launch-bound")
    launch = _claims(rep, "host-bound").get("idle_launch", 0)
    assert launch > 0
    # the same idle time that launch-bound claimed by default
    assert launch == pytest.approx(_claims(analyze(trace), "launch-bound")["idle_launch"], rel=1e-9)
    assert _claims(analyze(trace), "host-bound").get("idle_launch", 0) == 0  # back to the defaults


def test_unfused_optimizer_threshold_decides_what_launch_bound_leaves_to_it(tmp_path):
    trace = _load(tmp_path, build_unfused_optimizer())
    st = trace.steps
    idle = iv.intersect(trace.timeline.sets["idle_launch"], iv.union(st["start_us"], st["end_us"]))
    claims.configure(trace)
    left = iv.total(claims.unclaimed(trace, "launch-bound", "idle_launch", idle))
    assert left < iv.total(idle)  # the optimizer windows are unfused-optimizer's
    claims.configure(trace, C.Config(options={"unfused-optimizer": {"min_kernels": 10**9}}).make)
    assert iv.total(claims.unclaimed(trace, "launch-bound", "idle_launch", idle)) == pytest.approx(iv.total(idle))
    claims.configure(trace)
    assert iv.total(claims.unclaimed(trace, "launch-bound", "idle_launch", idle)) == pytest.approx(left)


def test_reservations_are_computed_once_per_trace_and_settings(tmp_path, monkeypatch):
    from traceinspect.detectors import unfused_optimizer as U

    trace = _load(tmp_path, build_unfused_optimizer())
    calls = []
    real = U.unfused_windows
    monkeypatch.setattr(U, "unfused_windows", lambda tr, n=U.DEFAULT_MIN_KERNELS: calls.append(n) or real(tr, n))
    claims.configure(trace)
    a = claims.reserved(trace, "unfused-optimizer")
    assert claims.reserved(trace, "unfused-optimizer") is a and calls == [U.DEFAULT_MIN_KERNELS]
    claims.configure(trace, C.Config(options={"unfused-optimizer": {"min_kernels": 7}}).make)
    claims.reserved(trace, "unfused-optimizer")
    claims.reserved(trace, "unfused-optimizer")
    assert calls == [U.DEFAULT_MIN_KERNELS, 7]


def test_a_subclass_made_elsewhere_does_not_take_over_a_detectors_claims():
    from dataclasses import dataclass

    from traceinspect.detectors.launch_bound import LaunchBound

    @dataclass(frozen=True)
    class Quiet(LaunchBound):
        def reserved(self, trace):
            raise AssertionError("never asked")

    assert claims._CLASSES["launch-bound"] is LaunchBound


@pytest.mark.parametrize(
    "build,impl,n_kernels",
    [
        (lambda: build_unfused_optimizer(steps=2, params=20), "for-loop", 60),
        (lambda: build_fused_optimizer(steps=2), "fused", 4),
    ],
)
def test_optimizer_steps_one_row_per_step_with_its_kernels(tmp_path, build, impl, n_kernels):
    from traceinspect.facts.optimizer import optimizer_steps

    trace = _load(tmp_path, build())
    o = optimizer_steps(trace)
    assert len(o) == len(trace.steps) and set(o["impl"]) == {impl} and set(o["n_kernels"]) == {n_kernels}
    assert set(o["opt_class"]) == {"AdamW"} and optimizer_steps(trace) is o
