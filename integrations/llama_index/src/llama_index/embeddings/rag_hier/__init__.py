"""rag-hier encoders as LlamaIndex embeddings: ``from llama_index.embeddings.rag_hier import RagHierEmbedding``."""

from llama_index.embeddings.rag_hier.base import RagHierEmbedding

__all__ = ["RagHierEmbedding"]
