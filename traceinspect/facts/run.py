"""Facts about the run: the training framework, the settings the capture recorded, the parameter count."""

from __future__ import annotations

import math
import re

import pandas as pd

from ..trace.model import Trace


_FRAMEWORKS = (
    ("trl", re.compile(r"(^|/)trl/")),
    ("hf_trainer", re.compile(r"transformers/trainer\.py")),
    ("lightning", re.compile(r"(^|/)(pytorch_)?lightning/")),
    ("accelerate", re.compile(r"(^|/)accelerate/")),
)


def detect_framework(trace: Trace) -> str:
    rc = trace.meta.run_config or {}
    src = rc.get("source")
    fw = rc.get("framework") if isinstance(rc.get("framework"), dict) else {}
    if src == "hf_trainer":
        return "trl" if "trl" in fw and rc.get("config", {}).get("packing") is not None else "hf_trainer"
    if src == "loop":
        return "plain"
    py = trace.python
    if len(py):
        names = [str(c) for c in pd.Categorical(py["name"]).categories]
        for fwname, rx in _FRAMEWORKS:
            if any(rx.search(n) for n in names):
                return fwname
        return "plain"
    return "unknown"


def config_value(trace: Trace, key: str):
    """A setting recorded by traceinspect.capture (run_config["config"][key]), or None."""
    rc = trace.meta.run_config
    cfg = rc.get("config") if isinstance(rc, dict) else None
    return cfg.get(key) if isinstance(cfg, dict) else None


def num_parameters(trace: Trace) -> int | None:
    """The model's parameter count the capture recorded (run_config num_parameters: an int, or a float
    such as 7e9), or None when it is absent or not a positive finite count. The one reading of it
    (memory model, cpu-offload, unfused-optimizer)."""
    v = config_value(trace, "num_parameters")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return int(v) if math.isfinite(v) and 0 < v < 1e15 else None
