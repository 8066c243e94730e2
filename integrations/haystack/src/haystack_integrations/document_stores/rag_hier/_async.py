"""Async twins of RagHierDocumentStore's methods: the sync work runs in a worker thread, off the event loop."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from haystack import Document
from haystack.dataclasses import SparseEmbedding
from haystack.document_stores.types import DuplicatePolicy

from rag_hier.retrieval.base import RetrieverParams

T = TypeVar("T")

__all__ = ["AsyncTwins"]


class AsyncTwins:
    """The ``*_async`` methods of RagHierDocumentStore (each runs its sync twin with ``asyncio.to_thread``)."""

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))

    async def count_documents_async(self) -> int:
        """Asynchronous :meth:`count_documents`."""
        return await self._off_loop(self.count_documents)

    async def filter_documents_async(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Asynchronous :meth:`filter_documents`."""
        return await self._off_loop(self.filter_documents, filters)

    async def write_documents_async(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE
    ) -> int:
        """Asynchronous :meth:`write_documents`."""
        return await self._off_loop(self.write_documents, documents, policy)

    async def delete_documents_async(self, document_ids: list[str]) -> None:
        """Asynchronous :meth:`delete_documents`."""
        await self._off_loop(self.delete_documents, document_ids)

    async def delete_all_documents_async(self, recreate_index: bool = False) -> None:
        """Asynchronous :meth:`delete_all_documents`."""
        await self._off_loop(self.delete_all_documents, recreate_index)

    async def delete_by_filter_async(self, filters: dict[str, Any]) -> int:
        """Asynchronous :meth:`delete_by_filter`."""
        return await self._off_loop(self.delete_by_filter, filters)

    async def update_by_filter_async(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Asynchronous :meth:`update_by_filter`."""
        return await self._off_loop(self.update_by_filter, filters, meta)

    async def count_documents_by_filter_async(self, filters: dict[str, Any]) -> int:
        """Asynchronous :meth:`count_documents_by_filter`."""
        return await self._off_loop(self.count_documents_by_filter, filters)

    async def count_unique_metadata_by_filter_async(
        self, filters: dict[str, Any], metadata_fields: list[str]
    ) -> dict[str, int]:
        """Asynchronous :meth:`count_unique_metadata_by_filter`."""
        return await self._off_loop(self.count_unique_metadata_by_filter, filters, metadata_fields)

    async def get_metadata_fields_info_async(self) -> dict[str, dict[str, str]]:
        """Asynchronous :meth:`get_metadata_fields_info`."""
        return await self._off_loop(self.get_metadata_fields_info)

    async def get_metadata_field_min_max_async(self, metadata_field: str) -> dict[str, Any]:
        """Asynchronous :meth:`get_metadata_field_min_max`."""
        return await self._off_loop(self.get_metadata_field_min_max, metadata_field)

    async def get_metadata_field_unique_values_async(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """Asynchronous :meth:`get_metadata_field_unique_values`."""
        return await self._off_loop(
            self.get_metadata_field_unique_values, metadata_field, search_term, from_, size, filters
        )

    async def retrieve_async(
        self,
        strategy: str = "dense",
        strategy_params: RetrieverParams | Mapping[str, Any] | None = None,
        *,
        query: str | None = None,
        query_embedding: list[float] | None = None,
        query_sparse_embedding: SparseEmbedding | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        auto_extensions: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`retrieve`."""
        return await self._off_loop(
            self.retrieve,
            strategy,
            strategy_params,
            query=query,
            query_embedding=query_embedding,
            query_sparse_embedding=query_sparse_embedding,
            filters=filters,
            top_k=top_k,
            scale_score=scale_score,
            return_embedding=return_embedding,
            auto_extensions=auto_extensions,
        )

    async def embedding_retrieval_async(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`embedding_retrieval`."""
        return await self._off_loop(
            self.embedding_retrieval, query_embedding, filters, top_k, scale_score, return_embedding
        )

    async def text_retrieval_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`text_retrieval`."""
        return await self._off_loop(self.text_retrieval, query, filters, top_k, scale_score, return_embedding)

    async def svdr_retrieval_async(
        self,
        query: str,
        mode: str = "beta-rerank",
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        rerank_m: int = 100,
        vocab_model: str | None = None,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`svdr_retrieval`."""
        return await self._off_loop(
            self.svdr_retrieval, query, mode, filters, top_k, rerank_m, vocab_model, return_embedding
        )

    async def sparse_embedding_retrieval_async(
        self,
        query_sparse_embedding: SparseEmbedding,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`sparse_embedding_retrieval`."""
        return await self._off_loop(
            self.sparse_embedding_retrieval, query_sparse_embedding, filters, top_k, return_embedding
        )

    async def bm25_retrieval_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        *,
        k1: float | None = None,
        b: float | None = None,
        auto_extensions: bool = False,
    ) -> list[Document]:
        """Asynchronous :meth:`bm25_retrieval`."""
        return await self._off_loop(
            self.bm25_retrieval,
            query,
            filters,
            top_k,
            scale_score,
            k1=k1,
            b=b,
            auto_extensions=auto_extensions,
        )

    async def hierarchical_retrieval_async(
        self,
        query: str | None = None,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        *,
        k1: int | None = None,
        lambda_: float | None = None,
        mode: str = "serial",
        auto_document_index: bool = False,
        query_embedding: list[float] | None = None,
    ) -> list[Document]:
        """Asynchronous :meth:`hierarchical_retrieval`."""
        return await self._off_loop(
            self.hierarchical_retrieval,
            query,
            filters,
            top_k,
            scale_score,
            return_embedding,
            k1=k1,
            lambda_=lambda_,
            mode=mode,
            auto_document_index=auto_document_index,
            query_embedding=query_embedding,
        )
