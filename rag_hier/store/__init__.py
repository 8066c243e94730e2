"""The persistent store: one directory per collection (manifest + SQLite + FAISS), and its contract."""

from rag_hier.store.contract import SIMILARITIES, Filters, Similarity, StoreBackend, StoreExtension
from rag_hier.store.factory import create_store, open_store
from rag_hier.store.filters import Predicate, Refined, compile_filter
from rag_hier.store.records import Hit, ModelSwitch, PassageRecord, QueryResult, WritePolicy, WriteSummary
from rag_hier.store.state import FORMAT_VERSION
from rag_hier.store.store import HierStore

__all__ = [
    "FORMAT_VERSION",
    "SIMILARITIES",
    "Filters",
    "HierStore",
    "Hit",
    "ModelSwitch",
    "PassageRecord",
    "Predicate",
    "QueryResult",
    "Refined",
    "Similarity",
    "StoreBackend",
    "StoreExtension",
    "WritePolicy",
    "WriteSummary",
    "compile_filter",
    "create_store",
    "open_store",
]
