"""The ``svdr-vectors`` store extension: learned sparse passage vectors E(D), filled in as they are computed.

A commit that adds or drops a few vectors stores them as a segment of ``store.sqlite`` (CSR rows and removed
rowids, recorded by the index's own journal) instead of rewriting ``svdr_vectors.npz``; the file is rewritten
once the segments pass a tenth of it, or on ``HierStore.optimize()``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.errors import StoreCorruptedError
from rag_hier.index.sparse import RowJournal, SparseRowIndex
from rag_hier.store.extensions.base import StoreExtension, register_extension
from rag_hier.store.extensions.sparse_rows import SPARSE_DELTA_ARRAYS, apply_sparse_delta, sparse_delta
from rag_hier.store.segments import Delta

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

if TYPE_CHECKING:
    from rag_hier.corpus.model import Passage
    from rag_hier.store.contract import StoreBackend

logger = logging.getLogger(__name__)

__all__ = ["SparseVectorExtension"]


# ----------------------------------------------------------------------------------------------------
@register_extension
class SparseVectorExtension(StoreExtension):
    """E(D): SVDR's learned sparse passage vectors, kept in the store (file ``svdr_vectors.npz``).

    It holds vectors for any subset of the passages — all of them after
    :func:`rag_hier.retrieval.svdr.encode_missing_vectors`, or just those that β+rerank has encoded so
    far (the representation "fills in as queries arrive"). Vectors are tied to the encoder that made
    them by ``fingerprint`` (:attr:`VocabEncoder.fingerprint`); a retriever with another encoder
    refuses to mix them. Removed passages are dropped; added passages simply have no vector yet.

    Args:
        model: Name or path of the vocabulary encoder (informational).
        fingerprint: The encoder's fingerprint.
        vocab_size: Columns (the tokenizer's vocabulary size).

    """

    name: ClassVar[str] = "svdr-vectors"
    FILE: ClassVar[str] = "svdr_vectors.npz"
    FILES: ClassVar[tuple[str, ...]] = (FILE,)

    def __init__(self, model: str = "", fingerprint: str = "", vocab_size: int = 1) -> None:
        self.model = model
        self.fingerprint = fingerprint
        self.index = SparseRowIndex(vocab_size, binary=False)

    def config(self) -> dict[str, Any]:
        """``model``, ``fingerprint`` and ``vocab_size``."""
        return {"model": self.model, "fingerprint": self.fingerprint, "vocab_size": self.index.vocab_size}

    def files(self) -> list[str]:
        """``svdr_vectors.npz``."""
        return [self.FILE]

    def write(self, paths: Mapping[str, Path]) -> None:
        """Compact and save the vectors."""
        self.index.save(paths[self.FILE])

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the vectors."""
        index = SparseRowIndex.load(paths[self.FILE])
        if index.vocab_size != self.index.vocab_size or index.binary:
            raise StoreCorruptedError(f"{paths[self.FILE]}: does not match the extension's configuration")
        self.index = index

    def build(self, store: StoreBackend) -> None:
        """Keep only vectors of passages that are in ``store`` (nothing is encoded here)."""
        self.index.retain(_all_rowids(store))

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """New passages have no vector yet (a re-used id cannot occur, but drop one defensively)."""
        self.index.remove(rowids)

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Drop the vectors of removed passages."""
        self.index.remove(rowids)

    # -- incremental commits ----------------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = SPARSE_DELTA_ARRAYS
    DELTA_SEES_ALL_CHANGES: ClassVar[bool] = True  # vectors cached by a search go through the same journal

    def begin_delta(self, limit: int) -> None:
        """Record the rows added and removed by the write batch."""
        self.index.journal = RowJournal(limit)

    def delta(self) -> Delta | None:
        """The batch's rows (CSR) and removed rowids."""
        return sparse_delta(self.index)

    def end_delta(self) -> None:
        """Stop recording."""
        self.index.journal = None

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay a committed segment on the vectors read from ``svdr_vectors.npz``."""
        apply_sparse_delta(self.index, arrays)

    def delta_size(self) -> int:
        """Rows held."""
        return self.index.rows_held

    def verify(self, store: StoreBackend) -> None:
        """Every vector belongs to a stored passage."""
        held = self.index.ids()
        if held.size and not np.isin(held, _all_rowids(store)).all():
            raise StoreCorruptedError(f"{store.location}/{self.FILE}: holds vectors of passages that are not stored")

    # -- rows kept by a store engine (the Milvus backend's sparse field) ---------------------------------
    def sparse_rows(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows in memory: ``(rowids ascending, E(d) rows over token ids)``."""
        return self.index.matrix()

    def add_sparse_rows(self, rowids: np.ndarray, rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add rows given as ``(token ids, weights)`` pairs (as an engine returns them)."""
        n = self.index.vocab_size
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(i) for i, _ in rows], out=indptr[1:])
        cols = np.concatenate([np.asarray(i, np.int64) for i, _ in rows]) if rows else np.zeros(0, np.int64)
        vals = np.concatenate([np.asarray(v, np.float32) for _, v in rows]) if rows else np.zeros(0, np.float32)
        if cols.size and (cols.min() < 0 or cols.max() >= n):
            raise StoreCorruptedError(f"token ids outside the encoder's vocabulary of {n}")
        self.index.add(np.asarray(rowids, np.int64), sp.csr_matrix((vals, cols, indptr), shape=(len(rows), n)))

    def clear_rows(self) -> None:
        """Forget the rows in memory (the engine holds them)."""
        self.index = SparseRowIndex(self.index.vocab_size, binary=False)

    def describe(self) -> dict[str, Any]:
        """Model, fingerprint prefix and size."""
        return {"model": self.model, "fingerprint": self.fingerprint[:16], **self.index.describe()}


def _all_rowids(store: StoreBackend) -> np.ndarray:
    """Rowids of every passage of ``store`` (with or without a dense vector), ascending."""
    return np.asarray(store.passage_rowids(), dtype=np.int64)
