"""Dense vectors and search of a local store: query encoding, the FAISS search, the hit rows, stored vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.store.local.base import LocalBase
from rag_hier.store.records import hit_rows, hit_rows_if_current

__all__ = ["LocalDense"]


class LocalDense(LocalBase):
    """The dense search path of :class:`~rag_hier.store.store.HierStore` (what ``DenseRetriever`` runs)."""

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Encode queries with the store's encoder (checking its dimension against the store)."""
        return self._require_encoder("text search").encode_queries(queries)

    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products over the passage vectors: ``(scores, rowids)``.

        Both are ``(n, min(top_k, live vectors))``; rows are ``-1``-padded where ``allowed`` leaves fewer.
        """
        with self._reading():
            return self._search_dense(np.asarray(queries, dtype=np.float32), top_k, allowed)

    def _search_dense(
        self, q: np.ndarray, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_dense` on the index this core holds now (the caller holds the core's lock)."""
        index = self._core.indexes.get("dense")
        live = 0 if index is None else len(index)
        if index is None or live == 0:
            return np.zeros((q.shape[0], 0), np.float32), np.zeros((q.shape[0], 0), np.int64)
        return index.search(q, min(top_k, live), allowed_ids=allowed)

    def search_dense_hits(
        self, queries: np.ndarray, top_k: int
    ) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[Any, ...]]]:
        """:meth:`search_dense` and :meth:`hit_rows` of what it found, both of one committed generation.

        The search path of an unfiltered dense query. Outside a read block it takes one SQL statement: the hit
        rows, read together with a check that the database still holds the generation this handle's index
        holds; when another process has committed since, it searches again within a read transaction (which
        loads that generation first). The first search of each generation a handle holds runs in a read
        transaction too, which keeps the stored state's text to check against.

        With the hit rows in memory (``hit_rows="memory"``, :mod:`rag_hier.store.hit_table`) it takes no table read:
        one read of the database header's change counter (``StoreCore.unchanged``) says whether anyone committed
        since; if none did and the table holds this handle's generation, the rows come from the table; else the
        search runs within a read transaction (which loads the new generation) and the table catches up to it first.
        """
        core = self._core
        q = np.asarray(queries, dtype=np.float32)
        with core.lock:
            outside = not core.db.in_transaction
            table = core.hit_table
            if table is not None and outside:
                if not (table.current(core.generation) and core.unchanged()):
                    with self._reading():
                        table.catch_up(core.db, core.generation, int(core.state["counts"]["vectors"]))
                        scores, ids = self._search_dense(q, top_k)
                        return scores, ids, table.get_many(ids.ravel().tolist())
                scores, ids = self._search_dense(q, top_k)
                return scores, ids, table.get_many(ids.ravel().tolist())
            token = core.state_token()
            if outside and token is not None:  # an empty result has nothing to check: the read block below
                scores, ids = self._search_dense(q, top_k)
                rows = hit_rows_if_current(core.db, ids[ids >= 0].tolist(), token)
                if rows is not None:
                    return scores, ids, rows
            with self._reading():
                if outside:  # the generation just synced: the next search can check against it
                    core.remember_token()
                scores, ids = self._search_dense(q, top_k)
                return scores, ids, hit_rows(core.db, ids[ids >= 0].tolist())

    def hit_rows(self, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """Rows of :data:`~rag_hier.store.records.HIT_COLUMNS` by rowid, for :func:`~rag_hier.store.records.new_hit`.

        The search path's read: one statement of exactly the fields a :class:`Hit` needs, JSON left undecoded
        (an optional fast path of the store contract; retrievers fall back to :meth:`records`).
        """
        core = self._core
        with self._reading():
            table = core.hit_table
            if table is not None and core.depth == 0:  # a write batch's own rows are read from SQLite
                table.catch_up(core.db, core.generation, int(core.state["counts"]["vectors"]))
                held = table.get_many(rowids)
                if len(held) == len(rowids):
                    return held
            return hit_rows(core.db, rowids)

    def vectors(self, rowids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of ``rowids`` (each must have one)."""
        with self._reading():
            index = self._core.indexes.get("dense")
            ids = np.asarray(rowids, dtype=np.int64)
            if index is None:
                if ids.size:
                    raise StoreError(f"the store at {self.path} holds no vectors")
                return np.zeros((0, self.dimension or 0), np.float32)
            return index.reconstruct(ids)
