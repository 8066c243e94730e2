"""Index structures: dense FAISS indexes, sparse rows, the binary token index, the cluster tree.

They know nothing of stores; the store's extensions (:mod:`rag_hier.store.extensions`) keep them in sync
with a collection. Names load on first use, so ``rag_hier.index.kinds`` imports no FAISS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.index.dense import DenseIndex, IndexConfig
    from rag_hier.index.kinds import INDEX_KINDS, IndexKind

__getattr__ = lazy_getattr(
    __name__,
    {"INDEX_KINDS": "kinds", "IndexKind": "kinds", "DenseIndex": "dense", "IndexConfig": "dense"},
    globals(),
)

__all__ = ["INDEX_KINDS", "DenseIndex", "IndexConfig", "IndexKind"]
