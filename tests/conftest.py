"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

# --- shared data (../shared/data next to the repository), used by tests marked ``data`` ---------------
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder (``<repo>/../shared/data``); skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
