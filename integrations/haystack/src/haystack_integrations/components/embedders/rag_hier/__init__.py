"""Haystack embedders backed by rag-hier's DenseEncoder (sentence-transformers; GPU when present)."""

from haystack_integrations.components.embedders.rag_hier.document_embedder import RagHierDocumentEmbedder
from haystack_integrations.components.embedders.rag_hier.text_embedder import RagHierTextEmbedder

__all__ = ["RagHierDocumentEmbedder", "RagHierTextEmbedder"]
