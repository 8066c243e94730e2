"""rag-hier retrievers for LlamaIndex: ``from llama_index.retrievers.rag_hier import RagHierRetriever``.

``RagHierRetriever`` runs any registered rag-hier strategy by name; ``HierarchicalRetriever`` is its DHR preset.
"""

from llama_index.retrievers.rag_hier.base import HierarchicalRetriever, RagHierRetriever

__all__ = ["HierarchicalRetriever", "RagHierRetriever"]
