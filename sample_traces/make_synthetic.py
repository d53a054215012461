"""Regenerate the synthetic sample traces in this folder from the test builders.

    python sample_traces/make_synthetic.py

Deterministic: the builders use no randomness, so the files are byte-identical on every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from builders import build_dataloader_stall, build_healthy, build_launch_bound  # noqa: E402

SAMPLES = {
    "synthetic_dataloader_stall.pt.trace.json.gz": lambda: build_dataloader_stall(steps=4, load_us=30_000),
    "synthetic_launch_bound.pt.trace.json.gz": lambda: build_launch_bound(steps=3, kernels_per_step=400),
    "synthetic_healthy.pt.trace.json.gz": lambda: build_healthy(steps=4),
}

if __name__ == "__main__":
    import gzip
    import json

    for name, make in SAMPLES.items():
        data = json.dumps(make().build()).encode()
        # mtime=0 keeps the gzip bytes reproducible
        (HERE / name).write_bytes(gzip.compress(data, mtime=0))
        print(HERE / name)
