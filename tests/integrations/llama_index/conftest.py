"""Fixtures for the LlamaIndex integration tests."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
