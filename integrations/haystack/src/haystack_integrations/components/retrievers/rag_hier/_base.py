"""What every rag-hier retriever component shares: one strategy of the engine's registry, run over the store.

A component names a registered strategy (``rag_hier.retrieval.registry``) and its parameters, checked once at
construction against the strategy's parameters dataclass; each run hands the Haystack inputs to
:meth:`RagHierDocumentStore._retrieve`, which builds the engine retriever, searches and turns the hits into
Documents. The specific components (embedding, hierarchical, SVDR, BM25, sparse) are presets of this machinery:
they fix the strategy, name their inputs as Haystack's conventions do, and keep their serialized form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from haystack import Document, default_from_dict
from haystack.document_stores.types import FilterPolicy, apply_filter_policy
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore
from haystack_integrations.document_stores.rag_hier.document_store import check_scale_score

from rag_hier.retrieval.base import RetrieverParams
from rag_hier.retrieval.registry import StrategyEntry, strategy

__all__ = ["StrategyComponent"]

C = TypeVar("C", bound="StrategyComponent")


class StrategyComponent:
    """Base of the rag-hier retriever components (not a component itself; subclasses are)."""

    document_store: RagHierDocumentStore
    filters: dict[str, Any] | None
    top_k: int
    return_embedding: bool
    filter_policy: FilterPolicy
    _strategy: str
    _params: RetrieverParams
    _auto_extensions: bool = False
    _auto_option: str = "auto_extensions=True"
    _scale_score: bool = False
    _component_scores: bool = True
    _parent_documents: bool = False

    def _setup(
        self,
        document_store: RagHierDocumentStore,
        filters: dict[str, Any] | None,
        top_k: int,
        return_embedding: bool,
        filter_policy: FilterPolicy | str,
    ) -> None:
        """Check and keep what every retriever component takes (InMemory retrievers' conventions)."""
        if not isinstance(document_store, RagHierDocumentStore):
            raise TypeError("document_store must be an instance of RagHierDocumentStore")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0:
            raise ValueError(f"top_k must be greater than 0, but got {top_k}")
        self.document_store = document_store
        self.filters = filters
        self.top_k = top_k
        self.return_embedding = return_embedding
        self.filter_policy = (
            filter_policy if isinstance(filter_policy, FilterPolicy) else FilterPolicy.from_str(filter_policy)
        )

    @staticmethod
    def _entry(name: str) -> StrategyEntry:
        return strategy(name)

    def _use_strategy(
        self, name: str, values: Mapping[str, Any] | None, *, where: str, scale_score: bool = False
    ) -> RetrieverParams:
        """Fix the strategy and its parameters (checked against the strategy's dataclass, once)."""
        entry = self._entry(name)
        params = entry.parse(values, where=where)
        check_scale_score(entry, scale_score)
        self._strategy = name
        self._params = params
        return params

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"document_store": type(self.document_store).__name__, "strategy": self._strategy}

    def warm_up(self) -> None:
        """Open the store and load what the strategy searches with (idempotent; cheap after the first call)."""
        self.document_store.warm_up_strategy(self._strategy, self._params)

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Deserialize the component from a dictionary (``data`` is not modified)."""
        init_params = dict(data.get("init_parameters", {}))
        if "filter_policy" in init_params:
            init_params["filter_policy"] = FilterPolicy.from_str(init_params["filter_policy"])
        return default_from_dict(cls, {**data, "init_parameters": init_params})

    def _inputs(
        self,
        filters: dict[str, Any] | None,
        top_k: int | None,
        scale_score: bool | None,
        return_embedding: bool | None,
    ) -> dict[str, Any]:
        top_k = self.top_k if top_k is None else top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"top_k must be greater than or equal to 0, but got {top_k}")
        return {
            "filters": apply_filter_policy(self.filter_policy, self.filters, filters),
            "top_k": top_k,
            "scale_score": self._scale_score if scale_score is None else scale_score,
            "return_embedding": self.return_embedding if return_embedding is None else return_embedding,
            "auto_extensions": self._auto_extensions,
            "auto_option": self._auto_option,
            "component_scores": self._component_scores,
            "parent_documents": self._parent_documents,
        }

    def _search(
        self,
        *,
        filters: dict[str, Any] | None,
        top_k: int | None,
        scale_score: bool | None = None,
        return_embedding: bool | None,
        **queries: Any,
    ) -> dict[str, list[Document]]:
        # _inputs() spelt out: the search path of every run, one keyword call instead of a dict and two unpackings
        top_k = self.top_k if top_k is None else top_k
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"top_k must be greater than or equal to 0, but got {top_k}")
        documents = self.document_store._retrieve(
            self._strategy,
            self._params,
            **queries,
            filters=apply_filter_policy(self.filter_policy, self.filters, filters),
            top_k=top_k,
            scale_score=self._scale_score if scale_score is None else scale_score,
            return_embedding=self.return_embedding if return_embedding is None else return_embedding,
            auto_extensions=self._auto_extensions,
            auto_option=self._auto_option,
            component_scores=self._component_scores,
            parent_documents=self._parent_documents,
        )
        return {"documents": documents}

    async def _search_async(
        self,
        *,
        filters: dict[str, Any] | None,
        top_k: int | None,
        scale_score: bool | None = None,
        return_embedding: bool | None,
        **queries: Any,
    ) -> dict[str, list[Document]]:
        inputs = self._inputs(filters, top_k, scale_score, return_embedding)
        store = self.document_store
        documents = await store._off_loop(store._retrieve, self._strategy, self._params, **queries, **inputs)
        return {"documents": documents}
