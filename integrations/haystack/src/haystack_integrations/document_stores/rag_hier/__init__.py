"""Haystack document store backed by a rag-hier store directory (SQLite + FAISS)."""

from haystack_integrations.document_stores.rag_hier.document_store import RagHierDocumentStore

__all__ = ["RagHierDocumentStore"]
