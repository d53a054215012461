"""lab/scenarios.py with --tiny on the CPU: traces, metadata and the results table.

Skips without torch/transformers (install: pip install torch==2.13.0 transformers)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from traceinspect.capture import meta

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "lab" / "scenarios.py"


@pytest.fixture(scope="module")
def lab():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("traceinspect_lab_scenarios", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses need the module registered
    spec.loader.exec_module(mod)
    import transformers.models.llama.modeling_llama  # noqa: F401  (one-off import cost here)

    return mod


def _run(lab, out: Path, *names: str) -> list[dict]:
    argv = ["--out", str(out), "--tiny", "--device", "cpu", "--steps", "2"]
    for n in names:
        argv += ["--scenario", n]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert lab.main(argv) == 0
    return json.loads((out / "results.json").read_text())


def _check_row(lab, out: Path, row: dict) -> dict:
    flags, expected, _ = lab.SCENARIOS[row["scenario"]]
    assert row["expected_finding"] == expected
    assert expected is None or expected in lab.FINDING_NAMES
    assert row["mean_step_time_ms"] > 0 and row["timed_steps"] == 2
    trace = out / row["trace"]
    assert trace.exists() and trace.name.endswith(".pt.trace.json.gz")
    m = meta.read_metadata(trace)
    assert m is not None and m["schema_version"] == 1 and m["source"] == "loop"
    assert m["lab"]["scenario"] == row["scenario"] and m["lab"]["expected_finding"] == expected
    assert m["config"]["per_device_train_batch_size"] == row["micro_batch"]
    assert m["config"]["gradient_accumulation_steps"] == row["grad_accum"]
    assert m["config"]["model_type"] == "llama"
    assert len(m["steps"]) == 3
    return m


def test_padded_vs_packed(lab, tmp_path):
    rows = _run(lab, tmp_path, "padded", "packed")
    assert [r["scenario"] for r in rows] == ["padded", "packed"]
    by = {r["scenario"]: _check_row(lab, tmp_path, r) for r in rows}
    pad_steps, packed_steps = by["padded"]["steps"], by["packed"]["steps"]
    share = 1 - sum(s["real_tokens"] for s in pad_steps) / sum(s["padded_tokens"] for s in pad_steps)
    assert share > 0.2, pad_steps
    assert all(s["real_tokens"] == s["padded_tokens"] for s in packed_steps)
    assert by["padded"]["config"]["packing"] is False and by["packed"]["config"]["packing"] is True
    assert (tmp_path / "results.md").read_text().count("| padded |") == 1


def test_dataloader_slow_merges_into_existing_results(lab, tmp_path):
    old = {
        "scenario": "healthy",
        "expected_finding": None,
        "device": "cuda",
        "micro_batch": 8,
        "grad_accum": 1,
        "mean_step_time_ms": 1.0,
        "padding_share": 0.0,
        "real_tokens_per_s": 1.0,
        "trace": "healthy/x.pt.trace.json.gz",
    }
    (tmp_path / "results.json").write_text(json.dumps([old]))
    rows = _run(lab, tmp_path, "dataloader-slow")
    assert [r["scenario"] for r in rows] == ["dataloader-slow", "healthy"]
    assert rows[1] == old
    m = _check_row(lab, tmp_path, rows[0])
    assert m["config"]["dataloader_num_workers"] == 0
    assert m["config"]["dataloader_pin_memory"] is False
    assert m["lab"]["flags"]["loader"] == "slow"


def test_cli_lists_scenarios_and_rejects_unknown(lab):
    pytest.importorskip("torch")
    ok = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True)
    assert ok.returncode == 0
    for name in lab.SCENARIOS:
        assert name in ok.stdout
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--scenario", "nope", "--out", "x"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "unknown scenario" in bad.stderr
