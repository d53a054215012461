"""The detector classes, in the catalogue's order. Adding a detector: its entry in
traceinspect/catalogue.py, its file, one line here, its test."""

from __future__ import annotations

from ..catalogue import CATALOGUE

from .allocator_churn import AllocatorChurn
from .cpu_offload import CpuOffload
from .dataloader_stall import DataloaderStall
from .eager_attention import EagerAttention
from .exposed_communication import ExposedCommunication
from .far_from_roofline import FarFromRoofline
from .fp32_gemm import Fp32Gemm
from .host_bound import HostBound
from .host_sync import HostSync
from .launch_bound import LaunchBound
from .padding_waste import PaddingWaste
from .pageable_memcpy import PageableMemcpy
from .unfused_optimizer import UnfusedOptimizer

_CLASSES = {
    d.code: d
    for d in (
        AllocatorChurn,
        CpuOffload,
        DataloaderStall,
        EagerAttention,
        ExposedCommunication,
        FarFromRoofline,
        Fp32Gemm,
        HostBound,
        HostSync,
        LaunchBound,
        PaddingWaste,
        PageableMemcpy,
        UnfusedOptimizer,
    )
}
# registry order is the catalogue's (traceinspect/catalogue.py), which also names and describes each
ALL = tuple(_CLASSES[e.code] for e in CATALOGUE)

BY_KEY = {**{d.code: d for d in ALL}, **{d.name: d for d in ALL}}
