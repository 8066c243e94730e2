"""The persistent store: one directory per collection (manifest + SQLite + FAISS)."""

from rag_hier.store.filters import Predicate, compile_filter
from rag_hier.store.store import FORMAT_VERSION, HierStore, WritePolicy, WriteSummary

__all__ = ["FORMAT_VERSION", "HierStore", "Predicate", "WritePolicy", "WriteSummary", "compile_filter"]
