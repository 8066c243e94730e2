"""Searching inside Milvus: dense search over passage vectors, sparse search over ``C__sparse``, leaf search.

Each search is one Milvus call inside ``_reading()``, fetching a few more rows than asked so that ties at the
cut are broken by rowid (:func:`rag_hier.index.selection.select_top_k`), as the local store breaks them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import scipy.sparse as sp

from rag_hier.errors import StoreCorruptedError
from rag_hier.index.selection import select_top_k
from rag_hier.store.milvus.fields import engine_data, sparse_dicts
from rag_hier.store.milvus.filters import ids_expr, str_list
from rag_hier.store.milvus.generations import GenerationLog
from rag_hier.store.milvus.schema import MAX_LIMIT, PASSAGE_FIELDS, search_params

__all__ = ["HIT_ROWS_MAX", "MilvusRowids", "Search"]

HIT_ROWS_MAX = 256
"""A search inside ``reading()`` fetching at most this many rows per query returns the hit fields with them."""


class MilvusRowids(np.ndarray):
    """Rowids matching a filter, carrying the Milvus expression that selects them (``expr``).

    :meth:`MilvusStore.search_dense` given this very array filters inside Milvus by ``expr`` instead of
    sending the rowids; any array derived from it (a slice, a mask) is a plain rowid set again.
    """

    expr: str | None

    def __new__(cls, rowids: np.ndarray, expr: str | None) -> MilvusRowids:  # noqa: D102
        obj = np.asarray(rowids, dtype=np.int64).view(cls)
        obj.expr = expr
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        self.expr = None


def _fill_top_k(scores: np.ndarray, ids_out: np.ndarray, results: Iterable[tuple[int, Any]], k: int) -> None:
    """Write each ``(row, hits)`` of a Milvus search into ``scores`` / ``ids_out``: top ``k``, ties by rowid."""
    for i, hits in results:
        if not hits:
            continue
        rows = np.fromiter((int(h["entity"]["rowid"]) for h in hits), np.int64, count=len(hits))
        dist = np.fromiter((float(h["distance"]) for h in hits), np.float32, count=len(hits))
        order = select_top_k(dist, rows, k)
        scores[i, : order.size] = dist[order]
        ids_out[i, : order.size] = rows[order]


def _allowed_expr(allowed: np.ndarray | None) -> str | None:
    """The passage condition of ``allowed`` (``None``: nothing allowed)."""
    if allowed is None:
        return "has_vector == true"
    if isinstance(allowed, MilvusRowids) and allowed.expr is not None:
        return allowed.expr
    ids = np.unique(np.asarray(allowed, dtype=np.int64))
    if ids.size == 0:
        return None
    return f"has_vector == true and {ids_expr('rowid', ids.tolist())}"


class Search(GenerationLog):
    """The searches of the store contract run by Milvus, and the reads of the extensions kept in its fields."""

    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None, *, where: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products over the passage vectors, searched inside Milvus: ``(scores, rowids)``, ``-1``-padded.

        ``allowed`` from :meth:`matching_rowids` is applied as its Milvus expression; any other rowid set as
        ``rowid in [...]``; ``where`` (a Milvus expression on the passage fields, internal) narrows further.
        ``top_k`` is capped at Milvus' limit of 16,384.
        """
        q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
        if q.ndim == 1:
            q = q[None, :]
        n = q.shape[0]
        passages = self._collections.passages
        with self._reading() as view:
            live = self._committed_count("vectors", passages, f"has_vector == true and {view.expr('p')}")
            k = min(int(top_k), live, MAX_LIMIT)
            if k <= 0 or n == 0:
                return np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64)
            cond = _allowed_expr(allowed)
            if cond is None:
                return np.full((n, k), -np.inf, np.float32), np.full((n, k), -1, np.int64)
            if where is not None:
                cond = f"({cond}) and ({where})"
            fetch = min(k + min(k, 16), MAX_LIMIT)  # a few more, so ties at the cut are broken by rowid
            # Inside reading() (a retriever's search), a short result brings the hit fields along: the hits are
            # then built without a second round trip (records() answers from them until the block ends).
            with_rows = bool(self._pinned) and self._batch is None and fetch <= HIT_ROWS_MAX
            res = self._call(
                "a vector search",
                "search",
                passages,
                data=q.tolist(),
                anns_field="vector",
                limit=fetch,
                filter=f"({cond}) and {view.expr('p')}",
                output_fields=PASSAGE_FIELDS if with_rows else ["rowid"],
                search_params=search_params(self.index_config, fetch),
                consistency_level="Strong",
            )
            if with_rows:
                self._hit_rows = (view.gen_max, {int(h["entity"]["rowid"]): h["entity"] for hits in res for h in hits})
        scores = np.full((n, k), -np.inf, np.float32)
        ids_out = np.full((n, k), -1, np.int64)
        _fill_top_k(scores, ids_out, enumerate(res), k)
        return scores, ids_out

    def search_in_leaves(
        self, name: str, queries: np.ndarray, top_k: int, leaves: np.ndarray, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One dense search inside Milvus over the passages filed under ``leaves`` by extension ``name``.

        A ``"leaf"`` extension (one leaf per passage, e.g. ``tree``) filters ``<field> in [...]``, a ``"leaves"``
        one (e.g. ``ehi``) ``array_contains_any(<field>, [...])``; ``allowed`` restricts further, as in
        :meth:`search_dense`.
        """
        with self._reading():
            column = self._field(name, "leaf")
        values = "[" + ",".join(str(int(x)) for x in np.unique(np.asarray(leaves, np.int64))) + "]"
        one = engine_data(name) == "leaf"
        where = f"{column} in {values}" if one else f"array_contains_any({column}, {values})"
        return self.search_dense(queries, top_k, allowed, where=where)

    # ------------------------------------------------------------------------------------------------
    # extensions kept in Milvus fields (see rag_hier.store.milvus.fields)
    # ------------------------------------------------------------------------------------------------
    def extension_in_engine(self, name: str) -> bool:
        """Whether extension ``name`` is searched inside Milvus.

        True when its rows are a sparse field (data ``"sparse-rows"``: ``token-index``, ``sparse-embeddings``,
        ``svdr-vectors``) or its leaves a passage field (``"leaf"`` / ``"leaves"``: ``tree``, ``ehi``); else the
        strategies search it in the client (extensions attached before this existed, collections whose schema
        lacks the leaf fields).
        """
        with self._reading():
            fields = self._state.get("extensions", {}).get(name, {}).get("fields") or {}
            return "sparse" in fields or "leaf" in fields

    def search_sparse(
        self, name: str, queries: Any, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products of sparse queries with extension ``name``'s rows, searched inside Milvus.

        Args:
            name: An extension whose data is ``"sparse-rows"`` (kept in a sparse field).
            queries: ``(n, columns)`` sparse rows whose column numbers are the stored indices (token ids,
                the caller's sparse indices); weights must be non-negative (Milvus' rule).
            top_k: Results per query (capped at 16,384).
            allowed: Only these passages (rowids) may be returned.

        Returns:
            ``(scores, rowids)``, ``(n, top_k)``, padded with ``-inf`` / ``-1``; ties by ascending rowid. Rows
            sharing no index with the query are never returned (Milvus' sparse search leaves them out).

        """
        q = sp.csr_matrix(queries, dtype=np.float32)
        n, k = q.shape[0], min(int(top_k), MAX_LIMIT)
        scores = np.full((n, k), -np.inf, np.float32)
        ids_out = np.full((n, k), -1, np.int64)
        if k <= 0 or n == 0:
            return scores, ids_out
        data = sparse_dicts(q, f"{self.location}: a {name} query")
        with self._reading() as view:
            tag = self._field(name, "sparse")
            if not self._sparse_collection_present():
                return scores, ids_out
            cond = f"tag == {str_list([tag])[1:-1]}"
            if allowed is not None:
                ids = np.unique(np.asarray(allowed, dtype=np.int64))
                if ids.size == 0:
                    return scores, ids_out
                cond += f" and {ids_expr('rowid', ids.tolist())}"
            todo = [i for i, d in enumerate(data) if d]
            if not todo:
                return scores, ids_out
            fetch = min(k + min(k, 16), MAX_LIMIT)  # a few more, so ties at the cut are broken by rowid
            res = self._call(
                "a sparse search",
                "search",
                self._collections.sparse,
                data=[data[i] for i in todo],
                anns_field="vec",
                limit=fetch,
                filter=f"{cond} and {view.expr('s')}",
                output_fields=["rowid"],
                search_params={"metric_type": "IP", "params": {}},
                consistency_level="Strong",
            )
        _fill_top_k(scores, ids_out, zip(todo, res, strict=True), k)
        return scores, ids_out

    def sparse_rows_of(self, name: str, rowids: np.ndarray, columns: int) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows extension ``name`` holds in Milvus for ``rowids`` (a query by rowid, never the whole field).

        Returns ``(rowids found ascending, their rows as a (found, columns) CSR matrix)``; rowids without a row
        are left out (a row with no positive weight is not stored either).
        """
        ids = np.unique(np.asarray(rowids, np.int64))
        with self._reading() as view:
            tag = self._field(name, "sparse")
            rows: list[dict[str, Any]] = []
            if ids.size and self._sparse_collection_present():
                cond = f"tag == {str_list([tag])[1:-1]} and {view.expr('s')}"
                rows = self._query_in(self._collections.sparse, "rowid", ids.tolist(), cond, ["rowid", "vec"])
        rows.sort(key=lambda r: int(r["rowid"]))
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(r["vec"]) for r in rows], out=indptr[1:])
        cols = np.fromiter((int(j) for r in rows for j in r["vec"]), np.int64, count=int(indptr[-1]))
        vals = np.fromiter((float(v) for r in rows for v in r["vec"].values()), np.float32, count=int(indptr[-1]))
        if cols.size and int(cols.max()) >= columns:
            raise StoreCorruptedError(f"{self.location}: a {name} row has index {int(cols.max())} >= {columns}")
        found = np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows))
        return found, sp.csr_matrix((vals, cols, indptr), shape=(len(rows), columns))

    def sparse_rowids(self, name: str) -> np.ndarray:
        """Rowids (ascending) that hold a row of extension ``name`` in Milvus; read once per committed generation."""
        with self._reading() as view:
            key = (self._field(name, "sparse"), view.gen_max)
            if key not in self._rowid_cache:
                rows = self._sparse_rows(name, view, fields=["rowid"])
                ids = np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows)))
                self._rowid_cache = {k: v for k, v in self._rowid_cache.items() if k[1] == view.gen_max} | {key: ids}
            return self._rowid_cache[key]

    def sparse_document_frequency(self, name: str) -> tuple[np.ndarray, np.ndarray, int]:
        """``(indices, document frequencies, rows)`` of extension ``name``'s sparse rows (for idf weights).

        Milvus has no aggregate for this, so the rows are read once per committed generation (streamed; only the
        counts are kept) — the client-side step of SVDR's lexical mode on Milvus.
        """
        with self._reading() as view:
            key = (self._field(name, "sparse"), view.gen_max)
            if key not in self._df_cache:
                counts: dict[int, int] = {}
                rows = self._sparse_rows(name, view)
                for r in rows:
                    for j in r["vec"]:
                        counts[int(j)] = counts.get(int(j), 0) + 1
                idx = np.fromiter(counts.keys(), np.int64, count=len(counts))
                df = np.fromiter(counts.values(), np.int64, count=len(counts))
                self._df_cache = {key: (idx, df, len(rows))}
            return self._df_cache[key]
