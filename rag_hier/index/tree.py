"""ClusterTree: a hierarchical spherical k-means tree over unit vectors (HCE), searched by beam search.

The tree is built bottom-up as in HCE (Chen et al., 2025, Alg. 1–2): the N item vectors are clustered
into ``K = ceil(N / b)`` clusters by spherical k-means (FAISS, GPU when FAISS sees one), the cluster
centroids are clustered again into ``ceil(K / b)``, and so on until a single root remains. Levels are
numbered top-down: level 0 is the root, levels ``1 .. H`` hold centroids (level ``H`` = the leaves) and
level ``H + 1`` holds the items, so every item has a fixed-length root → item path of length
``L = H + 1 = ceil(log_b N)``.

Spherical k-means: inputs are L2-normalised, centroids are normalised sums of their members, and every
vector is assigned to the centroid of largest inner product. The same seed gives the same tree. A round
that makes many clusters (``TreeBuildConfig.two_level_min_clusters``, default 4096: the first round of
corpora above ~500k items) runs as a two-level k-means, coarse cells first and then sub-clusters inside
each cell, so a 1M-item tree builds in minutes on a CPU.

Search (:meth:`ClusterTree.search`) is a beam search over centroids: keep the ``beam`` best nodes of
each level among the children of the nodes kept one level up, then score exactly every item in the
leaves reached. It reports how many items it scored, so recall can be compared at a matched fraction of
the corpus (not at a nominal beam). With a beam at least as wide as the widest level, every item is
scored and the result equals exhaustive search.

New items are routed to their nearest leaf centroid (:meth:`ClusterTree.add`) and removed items are
dropped from their leaf (:meth:`ClusterTree.remove`) without rebuilding; centroids stay as built, so
rebuild after many changes (``describe()["routed_since_build"]`` says how many).

Files: ``save(tensors_path, json_path)`` writes safetensors (centroids, parents, item ids, leaves) and a
JSON description; :meth:`ClusterTree.load` reads and checks them. Nothing is ever unpickled.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.encoders.device import faiss_gpu_count
from rag_hier.errors import DimensionMismatchError, RagHierError, StoreCorruptedError
from rag_hier.index.selection import select_top_k

logger = logging.getLogger(__name__)

__all__ = ["ClusterTree", "TreeBuildConfig", "TreeSearchResult", "auto_branching"]

TREE_FORMAT = "rag-hier-cluster-tree"
TREE_FORMAT_VERSION = 1


def auto_branching(n: int) -> int:
    """HCE's choice for BEIR-sized corpora: the smallest power of two ``>= n ** (1/3)`` (at least 2).

    With it, ``ceil(log_b n) <= 3``: a tree of two centroid levels above the items.
    """
    if n < 1:
        return 2
    root = n ** (1.0 / 3.0)
    b = 2
    while b < root - 1e-9:
        b *= 2
    return b


@dataclass(frozen=True)
class TreeBuildConfig:
    """How a :class:`ClusterTree` is built.

    Args:
        branching: Branching factor ``b`` (each k-means round makes ``ceil(n / b)`` clusters); ``None``
            picks :func:`auto_branching` of the number of items.
        niter: k-means iterations per level.
        max_points_per_centroid: k-means of ``k`` clusters trains on at most ``k * this`` points (a
            seeded sample; assignment always covers every point). Lower is faster on large corpora.
        seed: Seed of every k-means round (round ``r`` uses ``seed + r``).
        use_gpu: Cluster on GPU FAISS (``None``: when FAISS sees a GPU).
        two_level_min_clusters: A round that makes at least this many clusters runs as a two-level
            k-means (FAISS's recipe for large IVF quantizers): ``round(sqrt(k))`` coarse clusters, then
            each coarse cluster is split into sub-clusters in proportion to its size, then
            ``refine_iterations`` Lloyd iterations over all points in which each point is assigned to the
            best centroid within its ``refine_nprobe`` nearest coarse clusters (a FAISS IVF search). Costs
            about ``sqrt(k) · (1 + refine_nprobe)`` instead of ``k`` inner products per point and
            iteration; ``0`` always clusters flat (exact assignment over all ``k`` centroids).
        refine_iterations: Lloyd iterations after a two-level round (0: keep the within-cell clusters).
        refine_nprobe: Coarse clusters searched per point in those iterations and the final assignment.

    """

    branching: int | None = None
    niter: int = 20
    max_points_per_centroid: int = 256
    seed: int = 1234
    use_gpu: bool | None = None
    two_level_min_clusters: int = 4096
    refine_iterations: int = 4
    refine_nprobe: int = 16

    def __post_init__(self) -> None:
        if self.branching is not None and self.branching < 2:
            raise ValueError(f"branching must be >= 2 (or None for automatic), got {self.branching}")
        if self.niter < 1:
            raise ValueError(f"niter must be >= 1, got {self.niter}")
        if self.max_points_per_centroid < 1:
            raise ValueError(f"max_points_per_centroid must be >= 1, got {self.max_points_per_centroid}")
        if self.two_level_min_clusters < 0:
            raise ValueError(f"two_level_min_clusters must be >= 0, got {self.two_level_min_clusters}")
        if self.refine_iterations < 0:
            raise ValueError(f"refine_iterations must be >= 0, got {self.refine_iterations}")
        if self.refine_nprobe < 1:
            raise ValueError(f"refine_nprobe must be >= 1, got {self.refine_nprobe}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


@dataclass(frozen=True)
class TreeSearchResult:
    """Beam-search results for a batch of queries.

    Args:
        scores: ``(n_queries, top_k)`` inner products, ``-inf``-padded.
        ids: ``(n_queries, top_k)`` item ids, ``-1``-padded.
        scored: ``(n_queries,)`` how many items were scored exactly for each query.
        leaves_visited: ``(n_queries,)`` how many leaves each query reached.
        n_items: Items in the tree at search time (``scored / n_items`` is the fraction scored).

    """

    scores: np.ndarray
    ids: np.ndarray
    scored: np.ndarray
    leaves_visited: np.ndarray
    n_items: int = 0

    @property
    def fraction_scored(self) -> np.ndarray:
        """Per query, the fraction of the tree's items that were scored."""
        return self.scored / max(self.n_items, 1)


def _normalize(x: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return np.ascontiguousarray(arr / np.maximum(norms, 1e-12), dtype=np.float32)


def _use_gpu(flag: bool | None) -> bool:
    if flag is False:
        return False
    available = faiss_gpu_count() > 0
    if flag and not available:
        logger.warning("use_gpu=True but FAISS sees no GPU (faiss-cpu installed?); clustering on CPU")
    return available


def _assign(points: np.ndarray, centroids: np.ndarray, gpu: bool) -> np.ndarray:
    """Index of the centroid of largest inner product for every point."""
    import faiss

    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(centroids)
    if gpu:  # pragma: no cover - needs a GPU
        index = faiss.index_cpu_to_all_gpus(index)
    _, nearest = index.search(points, 1)
    return nearest[:, 0].astype(np.int64)


def _spherical_kmeans(points: np.ndarray, k: int, config: TreeBuildConfig, seed: int, gpu: bool) -> np.ndarray:
    import faiss

    km = faiss.Kmeans(
        points.shape[1],
        k,
        niter=config.niter,
        seed=seed,
        spherical=True,
        max_points_per_centroid=config.max_points_per_centroid,
        min_points_per_centroid=1,  # b points per cluster is the design, not a mistake to warn about
        gpu=gpu,
        verbose=False,
    )
    km.train(points)
    return _normalize(km.centroids)


def _allocate(sizes: np.ndarray, k: int) -> np.ndarray:
    """Split ``k`` clusters among cells of ``sizes`` points: proportional, >= 1 per non-empty cell, <= its size."""
    sizes = sizes.astype(np.int64)
    raw = sizes * (k / max(int(sizes.sum()), 1))
    alloc = np.minimum(np.maximum(np.floor(raw).astype(np.int64), (sizes > 0).astype(np.int64)), sizes)
    while (diff := k - int(alloc.sum())) != 0:
        if diff > 0:  # largest remainders first, among cells that can take one more
            cand = np.flatnonzero(alloc < sizes)
            order = cand[np.argsort(-(raw[cand] - alloc[cand]), kind="stable")]
        else:  # smallest remainders first, among cells that can give one up
            cand = np.flatnonzero(alloc > 1)
            order = cand[np.argsort(raw[cand] - alloc[cand], kind="stable")]
        if not order.size:  # pragma: no cover - k <= number of points makes this unreachable
            raise RagHierError(f"cannot split {k} clusters among cells of sizes {sizes.tolist()}")
        step = order[: abs(diff)]
        alloc[step] += 1 if diff > 0 else -1
    return alloc


def _cluster_round(
    points: np.ndarray, k: int, config: TreeBuildConfig, seed: int, gpu: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One bottom-up round: ``k`` unit centroids and each point's cluster (flat or two-level k-means)."""
    if not config.two_level_min_clusters or k < config.two_level_min_clusters:
        centroids = _spherical_kmeans(points, k, config, seed, gpu)
        return centroids, _assign(points, centroids, gpu)
    k1 = max(2, round(math.sqrt(k)))
    coarse = _spherical_kmeans(points, k1, config, seed, gpu)
    cell = _assign(points, coarse, gpu)
    sizes = np.bincount(cell, minlength=k1)
    alloc = _allocate(sizes, k)
    order = np.argsort(cell, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    parts: list[np.ndarray] = []
    assign = np.empty(points.shape[0], np.int64)
    offset = 0
    for c in range(k1):
        kc = int(alloc[c])
        if kc == 0:
            continue
        members = order[ptr[c] : ptr[c + 1]]
        sub = points[members]
        if kc >= members.size:  # as many clusters as points: each point is its own centroid
            cents, local = sub, np.arange(members.size, dtype=np.int64)
        elif kc == 1:
            cents = _normalize(sub.sum(axis=0, keepdims=True))
            local = np.zeros(members.size, np.int64)
        else:
            sub_seed = (seed * 1_000_003 + c + 1) % (2**31 - 1)
            cents = _spherical_kmeans(sub, kc, config, sub_seed, gpu)
            local = _assign(sub, cents, gpu)
        parts.append(cents)
        assign[members] = local + offset
        offset += cents.shape[0]
    centroids = np.ascontiguousarray(np.vstack(parts), dtype=np.float32)
    for _ in range(config.refine_iterations):
        assign = _cell_assign(points, centroids, coarse, config.refine_nprobe)
        centroids = _recompute_centroids(points, assign, centroids)
    if config.refine_iterations:
        assign = _cell_assign(points, centroids, coarse, config.refine_nprobe)
    return centroids, assign


def _cell_assign(points: np.ndarray, centroids: np.ndarray, coarse: np.ndarray, nprobe: int) -> np.ndarray:
    """Nearest centroid of every point among those filed under its ``nprobe`` nearest coarse centroids (FAISS IVF)."""
    import faiss

    d = points.shape[1]
    quantizer = faiss.IndexFlatIP(d)
    quantizer.add(coarse)
    ivf = faiss.IndexIVFFlat(quantizer, d, coarse.shape[0], faiss.METRIC_INNER_PRODUCT)
    ivf.is_trained = True  # the quantizer is given, not trained
    ivf.add(centroids)  # labels = row numbers of ``centroids``
    ivf.nprobe = min(nprobe, coarse.shape[0])
    _, nearest = ivf.search(points, 1)
    out = nearest[:, 0].astype(np.int64)
    # Each centroid is filed under its own nearest coarse centroid, so the probed cells can hold none (rare at
    # nprobe 16, possible at small nprobe): those points get the exact nearest centroid.
    missing = out < 0
    if missing.any():  # pragma: no cover - not reached by the tests' data
        out[missing] = _assign(points[missing], centroids, gpu=False)
    return out


def _recompute_centroids(points: np.ndarray, assign: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Spherical k-means update: normalised sum of each cluster's points (an empty cluster keeps its centroid)."""
    k = old.shape[0]
    order = np.argsort(assign, kind="stable")
    counts = np.bincount(assign, minlength=k)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    nonempty = counts > 0
    out = old.copy()
    out[nonempty] = _normalize(np.add.reduceat(points[order], starts[nonempty], axis=0))
    return out


class ClusterTree:
    """A hierarchical spherical k-means tree over item vectors (see the module docstring).

    Build one with :meth:`build`; read one with :meth:`load`. ``centroids[t-1]`` and ``parents[t-1]`` hold
    the centroids of level ``t`` (``1 .. depth``) and the index of each one's parent at level ``t - 1``
    (all 0 for level 1, whose parent is the root). Items are the caller's int64 ``ids``, each in one leaf.

    Example:
        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(500, 16)).astype(np.float32)
        >>> x /= np.linalg.norm(x, axis=1, keepdims=True)
        >>> tree = ClusterTree.build(x, branching=8)
        >>> tree.level_sizes, tree.path_length
        ([8, 63], 3)
        >>> res = tree.search(x[:1], beam=8, top_k=5, vectors_of=lambda pos: x[pos])
        >>> int(res.ids[0, 0]), bool(res.scored[0] < 500)
        (0, True)

    """

    def __init__(
        self,
        dimension: int,
        branching: int,
        centroids: list[np.ndarray],
        parents: list[np.ndarray],
        item_ids: np.ndarray,
        item_leaf: np.ndarray,
        *,
        build_config: Mapping[str, Any] | None = None,
        built_items: int | None = None,
        routed_since_build: int = 0,
        removed_since_build: int = 0,
    ) -> None:
        if dimension < 1:
            raise ValueError(f"dimension must be >= 1, got {dimension}")
        self.dimension = dimension
        self.branching = branching
        self.centroids = [np.ascontiguousarray(c, dtype=np.float32) for c in centroids]
        self.parents = [np.ascontiguousarray(p, dtype=np.int64) for p in parents]
        self.item_ids = np.ascontiguousarray(item_ids, dtype=np.int64)
        self.item_leaf = np.ascontiguousarray(item_leaf, dtype=np.int64)
        self.build_config: dict[str, Any] = dict(build_config or {})
        self.built_items = int(built_items if built_items is not None else len(self.item_ids))
        self.routed_since_build = int(routed_since_build)
        self.removed_since_build = int(removed_since_build)
        self._check()
        self._cache: dict[str, Any] = {}

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        ids: np.ndarray | None = None,
        *,
        branching: int | None = None,
        config: TreeBuildConfig | None = None,
    ) -> ClusterTree:
        """Cluster ``vectors`` bottom-up into a tree (vectors are L2-normalised first).

        Args:
            vectors: ``(n, dimension)`` item vectors.
            ids: int64 item ids (default ``0 .. n-1``), unique.
            branching: Shortcut for ``config.branching``.
            config: Build options (:class:`TreeBuildConfig`).

        """
        cfg = config or TreeBuildConfig()
        if branching is not None:
            cfg = TreeBuildConfig(**{**cfg.to_dict(), "branching": branching})
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] < 1:
            raise ValueError(f"vectors must be a 2-d array (n, dimension), got shape {tuple(x.shape)}")
        if not np.isfinite(x).all():
            raise ValueError("vectors contain NaN or infinite values")
        n, d = x.shape
        item_ids = np.arange(n, dtype=np.int64) if ids is None else np.ascontiguousarray(ids, dtype=np.int64)
        if item_ids.shape != (n,):
            raise ValueError(f"got {item_ids.shape[0]} ids for {n} vectors")
        b = cfg.branching or auto_branching(n)
        gpu = _use_gpu(cfg.use_gpu)
        t0 = time.perf_counter()
        points = _normalize(x)
        bottom_up_centroids: list[np.ndarray] = []
        bottom_up_assign: list[np.ndarray] = []
        r = 0
        while True:
            k = math.ceil(points.shape[0] / b)
            if k <= 1:
                break
            t1 = time.perf_counter()
            centroids, assign = _cluster_round(points, k, cfg, cfg.seed + r, gpu)
            logger.info(
                "tree round %d: %d points -> %d clusters (%.1fs)", r + 1, points.shape[0], k, time.perf_counter() - t1
            )
            bottom_up_centroids.append(centroids)
            bottom_up_assign.append(assign)
            points = centroids
            r += 1
        depth = len(bottom_up_centroids)
        top_down = bottom_up_centroids[::-1]
        parents = [np.zeros(top_down[0].shape[0], np.int64)] if depth else []
        for i in range(1, depth):
            parents.append(bottom_up_assign[depth - i])
        item_leaf = bottom_up_assign[0] if depth else np.zeros(n, np.int64)
        logger.info(
            "built cluster tree over %d items: b=%d, level sizes %s (%.1fs)",
            n,
            b,
            [c.shape[0] for c in top_down],
            time.perf_counter() - t0,
        )
        return cls(d, b, top_down, parents, item_ids, item_leaf, build_config={**cfg.to_dict(), "branching": b})

    def _check(self) -> None:
        if len(self.centroids) != len(self.parents):
            raise ValueError(f"{len(self.centroids)} centroid levels but {len(self.parents)} parent levels")
        prev = 1
        for t, (c, p) in enumerate(zip(self.centroids, self.parents, strict=True), start=1):
            if c.ndim != 2 or c.shape[1] != self.dimension:
                raise DimensionMismatchError(
                    f"level {t} centroids have shape {c.shape}; the tree is {self.dimension}-d"
                )
            if p.shape != (c.shape[0],):
                raise ValueError(f"level {t}: {p.shape[0]} parents for {c.shape[0]} centroids")
            if p.size and (p.min() < 0 or p.max() >= prev):
                raise ValueError(f"level {t}: parent index out of range 0..{prev - 1}")
            prev = c.shape[0]
        if self.item_ids.shape != self.item_leaf.shape or self.item_ids.ndim != 1:
            raise ValueError(f"{self.item_ids.shape} item ids but {self.item_leaf.shape} leaf assignments")
        if self.item_leaf.size and (self.item_leaf.min() < 0 or self.item_leaf.max() >= prev):
            raise ValueError(f"item leaf index out of range 0..{prev - 1}")
        if np.unique(self.item_ids).size != self.item_ids.size:
            raise ValueError("item ids are not unique")

    # -- shape ------------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Number of centroid levels ``H`` (0: the root holds the items directly)."""
        return len(self.centroids)

    @property
    def path_length(self) -> int:
        """Length ``L = depth + 1`` of every root → item path."""
        return self.depth + 1

    @property
    def level_sizes(self) -> list[int]:
        """Number of nodes of each centroid level, top (level 1) to leaves (level ``depth``)."""
        return [int(c.shape[0]) for c in self.centroids]

    @property
    def n_leaves(self) -> int:
        """Number of leaves (1 for a tree without centroid levels: the root)."""
        return self.level_sizes[-1] if self.depth else 1

    def __len__(self) -> int:
        return int(self.item_ids.size)

    def _invalidate(self) -> None:
        self._cache.clear()

    def node_paths(self) -> np.ndarray:
        """``(n_items, depth)``: each item's node index at levels ``1 .. depth`` (global within a level)."""
        if "paths" not in self._cache:
            out = np.zeros((len(self), self.depth), np.int64)
            if self.depth:
                node = self.item_leaf
                for t in range(self.depth, 0, -1):
                    out[:, t - 1] = node
                    node = self.parents[t - 1][node]
            self._cache["paths"] = out
        return self._cache["paths"]

    def paths(self) -> np.ndarray:
        """``(n_items, path_length)``: :meth:`node_paths` followed by the item's position in the tree."""
        return np.concatenate([self.node_paths(), np.arange(len(self), dtype=np.int64)[:, None]], axis=1)

    def semantic_ids(self) -> np.ndarray:
        """``(n_items, path_length)`` DSI-style ids: at every level, the rank of the node among its siblings."""
        cols = []
        paths = self.node_paths()
        for t in range(1, self.depth + 1):
            parents = self.parents[t - 1]
            rank = np.zeros(parents.size, np.int64)
            order = np.argsort(parents, kind="stable")
            starts = np.searchsorted(parents[order], parents[order], side="left")
            rank[order] = np.arange(parents.size) - starts
            cols.append(rank[paths[:, t - 1]])
        parent_of_item = self.item_leaf
        order = np.argsort(parent_of_item, kind="stable")
        starts = np.searchsorted(parent_of_item[order], parent_of_item[order], side="left")
        item_rank = np.zeros(len(self), np.int64)
        item_rank[order] = np.arange(len(self)) - starts
        cols.append(item_rank)
        return np.stack(cols, axis=1) if cols else np.zeros((len(self), 0), np.int64)

    def _members_index(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """(order, ptr): item positions sorted by their node at ``level`` and CSR offsets per node."""
        key = f"members{level}"
        if key not in self._cache:
            nodes = self.node_paths()[:, level - 1]
            order = np.argsort(nodes, kind="stable")
            ptr = np.searchsorted(nodes[order], np.arange(self.level_sizes[level - 1] + 1), side="left")
            self._cache[key] = (order, ptr)
        return self._cache[key]

    def members(self, level: int, node: int) -> np.ndarray:
        """Item positions under ``node`` of ``level`` (level 0 = the root: every item)."""
        if level == 0:
            return np.arange(len(self), dtype=np.int64)
        if not 1 <= level <= self.depth:
            raise ValueError(f"level must be in 0..{self.depth}, got {level}")
        order, ptr = self._members_index(level)
        return order[ptr[node] : ptr[node + 1]]

    def _children_index(self, level: int) -> tuple[np.ndarray, np.ndarray]:
        """CSR of the children (at ``level``) of each node of ``level - 1``."""
        key = f"children{level}"
        if key not in self._cache:
            parents = self.parents[level - 1]
            order = np.argsort(parents, kind="stable")
            n_parents = 1 if level == 1 else self.level_sizes[level - 2]
            ptr = np.searchsorted(parents[order], np.arange(n_parents + 1), side="left")
            self._cache[key] = (order, ptr)
        return self._cache[key]

    def children(self, level: int, node: int) -> np.ndarray:
        """Indices (at ``level``) of the children of ``node`` of ``level - 1``."""
        order, ptr = self._children_index(level)
        return order[ptr[node] : ptr[node + 1]]

    def subtree_counts(self, level: int) -> np.ndarray:
        """Items under each node of ``level`` (``1 .. depth``)."""
        key = f"counts{level}"
        if key not in self._cache:
            counts = np.bincount(self.item_leaf, minlength=self.n_leaves).astype(np.int64)
            for t in range(self.depth, level, -1):
                counts = np.bincount(self.parents[t - 1], weights=counts, minlength=self.level_sizes[t - 2]).astype(
                    np.int64
                )
            self._cache[key] = counts
        return self._cache[key]

    def leaf_sizes(self) -> np.ndarray:
        """Items per leaf."""
        return np.bincount(self.item_leaf, minlength=self.n_leaves).astype(np.int64)

    def describe(self) -> dict[str, Any]:
        """Shape and balance facts (for manifests, ``rag-hier info`` and logs)."""
        sizes = self.leaf_sizes()
        nonempty = sizes[sizes > 0]
        return {
            "items": len(self),
            "branching": self.branching,
            "depth": self.depth,
            "path_length": self.path_length,
            "level_sizes": self.level_sizes,
            "leaves_nonempty": int(nonempty.size),
            "leaf_size_max": int(sizes.max()) if sizes.size else 0,
            "leaf_size_mean": round(float(nonempty.mean()), 2) if nonempty.size else 0.0,
            "built_items": self.built_items,
            "routed_since_build": self.routed_since_build,
            "removed_since_build": self.removed_since_build,
        }

    # -- dynamic changes --------------------------------------------------------------------------
    def route(self, vectors: np.ndarray) -> np.ndarray:
        """The nearest leaf (largest inner product with its centroid) of each vector."""
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.dimension:
            raise DimensionMismatchError(f"vectors have shape {tuple(x.shape)}; the tree is {self.dimension}-d")
        if not self.depth or x.shape[0] == 0:
            return np.zeros(x.shape[0], np.int64)
        return _assign(_normalize(x), self.centroids[-1], gpu=False)

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """Route new items to their nearest leaf (no rebuild); returns the leaves chosen."""
        new_ids = np.ascontiguousarray(ids, dtype=np.int64)
        leaves = self.route(vectors)
        if new_ids.shape != leaves.shape:
            raise ValueError(f"got {new_ids.size} ids for {leaves.size} vectors")
        if new_ids.size == 0:
            return leaves
        if np.unique(new_ids).size != new_ids.size or np.isin(new_ids, self.item_ids).any():
            raise ValueError("item ids to add must be new and unique")
        self.item_ids = np.concatenate([self.item_ids, new_ids])
        self.item_leaf = np.concatenate([self.item_leaf, leaves])
        self.routed_since_build += int(new_ids.size)
        self._invalidate()
        return leaves

    def insert(self, ids: np.ndarray, leaves: np.ndarray) -> None:
        """File new items under leaves already chosen (a replay of :meth:`add`; the change counters are the caller's).

        Raises:
            ValueError: Ids not new or not unique, or leaves out of range (checked before anything changes).

        """
        new_ids = np.ascontiguousarray(ids, dtype=np.int64)
        new_leaves = np.ascontiguousarray(leaves, dtype=np.int64)
        if new_ids.ndim != 1 or new_ids.shape != new_leaves.shape:
            raise ValueError(f"got {new_ids.shape} ids for {new_leaves.shape} leaves")
        if new_ids.size == 0:
            return
        if new_leaves.min() < 0 or new_leaves.max() >= self.n_leaves:
            raise ValueError(f"leaves outside 0..{self.n_leaves - 1}")
        if np.unique(new_ids).size != new_ids.size or np.isin(new_ids, self.item_ids).any():
            raise ValueError("item ids to insert must be new and unique")
        self.item_ids = np.concatenate([self.item_ids, new_ids])
        self.item_leaf = np.concatenate([self.item_leaf, new_leaves])
        self._invalidate()

    def remove(self, ids: np.ndarray) -> int:
        """Drop items from their leaves (unknown ids are ignored); returns how many were removed."""
        drop = np.isin(self.item_ids, np.asarray(ids, dtype=np.int64))
        n = int(drop.sum())
        if n:
            self.item_ids = self.item_ids[~drop]
            self.item_leaf = self.item_leaf[~drop]
            self.removed_since_build += n
            self._invalidate()
        return n

    # -- search -----------------------------------------------------------------------------------
    def beam_leaves(self, query: np.ndarray, beam: int) -> np.ndarray:
        """Leaves reached by a beam search of width ``beam`` for one query vector (empty subtrees skipped)."""
        if beam < 1:
            raise ValueError(f"beam must be >= 1, got {beam}")
        if not self.depth:
            return np.zeros(1, np.int64)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        kept = np.zeros(1, np.int64)  # the root
        for t in range(1, self.depth + 1):
            order, ptr = self._children_index(t)
            cand = np.concatenate([order[ptr[p] : ptr[p + 1]] for p in kept]) if kept.size else kept
            cand = cand[self.subtree_counts(t)[cand] > 0]
            if cand.size > beam:
                scores = self.centroids[t - 1][cand] @ q
                top = np.argpartition(-scores, beam - 1)[:beam]
                cand = cand[top]
            kept = cand
        return kept

    def leaf_items(self, leaves: np.ndarray) -> np.ndarray:
        """The item ids in ``leaves`` (e.g. from :meth:`beam_leaves`), ascending."""
        if not self.depth:
            return np.sort(self.item_ids)
        order, ptr = self._members_index(self.depth)
        parts = [order[ptr[int(leaf)] : ptr[int(leaf) + 1]] for leaf in leaves]
        pos = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return np.sort(self.item_ids[pos])

    def search(
        self,
        queries: np.ndarray,
        *,
        beam: int,
        top_k: int,
        vectors_of: Callable[[np.ndarray], np.ndarray],
        allowed_ids: np.ndarray | None = None,
    ) -> TreeSearchResult:
        """Beam search, then exact inner products over every item in the leaves reached.

        Args:
            queries: ``(n, dimension)`` query vectors (inner product with the item vectors is the score).
            beam: Nodes kept per level.
            top_k: Results per query.
            vectors_of: Returns the ``(m, dimension)`` vectors of item *positions* (indices into
                ``item_ids``); e.g. a lookup into an array aligned with the tree's items.
            allowed_ids: Only these item ids may be returned (and counted as scored).

        """
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.shape[1] != self.dimension:
            raise DimensionMismatchError(f"queries are {q.shape[1]}-d; the tree is {self.dimension}-d")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        n_q = q.shape[0]
        scores = np.full((n_q, top_k), -np.inf, np.float32)
        ids = np.full((n_q, top_k), -1, np.int64)
        scored = np.zeros(n_q, np.int64)
        visited = np.zeros(n_q, np.int64)
        if self.depth:
            order, ptr = self._members_index(self.depth)
        allowed_mask = None if allowed_ids is None else np.isin(self.item_ids, np.asarray(allowed_ids, np.int64))
        for i in range(n_q):
            leaves = self.beam_leaves(q[i], beam)
            visited[i] = leaves.size
            if self.depth:
                pos = np.concatenate([order[ptr[leaf] : ptr[leaf + 1]] for leaf in leaves]) if leaves.size else leaves
            else:
                pos = np.arange(len(self), dtype=np.int64)
            if allowed_mask is not None:
                pos = pos[allowed_mask[pos]]
            scored[i] = pos.size
            if not pos.size:
                continue
            s = vectors_of(pos) @ q[i]
            top = select_top_k(s, self.item_ids[pos], top_k)
            k = top.size
            scores[i, :k] = s[top]
            ids[i, :k] = self.item_ids[pos[top]]
        return TreeSearchResult(scores=scores, ids=ids, scored=scored, leaves_visited=visited, n_items=len(self))

    # -- persistence ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON half of the files (shape, configuration, change counters)."""
        return {
            "format": TREE_FORMAT,
            "format_version": TREE_FORMAT_VERSION,
            "dimension": self.dimension,
            "branching": self.branching,
            "level_sizes": self.level_sizes,
            "items": len(self),
            "build_config": self.build_config,
            "built_items": self.built_items,
            "routed_since_build": self.routed_since_build,
            "removed_since_build": self.removed_since_build,
        }

    def save(self, tensors_path: str | Path, json_path: str | Path) -> None:
        """Write the tree: arrays as safetensors, the description as JSON (the caller makes it atomic)."""
        from safetensors.numpy import save_file

        tensors: dict[str, np.ndarray] = {"item_ids": self.item_ids, "item_leaf": self.item_leaf}
        for t, (c, p) in enumerate(zip(self.centroids, self.parents, strict=True), start=1):
            tensors[f"centroids.{t}"] = c
            tensors[f"parents.{t}"] = p
        save_file(tensors, str(tensors_path), metadata={"format": TREE_FORMAT, "version": str(TREE_FORMAT_VERSION)})
        Path(json_path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, tensors_path: str | Path, json_path: str | Path) -> ClusterTree:
        """Read a tree written by :meth:`save`, checking that both files agree."""
        from safetensors.numpy import load_file

        try:
            meta = json.loads(Path(json_path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreCorruptedError(f"{json_path}: not a readable tree description ({exc})") from exc
        if not isinstance(meta, dict) or meta.get("format") != TREE_FORMAT:
            raise StoreCorruptedError(f"{json_path}: not a {TREE_FORMAT} file")
        if int(meta.get("format_version", 0)) > TREE_FORMAT_VERSION:
            raise StoreCorruptedError(
                f"{json_path}: tree format version {meta.get('format_version')} is newer than this rag-hier "
                f"reads ({TREE_FORMAT_VERSION})"
            )
        try:
            arrays = load_file(str(tensors_path))
        except Exception as exc:  # safetensors raises its own error types
            raise StoreCorruptedError(f"{tensors_path}: not a readable safetensors file ({exc})") from exc
        sizes = list(meta.get("level_sizes", []))
        try:
            centroids = [arrays[f"centroids.{t}"] for t in range(1, len(sizes) + 1)]
            parents = [arrays[f"parents.{t}"] for t in range(1, len(sizes) + 1)]
            tree = cls(
                int(meta["dimension"]),
                int(meta["branching"]),
                centroids,
                parents,
                arrays["item_ids"],
                arrays["item_leaf"],
                build_config=meta.get("build_config", {}),
                built_items=int(meta.get("built_items", 0)),
                routed_since_build=int(meta.get("routed_since_build", 0)),
                removed_since_build=int(meta.get("removed_since_build", 0)),
            )
        except (KeyError, ValueError, RagHierError) as exc:
            raise StoreCorruptedError(f"{tensors_path}: inconsistent tree ({exc})") from exc
        if tree.level_sizes != sizes or len(tree) != int(meta.get("items", -1)):
            raise StoreCorruptedError(f"{tensors_path} and {json_path} describe different trees")
        return tree

    def __repr__(self) -> str:
        return f"ClusterTree(items={len(self)}, branching={self.branching}, level_sizes={self.level_sizes})"
