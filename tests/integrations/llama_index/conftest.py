"""Fixtures for the LlamaIndex integration tests."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

_SHM = Path("/dev/shm")


class HashEmbedding(BaseEmbedding):
    """A deterministic bag-of-words embedding (hashed words, unit length): retrieval that means something,
    without a model."""

    dim: int = 64

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dim)
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            h = int(hashlib.md5(word.encode()).hexdigest(), 16)
            v[h % self.dim] += 1.0
        n = np.linalg.norm(v)
        return (v / n if n else v).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec(query)


@pytest.fixture
def store_path(tmp_path: Path) -> Iterator[str]:
    """A fresh store directory (not yet created); on tmpfs when the machine has one (fsync is free there)."""
    if _SHM.is_dir() and os.access(_SHM, os.W_OK):
        root = tempfile.mkdtemp(prefix="rag-hier-llama-index-", dir=_SHM)
        yield str(Path(root) / "store")
        shutil.rmtree(root, ignore_errors=True)
    else:
        yield str(tmp_path / "store")


@pytest.fixture
def hash_embedding() -> HashEmbedding:
    return HashEmbedding()


# ------------------------------------------------------------------------------------------------------
# the backends the conformance tests run on: a local directory and a Milvus Lite collection
# ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def milvus_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[int, str], Any]]:
    """Milvus Lite collections for a test module, one per (dimension, similarity), made on first use.

    Creating a collection costs seconds, so tests reuse them (emptied before each test). A handle on each is
    kept open for the module, so the Milvus Lite server of the file keeps running between tests.
    """
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from rag_hier import HierStore

    db = tmp_path_factory.mktemp("llama-index-milvus") / "m.db"
    pool: dict[tuple[int, str], Any] = {}

    def collection(dimension: int, similarity: str) -> Any:
        key = (dimension, similarity)
        if key not in pool:
            pool[key] = HierStore.create(
                uri=f"{db}#d{dimension}_{similarity}",
                model=None,
                dimension=dimension,
                similarity=similarity,  # type: ignore[arg-type]
                corpus={"llama_index": {"similarity": similarity, "dense": True}},  # as RagHierVectorStore records
            )
        return pool[key]

    yield collection
    for keeper in pool.values():
        keeper.drop()
        keeper.close()


@pytest.fixture(params=["local", "milvus"])
def make_store(request: pytest.FixtureRequest, store_path: str) -> Iterator[Callable[..., Any]]:
    """``make_store(dimension, **options)``: a RagHierVectorStore on this test's backend.

    ``local``: ``RagHierVectorStore(store_path, **options)``. ``milvus``: an empty Milvus Lite collection of that
    dimension and similarity (``RagHierVectorStore(uri=..., **options)``). Later calls in the same test open
    the same store again (a reopen), whatever their arguments.
    """
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    pool = request.getfixturevalue("milvus_pool") if request.param == "milvus" else None
    made: list[Any] = []
    chosen: list[Any] = []

    def make(dimension: int, **options: Any) -> Any:
        if pool is None:
            vs = RagHierVectorStore(store_path, **options)
        else:
            if not chosen:
                keeper = pool(dimension, options.get("similarity") or "cosine")
                keeper.delete_all()
                chosen.append(keeper)
            vs = RagHierVectorStore(uri=chosen[0].location, **options)
        made.append(vs)
        return vs

    yield make
    for vs in made:
        vs.close()
