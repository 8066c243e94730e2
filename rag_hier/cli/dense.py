"""CLI plugin: the ``dense`` strategy (flat passage search over the store's FAISS index)."""

from __future__ import annotations

import argparse
from typing import Any

from rag_hier.cli.plugins import Strategy


def _search(
    store: Any, args: argparse.Namespace, queries: list[str], top_k: int, filters: Any, aggregate: str
) -> list[list[Any]]:
    from rag_hier.retrieval.dense import DenseRetriever

    vectors = store.encode_queries(queries)
    return DenseRetriever(store).search_vectors(vectors, top_k=top_k, filters=filters, aggregate=aggregate)  # type: ignore[arg-type]


STRATEGIES = {"dense": Strategy("dense", "dense passage search (exact or ANN per the store's index)", _search)}
