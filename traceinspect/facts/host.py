"""Host launch rows: the runtime calls that launch GPU work (kernels, CUDA/HIP graphs)."""

from __future__ import annotations

import pandas as pd

from ..trace.tables import name_flags

LAUNCH_CALLS = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipExtLaunchKernel",
    "cudaGraphLaunch",
    "hipGraphLaunch",
}
_LAUNCH_CBIDS = {211, 430, 307, 652, 311}  # CUDA cbids of the above, for events CUPTI names "INVALID"


def launch_rows(rt: pd.DataFrame) -> pd.DataFrame:
    """The rows of runtime table `rt` that launch a kernel or a graph."""
    mask = name_flags(rt["name"], LAUNCH_CALLS) | (
        name_flags(rt["name"], {"INVALID"}) & rt["cbid"].isin(_LAUNCH_CBIDS).to_numpy()
    )
    return rt[mask]
