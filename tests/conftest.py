"""Shared fixtures: the builders, and the real-trace folder ../shared/traces when it is present."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEINSPECT_SHARED", REPO.parent / "shared")) / "traces"


def shared_available() -> bool:
    return (SHARED / "EXPECTED.json").exists()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not shared_available():
        pytest.skip("../shared/traces is not present (acceptance suite runs only where it is)")
    return SHARED


@pytest.fixture(scope="session")
def expected(shared_dir) -> dict:
    return json.loads((shared_dir / "EXPECTED.json").read_text())
