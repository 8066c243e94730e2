"""Index structures: dense FAISS indexes, sparse rows, the binary token index, the cluster tree.

They know nothing of stores; the store's extensions (:mod:`rag_hier.store.extensions`) keep them in sync
with a collection.
"""

from rag_hier.index.dense import INDEX_KINDS, DenseIndex, IndexConfig, IndexKind

__all__ = ["INDEX_KINDS", "DenseIndex", "IndexConfig", "IndexKind"]
