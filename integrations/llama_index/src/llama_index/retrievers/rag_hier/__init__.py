"""rag-hier retrievers for LlamaIndex: ``from llama_index.retrievers.rag_hier import HierarchicalRetriever``."""

from llama_index.retrievers.rag_hier.base import HierarchicalRetriever

__all__ = ["HierarchicalRetriever"]
