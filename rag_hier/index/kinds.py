"""The dense index kinds a store can hold (no FAISS imported: the CLI's ``--help`` lists them)."""

from __future__ import annotations

from typing import Literal

__all__ = ["INDEX_KINDS", "IndexKind"]

IndexKind = Literal["flat", "ivf", "hnsw"]
INDEX_KINDS: tuple[str, ...] = ("flat", "ivf", "hnsw")
