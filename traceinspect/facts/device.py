"""Device selection: the GPU this rank drives (Trace.device_id, the device with the most kernel time;
on ROCm the same rule over HIP devices) and its kernels and copies. Detectors read these instead of
filtering the tables themselves, so every one judges the same device."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..trace.model import Trace


def primary_kernels(trace: Trace) -> pd.DataFrame:
    """The kernels of the primary device (all kernels when the trace names no device). Read-only."""

    def compute():
        k, dev = trace.kernels, trace.device_id
        return k[k["device"].to_numpy() == dev] if dev is not None and len(k) else k

    return trace.memo("facts: primary-device kernels", compute)


def primary_memcpy_mask(trace: Trace) -> np.ndarray:
    """Over trace.memcpy's rows: the copy or memset is on the primary device (all True when the trace
    names no device). Read-only."""

    def compute():
        m, dev = trace.memcpy, trace.device_id
        return m["device"].to_numpy() == dev if dev is not None and len(m) else np.ones(len(m), dtype=bool)

    return trace.memo("facts: primary-device copy mask", compute)


def primary_memcpy(trace: Trace) -> pd.DataFrame:
    """The copies and memsets of the primary device (all when the trace names no device). Read-only."""

    def compute():
        m = trace.memcpy
        return m[primary_memcpy_mask(trace)] if trace.device_id is not None and len(m) else m

    return trace.memo("facts: primary-device copies", compute)
