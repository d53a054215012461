"""The one ordered registry of detectors. Adding a detector: its file, one line here, its test."""
from __future__ import annotations

from .dataloader_stall import DataloaderStall

ALL = (
    DataloaderStall,
)

BY_KEY = {**{d.code: d for d in ALL}, **{d.name: d for d in ALL}}
