"""rag-hier: hierarchical retrieval components for RAG on one engine (FAISS + SQLite store).

The engine imports neither Haystack nor LlamaIndex; adapters live in the ``haystack_integrations`` and
``llama_index`` namespaces.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rag_hier._version import __version__

logging.getLogger(__name__).addHandler(logging.NullHandler())

import rag_hier.tuning  # noqa: E402, F401 - installs HierStore.tune; TuneConfig and TuneReport load on first use
from rag_hier._lazy import lazy_getattr  # noqa: E402
from rag_hier.corpus import Document, Passage, Section, split_document  # noqa: E402
from rag_hier.encoders import DEFAULT_MODEL, DenseEncoder  # noqa: E402
from rag_hier.errors import RagHierError  # noqa: E402
from rag_hier.index import DenseIndex, IndexConfig  # noqa: E402
from rag_hier.retrieval import DenseRetriever, Hit  # noqa: E402
from rag_hier.store import HierStore, WriteSummary  # noqa: E402

if TYPE_CHECKING:
    from rag_hier.tuning import TuneConfig, TuneReport


__getattr__ = lazy_getattr(__name__, {"TuneConfig": "tuning", "TuneReport": "tuning"}, globals())


__all__ = [
    "DEFAULT_MODEL",
    "DenseEncoder",
    "DenseIndex",
    "DenseRetriever",
    "Document",
    "HierStore",
    "Hit",
    "IndexConfig",
    "Passage",
    "RagHierError",
    "Section",
    "TuneConfig",
    "TuneReport",
    "WriteSummary",
    "__version__",
    "split_document",
]
