"""Haystack retrievers over a RagHierDocumentStore."""

from haystack_integrations.components.retrievers.rag_hier.bm25_retriever import RagHierBM25Retriever
from haystack_integrations.components.retrievers.rag_hier.embedding_retriever import RagHierEmbeddingRetriever
from haystack_integrations.components.retrievers.rag_hier.hierarchical_retriever import HierarchicalRetriever
from haystack_integrations.components.retrievers.rag_hier.retriever import RagHierRetriever
from haystack_integrations.components.retrievers.rag_hier.sparse_embedding_retriever import (
    RagHierSparseEmbeddingRetriever,
)
from haystack_integrations.components.retrievers.rag_hier.svdr_retriever import RagHierSvdrRetriever

__all__ = [
    "HierarchicalRetriever",
    "RagHierBM25Retriever",
    "RagHierEmbeddingRetriever",
    "RagHierRetriever",
    "RagHierSparseEmbeddingRetriever",
    "RagHierSvdrRetriever",
]
