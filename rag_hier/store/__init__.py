"""The persistent store: one directory per collection (manifest + SQLite + FAISS), and its contract."""

from rag_hier.store.contract import SIMILARITIES, Filters, Similarity, StoreBackend
from rag_hier.store.filters import Predicate, compile_filter
from rag_hier.store.records import PassageRecord
from rag_hier.store.state import FORMAT_VERSION
from rag_hier.store.store import HierStore
from rag_hier.store.writes import WritePolicy, WriteSummary

__all__ = [
    "FORMAT_VERSION",
    "SIMILARITIES",
    "Filters",
    "HierStore",
    "PassageRecord",
    "Predicate",
    "Similarity",
    "StoreBackend",
    "WritePolicy",
    "WriteSummary",
    "compile_filter",
]
