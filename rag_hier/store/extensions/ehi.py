"""EHIExtension: a trained EHI indexer and the leaf of every passage, kept with the collection.

Attach with ``store.add_extension(EHIExtension("my-ehi"))`` (the directory written by ``rag-hier train ehi``,
or an :class:`~rag_hier.index.ehi.EHIIndexer`), or ``rag-hier index ... --ehi DIR``: every passage vector
already stored is routed to its most probable leaf (or its ``leaves_per_passage`` most probable leaves, the
paper's d2l), and the indexer's parameters and the leaf lists are written in the store's atomic commit as
``ehi_indexer.safetensors`` + ``ehi_indexer.json`` and ``ehi_leaves.safetensors``. Afterwards the extension
follows the store's writes without retraining: new passages are routed by the learned indexer, deleted ones
leave their leaves. A small write commits only its change (the leaves of the passages added, the passages
removed) as a segment of ``store.sqlite``: the indexer's parameters do not change between trainings, and the
leaf lists are rewritten only once the segments pass a tenth of them, or on ``HierStore.optimize()``.
Nothing is unpickled: the files load through safetensors and JSON and are checked (names,
shapes, dtypes, ranges) on load. Search it with :class:`rag_hier.retrieval.ehi.EHIRetriever` (strategy ``ehi``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from rag_hier.errors import DimensionMismatchError, ParameterError, StoreCorruptedError, StoreError
from rag_hier.index.dense import Journal
from rag_hier.index.ehi import EHIIndexer, LeafAssignment, ehi_search
from rag_hier.store.extensions.base import StoreExtension, register_extension
from rag_hier.store.segments import Delta

if TYPE_CHECKING:
    from rag_hier.corpus.model import Passage
    from rag_hier.index.tree import TreeSearchResult
    from rag_hier.store.contract import StoreBackend

__all__ = ["EHI_FILES", "EHIExtension"]

EHI_FILES = ("ehi_indexer.safetensors", "ehi_indexer.json", "ehi_leaves.safetensors")
LEAVES_FORMAT = "rag-hier-ehi-leaves"
LEAVES_VERSION = "1"


@register_extension
class EHIExtension(StoreExtension):
    """A trained :class:`~rag_hier.index.ehi.EHIIndexer` and the leaves of the store's passages (items = FAISS ids).

    Args:
        indexer: The indexer, or the directory holding ``ehi_indexer.safetensors`` + ``ehi_indexer.json``
            (what ``rag-hier train ehi`` writes); ``None`` only when the store loads the extension.
        leaves_per_passage: Leaves each passage is filed under (1: its most probable leaf; ``k > 1``: its ``k``
            most probable leaves, the paper's d2l).

    """

    name = "ehi"
    FILES = EHI_FILES

    def __init__(self, indexer: EHIIndexer | str | Path | None = None, leaves_per_passage: int = 1) -> None:
        if isinstance(leaves_per_passage, bool) or not isinstance(leaves_per_passage, int) or leaves_per_passage < 1:
            raise ParameterError(f"leaves_per_passage must be an integer >= 1, got {leaves_per_passage!r}")
        if isinstance(indexer, str | Path):
            indexer = EHIIndexer.from_pretrained(indexer, device="cpu")
        if indexer is not None and not isinstance(indexer, EHIIndexer):
            raise ParameterError(f"indexer must be an EHIIndexer or a directory, got {type(indexer).__name__}")
        if indexer is not None and leaves_per_passage > indexer.n_leaves:
            raise ParameterError(
                f"leaves_per_passage {leaves_per_passage} is more than the indexer's {indexer.n_leaves} leaves"
            )
        self.indexer = indexer.cpu().eval() if indexer is not None else None
        self.leaves_per_passage = leaves_per_passage
        self._rowids = np.zeros(0, np.int64)
        self._leaves = np.zeros((0, leaves_per_passage), np.int64)
        self._assignment: LeafAssignment | None = None
        self._vectors: np.ndarray | None = None
        self._journal: Journal | None = None  # the write batch's leaf lists (see begin_delta)

    # -- configuration and files ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """``leaves_per_passage`` (the indexer itself is in the files)."""
        return {"leaves_per_passage": self.leaves_per_passage}

    def files(self) -> list[str]:
        """The indexer (safetensors + JSON) and the leaf lists (safetensors)."""
        return list(EHI_FILES)

    def write(self, paths: Mapping[str, Path]) -> None:
        """Write the indexer's two files and the leaf lists."""
        from safetensors.numpy import save_file

        indexer = self.require_indexer()
        indexer.save(paths[EHI_FILES[0]], paths[EHI_FILES[1]], info=indexer.info)  # how it was trained, kept
        save_file(
            {"rowids": np.ascontiguousarray(self._rowids), "leaves": np.ascontiguousarray(self._leaves)},
            str(paths[EHI_FILES[2]]),
            metadata={"format": LEAVES_FORMAT, "version": LEAVES_VERSION},
        )

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the committed indexer and leaf lists (checked; nothing unpickled)."""
        indexer = EHIIndexer.load(paths[EHI_FILES[0]], paths[EHI_FILES[1]], device="cpu")
        rowids, leaves = _read_leaves(paths[EHI_FILES[2]], indexer.n_leaves, self.leaves_per_passage)
        self.indexer = indexer.eval()
        self._set(rowids, leaves)

    def require_indexer(self) -> EHIIndexer:
        """The indexer (an error if the extension has none)."""
        if self.indexer is None:
            raise StoreError("the ehi extension has no indexer; attach it with store.add_extension(EHIExtension(DIR))")
        return self.indexer

    def encoder_dependency(self) -> Literal["none", "rebuild", "refuse"]:
        """The indexer was trained for one encoder's vectors: it cannot follow another encoder."""
        return "refuse"

    # -- building and following writes ------------------------------------------------------------
    def build(self, store: StoreBackend) -> None:
        """Route every passage vector of ``store`` to its leaves."""
        rowids, vectors = self._store_vectors(store)
        self._set(rowids, self._route(vectors))

    def _route(self, vectors: np.ndarray) -> np.ndarray:
        indexer = self.require_indexer()
        if vectors.shape[0] == 0:
            return np.zeros((0, self.leaves_per_passage), np.int64)
        return np.asarray(indexer.assign(vectors, top_k=self.leaves_per_passage), np.int64).reshape(
            vectors.shape[0], self.leaves_per_passage
        )

    def _store_vectors(self, store: StoreBackend, rowids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        indexer = self.require_indexer()
        dim = store.dimension
        if dim is not None and dim != indexer.dimension:
            raise DimensionMismatchError(
                f"{store.location}: the EHI indexer is {indexer.dimension}-d, the store's vectors are {dim}-d "
                "(train the indexer with the store's encoder)"
            )
        ids = store.rowids_of() if rowids is None else np.asarray(rowids, np.int64)
        if ids.size == 0 or dim is None:
            return np.zeros(0, np.int64), np.zeros((0, indexer.dimension), np.float32)
        return ids, np.asarray(store.vectors(ids), np.float32)

    def _set(self, rowids: np.ndarray, leaves: np.ndarray) -> None:
        order = np.argsort(rowids, kind="stable")
        self._rowids = np.ascontiguousarray(rowids[order], dtype=np.int64)
        self._leaves = np.ascontiguousarray(leaves[order], dtype=np.int64).reshape(-1, self.leaves_per_passage)
        self._assignment = None
        self._vectors = None

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """Route the new passages with the learned indexer (no retraining)."""
        if vectors is not None:
            ids, vecs = np.asarray(rowids, np.int64), np.asarray(vectors, np.float32)
            self._store_vectors(store, np.zeros(0, np.int64))  # the dimension check
        else:
            with_vec = store.rowids_of(passage_ids=[p.id for p in passages])
            ids, vecs = self._store_vectors(store, np.intersect1d(with_vec, np.asarray(rowids, np.int64)))
        if ids.size == 0:
            return
        if vecs.shape[1] != self.require_indexer().dimension:
            raise DimensionMismatchError(
                f"{store.location}: {vecs.shape[1]}-d passage vectors for a {self.require_indexer().dimension}-d "
                "EHI indexer"
            )
        keep = ~np.isin(self._rowids, ids)
        leaves = self._route(vecs)
        if self._journal is not None:
            if not keep.all():
                self._journal.removed(self._rowids[~keep])
            self._journal.added(ids, leaves)
        self._set(np.concatenate([self._rowids[keep], ids]), np.concatenate([self._leaves[keep], leaves]))

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Drop deleted passages from their leaves (the leaf lists stay exact)."""
        gone = np.isin(self._rowids, np.asarray(rowids, np.int64))
        if gone.any():
            if self._journal is not None:
                self._journal.removed(self._rowids[gone])
            self._set(self._rowids[~gone], self._leaves[~gone])

    # -- incremental commits ----------------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = {
        "added": ("<i8", 1),
        "leaves": ("<i8", 2),
        "removed": ("<i8", 1),
    }

    def begin_delta(self, limit: int) -> None:
        """Record the leaves of every passage added and the passages removed by the write batch."""
        self._journal = Journal(limit) if self.indexer is not None else None

    def delta(self) -> Delta | None:
        """Rowids added with their leaves (``(n, leaves_per_passage)``) and rowids removed."""
        journal = self._journal
        if journal is None or not journal.complete:
            return None
        added, leaves, removed = journal.net(np.zeros((0, self.leaves_per_passage), np.int64))
        return Delta({"added": added, "leaves": leaves.astype(np.int64), "removed": removed}, added.size + removed.size)

    def end_delta(self) -> None:
        """Stop recording."""
        self._journal = None

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay a committed segment on the leaf lists read from the files (the indexer is unchanged)."""
        n_leaves = self.require_indexer().n_leaves
        added, leaves, removed = arrays["added"], arrays["leaves"], arrays["removed"]
        if leaves.shape != (added.size, self.leaves_per_passage):
            raise ValueError(f"leaves of shape {leaves.shape} for {added.size} passages")
        if leaves.size and (leaves.min() < -1 or leaves.max() >= n_leaves or (leaves[:, 0] < 0).any()):
            raise ValueError(f"leaf numbers outside 0..{n_leaves - 1}")
        gone = np.isin(self._rowids, removed)
        if int(gone.sum()) != np.unique(removed).size:
            raise ValueError("removes passages the leaf lists do not hold")
        kept = self._rowids[~gone]
        if np.unique(added).size != added.size or np.isin(added, kept).any():
            raise ValueError("adds passages the leaf lists hold already")
        self._set(np.concatenate([kept, added]), np.concatenate([self._leaves[~gone], leaves]))

    def delta_size(self) -> int:
        """Passages filed."""
        return int(self._rowids.size)

    def verify(self, store: StoreBackend) -> None:
        """The leaf lists must hold exactly the store's passages with vectors, of the store's dimension."""
        indexer = self.require_indexer()
        live = store.rowids_of()
        if live.size != self._rowids.size or not np.array_equal(self._rowids, live):
            raise StoreCorruptedError(
                f"{store.location}/{EHI_FILES[2]}: the leaf lists hold {self._rowids.size} passages, "
                f"the store {live.size}"
            )
        if store.dimension is not None and indexer.dimension != store.dimension:
            raise StoreCorruptedError(
                f"{store.location}/{EHI_FILES[0]}: {indexer.dimension}-d EHI indexer in a {store.dimension}-d store"
            )

    def describe(self) -> dict[str, Any]:
        """Indexer shape and leaf balance (for ``rag-hier info``)."""
        if self.indexer is None:
            return {"built": False}
        return {**self.indexer.describe(), **self.assignment().describe()}

    # -- search support ---------------------------------------------------------------------------
    @property
    def rowids(self) -> np.ndarray:
        """The passages filed, ascending (row ``i`` of the leaf lists)."""
        return self._rowids

    def leaf_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, leaves (n, leaves_per_passage))``: the leaves of every passage filed (``-1``: none)."""
        return self._rowids, self._leaves

    def assignment(self) -> LeafAssignment:
        """The leaf lists as inverted lists."""
        if self._assignment is None:
            self._assignment = LeafAssignment(self._leaves, self.require_indexer().n_leaves)
        return self._assignment

    def item_vectors(self, store: StoreBackend) -> np.ndarray:
        """The passage vectors aligned with :attr:`rowids` (read from the dense index once, then cached)."""
        if self._vectors is None or self._vectors.shape[0] != self._rowids.size:
            _, self._vectors = self._store_vectors(store, self._rowids)
        return self._vectors

    # -- search support (rag_hier.store.candidates.LeafRouting) ----------------------------------------
    def routed_total(self) -> int:
        """Passages filed."""
        return int(self._rowids.size)

    def route(self, queries: np.ndarray, beam: int) -> np.ndarray:
        """The ``beam`` most probable leaves of each query, ``(n, beam)``."""
        leaves, _ = self.require_indexer().route(np.asarray(queries, np.float32), beam)
        return leaves

    def leaf_members(self, leaves: np.ndarray) -> np.ndarray:
        """The rowids filed under ``leaves``."""
        return self._rowids[self.assignment().members(leaves)]

    def search_here(
        self, store: StoreBackend, queries: np.ndarray, beam: int, k: int, allowed: np.ndarray | None
    ) -> TreeSearchResult:
        """Route and score exactly over the passage vectors held here (:meth:`item_vectors`)."""
        item_vectors = self.item_vectors(store)
        return ehi_search(
            self.require_indexer(),
            queries,
            lambda pos: item_vectors[pos],
            self.assignment(),
            beam=beam,
            top_k=k,
            item_ids=self._rowids,
            allowed_ids=allowed,
        )


def _read_leaves(path: Path, n_leaves: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The checked ``rowids`` ``(n,)`` and ``leaves`` ``(n, k)`` of a leaf-lists file."""
    from safetensors import SafetensorError, safe_open

    def bad(why: str) -> StoreCorruptedError:
        return StoreCorruptedError(f"{path}: {why}")

    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            names = set(f.keys())
            if meta.get("format") != LEAVES_FORMAT or meta.get("version") != LEAVES_VERSION:
                raise bad(
                    f"not an EHI leaf-lists file (format {meta.get('format')!r}, version {meta.get('version')!r})"
                )
            if names != {"rowids", "leaves"}:
                raise bad(f"expected the tensors 'leaves' and 'rowids', found {sorted(names)}")
            rowids, leaves = f.get_tensor("rowids"), f.get_tensor("leaves")
    except (SafetensorError, OSError, ValueError, json.JSONDecodeError) as exc:
        raise bad(f"unreadable ({exc})") from exc
    if rowids.dtype != np.int64 or leaves.dtype != np.int64:
        raise bad(f"rowids and leaves must be int64, got {rowids.dtype} and {leaves.dtype}")
    if rowids.ndim != 1 or leaves.shape != (rowids.shape[0], k):
        raise bad(f"shapes {rowids.shape} and {leaves.shape} do not fit {k} leaves per passage")
    if rowids.size and (np.diff(rowids) <= 0).any():
        raise bad("rowids are not strictly increasing")
    if leaves.size and (leaves.min() < -1 or leaves.max() >= n_leaves or (leaves[:, 0] < 0).any()):
        raise bad(f"leaf numbers outside 0..{n_leaves - 1}")
    return rowids, leaves
