"""CLI plugin: the ``dense`` strategy (flat passage search over the store's FAISS index)."""

from __future__ import annotations

import argparse
from typing import Any

from rag_hier.cli.plugins import Strategy


def _search(
    store: Any, args: argparse.Namespace, queries: list[str], top_k: int, filters: Any, aggregate: str
) -> list[list[Any]]:
    from rag_hier.retrieval.dense import DenseRetriever
    from rag_hier.store.store import StoreError

    if store.encoder is None and store.corpus_info.get("dense", True) is False:
        raise StoreError(
            f"the store at {store.path} was built with --no-dense: it has no dense index to search; use "
            "--strategy svdr-beta, svdr-beta-rerank, svdr-alpha or svdr-full (a vocabulary model), or "
            "svdr-lexical (no model)"
        )
    vectors = store.encode_queries(queries)
    return DenseRetriever(store).search_vectors(vectors, top_k=top_k, filters=filters, aggregate=aggregate)  # type: ignore[arg-type]


STRATEGIES = {"dense": Strategy("dense", "dense passage search (exact or ANN per the store's index)", _search)}
