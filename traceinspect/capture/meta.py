"""The ``traceinspect`` metadata block embedded in captured traces (schema version 1).

Everything here is best effort: each field is read inside its own try/except and is
``None`` (JSON null) when it cannot be known. Nothing in this module raises on bad input,
and it does not import torch at module import time (torch is an optional extra).

The schema is written down in docs/capture.md. The analyzer reads the top-level
``"traceinspect"`` key of a Kineto Chrome-trace JSON.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import os
import platform
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

SCHEMA_VERSION = 1
METADATA_KEY = "traceinspect"

#: Config keys of schema version 1 and the type each value is coerced to.
CONFIG_KEYS: dict[str, type] = {
    "per_device_train_batch_size": int,
    "gradient_accumulation_steps": int,
    "dataloader_num_workers": int,
    "dataloader_pin_memory": bool,
    "bf16": bool,
    "fp16": bool,
    "tf32": bool,
    "autocast_dtype": str,
    "attn_implementation": str,
    "packing": bool,
    "padding_free": bool,
    "group_by_length": bool,
    "max_seq_length": int,
    "optim": str,
    "gradient_checkpointing": bool,
    "torch_compile": bool,
    "model_type": str,
    "num_parameters": int,
}

#: Keys of one entry of ``"steps"``; extra optional keys: ``micro_batches``, ``global_step``.
STEP_KEYS = ("step", "batch_size", "seq_len", "real_tokens", "padded_tokens")

_FRAMEWORKS = ("torch", "transformers", "trl", "accelerate")


def _try(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        return fn()
    except Exception:
        return default


def _torch():
    """The torch module if it is importable, else None."""
    mod = sys.modules.get("torch")
    if mod is not None:
        return mod
    try:
        import torch  # noqa: PLC0415

        return torch
    except Exception:
        return None


def _coerce(value: Any, kind: type) -> Any:
    if value is None:
        return None
    try:
        if kind is bool:
            if isinstance(value, str):
                low = value.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off", ""):
                    return False
                return None
            return bool(value)
        if kind is int:
            if isinstance(value, bool):
                return int(value)
            if hasattr(value, "item"):  # 0-d tensor / numpy scalar
                value = value.item()
            if isinstance(value, float) and not value.is_integer():
                return None
            return int(value)
        if kind is str:
            # Enums (e.g. transformers.OptimizerNames) carry their text in .value
            inner = getattr(value, "value", value)
            text = str(inner)
            if text.startswith("torch."):  # torch.bfloat16 -> "bfloat16"
                text = text[len("torch.") :]
            return text
    except Exception:
        return None
    return value


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except Exception:
        return _try(lambda: str(value))


def normalize_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """All schema config keys (coerced, null when unknown), plus any extra keys given."""
    out: dict[str, Any] = {k: None for k in CONFIG_KEYS}
    if not config:
        return out
    items = _try(lambda: list(config.items()), [])
    for key, value in items:
        key = _try(lambda: str(key))
        if key is None:
            continue
        if key in CONFIG_KEYS:
            out[key] = _coerce(value, CONFIG_KEYS[key])
        else:
            out[key] = _jsonable(value)
    return out


def merge_config(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Later layers win, except that a None value never overwrites a known one."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if not layer:
            continue
        for key, value in _try(lambda: list(layer.items()), []):
            if value is None and merged.get(key) is not None:
                continue
            merged[key] = value
    return normalize_config(merged)


# ---------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------


def framework_versions() -> dict[str, str]:
    """Installed versions of torch/transformers/trl/accelerate (absent ones omitted) and python."""
    out: dict[str, str] = {}
    for name in _FRAMEWORKS:
        mod = sys.modules.get(name)
        version = getattr(mod, "__version__", None) if mod is not None else None
        if version is None:
            version = _try(lambda: importlib.metadata.version(name))
        if version:
            out[name] = str(version)
    out["python"] = platform.python_version()
    return out


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except Exception:
        pass
    return _try(platform.processor) or _try(platform.machine) or None


def device_info(device: Any = None) -> dict[str, Any]:
    """{"type", "name", "count"} for the device the run uses (cuda when available by default)."""
    torch = _torch()
    dev_type = None
    index = 0
    if device is not None:
        dev_type = _try(lambda: device.type) or _try(lambda: str(device).split(":")[0])
        index = _try(lambda: device.index) or _try(lambda: int(str(device).split(":")[1])) or 0
    if dev_type is None:
        dev_type = "cuda" if torch is not None and _try(torch.cuda.is_available, False) else "cpu"
    info: dict[str, Any] = {"type": dev_type, "name": None, "count": None}
    if dev_type == "cuda" and torch is not None:
        info["name"] = _try(lambda: torch.cuda.get_device_name(index))
        info["count"] = _try(torch.cuda.device_count)
    elif dev_type == "cpu":
        info["name"] = _cpu_name()
        info["count"] = 1
        info["cpu_count"] = _try(os.cpu_count)
    else:
        info["count"] = 1
    return info


def torch_state() -> dict[str, Any]:
    """TF32 / matmul precision flags and autocast state as visible right now."""
    torch = _torch()
    if torch is None:
        return {}
    out: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["cuda_matmul_allow_tf32"] = _try(lambda: bool(torch.backends.cuda.matmul.allow_tf32))
        out["cudnn_allow_tf32"] = _try(lambda: bool(torch.backends.cudnn.allow_tf32))
        out["float32_matmul_precision"] = _try(lambda: str(torch.get_float32_matmul_precision()))
        out["fp32_precision"] = _try(lambda: str(torch.backends.fp32_precision))
        out["cuda_matmul_fp32_precision"] = _try(lambda: str(torch.backends.cuda.matmul.fp32_precision))
        for dev in ("cuda", "cpu"):
            enabled = _try(lambda: bool(torch.is_autocast_enabled(dev)))
            out[f"autocast_{dev}_enabled"] = enabled
            out[f"autocast_{dev}_dtype"] = (
                _try(lambda: _coerce(torch.get_autocast_dtype(dev), str)) if enabled else None
            )
    out["tf32_effective"] = _tf32_effective(out)
    return out


def _tf32_effective(state: Mapping[str, Any]) -> bool | None:
    """Would an fp32 CUDA matmul use TF32 tensor cores under these flags?"""
    flags = [
        state.get("cuda_matmul_allow_tf32"),
        state.get("float32_matmul_precision"),
        state.get("cuda_matmul_fp32_precision"),
        state.get("fp32_precision"),
    ]
    if all(f is None for f in flags):
        return None
    if state.get("cuda_matmul_allow_tf32") is True:
        return True
    if state.get("float32_matmul_precision") in ("high", "medium"):
        return True
    if state.get("cuda_matmul_fp32_precision") == "tf32":
        return True
    if state.get("cuda_matmul_fp32_precision") in (None, "none") and state.get("fp32_precision") == "tf32":
        return True
    return False


# ---------------------------------------------------------------------------
# configuration readers
# ---------------------------------------------------------------------------


def _unwrap_model(model: Any) -> Any:
    seen = 0
    while seen < 5:
        inner = getattr(model, "_orig_mod", None) or getattr(model, "module", None)
        if inner is None or inner is model:
            break
        model = inner
        seen += 1
    return model


def config_from_model(model: Any) -> dict[str, Any]:
    """model_type, attn_implementation, num_parameters, gradient_checkpointing, torch_compile."""
    if model is None:
        return {}
    out: dict[str, Any] = {}
    out["torch_compile"] = _try(lambda: hasattr(model, "_orig_mod"))
    base = _try(lambda: _unwrap_model(model), model)
    cfg = _try(lambda: getattr(base, "config", None))
    out["model_type"] = _try(lambda: cfg.model_type) if cfg is not None else None
    attn = None
    if cfg is not None:
        attn = _try(lambda: cfg._attn_implementation) or _try(lambda: cfg.attn_implementation)
    out["attn_implementation"] = attn
    num = _try(lambda: int(base.num_parameters()))
    if num is None:
        num = _try(lambda: int(sum(p.numel() for p in base.parameters())))
    out["num_parameters"] = num
    out["num_trainable_parameters"] = _try(lambda: int(sum(p.numel() for p in base.parameters() if p.requires_grad)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers 5 deprecates is_gradient_checkpointing
        gc = _try(lambda: bool(base.is_activation_checkpointing))
        if gc is None:
            gc = _try(lambda: bool(base.is_gradient_checkpointing))
    out["gradient_checkpointing"] = gc
    return {k: v for k, v in out.items() if v is not None}


def config_from_training_args(args: Any) -> dict[str, Any]:
    """Read a transformers ``TrainingArguments`` (or TRL ``SFTConfig``), one field at a time."""
    if args is None:
        return {}
    out: dict[str, Any] = {}
    for key in (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "bf16",
        "fp16",
        "tf32",
        "gradient_checkpointing",
        "torch_compile",
        "packing",
        "padding_free",
    ):
        out[key] = _try(lambda: getattr(args, key))
    out["optim"] = _try(lambda: _coerce(args.optim, str))
    # transformers < 5: group_by_length; >= 5: train_sampling_strategy == "group_by_length"
    gbl = _try(lambda: args.group_by_length)
    strategy = _try(lambda: args.train_sampling_strategy)
    if gbl is None and strategy is not None:
        gbl = _try(lambda: _coerce(strategy, str) == "group_by_length")
    out["group_by_length"] = gbl
    if strategy is not None:
        out["train_sampling_strategy"] = _try(lambda: _coerce(strategy, str))
    max_len = _try(lambda: args.max_seq_length)
    if max_len is None:
        max_len = _try(lambda: args.max_length)
    out["max_seq_length"] = max_len
    bf16 = _try(lambda: bool(args.bf16))
    fp16 = _try(lambda: bool(args.fp16))
    out["autocast_dtype"] = "bfloat16" if bf16 else ("float16" if fp16 else None)
    out["dataloader_persistent_workers"] = _try(lambda: args.dataloader_persistent_workers)
    out["dataloader_prefetch_factor"] = _try(lambda: args.dataloader_prefetch_factor)
    return out


def effective_tf32(explicit: Any, device: Mapping[str, Any], state: Mapping[str, Any]) -> bool | None:
    """The ``tf32`` config value: the explicit setting if any, else the torch flags on CUDA."""
    if explicit is not None:
        return _coerce(explicit, bool)
    if device.get("type") == "cuda":
        return state.get("tf32_effective")
    return None


# ---------------------------------------------------------------------------
# per-step token counts
# ---------------------------------------------------------------------------


def _get(batch: Any, key: str) -> Any:
    try:
        if isinstance(batch, Mapping) or hasattr(batch, "keys"):
            return batch[key] if key in batch else None
    except Exception:
        return None
    return _try(lambda: getattr(batch, key))


def _shape(t: Any) -> tuple[int, ...] | None:
    shape = _try(lambda: tuple(int(s) for s in t.shape))
    return shape


def token_counts(batch: Any) -> dict[str, Any] | None:
    """batch_size, seq_len, real_tokens, padded_tokens of one (micro-)batch, or None.

    * ``attention_mask`` (2-D) present: real = mask.sum(), padded = mask.numel().
    * no mask but ``input_ids``: padded = numel; real = numel when the batch is padding-free
      (carries ``position_ids``/``cu_seq_lens_q``/``seq_lengths``), else None (unknown).
    * a bare 2-D tensor is read as input_ids.
    ``real_tokens`` may be a 0-d device tensor for CUDA masks (resolved later, to avoid a sync
    inside the profiled step); see ``resolve_counts``.
    """
    try:
        mask = _get(batch, "attention_mask")
        ids = _get(batch, "input_ids")
        if ids is None and mask is None and _shape(batch) is not None:
            ids = batch
        mask_shape = _shape(mask) if mask is not None else None
        if mask_shape is not None and len(mask_shape) == 2:
            bs, seq = mask_shape
            padded = bs * seq
            if getattr(getattr(mask, "device", None), "type", "cpu") == "cpu":
                real = int(mask.sum().item())
            else:
                real = mask.sum()  # stays on device until resolve_counts()
            return {"batch_size": bs, "seq_len": seq, "real_tokens": real, "padded_tokens": padded}
        ids_shape = _shape(ids) if ids is not None else None
        if ids_shape is None:
            return None
        if len(ids_shape) == 1:
            ids_shape = (1, ids_shape[0])
        bs, seq = ids_shape[0], ids_shape[-1]
        padded = bs * seq
        padding_free = any(
            _get(batch, k) is not None for k in ("position_ids", "cu_seq_lens_q", "seq_lengths", "cu_seqlens")
        )
        return {
            "batch_size": bs,
            "seq_len": seq,
            "real_tokens": padded if padding_free else None,
            "padded_tokens": padded,
        }
    except Exception:
        return None


def combine_counts(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Sum micro-batches of one optimizer step: batch_size and tokens add, seq_len is the max."""
    parts = [p for p in parts if p]
    if not parts:
        return None
    reals = [p["real_tokens"] for p in parts]
    real_total = None
    if all(r is not None for r in reals):
        real_total = reals[0]
        for r in reals[1:]:
            real_total = real_total + r
    return {
        "batch_size": sum(p["batch_size"] for p in parts),
        "seq_len": max(p["seq_len"] for p in parts),
        "real_tokens": real_total,
        "padded_tokens": sum(p["padded_tokens"] for p in parts),
        "micro_batches": len(parts),
    }


def resolve_counts(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn any device-tensor real_tokens into ints (one host sync for all of them)."""
    out = []
    for entry in steps:
        entry = dict(entry)
        real = entry.get("real_tokens")
        if real is not None and not isinstance(real, int):
            entry["real_tokens"] = _try(lambda: int(real.item()))
        out.append(entry)
    return out


# ---------------------------------------------------------------------------
# the block itself
# ---------------------------------------------------------------------------


def build_metadata(
    *,
    source: str,
    config: Mapping[str, Any] | None = None,
    steps: list[dict[str, Any]] | None = None,
    device: Any = None,
    extra: Mapping[str, Any] | None = None,
    memory: Mapping[str, Any] | None = None,
    profiler: Mapping[str, bool] | None = None,
) -> dict[str, Any]:
    """The complete ``"traceinspect"`` object (schema_version 1). `profiler`: the torch.profiler
    options the window ran with (record_shapes, with_stack, ...), off ones included: torch writes
    only the ones that are on into the trace."""
    dev = _try(lambda: device_info(device)) or {"type": None, "name": None, "count": None}
    state = _try(torch_state) or {}
    cfg = _try(lambda: normalize_config(config)) or normalize_config(None)
    cfg["tf32"] = _try(lambda: effective_tf32(cfg.get("tf32"), dev, state))
    if cfg.get("autocast_dtype") is None:
        for d in ("cuda", "cpu"):
            if state.get(f"autocast_{d}_enabled"):
                cfg["autocast_dtype"] = state.get(f"autocast_{d}_dtype")
                break
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "source": source,
        "framework": _try(framework_versions) or {},
        "device": dev,
        "config": cfg,
        "steps": [dict(s) for s in (steps or [])],
        "torch_state": state,
    }
    if memory is not None:
        meta["memory"] = dict(memory)
    if profiler is not None:
        meta["profiler"] = {str(k): bool(v) for k, v in profiler.items()}
    for key, value in (extra or {}).items():
        if key not in meta:
            meta[key] = _jsonable(value)
    return meta


# ---------------------------------------------------------------------------
# device memory per profiled step (read by traceinspect/trace/memory.py)
# ---------------------------------------------------------------------------

NO_CUDA_MEMORY = (
    "no CUDA device: torch.cuda.max_memory_allocated() measures GPU memory only, so a CPU run has no figure"
)


def memory_device(device: Any = None) -> tuple[int | None, str | None]:
    """(CUDA device index, None), or (None, the reason there is no memory figure)."""
    torch = _torch()
    if torch is None:
        return None, "torch is not importable"
    dev_type = (_try(lambda: device.type) or _try(lambda: str(device).split(":")[0])) if device is not None else None
    if dev_type not in (None, "cuda"):
        return None, NO_CUDA_MEMORY
    if not _try(torch.cuda.is_available, False):
        return None, NO_CUDA_MEMORY
    index = _try(lambda: device.index) if device is not None else None
    if index is None:
        index = _try(torch.cuda.current_device)
    return (int(index), None) if isinstance(index, int) else (None, "the CUDA device index is unknown")


def memory_step_begin(index: int | None) -> int | None:
    """At a step start: reset the allocator's peak counters and return the bytes allocated now.
    Host-side allocator counters only: no synchronisation, no kernel."""
    if index is None:
        return None
    torch = _torch()
    _try(lambda: torch.cuda.reset_peak_memory_stats(index))
    return _try(lambda: int(torch.cuda.memory_allocated(index)))


def memory_step_end(index: int | None, step: int, start: int | None) -> dict[str, Any]:
    """One ``memory.steps`` entry: the step's peaks since memory_step_begin (null on the CPU)."""
    torch = _torch() if index is not None else None
    return {
        "step": step,
        "start_allocated_bytes": start,
        "max_allocated_bytes": _try(lambda: int(torch.cuda.max_memory_allocated(index))) if torch else None,
        "max_reserved_bytes": _try(lambda: int(torch.cuda.max_memory_reserved(index))) if torch else None,
    }


def memory_block(index: int | None, reason: str | None, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``"memory"`` object of the metadata block."""
    total = None
    if index is not None:
        torch = _torch()
        total = _try(lambda: int(torch.cuda.get_device_properties(index).total_memory))
    return {"device_index": index, "device_total_bytes": total, "reason": reason, "steps": [dict(s) for s in steps]}


def dumps(meta: Mapping[str, Any]) -> str:
    return json.dumps(meta, default=str, allow_nan=False)


def _open_trace(path: Path, mode: str, gz: bool | None = None):
    if gz is None:
        gz = str(path).endswith(".gz")
    if gz:
        return gzip.open(path, mode)
    return open(path, mode)


def trace_has_metadata(path: str | os.PathLike, head_bytes: int = 1 << 20) -> bool:
    """Cheap check: does the first MiB of the (decompressed) trace carry the key?

    Kineto writes the metadata block before ``traceEvents``."""
    try:
        with _open_trace(Path(path), "rb") as fh:
            head = fh.read(head_bytes)
        return (f'"{METADATA_KEY}"').encode() in head
    except Exception:
        return False


def inject_metadata(path: str | os.PathLike, meta: Mapping[str, Any]) -> None:
    """Rewrite a trace file with ``meta`` as its top-level "traceinspect" key (fallback path)."""
    path = Path(path)
    with _open_trace(path, "rb") as fh:
        doc = json.loads(fh.read())
    doc[METADATA_KEY] = json.loads(dumps(meta))
    tmp = path.with_name(path.name + ".tmp")
    with _open_trace(tmp, "wb", gz=str(path).endswith(".gz")) as fh:
        fh.write(json.dumps(doc).encode())
    os.replace(tmp, path)


def read_metadata(path: str | os.PathLike) -> dict[str, Any] | None:
    """The "traceinspect" object of a .pt.trace.json[.gz] file, or None when it has none."""
    with _open_trace(Path(path), "rb") as fh:
        doc = json.loads(fh.read())
    value = doc.get(METADATA_KEY) if isinstance(doc, dict) else None
    if isinstance(value, str):  # tolerate a string-wrapped block (add_metadata instead of _json)
        value = _try(lambda: json.loads(value))
    return value if isinstance(value, dict) else None
