"""The one ordered registry of detectors. Adding a detector: its file, one line here, its test."""

from __future__ import annotations

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

ALL = (
    LaunchBound,
    PaddingWaste,
    EagerAttention,
    DataloaderStall,
    CpuOffload,
    Fp32Gemm,
    FarFromRoofline,
    HostSync,
    HostBound,
    UnfusedOptimizer,
    ExposedCommunication,
    PageableMemcpy,
    AllocatorChurn,
)

BY_KEY = {**{d.code: d for d in ALL}, **{d.name: d for d in ALL}}
