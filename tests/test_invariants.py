"""Consistency invariants over every real trace in ../shared (issue 26 item 6): what one report states
twice, or what the replay and the report state about the same run, must agree. Each check is derived from
the report's own numbers (or one replay of the same graph), never read off a trace; a violation is a bug,
not a tolerance to widen. The tolerances below are the replay's own noise: float rounding of microsecond
timestamps summed along thousands of edges (docs/whatif.md, Identity)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from test_whatif import _gpu_traces
from traceinspect.analyze import analyze
from traceinspect.causes import ALONE_LABEL
from traceinspect.whatif import engine as E
from traceinspect.whatif.batch import batch_plan

NOISE = 1e-3  # relative: the identity replay's largest per-step error on the shared traces is 0.04%
_ABOUT = re.compile(r"about (\d+(?:\.\d+)?)x")


KNOWN_OPEN: list[str] = []  # disagreements of an open, named bug (printed by the test)


def _comm_on_compute_streams(tr) -> bool:
    """Every collective kernel runs on a stream that also runs compute kernels."""
    from traceinspect.trace.timeline import is_comm_kernel

    k = tr.kernels
    comm = np.asarray(is_comm_kernel(k["name"]), dtype=bool)
    return bool(comm.any()) and set(k["stream"].to_numpy()[comm]) <= set(k["stream"].to_numpy()[~comm])


def _violations(tr) -> tuple[list[str], int]:
    rep = analyze(tr)
    d = rep.to_dict()
    v = d["verdict"]
    out, checks = [], 0
    meas = tr.steps["dur_us"].to_numpy(float)
    median = float(np.median(meas))

    def check(ok: bool, what: str):
        nonlocal checks
        checks += 1
        if not ok:
            out.append(what)

    # 1. the unmodified graph predicts the measured steps (the floor never holds it)
    ident = E.predict(tr, rep.findings, (), with_path=False)
    check(
        np.allclose(ident.step_us, meas, rtol=NOISE, atol=1.0), f"identity {ident.step_us[:4]} != measured {meas[:4]}"
    )
    # 2. no single fix makes the run longer: the window's total, and its median step (the median of the
    # per-step savings, Prediction.median_us: a fix that moves GPU work between adjacent steps of an
    # uneven window does not read as a longer step)
    total = float(ident.step_us.sum())
    for f in rep.findings:
        if f.name not in E.transforms():
            continue
        p = E.predict(tr, rep.findings, (f.name,), with_path=False)
        check(float(p.step_us.sum()) <= total * (1 + NOISE) + 1.0, f"{f.name} lengthens the window")
        check(p.median_us <= median * (1 + NOISE), f"{f.name} lengthens the median step")
        # the floor is the run with no host time: no fix's prediction sums below it
        check(float(p.step_us.sum()) >= float(p.floor_us.sum()) * (1 - NOISE), f"{f.name} below its own floor")
    saved_alone = v.get("whatif", {}).get("saved_alone_per_step_us") or {}
    for name, saved in saved_alone.items():
        check(saved >= -NOISE * median, f"report: {name} alone saves {saved:.0f} us (< 0)")
    # the finding's own "with this fix alone" number is its replay, the one the verdict's costs read
    for f in rep.findings:
        said = [e.value for e in f.evidence if e.label == ALONE_LABEL]
        if f.name in E.transforms():
            check(len(said) == 1, f"{f.name}: {len(said)} 'fix alone' evidence rows")
            replayed = E.predict(tr, rep.findings, (f.name,), with_path=False).median_us
            check(bool(said) and abs(said[0] * 1e3 - replayed) <= 1.0, f"{f.name}: says {said}, replays {replayed:.0f}")
            if f.name in saved_alone:
                check(abs(median - saved_alone[f.name] - replayed) <= 1e-6, f"{f.name}: verdict's cost not its replay")
    # 3. speed of light <= expected step <= measured; the fix path never lengthens a step
    exp = v.get("expected_step_us")
    if exp is not None:
        check(exp <= median * (1 + NOISE), f"expected step {exp:.0f} above measured {median:.0f}")
        sol = (v.get("whatif", {}).get("speed_of_light") or {}).get("sol_us")
        if sol:
            check(exp >= sol * (1 - NOISE), f"expected step {exp:.0f} below the speed of light {sol:.0f}")
    # the floor is never below what the report's own efficiency rows imply, nor above the measured step
    sol_ = v.get("whatif", {}).get("speed_of_light") or {}
    if sol_.get("sol_us"):
        rows = (d.get("efficiency") or {}).get("rows") or []
        implied = sum(
            min(r["roofline_us_per_step"], r["gpu_us_per_step"]) for r in rows if r.get("roofline_us_per_step")
        )
        check(
            sol_["sol_us"] >= implied * sol_.get("overlap", 1.0) * (1 - 1e-6),
            f"speed of light {sol_['sol_us']:.0f} below its efficiency rows' floor {implied:.0f}",
        )
        check(sol_["sol_us"] <= median * (1 + NOISE), f"speed of light {sol_['sol_us']:.0f} above the median step")
    for s in v.get("path", []):
        check(s["to_us"] <= s["from_us"] * (1 + NOISE), f"path: {s['fix']} {s['from_us']:.0f} -> {s['to_us']:.0f}")
    # the re-diagnosis of the predicted run is the replay of each listed fix on top of the path's
    for r in v.get("rediagnosed", []):
        to = E.predict(tr, rep.findings, tuple(r["after"]) + (r["fix"],), with_path=False).median_us
        check(
            abs(to - r["to_us"]) <= 1e-6 * max(to, 1.0),
            f"rediagnosed {r['fix']}: says {r['to_us']:.0f}, replays {to:.0f}",
        )
        check(r["share_of_predicted"] >= 0.03, f"rediagnosed {r['fix']} listed at {r['share_of_predicted']:.3f}")
        check(r["fix"] in v.get("next_bottlenecks", []), f"rediagnosed {r['fix']} not among next_bottlenecks")
    # detector and transformation agree on whether the pattern is present (issue 26: "they share one
    # finder"): a cause reported, or declined below its threshold with its signature measured, is one its
    # transformation finds something to change for; a cause whose detector found nothing is one it leaves
    # alone. (The transformation may still save nothing: a DataLoader span already at its prefetched cost.)
    fired = {f.name for f in rep.findings}
    declined = {s.name for s in rep.skipped if s.checked}
    for name in E.transforms():
        model = E.apply(tr, rep.findings, (name,)).models.get(name, "")
        seen = "nothing to change" not in model
        state = "reported" if name in fired else "declined" if name in declined else "not found"
        if name == "exposed-communication" and state != "not found" and not seen and _comm_on_compute_streams(tr):
            # open (issue 26): collectives serialised with compute on one stream (tensor-parallel
            # all-reduces) are counted exposed, but the overlap transformation only relaxes waits across
            # streams; which of the two is right there is not settled. Counted, printed, not hidden.
            KNOWN_OPEN.append(f"{name}: detector {state}, transformation: {model!r}")
            continue
        check(seen == (state != "not found"), f"{name}: detector {state}, transformation: {model!r}")
    # 4. the verdict names the top-ranked cause
    active = rep.findings
    if v.get("top") and active:
        check(v["top"] == active[0].name, f"verdict top {v['top']} != ranked first {active[0].name}")
    # 5. one batch factor per report: the launch-bound fix, the memory section and the replay's plan
    lb = next((f for f in rep.findings if f.name == "launch-bound"), None)
    if lb is not None:
        k = batch_plan(tr).factor
        said = {float(x) for x in _ABOUT.findall(" ".join(filter(None, [lb.fix or "", lb.title or ""])))}
        check(said <= {float(k)}, f"launch-bound says {sorted(said)}x, the plan {k}x")
        fit = (d.get("memory") or {}).get("batch_fit") or {}
        if fit.get("recommended_by"):
            check(fit.get("factor") == k, f"memory section recommends {fit.get('factor')}x, the plan {k}x")
    return out, checks


def test_invariants_on_every_real_trace(shared_dir):
    bad, n_traces, n_checks = {}, 0, 0
    for p, tr in _gpu_traces(shared_dir):
        out, checks = _violations(tr)
        n_traces += 1
        n_checks += checks
        if out:
            bad[str(p.relative_to(shared_dir))] = out
    if not n_traces:
        pytest.skip("no GPU trace in ../shared")
    print(f"invariants: {n_checks} checks over {n_traces} traces; open (named) disagreements: {KNOWN_OPEN}")
    assert not bad, bad
