"""Retrieval strategies over a store, returning ranked :class:`Hit` lists."""

from rag_hier.retrieval.dense import Aggregate, DenseRetriever, aggregate_max_passage
from rag_hier.retrieval.hierarchical import HierarchicalMode, HierarchicalRetriever, RankedPassages
from rag_hier.retrieval.hit import Hit

__all__ = [
    "Aggregate",
    "DenseRetriever",
    "HierarchicalMode",
    "HierarchicalRetriever",
    "Hit",
    "RankedPassages",
    "aggregate_max_passage",
]
