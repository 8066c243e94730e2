"""LeafRoutedRetriever: the base of strategies that route a query to leaves and score the passages filed there.

HCE's cluster tree (``tree``) and EHI's learned indexer (``ehi``) search alike: a beam search picks leaves, the
passages filed under them are scored exactly (inner product with the query), the best are ranked. Such a strategy
names its store extension (a :class:`~rag_hier.store.candidates.LeafRouting`: it routes queries and lists the
passages of leaves) and its beam; the search itself runs where the store keeps the data
(:func:`rag_hier.store.candidates.search_routed`: over the vectors in this process, or inside the engine). Per
query, ``QueryResult.stats`` reports ``passages_scored`` (the passages whose vectors were compared with the query,
measured), ``fraction_scored`` (their share of the passages filed) and ``leaves_visited``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

import numpy as np

from rag_hier.retrieval.base import Ranking, Retriever
from rag_hier.store.candidates import LeafRouting, search_routed

if TYPE_CHECKING:
    from rag_hier.index.tree import TreeSearchResult

__all__ = ["LeafRoutedRetriever", "beam_rankings"]


class LeafRoutedRetriever(Retriever[np.ndarray]):
    """Base of leaf-routed strategies: a subclass gives its extension and its beam (see the module docstring)."""

    @abstractmethod
    def routing(self) -> LeafRouting:
        """The store's leaf-routed extension this strategy searches (an error naming how to build it if missing)."""

    @abstractmethod
    def beam_of(self, routing: LeafRouting) -> int:
        """The leaves (tree: nodes per level) a query keeps at each step of the beam search."""

    def rank(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """Beam search, then exact scores for the passages of the leaves reached."""
        routing = self.routing()
        result = search_routed(self.store, routing, queries, k, self.beam_of(routing), allowed)
        return beam_rankings(result, k, routing.routed_total())


def beam_rankings(result: TreeSearchResult, k: int, total: int) -> list[Ranking]:
    """One :class:`Ranking` per query of a beam search (tree or EHI), with what it scored of ``total`` passages."""
    out = []
    for i in range(result.ids.shape[0]):
        keep = result.ids[i] >= 0
        scored = int(result.scored[i])
        out.append(
            Ranking(
                result.ids[i][keep],
                result.scores[i][keep].astype(np.float64),
                stats={
                    "passages_scored": float(scored),
                    "fraction_scored": scored / max(total, 1),
                    "leaves_visited": float(result.leaves_visited[i]),
                },
                exhausted=int(keep.sum()) < k,
            )
        )
    return out
