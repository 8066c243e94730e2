"""SparseRowIndex: rows of a sparse matrix over a vocabulary, keyed by stable ids, searched by sparse products.

The storage and search engine under SVDR's two indexes: the binary token index T(D)
(:class:`~rag_hier.index.token.TokenIndex`) and the learned sparse passage vectors E(D) kept by the
``svdr-vectors`` store extension (:class:`~rag_hier.store.extensions.svdr_vectors.SparseVectorExtension`).

Rows live in one scipy CSR matrix (rows appended since the last consolidation wait in a list). Removed
rows are masked and dropped by :meth:`SparseRowIndex.compact` (which :meth:`save` runs first). Scores
are inner products ``Q · Rᵀ`` computed one of two ways, both exact:

- ``"matmul"``: sparse rows × dense query block (cost ∝ nnz of the index × queries);
- ``"inverted"``: sparse queries × the transposed index — its rows are posting lists, so the cost is
  the total length of the postings the queries touch.

``method="auto"`` estimates the inverted cost (postings touched) against the matmul cost (nnz × queries)
from the document frequencies and takes the inverted path below a ratio of 0.1, per query block
(``benchmarks/retrieval/bench_svdr.py`` measures both on SciFact).

On disk (``np.savez_compressed``, read back with ``np.load(allow_pickle=False)``): row ids as deltas,
row lengths, column ids as deltas within each row (uint16 for vocabularies up to 65,536 tokens), and
the float32 values of a weighted index — CSR in a compact, lossless encoding. Columns and values are
stored as byte planes (all first bytes, then all second bytes, ...), which deflate compresses ~15%
better (SciFact: 1.07 bytes per token instead of 1.29).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier._arrays import read_npz
from rag_hier._lazy import LazyModule
from rag_hier.errors import StoreCorruptedError
from rag_hier.index.kinds import SearchMethod
from rag_hier.index.selection import top_k_rows

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

logger = logging.getLogger(__name__)

__all__ = [
    "RowJournal",
    "SearchMethod",
    "SparseRowIndex",
]

_METHODS = ("auto", "matmul", "inverted")
_PENDING_SCAN_MAX = 65536
"""A removal scans up to this many pending (not yet stacked) rows instead of stacking every row first."""
_FORMAT = "rag-hier-sparse-rows"
_VERSION = 1


def _byte_planes(values: np.ndarray) -> np.ndarray:
    """``(itemsize, n)`` uint8: byte ``b`` of every value in row ``b`` (deflate compresses this far better)."""
    return np.ascontiguousarray(values.view(np.uint8).reshape(-1, values.dtype.itemsize).T)


def _from_planes(planes: np.ndarray, dtypes: Mapping[int, str]) -> np.ndarray:
    """Inverse of :func:`_byte_planes` (``dtypes``: allowed itemsize → dtype); raises ``ValueError``."""
    arr = np.asarray(planes)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[0] not in dtypes:
        raise ValueError(f"byte planes of shape {arr.shape} and dtype {arr.dtype}")
    return np.ascontiguousarray(arr.T).view(dtypes[arr.shape[0]]).ravel()


class RowJournal:
    """The change set of one write batch on a :class:`SparseRowIndex`: rows added (or replaced), ids removed.

    Replayed as "remove these ids, then add these rows", which gives the writer's result whatever the order
    of its calls: a row added and then removed within the batch is dropped from the added rows and its id
    kept among the removed ones (harmless if it never existed before); of two adds of one id the last wins.
    ``complete`` turns false once the change passes ``limit`` entries (the index is then written whole, and
    holding a copy of a bulk load's rows would only cost memory).
    """

    def __init__(self, limit: int | None = None) -> None:
        self.complete = True
        self.limit = limit
        self.size = 0
        """Rows added plus ids removed so far (an upper bound of the net change)."""
        self._events: list[tuple[np.ndarray, sp.csr_matrix | None]] = []  # (ids, rows) added, or (ids, None) removed

    def _grow(self, n: int) -> bool:
        self.size += n
        if self.limit is not None and self.size > self.limit:
            self.complete = False
            self._events = []
        return self.complete

    def abandon(self) -> None:
        """Stop describing the change (it can no longer be written as one change set)."""
        self.complete = False
        self._events = []

    def added(self, ids: np.ndarray, rows: sp.csr_matrix) -> None:
        """Record ``rows`` added under ``ids``."""
        if self.complete and self._grow(len(ids)):
            self._events.append((np.asarray(ids, dtype=np.int64).copy(), rows))

    def removed(self, ids: np.ndarray) -> None:
        """Record ``ids`` removed."""
        if self.complete and self._grow(len(ids)):
            self._events.append((np.asarray(ids, dtype=np.int64).copy(), None))

    def arrays(self, vocab_size: int) -> tuple[np.ndarray, sp.csr_matrix, np.ndarray]:
        """``(added ids, their rows, removed ids)``: the net change, each id's last event deciding it."""
        if not self.complete:
            raise ValueError("an incomplete journal describes no change set")
        decided = np.zeros(0, np.int64)
        ids_parts: list[np.ndarray] = []
        rows_parts: list[sp.csr_matrix] = []
        removed_parts: list[np.ndarray] = []
        for ids, rows in reversed(self._events):
            fresh = ~np.isin(ids, decided)
            if rows is not None and fresh.any():
                ids_parts.append(ids[fresh])
                rows_parts.append(sp.csr_matrix(rows[np.flatnonzero(fresh)]))
            elif rows is None:
                removed_parts.append(ids)
            decided = np.union1d(decided, ids)
        removed = np.unique(np.concatenate(removed_parts)) if removed_parts else np.zeros(0, np.int64)
        if not ids_parts:
            return np.zeros(0, np.int64), sp.csr_matrix((0, vocab_size), dtype=np.float32), removed
        ids = np.concatenate(ids_parts[::-1])
        rows = sp.csr_matrix(sp.vstack(rows_parts[::-1], format="csr", dtype=np.float32))
        order = np.argsort(ids, kind="stable")
        return ids[order], sp.csr_matrix(rows[order]), removed


class SparseRowIndex:
    """Sparse rows over a vocabulary, keyed by int64 ids; exact inner-product search.

    Args:
        vocab_size: Number of columns (the tokenizer's vocabulary size).
        binary: Rows are 0/1 sets (values are stored implicitly and forced to 1 on :meth:`add`).

    Example:
        >>> index = SparseRowIndex(8, binary=True)
        >>> index.add(np.array([10, 11]), sp.csr_matrix(np.array([[1, 0, 1, 0, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0, 0]])))
        >>> scores, ids = index.search(sp.csr_matrix(np.array([[0, 0, 2.0, 1.0, 0, 0, 0, 0]])), top_k=2)
        >>> ids.tolist(), scores.tolist()
        ([[11, 10]], [[3.0, 2.0]])

    """

    def __init__(self, vocab_size: int, *, binary: bool = False) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        self.vocab_size = int(vocab_size)
        self.binary = bool(binary)
        self._ids = np.zeros(0, dtype=np.int64)
        self._live = np.zeros(0, dtype=bool)
        self._csr: sp.csr_matrix = sp.csr_matrix((0, self.vocab_size), dtype=np.float32)
        self._pending: list[tuple[np.ndarray, sp.csr_matrix]] = []
        self._lookup: tuple[np.ndarray, np.ndarray] | None = None
        self._inverted: sp.csr_matrix | None = None
        self._df: np.ndarray | None = None
        self._col_counts: np.ndarray | None = None
        self.journal: RowJournal | None = None
        """Records the changes of a write batch while set (see :class:`RowJournal`)."""

    # -- size and membership ------------------------------------------------------------------------
    def _consolidate(self) -> None:
        if not self._pending:
            return
        held = self._ids.shape[0]
        new_ids = np.concatenate([i for i, _ in self._pending])
        mats = [self._csr, *(m for _, m in self._pending)]
        self._ids = np.concatenate([self._ids, new_ids])
        self._live = np.concatenate([self._live, np.ones(new_ids.shape[0], dtype=bool)])
        self._csr = sp.csr_matrix(sp.vstack(mats, format="csr", dtype=np.float32))
        self._pending = []
        self._invalidate()
        lookup = self._lookup
        if lookup is not None and new_ids.size and (lookup[0].size == 0 or new_ids.min() > lookup[0][-1]):
            # ids appended above every held one (the store's rowids): extend the lookup, no sort of all ids
            order = np.argsort(new_ids, kind="stable")
            self._lookup = (np.concatenate([lookup[0], new_ids[order]]), np.concatenate([lookup[1], held + order]))
        else:
            self._lookup = None

    def _invalidate(self) -> None:
        """Drop the caches derived from the rows (the id lookup depends only on the ids: it stays)."""
        self._inverted = None
        self._df = None
        self._col_counts = None

    def __len__(self) -> int:
        self._consolidate()
        return int(self._live.sum())

    @property
    def rows_held(self) -> int:
        """Rows held (removed-but-not-compacted ones included), counted without consolidating."""
        return int(self._ids.shape[0]) + sum(int(i.shape[0]) for i, _ in self._pending)

    @property
    def n_rows(self) -> int:
        """Rows held, removed-but-not-compacted ones included."""
        self._consolidate()
        return int(self._ids.shape[0])

    @property
    def nnz(self) -> int:
        """Non-zeros of the live rows."""
        self._consolidate()
        lengths = np.diff(self._csr.indptr)
        return int(lengths[self._live].sum())

    def ids(self) -> np.ndarray:
        """Ids of the live rows, ascending."""
        self._consolidate()
        return np.sort(self._ids[self._live])

    def _positions(self, ids: np.ndarray) -> np.ndarray:
        """Row position of each id among live rows (``-1`` when absent)."""
        self._consolidate()
        return self._held_positions(ids)

    def _held_positions(self, ids: np.ndarray) -> np.ndarray:
        """Row position of each id among the live consolidated rows (``-1`` when absent; pending rows ignored).

        The lookup sorts every held id, masked ones included, so removals leave it valid; of an id held
        twice (masked, then added again) the later row is the only one that can be live.
        """
        if self._lookup is None:
            order = np.argsort(self._ids, kind="stable")
            self._lookup = (self._ids[order], order)
        keys, pos = self._lookup
        q = np.asarray(ids, dtype=np.int64).ravel()
        if keys.shape[0] == 0:
            return np.full(q.shape[0], -1, dtype=np.int64)
        at = np.searchsorted(keys, q, side="right") - 1
        safe = np.clip(at, 0, keys.shape[0] - 1)
        row = pos[safe]
        return np.where((at >= 0) & (keys[safe] == q) & self._live[row], row, -1)

    def contains(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Boolean mask: which of ``ids`` have a live row."""
        return self._positions(np.asarray(ids, dtype=np.int64)) >= 0

    # -- writes -------------------------------------------------------------------------------------
    def add(self, ids: Sequence[int] | np.ndarray, rows: sp.spmatrix | sp.sparray) -> None:
        """Add (or replace) rows: ``rows[i]`` under ``ids[i]``; a live row with the same id is replaced."""
        id_arr = np.asarray(ids, dtype=np.int64).ravel()
        mat = sp.csr_matrix(rows, dtype=np.float32)
        if mat.shape[0] != id_arr.shape[0]:
            raise ValueError(f"got {id_arr.shape[0]} ids for {mat.shape[0]} rows")
        if mat.shape[1] != self.vocab_size:
            raise ValueError(f"rows have {mat.shape[1]} columns; this index has vocab_size={self.vocab_size}")
        if np.unique(id_arr).shape[0] != id_arr.shape[0]:
            raise ValueError("duplicate ids in one add()")
        if id_arr.shape[0] == 0:
            return
        mat = mat.copy()
        mat.sum_duplicates()
        mat.sort_indices()
        if self.binary:
            mat.data[:] = 1.0
        elif not np.isfinite(mat.data).all():
            raise ValueError("rows contain NaN or infinite values")
        self._mask(id_arr)
        self._pending.append((id_arr, mat))
        self._invalidate()
        if self.journal is not None:
            self.journal.added(id_arr, mat)

    def remove(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mask the rows of ``ids`` (unknown ids are ignored); returns how many were live."""
        id_arr = np.asarray(ids, dtype=np.int64).ravel()
        n = self._mask(id_arr)
        if n and self.journal is not None:
            self.journal.removed(id_arr)
        return n

    def widen(self, vocab_size: int) -> None:
        """Grow the vocabulary to ``vocab_size`` columns; existing rows keep their columns (nothing is copied).

        For vocabularies that grow as rows arrive (hashed terms numbered in order of first appearance). A
        journal recording the batch cannot hold rows of two widths: it is marked incomplete (the owner then
        writes its file whole).
        """
        if vocab_size < self.vocab_size:
            raise ValueError(f"cannot narrow the vocabulary from {self.vocab_size} to {vocab_size} columns")
        if vocab_size == self.vocab_size:
            return

        def wide(m: sp.csr_matrix) -> sp.csr_matrix:
            return sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], vocab_size))

        self.vocab_size = int(vocab_size)
        self._csr = wide(self._csr)
        self._pending = [(ids, wide(m)) for ids, m in self._pending]
        self._invalidate()
        if self.journal is not None:
            self.journal.abandon()

    def apply_delta(
        self, ids: np.ndarray, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, removed: np.ndarray
    ) -> None:
        """Replay one committed change set (see :class:`RowJournal`): remove ``removed``, then add the CSR rows.

        ``data`` is empty for a binary index. Raises ``ValueError`` when the arrays do not describe CSR rows
        of this vocabulary (checked before anything changes).
        """
        n = ids.shape[0]
        if indptr.shape != (n + 1,) or int(indptr[0]) != 0 or (np.diff(indptr) < 0).any():
            raise ValueError(f"row pointers do not describe {n} rows")
        if int(indptr[-1]) != indices.shape[0]:
            raise ValueError(f"row pointers end at {int(indptr[-1])}, {indices.shape[0]} column ids given")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= self.vocab_size):
            raise ValueError(f"column ids outside 0..{self.vocab_size - 1}")
        if self.binary:
            if data.size:
                raise ValueError("values given for a binary index")
            values = np.ones(indices.shape[0], np.float32)
        else:
            if data.shape != indices.shape:
                raise ValueError(f"{data.shape[0]} values for {indices.shape[0]} column ids")
            values = data.astype(np.float32)
        if np.unique(ids).shape[0] != n:
            raise ValueError("duplicate row ids")
        rows = sp.csr_matrix((values, indices.astype(np.int32), indptr.astype(np.int64)), shape=(n, self.vocab_size))
        self.remove(removed)
        self.add(ids, rows)

    def _mask(self, ids: np.ndarray) -> int:
        """Mask the live rows of ``ids`` (pending rows are dropped from the pending list: no consolidation)."""
        q = np.asarray(ids, dtype=np.int64).ravel()
        n = 0
        if self.rows_held - self._ids.shape[0] > _PENDING_SCAN_MAX:
            self._consolidate()  # many pending rows: one stack, then the lookup, beats a scan per call
        if self._pending:
            kept = []
            for pid, mat in self._pending:
                hit = np.isin(pid, q)
                if hit.any():
                    n += int(hit.sum())
                    keep = np.flatnonzero(~hit)
                    if keep.size:
                        kept.append((pid[keep], sp.csr_matrix(mat[keep])))
                else:
                    kept.append((pid, mat))
            self._pending = kept
        pos = self._held_positions(q)
        pos = pos[pos >= 0]
        if pos.size:
            self._live[pos] = False
        n += int(pos.size)
        if n:
            self._invalidate()
        return n

    def retain(self, ids: Sequence[int] | np.ndarray) -> int:
        """Remove every live row whose id is not in ``ids``; returns how many were removed."""
        self._consolidate()
        drop = self._live & ~np.isin(self._ids, np.asarray(ids, dtype=np.int64))
        if drop.any():
            if self.journal is not None:
                self.journal.removed(self._ids[drop])
            self._live[drop] = False
            self._invalidate()
        return int(drop.sum())

    def compact(self) -> None:
        """Drop masked rows for good."""
        self._consolidate()
        if self._live.all():
            return
        keep = np.flatnonzero(self._live)
        self._ids = self._ids[keep]
        self._csr = sp.csr_matrix(self._csr[keep])
        self._live = np.ones(keep.shape[0], dtype=bool)
        self._invalidate()
        self._lookup = None

    # -- reads --------------------------------------------------------------------------------------
    def rows(self, ids: Sequence[int] | np.ndarray) -> sp.csr_matrix:
        """The rows of ``ids`` in that order (a missing id raises ``KeyError``)."""
        id_arr = np.asarray(ids, dtype=np.int64).ravel()
        pos = self._positions(id_arr)
        if (pos < 0).any():
            raise KeyError(f"no row for id {int(id_arr[np.argmax(pos < 0)])}")
        return sp.csr_matrix(self._csr[pos])

    def matrix(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """``(ids, rows)`` of the live rows, ids ascending."""
        ids = self.ids()
        return ids, self.rows(ids)

    def document_frequency(self) -> np.ndarray:
        """Number of live rows in which each column is non-zero (``(vocab_size,)`` int64)."""
        self._consolidate()
        if self._df is None:
            live = sp.csr_matrix(self._csr[np.flatnonzero(self._live)]) if not self._live.all() else self._csr
            self._df = np.bincount(live.indices, minlength=self.vocab_size).astype(np.int64)
        return self._df

    def _transposed(self) -> sp.csr_matrix:
        if self._inverted is None:
            self._inverted = sp.csr_matrix(self._csr.T.tocsr())
        return self._inverted

    def _check_queries(self, queries: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_matrix:
        q = sp.csr_matrix(queries, dtype=np.float32)
        if q.shape[1] != self.vocab_size:
            raise ValueError(f"queries have {q.shape[1]} columns; this index has vocab_size={self.vocab_size}")
        return q

    def score(self, queries: sp.spmatrix | sp.sparray | np.ndarray, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Inner products of each query with the rows of ``ids``: ``(nq, len(ids))`` float32."""
        q = self._check_queries(queries)
        return np.asarray((q @ self.rows(ids).T).toarray(), dtype=np.float32)

    def _block_scores(self, q: sp.csr_matrix, method: str) -> np.ndarray:
        if method == "auto":
            if self._col_counts is None:
                self._col_counts = np.bincount(self._csr.indices, minlength=self.vocab_size)
            df = self._col_counts
            inverted_work = float(df[q.indices].sum())
            matmul_work = float(self._csr.nnz) * q.shape[0]
            # the inverted-list product touches only the query terms' columns, the matrix product every stored
            # entry: below a tenth of the matrix product's work the inverted lists win (alpha, beta and full
            # queries on SciFact all fall below it)
            method = "inverted" if inverted_work < 0.1 * matmul_work else "matmul"
        if method == "inverted":
            return np.asarray((q @ self._transposed()).toarray(), dtype=np.float32)
        dense = np.asarray(q.toarray(), dtype=np.float32)
        return np.ascontiguousarray(np.asarray(self._csr @ dense.T, dtype=np.float32).T)

    def search(
        self,
        queries: sp.spmatrix | sp.sparray | np.ndarray,
        top_k: int = 10,
        *,
        allowed_ids: np.ndarray | None = None,
        method: SearchMethod = "auto",
        batch_size: int = 64,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``top_k`` rows by inner product with each query row.

        Args:
            queries: ``(nq, vocab_size)`` sparse (or dense) query vectors.
            top_k: Results per query.
            allowed_ids: Restrict the search to these ids (``None``: every live row).
            method: ``"auto"``, ``"matmul"`` or ``"inverted"`` (same results, different cost).
            batch_size: Queries scored per block (bounds the ``(batch, rows)`` score matrix).

        Returns:
            ``(scores, ids)``, both ``(nq, top_k)``, padded with ``-inf`` / ``-1``; ties in ascending id.

        """
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if method not in _METHODS:
            raise ValueError(f"method must be one of {', '.join(_METHODS)}; got {method!r}")
        q = self._check_queries(queries)
        self._consolidate()
        mask = self._live.copy()
        if allowed_ids is not None:
            mask &= np.isin(self._ids, np.asarray(allowed_ids, dtype=np.int64))
        nq = q.shape[0]
        out_s = np.full((nq, top_k), -np.inf, dtype=np.float32)
        out_i = np.full((nq, top_k), -1, dtype=np.int64)
        if nq == 0 or not mask.any():
            return out_s, out_i
        cols = np.flatnonzero(mask)
        sub_ids = self._ids[cols]
        whole = cols.shape[0] == self._ids.shape[0]
        for start in range(0, nq, batch_size):
            block = self._block_scores(q[start : start + batch_size], method)
            if not whole:
                block = block[:, cols]
            s, i = top_k_rows(block, sub_ids, top_k)
            out_s[start : start + s.shape[0]] = s
            out_i[start : start + s.shape[0]] = i
        return out_s, out_i

    # -- persistence --------------------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The compacted rows as plain numeric arrays (what :meth:`save` writes)."""
        self.compact()
        csr = self._csr
        lengths = np.diff(csr.indptr).astype(np.int64)
        cols = csr.indices.astype(np.int64)
        deltas = cols.copy()
        if cols.size:
            deltas[1:] -= cols[:-1]
            starts = csr.indptr[:-1][lengths > 0]
            deltas[starts] = cols[starts]
        col_dtype = "<u2" if self.vocab_size <= 65536 else "<u4"
        len_dtype = np.uint16 if lengths.size == 0 or lengths.max() < 65536 else np.uint32
        id_deltas = np.diff(self._ids, prepend=np.int64(0)) if self._ids.size else self._ids
        arrays = {
            "format": np.array(_FORMAT),
            "header": np.array([_VERSION, self.vocab_size, int(self.binary), self._ids.shape[0]], dtype=np.int64),
            "id_deltas": id_deltas.astype(np.int64),
            "lengths": lengths.astype(len_dtype),
            "col_delta_planes": _byte_planes(deltas.astype(col_dtype)),
        }
        if not self.binary:
            arrays["value_planes"] = _byte_planes(np.asarray(csr.data, dtype="<f4"))
        return arrays

    def save(self, path: str | Path, *, compressed: bool = True) -> None:
        """Write the index to ``path`` (``.npz``; no pickled objects)."""
        arrays = self.to_arrays()
        with Path(path).open("wb") as f:
            if compressed:
                np.savez_compressed(f, **arrays)  # type: ignore[arg-type]
            else:
                np.savez(f, **arrays)  # type: ignore[arg-type]

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], where: str = "index") -> SparseRowIndex:
        """Rebuild an index from :meth:`to_arrays` output, validating every array."""

        def bad(msg: str) -> StoreCorruptedError:
            return StoreCorruptedError(f"{where}: {msg}")

        try:
            fmt = str(arrays["format"])
            header = np.asarray(arrays["header"])
            id_deltas = np.asarray(arrays["id_deltas"], dtype=np.int64)
            lengths = np.asarray(arrays["lengths"]).astype(np.int64)
            deltas = _from_planes(arrays["col_delta_planes"], {2: "<u2", 4: "<u4"}).astype(np.int64)
        except KeyError as exc:
            raise bad(f"missing array {exc}") from exc
        except ValueError as exc:
            raise bad(str(exc)) from exc
        if fmt != _FORMAT or header.shape != (4,):
            raise bad("not a rag-hier sparse index")
        version, vocab_size, binary, n = (int(x) for x in header)
        if version != _VERSION:
            raise bad(f"sparse index version {version}; this rag-hier reads version {_VERSION}")
        if id_deltas.shape != (n,) or lengths.shape != (n,) or (lengths < 0).any():
            raise bad("row arrays do not match the recorded row count")
        if int(lengths.sum()) != deltas.shape[0]:
            raise bad("column array does not match the row lengths")
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        cols = np.cumsum(deltas)
        if cols.size:
            # per-row prefix sums: subtract the running total reached before each row starts
            starts = indptr[:-1]
            base = np.where(starts > 0, cols[np.maximum(starts - 1, 0)], 0)
            cols = cols - np.repeat(base, lengths)
            first = np.zeros(cols.shape[0], dtype=bool)
            first[starts[lengths > 0]] = True
            if (deltas[~first] <= 0).any() or (cols < 0).any() or (cols >= vocab_size).any():
                raise bad("column ids out of order or out of range")
        ids = np.cumsum(id_deltas)
        if np.unique(ids).shape[0] != ids.shape[0]:
            raise bad("duplicate row ids")
        if binary:
            data = np.ones(cols.shape[0], dtype=np.float32)
        else:
            if "value_planes" not in arrays:
                raise bad("missing array 'value_planes'")
            try:
                data = _from_planes(arrays["value_planes"], {4: "<f4"}).astype(np.float32)
            except ValueError as exc:
                raise bad(str(exc)) from exc
            if data.shape != cols.shape or not np.isfinite(data).all():
                raise bad("values do not match the columns, or are not finite")
        index = cls(vocab_size, binary=bool(binary))
        index._ids = ids
        index._live = np.ones(n, dtype=bool)
        index._csr = sp.csr_matrix((data, cols.astype(np.int32), indptr), shape=(n, vocab_size))
        return index

    @classmethod
    def load(cls, path: str | Path) -> SparseRowIndex:
        """Read an index written by :meth:`save` (``np.load(allow_pickle=False)``: nothing is unpickled)."""
        arrays = read_npz(path)  # headers, sizes and inflation checked before anything is allocated
        return cls.from_arrays(arrays, where=str(path))

    def describe(self) -> dict[str, Any]:
        """Size facts (rows, live rows, non-zeros)."""
        return {"rows": self.n_rows, "live": len(self), "nnz": self.nnz, "binary": self.binary}
