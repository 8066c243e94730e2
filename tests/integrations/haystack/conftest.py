"""Fixtures for the Haystack integration tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# ------------------------------------------------------------------------------------------------------
# the backends the shared document-store suites run on: a local directory and a Milvus Lite collection
# ------------------------------------------------------------------------------------------------------
MILVUS_DIMENSION = 768
"""The size of the embeddings in Haystack's shared tests (``haystack.testing.document_store``)."""


@pytest.fixture(scope="module")
def milvus_collection(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Milvus Lite collection per test module (creating one costs seconds), emptied before each test.

    A handle is kept open for the module, so the Milvus Lite server of the file keeps running between tests.
    """
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from rag_hier import HierStore

    uri = f"{tmp_path_factory.mktemp('haystack-milvus') / 'm.db'}#haystack"
    keeper = HierStore.create(uri=uri, model=None, dimension=MILVUS_DIMENSION)
    yield keeper
    keeper.drop()
    keeper.close()


@pytest.fixture(params=["local", "milvus"])
def store_location(request: pytest.FixtureRequest, store_path: str) -> dict[str, Any]:
    """Where a test's RagHierDocumentStore lives: ``{"path": ...}``, or ``{"uri": ...}`` of an empty collection."""
    if request.param == "local":
        return {"path": store_path}
    keeper = request.getfixturevalue("milvus_collection")
    keeper.delete_all()
    return {"uri": keeper.location}
