"""Retrieval strategies over a store, each returning ranked :class:`Hit` lists.

All share one contract (:mod:`rag_hier.retrieval.base`) and are found by name in one registry
(:mod:`rag_hier.retrieval.registry`): ``dense``, ``hierarchical`` (DHR), ``tree`` (HCE), ``ehi`` (EHI),
``svdr-*`` (SVDR), ``bm25``, ``sparse-embedding`` and ``fusion`` (hybrid).
Tied-Atomic's generative (docid) view over a store is :mod:`rag_hier.retrieval.generative` (searching such a
store is ``dense``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.retrieval.base import Aggregate, ParameterError, Queries, Ranking, Retriever, aggregate_max_passage
    from rag_hier.retrieval.dense import DenseRetriever
    from rag_hier.retrieval.hierarchical import HierarchicalMode, HierarchicalRetriever
    from rag_hier.retrieval.hit import Hit, QueryResult
    from rag_hier.retrieval.params import RetrieverParams, param
    from rag_hier.retrieval.registry import (
        StrategyEntry,
        build_retriever,
        register_strategy,
        strategy,
        strategy_names,
        strategy_params,
    )

# names load on first use: listing strategies and their parameters imports no NumPy
__getattr__ = lazy_getattr(
    __name__,
    {
        "Aggregate": "base",
        "DenseRetriever": "dense",
        "HierarchicalMode": "hierarchical",
        "HierarchicalRetriever": "hierarchical",
        "Hit": "hit",
        "ParameterError": "base",
        "Queries": "base",
        "QueryResult": "hit",
        "Ranking": "base",
        "Retriever": "base",
        "RetrieverParams": "params",
        "StrategyEntry": "registry",
        "aggregate_max_passage": "base",
        "build_retriever": "registry",
        "param": "params",
        "register_strategy": "registry",
        "strategy": "registry",
        "strategy_names": "registry",
        "strategy_params": "registry",
    },
    globals(),
)

__all__ = [
    "Aggregate",
    "DenseRetriever",
    "HierarchicalMode",
    "HierarchicalRetriever",
    "Hit",
    "ParameterError",
    "Queries",
    "QueryResult",
    "Ranking",
    "Retriever",
    "RetrieverParams",
    "StrategyEntry",
    "aggregate_max_passage",
    "build_retriever",
    "param",
    "register_strategy",
    "strategy",
    "strategy_names",
    "strategy_params",
]
