"""TreeExtension: the HCE cluster tree of a store's passage vectors, kept with the collection.

Attach with ``store.add_extension(TreeExtension(branching=...))`` (or ``rag-hier index ... --tree``):
the tree is built from the passage vectors already stored and written in the store's atomic commit as
``tree.safetensors`` + ``tree.json``. Afterwards it follows the store's writes without rebuilding: new
passages are routed to their nearest leaf, deleted ones leave their leaf. Attach it again
(``replace=True``, or ``--tree`` again) to re-cluster after many changes; ``describe()`` reports how many
passages were routed or removed since the build. A small write commits only its change (the leaf of each
passage added, the passages removed) as a segment of ``store.sqlite``; the centroids do not change between
re-clusterings, so the files are rewritten only once the segments pass a tenth of the tree, or on
``HierStore.optimize()``. Search it with :class:`rag_hier.retrieval.tree.TreeRetriever`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.dense import Journal
from rag_hier.index.tree import ClusterTree, TreeBuildConfig
from rag_hier.store.extensions.base import StoreExtension, register_extension
from rag_hier.store.segments import Delta

if TYPE_CHECKING:
    from rag_hier.corpus.model import Passage
    from rag_hier.index.tree import TreeSearchResult
    from rag_hier.store.contract import StoreBackend

logger = logging.getLogger(__name__)

__all__ = ["TREE_FILES", "TreeExtension"]

TREE_FILES = ("tree.safetensors", "tree.json")


@register_extension
class TreeExtension(StoreExtension):
    """A :class:`~rag_hier.index.tree.ClusterTree` over the store's passage vectors (items = FAISS ids).

    Args:
        branching: Branching factor ``b``; ``None``: the smallest power of 2 >= N^(1/3) (HCE's choice).
        niter: k-means iterations per level.
        max_points_per_centroid: k-means training sample per centroid (assignment covers every vector).
        seed: Clustering seed (same vectors and seed → same tree).
        two_level_min_clusters: Rounds of at least this many clusters use two-level k-means (0: never);
            see :class:`~rag_hier.index.tree.TreeBuildConfig`.
        refine_iterations: Lloyd iterations after a two-level round.
        refine_nprobe: Coarse clusters searched per vector in those iterations.

    """

    name = "tree"
    FILES = TREE_FILES

    def __init__(
        self,
        branching: int | None = None,
        niter: int = 20,
        max_points_per_centroid: int = 256,
        seed: int = 1234,
        two_level_min_clusters: int = 4096,
        refine_iterations: int = 4,
        refine_nprobe: int = 16,
    ) -> None:
        self.build_config = TreeBuildConfig(
            branching=branching,
            niter=niter,
            max_points_per_centroid=max_points_per_centroid,
            seed=seed,
            two_level_min_clusters=two_level_min_clusters,
            refine_iterations=refine_iterations,
            refine_nprobe=refine_nprobe,
        )
        self.tree: ClusterTree | None = None
        self._vectors: np.ndarray | None = None
        self._journal: Journal | None = None  # the write batch's leaf assignments (see begin_delta)

    # -- configuration and files ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Build options (``use_gpu`` is a property of the machine, not of the store)."""
        cfg = self.build_config.to_dict()
        cfg.pop("use_gpu", None)
        return cfg

    def files(self) -> list[str]:
        """``tree.safetensors`` (arrays) and ``tree.json`` (description)."""
        return list(TREE_FILES)

    def write(self, paths: Mapping[str, Path]) -> None:
        """Write the tree's two files."""
        self.require_tree().save(paths[TREE_FILES[0]], paths[TREE_FILES[1]])

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the committed tree."""
        self.tree = ClusterTree.load(paths[TREE_FILES[0]], paths[TREE_FILES[1]])
        self._vectors = None

    def require_tree(self) -> ClusterTree:
        """The tree (an error if the extension was never built or loaded)."""
        if self.tree is None:
            raise StoreError("the tree extension has not been built; attach it with store.add_extension()")
        return self.tree

    def encoder_dependency(self) -> Literal["none", "rebuild", "refuse"]:
        """The tree clusters the passage vectors: rebuilt from the new model's vectors."""
        return "rebuild"

    # -- building and following writes ------------------------------------------------------------
    def build(self, store: StoreBackend) -> None:
        """Cluster every passage vector of ``store``."""
        rowids, vectors = self._store_vectors(store)
        self.tree = ClusterTree.build(vectors, rowids, config=self.build_config)
        self._vectors = None

    @staticmethod
    def _store_vectors(store: StoreBackend, rowids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        dim = store.dimension
        if dim is None:
            raise StoreError(f"{store.location}: the tree needs passage vectors, and the store holds none yet")
        ids = store.rowids_of() if rowids is None else rowids
        if ids.size == 0:
            return np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
        return ids, store.vectors(ids)

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """Route the new passages to their nearest leaves (an empty tree is built from them instead)."""
        tree = self.require_tree()
        if vectors is not None:
            ids, vecs = np.asarray(rowids, np.int64), vectors
        else:
            with_vec = store.rowids_of(passage_ids=[p.id for p in passages])
            ids, vecs = self._store_vectors(store, np.intersect1d(with_vec, np.asarray(rowids, np.int64)))
        if ids.size == 0:
            return
        if len(tree) == 0 and tree.built_items == 0:
            self.tree = ClusterTree.build(vecs, ids, config=self.build_config)
            if self._journal is not None:
                self._journal.complete = False  # new centroids: the files are written whole
        else:
            leaves = tree.add(ids, vecs)
            if self._journal is not None:
                self._journal.added(ids, leaves)
        self._vectors = None

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Drop deleted passages from their leaves."""
        tree = self.require_tree()
        ids = np.asarray(rowids, np.int64)
        present = ids[np.isin(ids, tree.item_ids)] if self._journal is not None else ids
        if tree.remove(ids):
            self._vectors = None
            if self._journal is not None:
                self._journal.removed(present)

    # -- incremental commits ----------------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = {
        "added": ("<i8", 1),
        "leaves": ("<i8", 1),
        "removed": ("<i8", 1),
        "counters": ("<i8", 1),
    }

    def begin_delta(self, limit: int) -> None:
        """Record the leaf of every passage added and the passages removed by the write batch."""
        self._journal = Journal(limit) if self.tree is not None else None

    def delta(self) -> Delta | None:
        """Rowids added with their leaves, rowids removed, and the change counters after the batch."""
        journal, tree = self._journal, self.tree
        if journal is None or not journal.complete or tree is None:
            return None
        added, leaves, removed = journal.net(np.zeros(0, np.int64))
        counters = np.array([tree.routed_since_build, tree.removed_since_build], np.int64)
        return Delta(
            {"added": added, "leaves": leaves.astype(np.int64), "removed": removed, "counters": counters},
            int(added.size + removed.size),
        )

    def end_delta(self) -> None:
        """Stop recording."""
        self._journal = None

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay a committed segment on the tree read from the files (centroids unchanged)."""
        tree = self.require_tree()
        counters = arrays["counters"]
        if counters.shape != (2,) or (counters < 0).any():
            raise ValueError(f"counters must be two integers >= 0, got {counters.tolist()}")
        removed = arrays["removed"]
        if not np.isin(removed, tree.item_ids).all():
            raise ValueError("removes passages the tree does not hold")
        kept = tree.item_ids[~np.isin(tree.item_ids, removed)]
        if np.isin(arrays["added"], kept).any():
            raise ValueError("adds passages the tree holds already")
        leaves = arrays["leaves"]
        if leaves.shape != arrays["added"].shape or (
            leaves.size and (leaves.min() < 0 or leaves.max() >= tree.n_leaves)
        ):
            raise ValueError(f"leaves do not fit {arrays['added'].size} passages and {tree.n_leaves} leaves")
        tree.remove(removed)
        tree.insert(arrays["added"], leaves)
        tree.routed_since_build, tree.removed_since_build = (int(x) for x in counters)
        self._vectors = None

    def delta_size(self) -> int:
        """Passages filed."""
        return len(self.tree) if self.tree is not None else 0

    def verify(self, store: StoreBackend) -> None:
        """The tree must hold exactly the store's passages with vectors."""
        tree = self.require_tree()
        live = store.rowids_of()
        if live.size != len(tree) or not np.array_equal(np.sort(tree.item_ids), live):
            raise StoreCorruptedError(
                f"{store.location}/{TREE_FILES[0]}: the tree holds {len(tree)} passages, the store {live.size}"
            )
        if store.dimension is not None and tree.dimension != store.dimension:
            raise StoreCorruptedError(
                f"{store.location}/{TREE_FILES[0]}: {tree.dimension}-d tree in a {store.dimension}-d store"
            )

    def leaf_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, leaves (n, 1))``: the leaf of every passage in the tree (what an engine filters by)."""
        tree = self.require_tree()
        return tree.item_ids, tree.item_leaf.reshape(-1, 1)

    def describe(self) -> dict[str, Any]:
        """Tree shape and balance (for ``rag-hier info``)."""
        return self.tree.describe() if self.tree is not None else {"built": False}

    # -- search support (rag_hier.store.candidates.LeafRouting) ----------------------------------------
    def item_vectors(self, store: StoreBackend) -> np.ndarray:
        """The passage vectors aligned with the tree's items (read from the dense index once, then cached)."""
        tree = self.require_tree()
        if self._vectors is None or self._vectors.shape[0] != len(tree):
            _, self._vectors = self._store_vectors(store, tree.item_ids)
        return self._vectors

    def routed_total(self) -> int:
        """Passages in the tree."""
        return len(self.require_tree())

    def route(self, queries: np.ndarray, beam: int) -> list[np.ndarray]:
        """The leaves each query reaches, keeping ``beam`` nodes per level."""
        tree = self.require_tree()
        return [tree.beam_leaves(q, beam) for q in queries]

    def leaf_members(self, leaves: np.ndarray) -> np.ndarray:
        """The rowids in ``leaves``, ascending."""
        return self.require_tree().leaf_items(leaves)

    def search_here(
        self, store: StoreBackend, queries: np.ndarray, beam: int, k: int, allowed: np.ndarray | None
    ) -> TreeSearchResult:
        """Beam search and exact scores over the passage vectors held here (:meth:`item_vectors`)."""
        tree = self.require_tree()
        item_vectors = self.item_vectors(store)
        return tree.search(queries, beam=beam, top_k=k, vectors_of=lambda pos: item_vectors[pos], allowed_ids=allowed)
