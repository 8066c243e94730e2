"""Indexes: dense FAISS indexes (and, in later modules, tree and token indexes)."""

from rag_hier.index.dense import INDEX_KINDS, DenseIndex, IndexConfig, IndexKind
from rag_hier.index.document import DocumentIndex

__all__ = ["INDEX_KINDS", "DenseIndex", "DocumentIndex", "IndexConfig", "IndexKind"]
