"""DenseIndex: FAISS inner-product search (Flat, IVF, HNSW) with stable int64 ids and exact pre-filtering."""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.encoders.device import faiss_gpu_count
from rag_hier.errors import DimensionMismatchError, StoreError
from rag_hier.index.kinds import INDEX_KINDS, IndexKind

if TYPE_CHECKING:
    import faiss
else:
    faiss = LazyModule("faiss")  # imported when an index is first built, read or searched

logger = logging.getLogger(__name__)

__all__ = ["INDEX_KINDS", "DenseIndex", "IndexConfig", "IndexKind", "Journal"]


def _sorted_unique(ids: np.ndarray) -> np.ndarray:
    """``np.unique(ids)``, skipping the hash and the sort when ``ids`` are already strictly increasing.

    A filter's matching rowids come sorted and distinct from the store: one pass instead of a hash and a sort.
    """
    if ids.ndim == 1 and (ids.size < 2 or bool((ids[1:] > ids[:-1]).all())):
        return ids
    return np.unique(ids)


@dataclass(frozen=True)
class IndexConfig:
    """How a :class:`DenseIndex` is built and searched.

    Args:
        kind: ``"flat"`` (exact), ``"ivf"`` (inverted lists; exact Flat search until trained) or
            ``"hnsw"`` (graph).
        nlist: IVF lists; ``None`` chooses ``min(4*sqrt(n), n/39)`` when training.
        nprobe: IVF lists probed per query.
        train_min: Vectors needed before IVF trains itself (default ``39*nlist``, or 10,000 with auto nlist).
        hnsw_m: HNSW neighbours per node.
        ef_construction: HNSW build-time beam.
        ef_search: HNSW search-time beam.
        exact_filter_max: A filter that allows at most this many ids is answered by exact search over
            exactly those vectors (and so is any approximate filtered search that found fewer than
            ``top_k`` hits), so a filtered search always returns ``min(top_k, matches)`` hits.
        hnsw_compact_ratio: HNSW cannot remove vectors; deleted ids become tombstones excluded from
            every search, and the graph is rebuilt when tombstones exceed this fraction.
        use_gpu: Search on GPU FAISS (``None``: when FAISS sees a GPU). The CPU index stays the master copy
            that is saved.

    """

    kind: IndexKind = "flat"
    nlist: int | None = None
    nprobe: int = 16
    train_min: int | None = None
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 64
    exact_filter_max: int = 4096
    hnsw_compact_ratio: float = 0.2
    use_gpu: bool | None = None

    def __post_init__(self) -> None:
        if self.kind not in INDEX_KINDS:
            raise ValueError(f"index kind must be one of {', '.join(INDEX_KINDS)}; got {self.kind!r}")
        for name in ("nprobe", "hnsw_m", "ef_construction", "ef_search"):
            if getattr(self, name) < 1:
                raise ValueError(f"IndexConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.nlist is not None and self.nlist < 1:
            raise ValueError(f"IndexConfig.nlist must be >= 1 or None, got {self.nlist}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error naming them."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown index option(s): {', '.join(sorted(unknown))}")
        return cls(**data)


def _auto_nlist(n: int) -> int:
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


FLAT_TOMBSTONES_MAX = 1024
"""A flat index purges its tombstones (one pass over the vectors) once it holds more than this many."""

_TOMBSTONE_KINDS = ("flat", "hnsw")
_IVF_MOVE_CHUNK = 65_536


class Journal:
    """The change set of one write batch on a :class:`DenseIndex`: ids added (with vectors) and ids removed.

    Ids are never reused, so the net change is "these pre-existing ids removed, these new ids added" whatever
    the order of the calls; an id added and removed within the batch cancels out. ``complete`` turns false
    when the index changes in a way a change set cannot describe (IVF training, HNSW compaction), or when
    the change set passes ``limit`` entries (the index is then written whole, and holding a copy of a bulk
    load's vectors would only cost memory).
    """

    def __init__(self, limit: int | None = None) -> None:
        self.complete = True
        self.limit = limit
        self.size = 0
        """Vectors added plus ids removed so far (an upper bound of the net change)."""
        self._added: list[tuple[np.ndarray, np.ndarray]] = []
        self._removed: list[np.ndarray] = []

    def _grow(self, n: int) -> bool:
        self.size += n
        if self.limit is not None and self.size > self.limit:
            self.complete = False
            self._added, self._removed = [], []
        return self.complete

    def added(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Record vectors added under ``ids``."""
        if self.complete and self._grow(len(ids)):
            self._added.append((ids.copy(), vectors.copy()))

    def removed(self, ids: np.ndarray) -> None:
        """Record ``ids`` removed."""
        if self.complete and self._grow(len(ids)):
            self._removed.append(ids.copy())

    def arrays(self, dimension: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(added ids, their float32 vectors, removed ids)``, net of each other, ids ascending."""
        ids, vectors, removed = self.net(np.zeros((0, dimension), np.float32))
        return ids, np.ascontiguousarray(vectors, np.float32), removed

    def net(self, empty: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(added ids, their rows, removed ids)``, net of each other, ids ascending.

        The rows are whatever was recorded with the ids (vectors here; any array with one row per id, e.g.
        the leaves of a tree); ``empty`` is what they are when nothing was added.
        """
        if not self.complete:
            raise ValueError("an incomplete journal describes no change set")
        ids = np.concatenate([a for a, _ in self._added]) if self._added else np.zeros(0, np.int64)
        rows = np.concatenate([v for _, v in self._added]) if self._added else empty
        removed = np.unique(np.concatenate(self._removed)) if self._removed else np.zeros(0, np.int64)
        keep = ~np.isin(ids, removed)
        removed = removed[~np.isin(removed, ids)]
        ids, rows = ids[keep], rows[keep]
        order = np.argsort(ids, kind="stable")
        return ids[order].astype(np.int64), rows[order], removed.astype(np.int64)


class DenseIndex:
    """A FAISS inner-product index addressed by caller-chosen int64 ids.

    Ids are the caller's (the store uses SQLite rowids, never reused). ``flat`` and ``hnsw`` wrap the
    FAISS index in ``IndexIDMap2`` (so vectors can be reconstructed by id); ``ivf`` uses the ids natively
    with a hash-table direct map. ``remove`` deletes from IVF (a hash lookup per id). For HNSW, which FAISS
    cannot delete from, removed ids become tombstones that every search excludes through an id selector, and
    the graph is rebuilt from the live vectors once tombstones pass ``hnsw_compact_ratio``. Flat removes
    lazily too (FAISS's own removal moves every vector after the first one removed, a cost of the index
    size): its tombstones are dropped from the results of a search for ``top_k`` plus their number, which
    is exact, and purged in one pass once they pass :data:`FLAT_TOMBSTONES_MAX`.

    Filtered search (``allowed_ids``) is a pre-filter: FAISS only considers those ids, and if an
    approximate index returns fewer than ``min(top_k, len(allowed_ids))`` hits the query is answered
    exactly over the allowed vectors, so filtered results are never short.
    """

    def __init__(self, dimension: int, config: IndexConfig | None = None) -> None:
        if dimension < 1:
            raise ValueError(f"dimension must be >= 1, got {dimension}")
        self.dimension = dimension
        self.config = config or IndexConfig()
        self._index: faiss.Index = self._new_base_index()
        self._tombstones: set[int] = set()
        self.journal: Journal | None = None
        self._invalidate()  # the caches derived from the index (GPU copy, id map, search plan) start empty

    # -- construction -----------------------------------------------------------------------------
    def _new_base_index(self) -> faiss.Index:
        d = self.dimension
        if self.config.kind == "hnsw":
            hnsw = faiss.IndexHNSWFlat(d, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = self.config.ef_construction
            hnsw.hnsw.efSearch = self.config.ef_search
            return faiss.IndexIDMap2(hnsw)
        # flat, and ivf before it is trained
        return faiss.IndexIDMap2(faiss.IndexFlatIP(d))

    @property
    def is_ivf_trained(self) -> bool:
        """True once an ``ivf`` index has switched from exact search to inverted lists."""
        return isinstance(faiss.downcast_index(self._index), faiss.IndexIVF)

    @property
    def ntotal(self) -> int:
        """Vectors held, tombstoned ones included."""
        return int(self._index.ntotal)

    def __len__(self) -> int:
        return self.ntotal - len(self._tombstones)

    @property
    def tombstones(self) -> frozenset[int]:
        """Ids removed from an HNSW index but still in its graph."""
        return frozenset(self._tombstones)

    def describe(self) -> dict[str, Any]:
        """Runtime facts for manifests and ``rag-hier info``."""
        out: dict[str, Any] = {"kind": self.config.kind, "ntotal": self.ntotal, "live": len(self)}
        if self.config.kind == "ivf":
            out["trained"] = self.is_ivf_trained
            if self.is_ivf_trained:
                out["nlist"] = int(faiss.downcast_index(self._index).nlist)
        if self.config.kind in _TOMBSTONE_KINDS:
            out["tombstones"] = len(self._tombstones)
        return out

    # -- mutation ---------------------------------------------------------------------------------
    def _check_vectors(self, vectors: np.ndarray) -> np.ndarray:
        arr = np.ascontiguousarray(vectors, dtype=np.float32)
        if arr.ndim != 2 or arr.shape[1] != self.dimension:
            raise DimensionMismatchError(
                f"vectors have shape {tuple(arr.shape)}; this index holds {self.dimension}-d vectors"
            )
        if not np.isfinite(arr).all():
            raise ValueError("vectors contain NaN or infinite values")
        return arr

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under ``ids`` (int64, not already present)."""
        added = self._add(ids, vectors)
        if added is None:
            return
        if self.journal is not None:
            self.journal.added(*added)
        if self.config.kind == "ivf" and not self.is_ivf_trained:
            self._maybe_train_ivf()

    def _add(self, ids: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Check and add, nothing else (no journal, no training); the checked ``(ids, vectors)``, None if empty."""
        arr = self._check_vectors(vectors)
        id_arr = np.ascontiguousarray(ids, dtype=np.int64)
        if id_arr.shape != (arr.shape[0],):
            raise ValueError(f"got {id_arr.shape[0]} ids for {arr.shape[0]} vectors")
        if arr.shape[0] == 0:
            return None
        self._invalidate()
        self._index.add_with_ids(arr, id_arr)
        return id_arr, arr

    def _remove_ids(self, ids: np.ndarray) -> int:
        """Remove ``ids`` from the FAISS index itself; how many were there."""
        self._invalidate()
        # IDSelectorArray: the IVF hash-table direct map accepts nothing else.
        return int(self._index.remove_ids(faiss.IDSelectorArray(ids.size, faiss.swig_ptr(ids))))

    def _train_threshold(self) -> int:
        if self.config.train_min is not None:
            return self.config.train_min
        return 39 * self.config.nlist if self.config.nlist else 10_000

    def _maybe_train_ivf(self) -> None:
        n = self.ntotal
        if n < self._train_threshold():
            return
        self.train_ivf()

    def train_ivf(self) -> None:
        """Train the IVF index on the vectors held so far and move them into inverted lists."""
        if self.config.kind != "ivf":
            raise StoreError(f"train_ivf() needs an ivf index, this one is {self.config.kind!r}")
        ids = self.ids()
        n = len(ids)
        nlist = self.config.nlist or _auto_nlist(n)
        if n < nlist:
            raise StoreError(f"cannot train IVF with nlist={nlist} on {n} vectors (need at least nlist)")
        logger.info("training IVF index: %d vectors, nlist=%d", n, nlist)
        quantizer = faiss.IndexFlatIP(self.dimension)
        ivf = faiss.IndexIVFFlat(quantizer, self.dimension, nlist, faiss.METRIC_INNER_PRODUCT)
        ivf.cp.seed = 1234
        max_train = 256 * nlist
        sample = ids
        if n > max_train:
            rng = np.random.default_rng(1234)
            sample = ids[np.sort(rng.choice(n, size=max_train, replace=False))]
        self._journal_broken()
        ivf.train(self.reconstruct(sample))  # only the training sample is copied out
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
        ivf.nprobe = self.config.nprobe
        ivf.own_fields = True
        quantizer.this.disown()
        # moved over in chunks: the flat vectors, the inverted lists and one chunk, never a third full copy
        for start in range(0, n, _IVF_MOVE_CHUNK):
            chunk = ids[start : start + _IVF_MOVE_CHUNK]
            ivf.add_with_ids(self.reconstruct(chunk), chunk)
        self._index = ivf
        self._invalidate()

    def remove(self, ids: np.ndarray) -> int:
        """Remove ``ids``; returns how many were present. HNSW marks them as tombstones."""
        id_arr = np.ascontiguousarray(ids, dtype=np.int64)
        if id_arr.size == 0:
            return 0
        self._invalidate()
        if self.config.kind in _TOMBSTONE_KINDS:
            newly = [i for i in sorted({int(i) for i in id_arr} - self._tombstones) if self._holds(i)]
            self._tombstones.update(newly)
            if self.journal is not None:
                self.journal.removed(np.array(newly, dtype=np.int64))
            limit = self.config.hnsw_compact_ratio * self.ntotal
            if self.config.kind == "flat":
                limit = min(limit, FLAT_TOMBSTONES_MAX)
            if self.ntotal and len(self._tombstones) > limit:
                self.compact()
            return len(newly)
        if self.journal is not None:
            self.journal.removed(id_arr)
        return self._remove_ids(id_arr)

    def apply_segment(self, added_ids: np.ndarray, vectors: np.ndarray, removed_ids: np.ndarray) -> None:
        """Replay one committed change set (see :class:`Journal`): remove, then add, with no training or compaction.

        The writer that journaled the change set rewrote the whole file instead whenever its change trained an
        IVF index or compacted an HNSW graph, so a replay never needs either.
        """
        removed = np.ascontiguousarray(removed_ids, dtype=np.int64)
        if removed.size:
            if self.config.kind in _TOMBSTONE_KINDS:
                self._invalidate()
                self.mark_tombstones(removed)
            else:
                self._remove_ids(removed)
        self._add(added_ids, vectors)

    def _holds(self, i: int) -> bool:
        """Whether id ``i`` is in an ``IndexIDMap2`` (one hash lookup, not a scan of every id)."""
        try:
            self._index.reconstruct(i)
        except RuntimeError:
            return False
        return True

    def _journal_broken(self) -> None:
        """The index changes in a way a change set cannot describe (IVF training, HNSW compaction)."""
        if self.journal is not None:
            self.journal.complete = False

    def mark_tombstones(self, ids: np.ndarray) -> None:
        """Declare ids present in a flat or HNSW index as deleted (used when loading a saved index)."""
        self._tombstones |= {int(i) for i in ids}

    def compact(self) -> None:
        """Drop tombstones: purge them from a flat index, rebuild an HNSW graph from its live vectors."""
        if not self._tombstones:
            return
        if self.config.kind != "hnsw":
            dead = np.array(sorted(self._tombstones), dtype=np.int64)
            logger.debug("purging %d tombstones from a flat index of %d vectors", dead.size, self.ntotal)
            self._journal_broken()
            self._remove_ids(dead)
            self._tombstones = set()
            return
        ids = np.array(sorted(set(self.ids().tolist()) - self._tombstones), dtype=np.int64)
        vectors = self.reconstruct(ids) if len(ids) else np.zeros((0, self.dimension), np.float32)
        logger.info("compacting HNSW index: %d live vectors, %d tombstones", len(ids), len(self._tombstones))
        self._journal_broken()
        self._index = self._new_base_index()
        self._tombstones = set()
        self._invalidate()
        if len(ids):
            self._index.add_with_ids(vectors, ids)

    # -- reading ----------------------------------------------------------------------------------
    def ids(self) -> np.ndarray:
        """All ids held (tombstones included), int64."""
        index = faiss.downcast_index(self._index)
        if isinstance(index, faiss.IndexIDMap2 | faiss.IndexIDMap):
            return faiss.vector_to_array(index.id_map).astype(np.int64, copy=False)
        invlists = index.invlists
        parts = [
            faiss.rev_swig_ptr(invlists.get_ids(i), invlists.list_size(i)).copy()
            for i in range(index.nlist)
            if invlists.list_size(i)
        ]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of ``ids`` (each must be present)."""
        id_arr = np.ascontiguousarray(ids, dtype=np.int64)
        if id_arr.size == 0:
            return np.zeros((0, self.dimension), np.float32)
        return self._index.reconstruct_batch(id_arr)

    def _search_params(self, selector: faiss.IDSelector | None) -> faiss.SearchParameters | None:
        if self.config.kind == "hnsw":
            return faiss.SearchParametersHNSW(sel=selector, efSearch=self.config.ef_search)
        if self.is_ivf_trained:
            return faiss.SearchParametersIVF(sel=selector, nprobe=self.config.nprobe)
        return faiss.SearchParameters(sel=selector) if selector is not None else None

    def _invalidate(self) -> None:
        """Forget caches derived from the FAISS index (after any change to it)."""
        self._gpu_index: faiss.Index | None = None
        self._id_cache: tuple[np.ndarray, np.ndarray] | None = None
        self._plan: tuple[faiss.Index, np.ndarray | None, int] | None = None

    def _fast_plan(self) -> tuple[faiss.Index, np.ndarray | None, int]:
        """What an unfiltered search without tombstones runs, cached until the index changes.

        ``(the FAISS index to search, the id of each of its positions with -1 appended so that FAISS's -1
        padding maps to -1 (None when the index returns ids itself), the number of vectors held)``. Its
        search-time parameters (nprobe, efSearch) are set on the index itself (train_ivf, read, construction).
        """
        if self._plan is None:
            index = faiss.downcast_index(self._index)
            if isinstance(index, faiss.IndexIDMap2):
                base = faiss.downcast_index(index.index)
                ext = faiss.vector_to_array(index.id_map).astype(np.int64, copy=False)
                self._plan = (base, np.append(ext, np.int64(-1)), int(index.ntotal))
            else:
                self._plan = (index, None, int(index.ntotal))
        return self._plan

    def _mapped(self) -> tuple[np.ndarray, np.ndarray] | None:
        """For ``IndexIDMap2`` kinds: (external id of each internal position, argsort of those ids)."""
        if not isinstance(faiss.downcast_index(self._index), faiss.IndexIDMap2):
            return None
        if getattr(self, "_id_cache", None) is None:
            ext = faiss.vector_to_array(self._index.id_map).astype(np.int64, copy=False)
            self._id_cache = (ext, np.argsort(ext, kind="stable"))
        return self._id_cache

    def _positions(self, ids: np.ndarray, mapped: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Internal positions of external ``ids`` (ids not held are dropped)."""
        ext, order = mapped
        if ext.size == 0:
            return np.zeros(0, np.int64)
        where = np.searchsorted(ext, ids, sorter=order)
        where = np.clip(where, 0, ext.size - 1)
        pos = order[where]
        return pos[ext[pos] == ids].astype(np.int64)

    def _selector(
        self, allowed: np.ndarray | None, dead: np.ndarray | None
    ) -> tuple[faiss.IDSelector | None, list[Any]]:
        """An id selector for ``allowed`` minus ``dead``; also returns the objects it needs kept alive."""
        keep: list[Any] = []
        sel: faiss.IDSelector | None = None
        if allowed is not None:
            if allowed.size and int(allowed.max()) < 64 * allowed.size:
                n_bits = int(allowed.max()) + 1
                bitmap = np.zeros((n_bits + 7) // 8, dtype=np.uint8)
                np.bitwise_or.at(bitmap, allowed >> 3, (1 << (allowed & 7)).astype(np.uint8))
                keep.append(bitmap)
                # FAISS takes the bitmap's size in BYTES (an id i is checked iff i // 8 < n)
                sel = faiss.IDSelectorBitmap(bitmap.size, faiss.swig_ptr(bitmap))
            else:
                keep.append(allowed)
                sel = faiss.IDSelectorBatch(allowed.size, faiss.swig_ptr(allowed))
        if dead is not None and dead.size:
            keep.append(dead)
            not_dead = faiss.IDSelectorNot(faiss.IDSelectorBatch(dead.size, faiss.swig_ptr(dead)))
            keep.append(not_dead)
            if sel is None:
                sel = not_dead
            else:
                keep.append(sel)
                sel = faiss.IDSelectorAnd(sel, not_dead)
        if sel is not None:
            keep.append(sel)
        return sel, keep

    def search(
        self, queries: np.ndarray, top_k: int, allowed_ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``top_k`` inner products: ``(scores, ids)``, both ``(n_queries, top_k)``, ids ``-1``-padded.

        ``allowed_ids`` restricts the search to those ids (a pre-filter: the result holds
        ``min(top_k, number of allowed live ids)`` hits).
        """
        q = self._check_vectors(queries)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        n_q = q.shape[0]
        lazy = self.config.kind == "flat" or not self._tombstones  # flat drops tombstones from its results
        if allowed_ids is None and lazy and n_q and not self._use_gpu():
            # the hot path: one FAISS call on the index that holds the vectors, positions mapped to ids in numpy
            base, ext, ntotal = self._fast_plan()
            n_live = ntotal - len(self._tombstones)
            if n_live <= 0:
                return np.full((n_q, top_k), -np.inf, np.float32), np.full((n_q, top_k), -1, np.int64)
            k = min(top_k + len(self._tombstones), ntotal)
            scores, ids = base.search(q, k)
            if ext is not None:
                ids = ext[ids]
            if self._tombstones:
                scores, ids = self._drop_tombstones(scores, ids, top_k)
                k = ids.shape[1]
            if k < top_k or (ids[:, -1] < 0).any():  # padding, or an approximate index came back short
                return self._finish(q, top_k, k, scores, ids, None, n_live)
            return scores, ids
        allowed = None
        if allowed_ids is not None:
            allowed = _sorted_unique(np.asarray(allowed_ids, dtype=np.int64))
            if self._tombstones:
                allowed = allowed[~np.isin(allowed, np.fromiter(self._tombstones, np.int64))]
        n_live = len(self)
        if n_q == 0 or n_live == 0 or (allowed is not None and allowed.size == 0):
            return np.full((n_q, top_k), -np.inf, np.float32), np.full((n_q, top_k), -1, np.int64)
        if allowed is not None and allowed.size <= self.config.exact_filter_max:
            return self._exact_search(q, top_k, allowed)
        k = min(top_k, self.ntotal)
        mapped = self._mapped()
        if allowed is None and not self._tombstones and self._use_gpu():
            scores, ids = self._gpu().search(q, k)
        elif mapped is not None:
            # Search the wrapped index directly and map positions to ids ourselves: IndexIDMap's own
            # label translation opens an OpenMP region per call, which stalls single queries on a busy
            # machine, and its selector translation does more work than selecting positions.
            dead = self._positions(np.fromiter(self._tombstones, np.int64), mapped) if self._tombstones else None
            sel, _keep = self._selector(None if allowed is None else self._positions(allowed, mapped), dead)
            params = self._search_params(sel)
            base = faiss.downcast_index(self._index.index)
            scores, pos = base.search(q, k, params=params) if params is not None else base.search(q, k)
            ids = np.where(pos >= 0, mapped[0][np.clip(pos, 0, None)], -1)
        else:
            sel, _keep = self._selector(allowed, None)
            params = self._search_params(sel)
            scores, ids = self._index.search(q, k, params=params) if params is not None else self._index.search(q, k)
        return self._finish(q, top_k, k, scores, ids, allowed, n_live)

    def _drop_tombstones(self, scores: np.ndarray, ids: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``top_k`` results of each row that are not tombstones (an exact search asked for more)."""
        dead = np.isin(ids, np.fromiter(self._tombstones, np.int64, len(self._tombstones)))
        if not dead.any():
            return scores[:, :top_k], ids[:, :top_k]
        order = np.argsort(dead, axis=1, kind="stable")[:, :top_k]  # live results first, in score order
        ids = np.where(dead, -1, ids)
        scores = np.where(dead, np.float32(-np.inf), scores)
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)

    def _finish(
        self,
        q: np.ndarray,
        top_k: int,
        k: int,
        scores: np.ndarray,
        ids: np.ndarray,
        allowed: np.ndarray | None,
        n_live: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Answer short rows exactly (an approximate index found fewer than it could) and pad to ``top_k``."""
        expected = min(top_k, n_live if allowed is None else allowed.size)
        found = (ids >= 0).sum(axis=1)
        short = np.nonzero(found < expected)[0]
        if short.size:
            logger.debug("%d queries came back short from the approximate index; searching exactly", short.size)
            pool = allowed if allowed is not None else self._live_ids()
            ex_scores, ex_ids = self._exact_search(q[short], k, pool)
            scores[short], ids[short] = ex_scores[:, :k], ex_ids[:, :k]
        if k < top_k:
            pad = top_k - k
            scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
            ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        return scores, ids

    def _live_ids(self) -> np.ndarray:
        ids = self.ids()
        if self._tombstones:
            ids = ids[~np.isin(ids, np.fromiter(self._tombstones, np.int64))]
        return ids

    def _exact_search(self, q: np.ndarray, top_k: int, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vectors = self.reconstruct(pool)
        k = min(top_k, pool.size)
        flat = faiss.IndexFlatIP(self.dimension)
        flat.add(vectors)
        scores, pos = flat.search(q, k)
        ids = np.where(pos >= 0, pool[np.clip(pos, 0, None)], -1)
        if k < top_k:
            scores = np.pad(scores, ((0, 0), (0, top_k - k)), constant_values=-np.inf)
            ids = np.pad(ids, ((0, 0), (0, top_k - k)), constant_values=-1)
        return scores, ids.astype(np.int64)

    # -- GPU --------------------------------------------------------------------------------------
    def _use_gpu(self) -> bool:
        if self.config.use_gpu is False or self.config.kind == "hnsw":
            return False
        available = faiss_gpu_count() > 0
        if self.config.use_gpu and not available:
            logger.warning("use_gpu=True but FAISS sees no GPU (faiss-cpu installed?); searching on CPU")
        return available

    def _gpu(self) -> faiss.Index:
        if self._gpu_index is None:
            self._gpu_index = faiss.index_cpu_to_all_gpus(self._index)
        return self._gpu_index

    # -- persistence ------------------------------------------------------------------------------
    def write(self, path: str | Path) -> None:
        """Write the (CPU) index to ``path`` (the caller makes it atomic); a flat index purges its tombstones first."""
        if self.config.kind == "flat" and self._tombstones:
            self.compact()
        faiss.write_index(self._index, str(path))

    @classmethod
    def read(cls, path: str | Path, dimension: int, config: IndexConfig) -> DenseIndex:
        """Read an index written by :meth:`write`, checking its dimension and kind."""
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            if not Path(path).exists():  # renamed or removed under us: callers look again (state.retrying)
                raise FileNotFoundError(str(path)) from exc
            raise StoreError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0]})") from exc
        if index.d != dimension:
            raise DimensionMismatchError(f"{path}: index holds {index.d}-d vectors, manifest says {dimension}")
        inner = faiss.downcast_index(index)
        if isinstance(inner, faiss.IndexIVF):
            inner.nprobe = config.nprobe
        elif isinstance(inner, faiss.IndexIDMap2):
            base = faiss.downcast_index(inner.index)
            if isinstance(base, faiss.IndexHNSWFlat):
                base.hnsw.efSearch = config.ef_search
        out = cls.__new__(cls)
        out.dimension = dimension
        out.config = config
        out._index = index
        out._tombstones = set()
        out.journal = None
        out._invalidate()
        return out
