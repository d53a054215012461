"""The analyzer reads traceinspect.capture metadata: the fix names the setting and its current value,
the report shows the configuration, and bad metadata never breaks the analysis."""

import json

import pytest

from builders import build_dataloader_stall
from traceinspect.analyze import analyze
from traceinspect.render import RENDERERS
from traceinspect.trace.model import load_trace

META = {
    "schema_version": 1,
    "source": "hf_trainer",
    "framework": {"torch": "2.13.0", "transformers": "5.24.0"},
    "config": {
        "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 2,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": False,
        "attn_implementation": "sdpa",
    },
    "steps": [],
}


def _report(tmp_path, meta):
    b = build_dataloader_stall()
    b.meta["traceinspect"] = meta
    return analyze(load_trace(b.write(tmp_path / "t.json")))


def test_fix_names_the_hf_setting_and_its_current_value(tmp_path):
    rep = _report(tmp_path, META)
    f = next(f for f in rep.findings if f.name == "dataloader-stall")
    assert "dataloader_num_workers=4" in f.fix and "now: dataloader_num_workers=0" in f.fix
    assert rep.trace["run_config"]["per_device_train_batch_size"] == 8
    text = RENDERERS["text"][0](rep)
    assert "Run configuration" in text and "gradient_accumulation_steps: 2" in text
    md = RENDERERS["md"][0](rep)
    assert "Run configuration" in md


@pytest.mark.parametrize(
    "bad",
    [
        "not an object",
        [1, 2],
        {"config": "oops", "steps": "nope"},
        {"config": {"dataloader_num_workers": "many"}, "source": 7},
    ],
)
def test_bad_metadata_never_breaks_analysis(tmp_path, bad):
    rep = _report(tmp_path, bad)
    assert not rep.failures, rep.failures
    assert any(f.name == "dataloader-stall" for f in rep.findings)
    json.dumps(rep.to_dict(), default=str)
