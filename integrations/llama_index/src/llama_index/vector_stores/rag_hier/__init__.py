"""rag-hier as a LlamaIndex vector store: ``from llama_index.vector_stores.rag_hier import RagHierVectorStore``."""

from llama_index.vector_stores.rag_hier.base import DEFAULT_NAMESPACE, RagHierVectorStore, Similarity, llm_questions

__all__ = ["DEFAULT_NAMESPACE", "RagHierVectorStore", "Similarity", "llm_questions"]
