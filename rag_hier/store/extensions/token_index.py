"""The ``token-index`` store extension: SVDR's binary token index T(D) of every passage, file ``tokens.npz``.

It keeps a :class:`~rag_hier.index.token.TokenIndex` in sync with every write: added passages are tokenized,
removed ones masked. A small write commits its rows (CSR) and removed rowids as a segment of ``store.sqlite``
(:attr:`StoreExtension.DELTA_ARRAYS`); the file is compacted and rewritten in the store's atomic commit once
the segments pass a tenth of the index, or on ``HierStore.optimize()``.

Example:
    >>> store = HierStore.create("my-store", model=None)  # doctest: +SKIP
    >>> store.add_extension(TokenIndexExtension())  # doctest: +SKIP
    >>> store.add_documents(docs, encode=False)  # doctest: +SKIP
    >>> TokenIndexExtension.of(store).index.search_text(["how do tides work?"], top_k=5)  # doctest: +SKIP

"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.encoders.dense import DEFAULT_MODEL
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.sparse import RowJournal, SparseRowIndex
from rag_hier.index.token import TokenIndex
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

__all__ = ["TokenIndexExtension", "passage_texts"]


def passage_texts(store: StoreBackend, rowids: np.ndarray, *, chunk: int = 4096) -> list[str]:
    """The :attr:`Passage.embedding_text` of each rowid, in order (an unknown rowid raises ``StoreError``)."""
    out: list[str] = []
    ids = np.asarray(rowids, dtype=np.int64)
    for start in range(0, ids.shape[0], chunk):
        part = ids[start : start + chunk].tolist()
        records = store.records(part)
        for r in part:
            rec = records.get(r)
            if rec is None:
                raise StoreError(f"{store.location}: no passage with rowid {r}")
            out.append(rec.embedding_text)
    return out


@register_extension
class TokenIndexExtension(StoreExtension):
    """The ``token-index`` store extension: a :class:`TokenIndex` of every passage, file ``tokens.npz``.

    Args:
        model: Model (name or path) whose tokenizer defines the vocabulary; default: the offline
            all-MiniLM-L6-v2. Recorded in the manifest, and the default vocabulary encoder of stores
            without a dense encoder.
        max_length: Tokens per passage (special tokens included; ``None``: no truncation). The default,
            256, matches :class:`~rag_hier.encoders.vocab.VocabEncoder`'s passage length, so T(d) and
            E(d) see the same tokens.
        fingerprint: The tokenizer's fingerprint when the index was built (checked on load; leave empty
            when creating one).

    """

    name: ClassVar[str] = "token-index"
    FILE: ClassVar[str] = "tokens.npz"
    FILES: ClassVar[tuple[str, ...]] = (FILE,)

    def __init__(self, model: str = DEFAULT_MODEL, max_length: int | None = 256, fingerprint: str = "") -> None:
        self.model = model
        self.max_length = max_length
        self.index = TokenIndex(model, max_length=max_length, fingerprint=fingerprint)
        """The in-memory :class:`TokenIndex` (its tokenizer loads on first use)."""

    @classmethod
    def of(cls, store: StoreBackend) -> TokenIndexExtension:
        """The store's token index extension (a clear error when it has none)."""
        ext = store.extension(cls.name)
        if not isinstance(ext, TokenIndexExtension):
            raise StoreError(
                f"{store.location} has no token index; create one with `rag-hier index ... --token-index` "
                "or store.add_extension(TokenIndexExtension())"
            )
        return ext

    def config(self) -> dict[str, Any]:
        """``model``, ``max_length`` and the tokenizer ``fingerprint``."""
        return {"model": self.model, "max_length": self.max_length, "fingerprint": self.index.fingerprint}

    def files(self) -> list[str]:
        """``tokens.npz``."""
        return [self.FILE]

    def write(self, paths: Mapping[str, Path]) -> None:
        """Compact and save the rows."""
        self.index.save(paths[self.FILE])

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the rows (the tokenizer is loaded, and its fingerprint checked)."""
        self.index.load_rows(paths[self.FILE])

    def build(self, store: StoreBackend) -> None:
        """Tokenize every passage of ``store``."""
        rowids = np.asarray(store.passage_rowids(), dtype=np.int64)
        index = self.index
        index.rows = SparseRowIndex(index.vocab_size, binary=True)
        chunk = 16384
        for start in range(0, rowids.shape[0], chunk):
            part = rowids[start : start + chunk]
            index.add_texts(part, passage_texts(store, part))

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """Tokenize the new passages."""
        self.index.add_texts(rowids, [p.embedding_text for p in passages])

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Mask the removed passages (compacted when the file is next written)."""
        self.index.remove(rowids)

    # -- rows kept by a store engine (the Milvus backend's sparse field) ---------------------------------
    def sparse_rows(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows in memory: ``(rowids ascending, binary rows over token ids)`` (none: empty)."""
        rows = self.index.held_rows()
        if rows is None:
            return np.zeros(0, np.int64), sp.csr_matrix((0, 1), dtype=np.float32)
        return rows.matrix()

    def add_sparse_rows(self, rowids: np.ndarray, rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add rows given as ``(token ids, weights)`` pairs (as an engine returns them)."""
        n = self.index.vocab_size
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(i) for i, _ in rows], out=indptr[1:])
        cols = np.concatenate([np.asarray(i, np.int64) for i, _ in rows]) if rows else np.zeros(0, np.int64)
        if cols.size and (cols.min() < 0 or cols.max() >= n):
            raise StoreCorruptedError(f"token ids outside the tokenizer's vocabulary of {n}")
        mat = sp.csr_matrix((np.ones(cols.size, np.float32), cols, indptr), shape=(len(rows), n))
        self.index.rows.add(np.asarray(rowids, np.int64), mat)

    def clear_rows(self) -> None:
        """Forget the rows in memory (the engine holds them)."""
        self.index.clear()

    # -- incremental commits ----------------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = SPARSE_DELTA_ARRAYS
    DELTA_SEES_ALL_CHANGES: ClassVar[bool] = True  # the journal is the rows' own

    def begin_delta(self, limit: int) -> None:
        """Record the rows added and removed by the write batch."""
        rows = self.index.held_rows()
        if rows is not None:
            rows.journal = RowJournal(limit)

    def delta(self) -> Delta | None:
        """The batch's rows (CSR) and removed rowids."""
        return sparse_delta(self.index.held_rows())

    def end_delta(self) -> None:
        """Stop recording."""
        rows = self.index.held_rows()
        if rows is not None:
            rows.journal = None

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay a committed segment on the rows read from ``tokens.npz``."""
        rows = self.index.held_rows()
        if rows is None:
            raise ValueError("no rows loaded")
        apply_sparse_delta(rows, arrays)

    def delta_size(self) -> int:
        """Rows held."""
        rows = self.index.held_rows()
        return rows.rows_held if rows is not None else 0

    def verify(self, store: StoreBackend) -> None:
        """The index holds exactly the store's passages."""
        held = self.index.rows.ids()
        stored = np.asarray(store.passage_rowids(), dtype=np.int64)
        if held.shape != stored.shape or not np.array_equal(held, stored):
            raise StoreCorruptedError(
                f"{store.location}/{self.FILE}: holds {held.shape[0]} passages, the store {stored.shape[0]} "
                "(or different ones); remove and re-add the token-index extension"
            )

    def describe(self) -> dict[str, Any]:
        """Model, truncation and size."""
        return {"model": self.model, "max_length": self.max_length, **self.index.rows.describe()}
