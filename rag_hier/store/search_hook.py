"""What a store's ``search()`` runs: installed by the retrieval layer's dense strategy when it is imported.

The store layer never imports the retrieval layer; ``HierStore.search`` and ``MilvusStore.search`` both look
the search up here, importing :data:`SEARCH_MODULE` by name on first use (a plugin lookup).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

from rag_hier.errors import StoreError

if TYPE_CHECKING:
    from rag_hier.store.contract import Filters
    from rag_hier.store.records import Hit

__all__ = ["SEARCH_MODULE", "DenseSearch", "default_search", "set_default_search"]

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


class DenseSearch:
    """``search()`` for a store class: the dense strategy over the store (both backends inherit it)."""

    __slots__ = ()

    @overload
    def search(  # type: ignore[overload-overlap]  # str is also a Sequence[str]; str wins
        self, query: str, top_k: int = 10, filters: Filters = None
    ) -> list[Hit]: ...
    @overload
    def search(self, query: Sequence[str], top_k: int = 10, filters: Filters = None) -> list[list[Hit]]: ...
    def search(
        self, query: str | Sequence[str], top_k: int = 10, filters: Filters = None
    ) -> list[Hit] | list[list[Hit]]:
        """Dense search: one query gives a ranked ``list[Hit]``, a list of queries a list of those.

        The ``dense`` strategy of :mod:`rag_hier.retrieval` (``DenseRetriever(store).search(...)``); other
        strategies are searched through their retrievers or :func:`rag_hier.retrieval.build_retriever`.
        """
        return default_search(self, query, top_k, filters)
