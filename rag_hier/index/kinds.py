"""Index kinds and search methods, importable without FAISS or NumPy (the CLI's ``--help`` lists them)."""

from __future__ import annotations

from typing import Literal

__all__ = ["INDEX_KINDS", "IndexKind", "SearchMethod"]

IndexKind = Literal["flat", "ivf", "hnsw"]
INDEX_KINDS: tuple[str, ...] = ("flat", "ivf", "hnsw")
SearchMethod = Literal["auto", "matmul", "inverted"]
"""How a sparse product is computed (:class:`~rag_hier.index.sparse.SparseRowIndex`; same results)."""
