"""Haystack retrievers over a RagHierDocumentStore."""

from haystack_integrations.components.retrievers.rag_hier.embedding_retriever import RagHierEmbeddingRetriever
from haystack_integrations.components.retrievers.rag_hier.hierarchical_retriever import HierarchicalRetriever

__all__ = ["HierarchicalRetriever", "RagHierEmbeddingRetriever"]
