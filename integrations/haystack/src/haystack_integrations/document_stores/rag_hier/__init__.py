"""Haystack document store backed by a rag-hier store directory (SQLite + FAISS)."""

from haystack_integrations.document_stores.rag_hier.document_store import RagHierDocumentStore, chat_generator_questions

__all__ = ["RagHierDocumentStore", "chat_generator_questions"]
