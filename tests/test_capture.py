"""traceinspect.capture: metadata schema, plain-loop capture, HF Trainer capture.

The first tests need neither torch nor transformers; the capture tests skip without them
(install: pip install torch==2.13.0 transformers accelerate)."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest

from traceinspect.capture import meta

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "cpu_train_loop.pt.trace.json.gz"


# ---------------------------------------------------------------------------
# schema helpers (no torch)
# ---------------------------------------------------------------------------


class _Exploding:
    """Every attribute read raises: a bad piece of config must never raise."""

    def __getattr__(self, name):
        raise RuntimeError(f"no {name}")


def test_config_readers_never_raise_and_fill_every_key():
    cfg = meta.merge_config(meta.config_from_training_args(_Exploding()), meta.config_from_model(_Exploding()))
    assert set(meta.CONFIG_KEYS) <= set(cfg)
    assert all(cfg[k] is None for k in meta.CONFIG_KEYS)


def test_normalize_config_coerces_and_keeps_extras():
    cfg = meta.normalize_config(
        {"per_device_train_batch_size": "8", "bf16": "true", "max_seq_length": 1.5, "optim": object, "my_key": {1, 2}}
    )
    assert cfg["per_device_train_batch_size"] == 8
    assert cfg["bf16"] is True
    assert cfg["max_seq_length"] is None
    assert isinstance(cfg["optim"], str)
    assert isinstance(cfg["my_key"], str)  # not JSON-able: kept as text
    json.dumps(cfg)


def test_build_metadata_has_the_schema_fields():
    m = meta.build_metadata(
        source="loop",
        config={"gradient_accumulation_steps": 4},
        steps=[{"step": 3, "batch_size": 2, "seq_len": 8, "real_tokens": 10, "padded_tokens": 16}],
        extra={"schema_version": 99, "lab": {"scenario": "x"}},
    )
    assert m["schema_version"] == 1 and m["source"] == "loop"
    assert set(m) >= {"framework", "device", "config", "steps", "lab"}
    assert "python" in m["framework"]
    assert set(m["device"]) >= {"type", "name", "count"}
    assert m["config"]["gradient_accumulation_steps"] == 4
    assert m["steps"][0]["real_tokens"] == 10
    json.loads(meta.dumps(m))


def test_combine_counts_sums_micro_batches():
    parts = [
        {"batch_size": 2, "seq_len": 8, "real_tokens": 9, "padded_tokens": 16},
        {"batch_size": 2, "seq_len": 5, "real_tokens": 7, "padded_tokens": 10},
    ]
    c = meta.combine_counts(parts)
    assert c == {"batch_size": 4, "seq_len": 8, "real_tokens": 16, "padded_tokens": 26, "micro_batches": 2}
    parts[1]["real_tokens"] = None
    assert meta.combine_counts(parts)["real_tokens"] is None
    assert meta.combine_counts([]) is None


def test_device_tensor_counts_are_resolved_later():
    torch = pytest.importorskip("torch")
    parts = [
        {"batch_size": 2, "seq_len": 4, "real_tokens": torch.tensor(5), "padded_tokens": 8},
        {"batch_size": 2, "seq_len": 4, "real_tokens": torch.tensor(6), "padded_tokens": 8},
    ]
    steps = [dict(step=7, **meta.combine_counts(parts))]
    resolved = meta.resolve_counts(steps)
    assert resolved[0]["real_tokens"] == 11 and isinstance(resolved[0]["real_tokens"], int)


def test_inject_and_read_metadata_roundtrip(tmp_path):
    path = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": [], "schemaVersion": 1}, fh)
    assert meta.read_metadata(path) is None and not meta.trace_has_metadata(path)
    meta.inject_metadata(path, {"schema_version": 1, "steps": []})
    assert meta.trace_has_metadata(path)
    assert meta.read_metadata(path) == {"schema_version": 1, "steps": []}


# ---------------------------------------------------------------------------
# helpers for the torch tests
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf():
    """transformers, imported once (its import is the slowest part of these tests)."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import transformers.models.llama.modeling_llama  # noqa: F401

    return transformers


def _tiny_llama(attn="sdpa"):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=64,
    )
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)


def _padded_batch(lengths, seq_len):
    import torch

    ids = torch.randint(3, 256, (len(lengths), seq_len))
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _load(path):
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _step_names(doc):
    return sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})


def _has_input_dims(doc):
    return any("Input Dims" in (e.get("args") or {}) for e in doc["traceEvents"])


# ---------------------------------------------------------------------------
# plain loop
# ---------------------------------------------------------------------------


def test_token_counts_of_a_batch():
    pytest.importorskip("torch")
    b = _padded_batch([3, 8, 1], 8)
    assert meta.token_counts(b) == {"batch_size": 3, "seq_len": 8, "real_tokens": 12, "padded_tokens": 24}
    import torch

    ids = torch.ones(1, 10, dtype=torch.long)
    assert meta.token_counts({"input_ids": ids})["real_tokens"] is None
    assert meta.token_counts({"input_ids": ids, "position_ids": ids})["real_tokens"] == 10
    assert meta.token_counts("not a batch") is None


def test_loop_capture_writes_trace_with_metadata(hf, tmp_path):
    model = _tiny_llama("sdpa")
    import torch

    from traceinspect.capture import profile_steps

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lengths = [[5, 16, 3, 9], [16, 16, 2, 1], [7, 7, 7, 7], [1, 2, 3, 4], [12, 16, 10, 14], [4, 4, 4, 4]]
    batches = [_padded_batch(ls, 16) for ls in lengths]
    config = {
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "dataloader_num_workers": 0,
        "optim": "adamw_torch",
        "my_extra": "kept",
    }
    with profile_steps(tmp_path, wait=1, warmup=1, active=3, model=model, config=config) as cap:
        for batch in cap.wrap(batches):
            model(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
    path = cap.trace_path
    assert path is not None and path.name.endswith(".pt.trace.json.gz") and path.parent == tmp_path
    doc = _load(path)
    m = doc["traceinspect"]
    assert m == cap.metadata
    assert m["schema_version"] == 1 and m["source"] == "loop"
    assert m["framework"]["torch"] == torch.__version__
    assert m["device"]["type"] == "cpu"
    c = m["config"]
    assert c["per_device_train_batch_size"] == 4 and c["gradient_accumulation_steps"] == 1
    assert c["dataloader_num_workers"] == 0 and c["optim"] == "adamw_torch"
    assert c["my_extra"] == "kept"
    assert c["model_type"] == "llama" and c["attn_implementation"] == "sdpa"
    assert c["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert set(meta.CONFIG_KEYS) <= set(c)
    # steps 2..4 are recorded (wait 1 + warmup 1); counts come from the batches fed
    assert [s["step"] for s in m["steps"]] == [2, 3, 4]
    for s in m["steps"]:
        b = batches[s["step"]]
        assert s["batch_size"] == 4 and s["seq_len"] == 16
        assert s["real_tokens"] == int(b["attention_mask"].sum())
        assert s["padded_tokens"] == b["attention_mask"].numel() == 64
    assert _step_names(doc) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert _has_input_dims(doc)


def test_loop_cut_short_still_writes_trace_with_metadata(tmp_path):
    torch = pytest.importorskip("torch")
    from traceinspect.capture import profile_steps

    lin = torch.nn.Linear(8, 8)
    with profile_steps(
        tmp_path, wait=0, warmup=1, active=5, model=lin, config={"per_device_train_batch_size": 2}
    ) as cap:
        for _ in range(3):  # window needs 6 steps; stop after 3
            x = torch.randn(2, 8)
            lin(x).sum().backward()
            cap.step(
                {
                    "input_ids": torch.zeros(2, 8, dtype=torch.long),
                    "attention_mask": torch.tensor([[1] * 8, [1] * 3 + [0] * 5]),
                }
            )
    m = meta.read_metadata(cap.trace_path)
    assert m is not None and m["config"]["per_device_train_batch_size"] == 2
    assert m["config"]["num_parameters"] == 72
    assert [(s["step"], s["real_tokens"], s["padded_tokens"]) for s in m["steps"]] == [(1, 11, 16), (2, 11, 16)]
    assert cap.done


# ---------------------------------------------------------------------------
# HF Trainer
# ---------------------------------------------------------------------------


def test_trainer_callback_writes_trace_with_metadata(hf, tmp_path):
    model = _tiny_llama("eager")
    pytest.importorskip("accelerate")
    import torch
    from transformers import Trainer, TrainingArguments

    from traceinspect.capture import TraceinspectCallback

    lengths = [3, 17, 5, 9, 12, 4, 20, 7, 6, 11, 8, 15, 2, 13, 19, 10, 14, 16]
    dataset = [{"input_ids": list(range(3, 3 + n))} for n in lengths]
    collated = []  # what the Trainer was fed, in order (num_workers=0: main process)

    def collate(features):
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros((len(features), longest), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, f in enumerate(features):
            ids[row, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
            mask[row, : len(f["input_ids"])] = 1
        collated.append(mask.clone())
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=4,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1000,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        learning_rate=1e-3,
        optim="adamw_torch",
        disable_tqdm=True,
    )
    cb = TraceinspectCallback(start_step=1, num_steps=2, config={"packing": False})
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate)
    cb.attach(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()

    path = cb.trace_path
    assert path is not None and path.parent == tmp_path / "traceinspect"
    assert path.name.endswith(".pt.trace.json.gz")
    doc = _load(path)
    m = doc["traceinspect"]
    assert m["schema_version"] == 1 and m["source"] == "hf_trainer"
    assert "transformers" in m["framework"] and "torch" in m["framework"]
    c = m["config"]
    assert c["per_device_train_batch_size"] == 2 and c["gradient_accumulation_steps"] == 2
    assert c["dataloader_num_workers"] == 0 and c["dataloader_pin_memory"] is False
    assert c["bf16"] is False and c["fp16"] is False and c["autocast_dtype"] is None
    assert c["optim"] == "adamw_torch" and c["gradient_checkpointing"] is False
    assert c["attn_implementation"] == "eager" and c["model_type"] == "llama"
    assert c["num_parameters"] == model.num_parameters()
    assert c["packing"] is False and c["group_by_length"] is False
    # optimizer steps 1 and 2, two micro-batches each: collator calls 2,3 and 4,5
    assert [s["step"] for s in m["steps"]] == [1, 2]
    for s in m["steps"]:
        masks = collated[2 * s["step"] : 2 * s["step"] + 2]
        assert s["global_step"] == s["step"] and s["micro_batches"] == 2
        assert s["batch_size"] == 4
        assert s["real_tokens"] == sum(int(mk.sum()) for mk in masks)
        assert s["padded_tokens"] == sum(mk.numel() for mk in masks)
        assert s["seq_len"] == max(mk.shape[1] for mk in masks)
    assert _step_names(doc) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert _has_input_dims(doc)


# ---------------------------------------------------------------------------
# the committed sample
# ---------------------------------------------------------------------------


def test_committed_cpu_sample_carries_metadata():
    if not SAMPLE.exists():
        pytest.skip("sample_traces/cpu_train_loop.pt.trace.json.gz not present")
    doc = _load(SAMPLE)
    m = doc["traceinspect"]
    assert m["schema_version"] == 1 and m["source"] == "loop"
    assert [s["step"] for s in m["steps"]] == [2, 3, 4]
    assert all(0 < s["real_tokens"] <= s["padded_tokens"] for s in m["steps"])
    assert _step_names(doc) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert _has_input_dims(doc)
    assert SAMPLE.stat().st_size < 1_000_000
