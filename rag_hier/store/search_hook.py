"""What a store's ``search()`` runs: installed by the retrieval layer's dense strategy when it is imported.

The store layer never imports the retrieval layer; ``HierStore.search`` and ``MilvusStore.search`` both look
the search up here, importing :data:`SEARCH_MODULE` by name on first use (a plugin lookup).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rag_hier.errors import StoreError

__all__ = ["SEARCH_MODULE", "default_search", "set_default_search"]

SEARCH_MODULE = "rag_hier.retrieval.dense"
"""The module that installs the stores' ``search`` (:func:`set_default_search`) when imported."""

_SEARCH: Callable[..., Any] | None = None


def set_default_search(search: Callable[..., Any]) -> None:
    """Install what a store's ``search(query, top_k, filters)`` runs (the dense strategy registers itself)."""
    global _SEARCH
    _SEARCH = search


def default_search(store: Any, query: Any, top_k: int, filters: Any) -> Any:
    """Run the installed search on ``store`` (importing :data:`SEARCH_MODULE` first if nothing is installed)."""
    if _SEARCH is None:
        importlib.import_module(SEARCH_MODULE)
    if _SEARCH is None:  # pragma: no cover - rag_hier.retrieval.dense calls set_default_search
        raise StoreError(f"searching is not available: {SEARCH_MODULE} did not install it")
    return _SEARCH(store, query, top_k, filters)
