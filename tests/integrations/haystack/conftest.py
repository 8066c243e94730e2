"""Fixtures for the Haystack integration tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Haystack sends anonymous usage telemetry by default; tests have no network and must not try
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

_SHM = Path("/dev/shm")


@pytest.fixture
def store_path(tmp_path: Path) -> Iterator[str]:
    """A fresh store directory (not yet created).

    Every store write is fsync'ed; on tmpfs (``/dev/shm``, when the machine has it) that costs nothing,
    which makes the ~170 store tests several times faster. Falls back to ``tmp_path``.
    """
    if _SHM.is_dir() and os.access(_SHM, os.W_OK):
        root = tempfile.mkdtemp(prefix="rag-hier-haystack-", dir=_SHM)
        yield str(Path(root) / "store")
        shutil.rmtree(root, ignore_errors=True)
    else:
        yield str(tmp_path / "store")
