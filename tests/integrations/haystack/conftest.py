"""Fixtures for the Haystack integration tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
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
# the backends the shared document-store suites run on: a local directory and a Milvus collection
# ------------------------------------------------------------------------------------------------------
MILVUS_DIMENSION = 768
"""The size of the embeddings in Haystack's shared tests (``haystack.testing.document_store``)."""


@pytest.fixture(scope="module")
def milvus_collections(milvus_db: str) -> Iterator[Callable[[int], Any]]:
    """``milvus_collections(dimension)``: an empty Milvus collection for a test (one per dimension per module), on
    Milvus Lite or the server of ``$RAG_HIER_TEST_MILVUS_URI`` (``milvus_db`` in ``tests/conftest.py``).

    Creating a collection costs seconds, so tests reuse them: each call empties the collection (passages and
    extensions) first. A handle on each is kept open for the module, so the Milvus Lite server of the file keeps
    running between tests.
    """
    from rag_hier import HierStore

    db = milvus_db
    pool: dict[int, Any] = {}

    def empty_collection(dimension: int) -> Any:
        if dimension not in pool:
            pool[dimension] = HierStore.create(uri=f"{db}#haystack_{dimension}", model=None, dimension=dimension)
        keeper = pool[dimension]
        keeper.delete_all()
        for name in list(keeper.extensions):
            keeper.remove_extension(name)
        return keeper

    yield empty_collection
    for keeper in pool.values():
        keeper.drop()
        keeper.close()


@pytest.fixture(params=["local", "milvus"])
def store_location(request: pytest.FixtureRequest, store_path: str) -> dict[str, Any]:
    """Where a test's RagHierDocumentStore lives: ``{"path": ...}``, or ``{"uri": ...}`` of an empty collection
    (of the shared tests' dimension)."""
    if request.param == "local":
        return {"path": store_path}
    return {"uri": request.getfixturevalue("milvus_collections")(MILVUS_DIMENSION).location}
