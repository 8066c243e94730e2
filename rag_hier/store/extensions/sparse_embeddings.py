"""SparseEmbeddingExtension: sparse vectors that callers store with their passages, kept searchable.

A framework may hand passages over with a ready sparse embedding (Haystack's ``Document.sparse_embedding``:
``{"indices": [...], "values": [...]}`` from SPLADE, BM25-style or SVDR encoders). The store keeps that
payload as JSON in :attr:`Passage.extra`; this extension (``sparse-embeddings``, file
``sparse_embeddings.npz``) mirrors it into a :class:`~rag_hier.index.sparse.SparseRowIndex` so a query's
sparse embedding can be searched by exact inner product, with the store's filters applied first.

Indices may be any non-negative integers (a 30k vocabulary, or 2³¹ hashed buckets): the extension maps the
indices it has seen to compact columns (the sorted ``columns`` array, saved with the rows), so memory
follows the indices in use, not the largest one. Query indices no passage uses contribute nothing.

The extension follows every write like the other extensions (rows of added passages are read from their
``extra`` at :attr:`SparseEmbeddingExtension.key`, rows of removed passages dropped) and is written in the
store's atomic commit; the file is read with ``np.load(allow_pickle=False)``. A small write commits only
its rows, as the original indices (not columns: a new index renumbers the columns) and values, plus the
rowids removed, as a segment of ``store.sqlite``; the file is rewritten once the segments pass a tenth of
the rows, or on ``HierStore.optimize()``.

Example:
    >>> store.add_extension(SparseEmbeddingExtension(key=("haystack", "sparse_embedding")))  # doctest: +SKIP
    >>> SparseEmbeddingExtension.of(store).search([12, 4051], [0.8, 1.3], top_k=5)  # doctest: +SKIP

"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rag_hier._arrays import read_npz
from rag_hier._lazy import LazyModule
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.sparse import SparseRowIndex
from rag_hier.store.extensions.base import StoreExtension, register_extension
from rag_hier.store.segments import Delta

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

if TYPE_CHECKING:
    from rag_hier.corpus.model import Passage
    from rag_hier.store.contract import StoreBackend

logger = logging.getLogger(__name__)

__all__ = ["SparseEmbeddingExtension", "parse_sparse_embedding"]


def parse_sparse_embedding(data: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate a ``{"indices": [...], "values": [...]}`` payload; returns ``(indices int64, values float64)``.

    Raises:
        StoreError: Not a mapping with equally long lists of non-negative integer indices and finite values.

    """
    if not isinstance(data, Mapping) or "indices" not in data or "values" not in data:
        raise StoreError(f"{where}: a sparse embedding must be {{'indices': [...], 'values': [...]}}, got {data!r}")
    indices, values = data["indices"], data["values"]
    if not isinstance(indices, Sequence) or not isinstance(values, Sequence) or len(indices) != len(values):
        raise StoreError(f"{where}: sparse embedding indices and values must be lists of the same length")
    for i in indices:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or i < 0:
            raise StoreError(f"{where}: sparse embedding indices must be non-negative integers, got {i!r}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float | np.number) or not math.isfinite(float(v)):
            raise StoreError(f"{where}: sparse embedding values must be finite numbers, got {v!r}")
    return np.asarray(indices, dtype=np.int64).reshape(-1), np.asarray(values, dtype=np.float64).reshape(-1)


@register_extension
class SparseEmbeddingExtension(StoreExtension):
    """The ``sparse-embeddings`` store extension: caller-supplied sparse passage vectors, searchable.

    Args:
        key: Path into :attr:`Passage.extra` where a passage's sparse embedding is stored as
            ``{"indices": [...], "values": [...]}`` (passages without one have no row).

    """

    name: ClassVar[str] = "sparse-embeddings"
    FILE: ClassVar[str] = "sparse_embeddings.npz"
    FILES: ClassVar[tuple[str, ...]] = (FILE,)

    def __init__(self, key: Sequence[str] = ("sparse_embedding",)) -> None:
        if isinstance(key, str) or not key or not all(isinstance(k, str) and k for k in key):
            raise ValueError(f"key must be a non-empty list of non-empty strings, got {key!r}")
        self.key: tuple[str, ...] = tuple(key)
        self.columns = np.zeros(0, dtype=np.int64)
        """The sparse indices in use, ascending; column ``j`` of :attr:`index` holds index ``columns[j]``."""
        self.index = SparseRowIndex(1, binary=False)
        # the write batch's changes (see begin_delta): (rowids, their (indices, values)) added, (rowids, None) removed
        self._events: list[tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]] | None]] | None = None
        self._recorded = 0
        self._limit = 0

    @classmethod
    def of(cls, store: StoreBackend) -> SparseEmbeddingExtension | None:
        """The store's extension, or ``None`` when it has none."""
        ext = store.extension(cls.name)
        return ext if isinstance(ext, SparseEmbeddingExtension) else None

    # -- payloads -----------------------------------------------------------------------------------
    def payload(self, extra: Mapping[str, Any]) -> Any:
        """The sparse embedding payload stored at :attr:`key` of a passage's ``extra`` (``None`` if absent)."""
        node: Any = extra
        for k in self.key:
            if not isinstance(node, Mapping) or k not in node:
                return None
            node = node[k]
        return node

    # -- rows ---------------------------------------------------------------------------------------
    def _grow(self, new_indices: np.ndarray) -> None:
        """Make room for columns of ``new_indices`` (existing rows are remapped to the merged columns)."""
        merged = np.union1d(self.columns, new_indices)
        if merged.shape[0] == self.columns.shape[0]:
            return
        self._remap(merged)

    def _remap(self, columns: np.ndarray) -> None:
        ids, rows = self.index.matrix()
        index = SparseRowIndex(max(1, int(columns.shape[0])), binary=False)
        if ids.size:
            where = np.searchsorted(columns, self.columns)  # old column j -> new column
            coo = rows.tocoo()
            mat = sp.csr_matrix(
                (coo.data, (coo.row, where[coo.col])), shape=(rows.shape[0], index.vocab_size), dtype=np.float32
            )
            index.add(ids, mat)
        self.columns = np.asarray(columns, dtype=np.int64)
        self.index = index

    def add(self, rowids: Sequence[int] | np.ndarray, embeddings: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add (or replace) the rows of ``rowids``: one ``(indices, values)`` pair each."""
        id_arr = np.asarray(rowids, dtype=np.int64).reshape(-1)
        if id_arr.shape[0] != len(embeddings):
            raise ValueError(f"got {id_arr.shape[0]} ids for {len(embeddings)} sparse embeddings")
        if not len(embeddings):
            return
        self._record(id_arr, [(np.asarray(i, np.int64), np.asarray(v, np.float32)) for i, v in embeddings])
        all_idx = np.concatenate([np.asarray(i, dtype=np.int64) for i, _ in embeddings])
        self._grow(np.unique(all_idx))
        lengths = np.fromiter((len(i) for i, _ in embeddings), dtype=np.int64, count=len(embeddings))
        indptr = np.zeros(len(embeddings) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        values = np.concatenate([np.asarray(v, dtype=np.float32) for _, v in embeddings])
        cols = np.searchsorted(self.columns, all_idx)
        mat = sp.csr_matrix((values, cols, indptr), shape=(len(embeddings), self.index.vocab_size), dtype=np.float32)
        self.index.add(id_arr, mat)  # duplicate indices within one embedding are summed

    def query_vector(self, indices: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray) -> sp.csr_matrix:
        """A ``(1, columns)`` query row: indices no stored passage uses are dropped, duplicates summed."""
        idx, val = parse_sparse_embedding({"indices": list(indices), "values": list(values)}, "query")
        n = self.index.vocab_size
        if self.columns.size == 0 or idx.size == 0:
            return sp.csr_matrix((1, n), dtype=np.float32)
        pos = np.clip(np.searchsorted(self.columns, idx), 0, self.columns.shape[0] - 1)
        known = self.columns[pos] == idx
        data = val[known].astype(np.float32)
        return sp.csr_matrix((data, (np.zeros(data.shape[0], dtype=np.int64), pos[known])), shape=(1, n))

    def search(
        self,
        indices: Sequence[int] | np.ndarray,
        values: Sequence[float] | np.ndarray,
        top_k: int = 10,
        *,
        allowed_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows with the largest inner product with the query ``(indices, values)``, best first.

        Rows whose inner product is 0 (typically: no index in common with the query) are left out, as in
        sparse vector databases. Returns ``(scores float32, rowids int64)``, ties by ascending rowid.
        """
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        q = self.query_vector(indices, values)
        if q.nnz == 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        scores, ids = self.index.search(q, top_k, allowed_ids=allowed_ids)
        keep = (ids[0] >= 0) & (scores[0] != 0)
        return scores[0][keep], ids[0][keep]

    def _passage_rows(self, rowids: np.ndarray, extras: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
        ids: list[int] = []
        embeddings: list[tuple[np.ndarray, np.ndarray]] = []
        for rowid, extra, name in zip(rowids.tolist(), extras, names, strict=True):
            data = self.payload(extra)
            if data is None:
                continue
            embeddings.append(parse_sparse_embedding(data, f"passage {name!r}"))
            ids.append(int(rowid))
        self.add(ids, embeddings)

    # -- rows kept by a store engine (the Milvus backend's sparse field) ---------------------------------
    def sparse_rows(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows in memory: ``(rowids ascending, rows whose columns are the original sparse indices)``."""
        ids, rows = self.index.matrix()
        coo = rows.tocoo()
        width = int(self.columns.max()) + 1 if self.columns.size else 1
        mat = sp.csr_matrix(
            (coo.data, (coo.row, self.columns[coo.col] if coo.nnz else coo.col)), shape=(rows.shape[0], width)
        )
        return ids, mat

    def add_sparse_rows(self, rowids: np.ndarray, rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add rows given as ``(indices, values)`` pairs (as an engine returns them)."""
        self.add(rowids, [(np.asarray(i, np.int64), np.asarray(v, np.float64)) for i, v in rows])

    def clear_rows(self) -> None:
        """Forget the rows in memory (the engine holds them)."""
        self.columns = np.zeros(0, dtype=np.int64)
        self.index = SparseRowIndex(1, binary=False)

    # -- the StoreExtension contract ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """``key``."""
        return {"key": list(self.key)}

    def files(self) -> list[str]:
        """``sparse_embeddings.npz``."""
        return [self.FILE]

    def write(self, paths: Mapping[str, Path]) -> None:
        """Drop columns no live row uses, then save the rows and the columns."""
        used = self.index.document_frequency() > 0
        if self.columns.size and not used[: self.columns.shape[0]].all():
            self._remap(self.columns[used[: self.columns.shape[0]]])
        arrays = {**self.index.to_arrays(), "columns": self.columns}
        with Path(paths[self.FILE]).open("wb") as f:
            np.savez_compressed(f, **arrays)  # type: ignore[arg-type]

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the rows and columns (``allow_pickle=False``), checking that they fit together."""
        path = paths[self.FILE]
        arrays = read_npz(path)  # headers, sizes and inflation checked before anything is allocated
        if "columns" not in arrays:
            raise StoreCorruptedError(f"{path}: missing array 'columns'")
        index = SparseRowIndex.from_arrays(arrays, where=str(path))
        columns = np.asarray(arrays["columns"])
        if (
            columns.ndim != 1
            or not np.issubdtype(columns.dtype, np.integer)
            or (columns.size and (columns[0] < 0 or (np.diff(columns) <= 0).any()))
            or index.binary
            or index.vocab_size != max(1, columns.shape[0])
        ):
            raise StoreCorruptedError(f"{path}: the columns do not match the sparse rows")
        self.columns = columns.astype(np.int64)
        self.index = index

    def build(self, store: StoreBackend) -> None:
        """Read the sparse embedding of every stored passage."""
        self.columns = np.zeros(0, dtype=np.int64)
        self.index = SparseRowIndex(1, binary=False)
        rowids = np.asarray(store.passage_rowids(), dtype=np.int64)
        for start in range(0, rowids.shape[0], 4096):
            part = rowids[start : start + 4096]
            records = store.records(part.tolist())
            present = [r for r in part.tolist() if r in records]
            self._passage_rows(
                np.asarray(present, dtype=np.int64),
                [records[r].extra for r in present],
                [records[r].passage_id for r in present],
            )

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """Index the sparse embeddings the new passages carry."""
        self.index.remove(rowids)
        self._passage_rows(np.asarray(rowids, dtype=np.int64), [p.extra for p in passages], [p.id for p in passages])

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Drop the rows of removed passages."""
        if self.index.remove(rowids):
            self._record(np.asarray(rowids, np.int64), None)

    # -- incremental commits ----------------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = {
        "ids": ("<i8", 1),
        "indptr": ("<i8", 1),
        "indices": ("<i8", 1),
        "values": ("<f4", 1),
        "removed": ("<i8", 1),
    }

    def _record(self, ids: np.ndarray, embeddings: list[tuple[np.ndarray, np.ndarray]] | None) -> None:
        if self._events is None:
            return
        self._recorded += len(ids)
        if self._recorded > self._limit:
            self._events = None  # too large for a segment: the file is written whole
            return
        self._events.append((ids.copy(), embeddings))

    def begin_delta(self, limit: int) -> None:
        """Record the rows added (original indices and values) and the rowids removed by the write batch."""
        self._events, self._recorded, self._limit = [], 0, limit

    def delta(self) -> Delta | None:
        """Each rowid's last change: its row (CSR over the original indices) or its removal."""
        if self._events is None:
            return None
        decided = np.zeros(0, np.int64)
        ids: list[int] = []
        rows: list[tuple[np.ndarray, np.ndarray]] = []
        removed: list[np.ndarray] = []
        for event_ids, embeddings in reversed(self._events):
            if embeddings is None:
                removed.append(event_ids)
            else:
                fresh = ~np.isin(event_ids, decided)
                for j in np.flatnonzero(fresh).tolist():
                    ids.append(int(event_ids[j]))
                    rows.append(embeddings[j])
            decided = np.union1d(decided, event_ids)
        lengths = np.fromiter((r[0].size for r in rows), np.int64, count=len(rows))
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        gone = np.unique(np.concatenate(removed)) if removed else np.zeros(0, np.int64)
        arrays = {
            "ids": np.asarray(ids, np.int64),
            "indptr": indptr,
            "indices": np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, np.int64),
            "values": np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, np.float32),
            "removed": gone,
        }
        return Delta(arrays, len(ids) + int(gone.size))

    def end_delta(self) -> None:
        """Stop recording."""
        self._events = None

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay a committed segment: drop the removed rows, then add the rows (their columns mapped anew)."""
        ids, indptr, indices, values = arrays["ids"], arrays["indptr"], arrays["indices"], arrays["values"]
        n = ids.size
        if indptr.shape != (n + 1,) or int(indptr[0]) != 0 or (np.diff(indptr) < 0).any():
            raise ValueError(f"row pointers do not describe {n} rows")
        if int(indptr[-1]) != indices.size or values.shape != indices.shape:
            raise ValueError(f"{indices.size} indices and {values.size} values for rows ending at {int(indptr[-1])}")
        if (indices < 0).any() or np.unique(ids).size != n:
            raise ValueError("negative sparse indices or repeated rowids")
        self.index.remove(arrays["removed"])
        bounds = indptr.tolist()
        self.add(ids, [(indices[a:b], values[a:b]) for a, b in itertools.pairwise(bounds)])

    def delta_size(self) -> int:
        """Rows held."""
        return self.index.rows_held

    def verify(self, store: StoreBackend) -> None:
        """Every row belongs to a stored passage."""
        held = self.index.ids()
        if held.size and not np.isin(held, store.passage_rowids()).all():
            raise StoreCorruptedError(
                f"{store.location}/{self.FILE}: holds sparse embeddings of passages that are not stored"
            )

    def describe(self) -> dict[str, Any]:
        """Key, columns in use and size."""
        return {"key": list(self.key), "columns": int(self.columns.shape[0]), **self.index.describe()}
