"""FusionRetriever (strategy ``fusion``): hybrid search, several strategies' rankings fused into one.

Each component strategy (by default ``dense`` and ``svdr-lexical``; any registered strategies, or ready
retrievers) ranks its ``depth`` best candidates; a fusion function combines the lists. The function is
pluggable (:func:`register_fusion`, in the spirit of Qdrant's LlamaIndex ``HybridFusionCallable``); built in:

- ``relative_score`` — each list min-max scaled to [0, 1] (all 1.0 when its scores are equal), then
  ``Σ wᵢ · scaledᵢ`` (missing: 0). LlamaIndex's ``alpha`` convention is ``weights=(alpha, 1 − alpha)``. The
  default, with equal weights: chosen on dev splits of SciFact and XQuAD-en among the fusions that do not
  depend on the components' score scales, it beat plain RRF on both test splits
  (``benchmarks/retrieval/bench_fusion.py``, docs/benchmarks.md "Hybrid search").
- ``rrf`` — reciprocal rank fusion (Cormack et al. 2009): ``Σ wᵢ / (rrf_k + rankᵢ)``, ranks from 1, a list
  that misses a passage adds nothing. Only ranks count, so a passage that one component scores far above the
  rest gains no more than one that barely leads.
- ``dbsf`` — distribution-based score fusion: each list scaled by ``(s − (μ − 3σ)) / 6σ`` clipped to [0, 1],
  then summed with the weights (Qdrant's DBSF).
- ``convex`` — ``Σ wᵢ · sᵢ`` on the raw scores, a passage missing from a list taking that list's lowest score
  (tune the weights on a dev split: the scales must be comparable).

Equal fused scores are ordered by where the passages first appear in the components' lists (the first
component's order, then the next one's for passages it lacks), then by insertion order; so with
``weights=(1, 0)`` the result is the first component's ranking. A passage a token or sparse component scores 0
(nothing in common with the query) does not count as one of its candidates, unless ``keep_zero_scores`` (then a
component's list is its ``depth`` best as ranked, and ``relative_score`` scales a list holding zeros from 0;
LlamaIndex's ``HYBRID`` mode of ``RagHierVectorStore`` keeps this rule of its own earlier fusion).
``Hit.scores`` holds each component's raw score under the component's name (absent where the
component did not return the passage) and ``fused``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rag_hier.index.selection import select_top_k
from rag_hier.retrieval.base import ParameterError, Queries, Ranking, Retriever
from rag_hier.retrieval.fusion_params import FUSION_METHODS, FusionParams
from rag_hier.store.contract import StoreBackend

__all__ = ["FUSIONS", "FusionFn", "FusionParams", "FusionRetriever", "register_fusion"]

FusionFn = Callable[[Sequence[tuple[np.ndarray, np.ndarray]], Sequence[float], int], tuple[np.ndarray, np.ndarray]]
"""``(lists of (rowids, scores) best first, weights, rrf_k) -> (rowids, fused scores)``, in any order."""


def _union(lists: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    parts = [r for r, _ in lists if r.size]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def _spread(ids: np.ndarray, rows: np.ndarray, values: np.ndarray, missing: float) -> np.ndarray:
    """``values`` (aligned with ``rows``) placed at the positions of ``ids``; ``missing`` elsewhere."""
    out = np.full(ids.shape[0], missing, np.float64)
    if rows.size and ids.size:
        pos = np.minimum(np.searchsorted(ids, rows), ids.size - 1)
        hit = ids[pos] == rows
        out[pos[hit]] = np.asarray(values)[hit]
    return out


def _weighted_sum(value: Callable[[np.ndarray, int], np.ndarray], missing: Callable[[np.ndarray], float]) -> FusionFn:
    """A fusion that sums ``weight * value(list scores)``, a passage missing from a list taking ``missing(scores)``."""

    def fuse(
        lists: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[float], rrf_k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        ids = _union(lists)
        fused = np.zeros(ids.shape[0])
        for (rows, scores), w in zip(lists, weights, strict=True):
            if rows.size:
                fused += w * _spread(ids, rows, value(scores, rrf_k), missing(scores))
        return ids, fused

    return fuse


def _reciprocal_rank(scores: np.ndarray, rrf_k: int) -> np.ndarray:
    return 1.0 / (rrf_k + np.arange(1, scores.size + 1))


def _minmax(scores: np.ndarray, rrf_k: int) -> np.ndarray:
    lo, hi = float(scores.min()), float(scores.max())
    return np.ones_like(scores) if hi == lo else (scores - lo) / (hi - lo)


def _dbsf(scores: np.ndarray, rrf_k: int) -> np.ndarray:
    mu, sd = float(scores.mean()), float(scores.std())
    if sd == 0.0:
        return np.ones_like(scores)
    return np.clip((scores - (mu - 3 * sd)) / (6 * sd), 0.0, 1.0)


def _zero(scores: np.ndarray) -> float:
    return 0.0


FUSIONS: dict[str, FusionFn] = {
    "rrf": _weighted_sum(_reciprocal_rank, _zero),
    "relative_score": _weighted_sum(_minmax, _zero),
    "dbsf": _weighted_sum(_dbsf, _zero),
    "convex": _weighted_sum(lambda scores, _k: scores, lambda scores: float(scores.min())),
}
"""Fusion functions by name."""


def register_fusion(name: str, fn: FusionFn) -> None:
    """Make ``fn`` available as ``FusionParams(method=name)``."""
    if not name:
        raise ValueError("a fusion function needs a name")
    FUSIONS[name] = fn
    if name not in FUSION_METHODS:
        FUSION_METHODS.append(name)


class FusionRetriever(Retriever[list[Any]]):
    """Hybrid retrieval: component strategies' rankings fused (see the module docstring).

    Args:
        store: The store.
        params: :class:`FusionParams` (or a mapping), also accepted as keyword arguments.
        components: Ready retrievers to fuse instead of ``params.strategies`` (their names label the scores).

    Example:
        >>> fusion = FusionRetriever(store, strategies=("dense", "svdr-lexical"))  # doctest: +SKIP
        >>> fusion.search("tides", top_k=5)  # doctest: +SKIP

    """

    name = "fusion"
    Params = FusionParams
    params: FusionParams
    over_vectors = False

    def __init__(
        self,
        store: StoreBackend,
        params: FusionParams | Mapping[str, Any] | None = None,
        *,
        components: Sequence[Retriever[Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(store, params, **kwargs)
        p = self.params
        if components is None:
            from rag_hier.retrieval.registry import build_retriever

            components = [build_retriever(name, store) for name in p.strategies]
            names = list(p.strategies)
        else:
            names = [c.name or type(c).__name__ for c in components]
        if len(components) < 1:
            raise ParameterError("fusion needs at least one component strategy")
        self.components = list(components)
        self.labels = _labels(names)
        n = len(self.components)
        if p.weights and len(p.weights) != n:
            raise ParameterError(f"FusionParams.weights has {len(p.weights)} values for {n} components")
        if p.depths and len(p.depths) != n:
            raise ParameterError(f"FusionParams.depths has {len(p.depths)} values for {n} components")
        if any(d < 1 for d in p.depths):
            raise ParameterError(f"FusionParams.depths must be >= 1, got {p.depths}")

    @property
    def uses_query_vectors(self) -> bool:
        """Whether any component ranks with dense query vectors."""
        return any(c.uses_query_vectors for c in self.components)

    def prepare(self, queries: Queries) -> list[Any]:
        """Each component's own query representation."""
        return [c.prepare(queries) for c in self.components]

    def select(self, queries: list[Any], rows: Sequence[int]) -> list[Any]:
        """The queries at ``rows``, for every component."""
        return [c.select(q, rows) for c, q in zip(self.components, queries, strict=True)]

    def rank(
        self, queries: list[Any], k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """Every component's candidates, fused."""
        p = self.params
        weights = p.weights or (1.0,) * len(self.components)
        per_component = []
        for j, (comp, q) in enumerate(zip(self.components, queries, strict=True)):
            depth = max(k, p.depths[j] if p.depths else p.depth)
            per_component.append(
                comp.rank(q, min(depth, max(comp.candidates(), 1)), allowed, min_documents=min_documents)
            )
        fuse = FUSIONS[p.method]
        out = []
        for i in range(len(per_component[0])):
            lists = []
            for comp, rankings in zip(self.components, per_component, strict=True):
                r = rankings[i]
                rowids, scores = r.rowids, np.asarray(r.scores, np.float64)
                if not comp.over_vectors and not p.keep_zero_scores:  # token/sparse 0: nothing in common
                    rowids, scores = rowids[scores != 0], scores[scores != 0]
                order = select_top_k(scores, rowids, rowids.size)
                lists.append((rowids[order].astype(np.int64), scores[order]))
            ids, fused = fuse(lists, weights, p.rrf_k)
            order = np.argsort(ids, kind="stable")
            ids, fused = np.asarray(ids, np.int64)[order], np.asarray(fused, np.float64)[order]
            # equal fused scores: the passage that comes first in the components' lists (in component order)
            listed = np.concatenate([rows for rows, _ in lists]) if lists else np.zeros(0, np.int64)
            seen, first = np.unique(listed, return_index=True)
            position = _spread(ids, seen, first.astype(np.float64), float(listed.size))
            components = {"fused": fused}
            for label, (rows, scores) in zip(self.labels, lists, strict=True):
                components[label] = (
                    _spread(ids, np.sort(rows), scores[np.argsort(rows)], np.nan)
                    if rows.size
                    else np.full(ids.shape[0], np.nan)
                )
            out.append(Ranking(ids, fused, components=components, tiebreak=-position))
        return out


def _labels(names: Sequence[str]) -> list[str]:
    """Component names, made unique (``dense``, ``dense-2``, ...)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}-{seen[n]}")
    return out
