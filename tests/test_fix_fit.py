"""Fix texts fit the run (issue 32 item 4): the model family the trace shows picks the input-preprocessing
advice, the optimizer named is the one the trace shows stepped, and a number in a fix is the run's own or
labelled as an example. On builders, then on the shared traces that show it (skipped where absent)."""

from __future__ import annotations

import re

import pytest

import builders
import builders_fit as bf
from conftest import SHARED
from traceinspect.analyze import analyze
from traceinspect.detectors.dataloader_stall import DataloaderStall
from traceinspect.detectors.host_bound import HostBound
from traceinspect.detectors.launch_bound import LaunchBound
from traceinspect.facts.model_family import model_family
from traceinspect.facts.optimizer import stepped_optimizer
from traceinspect.trace.model import load_trace

# "1 x 16", "8 x 2": a batch x accumulation pair, which only the capture's run configuration can give
PAIR = re.compile(r"\b\d+ x \d+\b")


def _load(b, tmp_path, name="t.json"):
    return load_trace(b.write(tmp_path / name))


def _finding(trace, det):
    found = [f for f in analyze(trace, detectors=[det], strict=True).findings if f.name == det.name]
    assert found, f"{det.name} did not fire"
    return found[0]


# --- the model family ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["vision", "language", "recommender"])
def test_model_family_from_ops(family, tmp_path):
    tr = _load(bf.build_dataloader_stall_family(family), tmp_path)
    mf = model_family(tr)
    assert (mf.family, mf.source) == (family, "ops") and mf.signals


def test_model_family_unknown_when_the_ops_do_not_say(tmp_path):
    # elementwise adds only; and linear + attention with no token lookup (could be any transformer)
    assert model_family(_load(builders.build_launch_bound(), tmp_path, "a.json")).family == "unknown"
    assert model_family(_load(builders.build_dataloader_stall(), tmp_path, "b.json")).family == "unknown"


def test_model_family_from_run_configuration_first(tmp_path):
    b = bf.build_dataloader_stall_family("language")
    b.meta["traceinspect"] = {"schema_version": 1, "source": "loop", "config": {"model_type": "vit"}, "steps": []}
    mf = model_family(_load(b, tmp_path))
    assert (mf.family, mf.source) == ("vision", "run configuration")


def test_model_family_from_python_modules(tmp_path):
    b = bf.build_host_bound_preprocess("language", "transformers/models/llama/modeling_llama.py(300): forward")
    assert model_family(_load(b, tmp_path)).family == "language"


# --- dataloader-stall: preprocessing advice by family ------------------------------------------------------


def test_dataloader_fix_for_a_vision_model_does_not_tokenize(tmp_path):
    f = _finding(_load(bf.build_dataloader_stall_vision(), tmp_path), DataloaderStall)
    assert "tokeniz" not in f.fix.lower()
    assert "image decoding" in f.fix


def test_dataloader_fix_for_a_language_model_pre_tokenizes(tmp_path):
    f = _finding(_load(bf.build_dataloader_stall_language(), tmp_path), DataloaderStall)
    assert "pre-tokenize" in f.fix


@pytest.mark.parametrize(
    "make", [bf.build_dataloader_stall_recommender, builders.build_dataloader_stall], ids=["recommender", "unknown"]
)
def test_dataloader_fix_without_a_language_model_does_not_tokenize(make, tmp_path):
    f = _finding(_load(make(), tmp_path), DataloaderStall)
    assert "tokeniz" not in f.fix.lower()


def test_dataloader_fix_labels_the_worker_count_as_an_example(tmp_path):
    f = _finding(_load(bf.build_dataloader_stall_vision(), tmp_path), DataloaderStall)
    assert "for example DataLoader(num_workers=4" in f.fix


# --- host-bound: what the preprocessing is --------------------------------------------------------------


def test_host_bound_preprocessing_names_image_transforms_not_tokenization(tmp_path):
    b = bf.build_host_bound_preprocess("vision", "torchvision/transforms/transforms.py(354): forward")
    f = _finding(_load(b, tmp_path), HostBound)
    assert "image decoding" in f.title + f.fix
    assert "tokeniz" not in (f.title + f.fix).lower()


def test_host_bound_preprocessing_names_tokenization(tmp_path):
    b = bf.build_host_bound_preprocess("language", "transformers/tokenization_utils_base.py(2800): __call__")
    f = _finding(_load(b, tmp_path), HostBound)
    assert "tokenization" in f.fix and "image" not in f.fix


# --- launch-bound: no invented accumulation, the optimizer stepped ---------------------------------------


def test_launch_bound_without_run_configuration_invents_no_accumulation(tmp_path):
    f = _finding(_load(builders.build_launch_bound(), tmp_path), LaunchBound)
    assert not PAIR.search(f.fix), f.fix
    f = _finding(_load(bf.build_launch_bound_stepping("SGD"), tmp_path, "s.json"), LaunchBound)
    assert not PAIR.search(f.fix), f.fix


@pytest.mark.parametrize("cls", ["SGD", "Adagrad"])
def test_launch_bound_names_the_optimizer_the_trace_steps(cls, tmp_path):
    tr = _load(bf.build_launch_bound_stepping(cls), tmp_path)
    assert stepped_optimizer(tr) == (cls, "for-loop")
    f = _finding(tr, LaunchBound)
    assert "AdamW" not in f.fix, f.fix
    assert f"your optimizer ({cls})" in f.fix


def test_launch_bound_asks_no_fusion_of_a_fused_optimizer(tmp_path):
    tr = _load(bf.build_launch_bound_stepping("AdamW", fused=True), tmp_path)
    assert stepped_optimizer(tr) == ("AdamW", "fused")
    f = _finding(tr, LaunchBound)
    assert "optimizer" not in f.fix, f.fix


def test_launch_bound_names_no_optimizer_when_none_is_recorded(tmp_path):
    f = _finding(_load(builders.build_launch_bound(), tmp_path), LaunchBound)
    assert "AdamW" not in f.fix and "optimizer" not in f.fix


# --- the shared traces ----------------------------------------------------------------------------------

RESNET50 = "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0"
DLRM = "facebookresearch__param/et_replay/tests/data/dlrm_kineto"


def _shared(shared_dir, rel: str) -> list:
    d = shared_dir / rel
    files = sorted(p for p in d.glob("*") if p.name.endswith((".json", ".json.gz"))) if d.is_dir() else []
    if not files:
        pytest.skip(f"{rel} is not present under {SHARED}")
    return files


def test_shared_resnet50_dataloader_fix_does_not_tokenize(shared_dir):
    for p in _shared(shared_dir, RESNET50):
        tr = load_trace(p)
        assert model_family(tr).family == "vision", p.name
        rep = analyze(tr)
        (f,) = [f for f in rep.findings if f.name == "dataloader-stall"]
        assert "tokeniz" not in f.fix.lower(), (p.name, f.fix)
        assert "image decoding" in f.fix


def test_shared_dlrm_launch_bound_fix_invents_no_accumulation_or_adamw(shared_dir):
    checked = 0
    for p in _shared(shared_dir, DLRM):
        tr = load_trace(p)
        assert model_family(tr).family == "recommender", p.name
        rep = analyze(tr)
        for f in rep.findings:
            if f.name == "dataloader-stall":
                assert "tokeniz" not in f.fix.lower(), (p.name, f.fix)
            if f.name != "launch-bound":
                continue
            checked += 1
            assert not PAIR.search(f.fix), (p.name, f.fix)  # the trace records no batch or accumulation
            opt = stepped_optimizer(tr)
            if opt is None or "AdamW" not in opt[0]:
                assert "AdamW" not in f.fix, (p.name, f.fix)
            if opt is not None and opt[1] not in ("fused", "cpu"):
                assert f"your optimizer ({opt[0]})" in f.fix, (p.name, f.fix)
    assert checked, "launch-bound fired on no DLRM rank"
