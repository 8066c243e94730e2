"""Indexes: dense FAISS indexes (and, in later modules, tree and token indexes)."""

from rag_hier.index.dense import INDEX_KINDS, DenseIndex, IndexConfig, IndexKind

__all__ = ["INDEX_KINDS", "DenseIndex", "IndexConfig", "IndexKind"]
