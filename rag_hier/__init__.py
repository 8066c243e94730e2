"""rag-hier: hierarchical retrieval components for RAG on one engine (FAISS + SQLite store).

The engine imports neither Haystack nor LlamaIndex; adapters live in the ``haystack_integrations`` and
``llama_index`` namespaces.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rag_hier._version import __version__

logging.getLogger(__name__).addHandler(logging.NullHandler())

from rag_hier._lazy import lazy_getattr  # noqa: E402

if TYPE_CHECKING:
    from rag_hier.corpus import Document, Passage, Section, split_document
    from rag_hier.encoders import DEFAULT_MODEL, DenseEncoder
    from rag_hier.errors import RagHierError
    from rag_hier.index import DenseIndex, IndexConfig
    from rag_hier.retrieval import DenseRetriever, Hit
    from rag_hier.store import HierStore, WriteSummary, create_store, open_store
    from rag_hier.tuning import TuneConfig, TuneReport

# Everything loads on first use (PEP 562): `import rag_hier` stays light (no NumPy, FAISS or SQLite).
__getattr__ = lazy_getattr(
    __name__,
    {
        "Document": "corpus",
        "Passage": "corpus",
        "Section": "corpus",
        "split_document": "corpus",
        "DEFAULT_MODEL": "encoders",
        "DenseEncoder": "encoders",
        "RagHierError": "errors",
        "DenseIndex": "index",
        "IndexConfig": "index",
        "DenseRetriever": "retrieval",
        "Hit": "retrieval",
        "HierStore": "store",
        "WriteSummary": "store",
        "create_store": "store",
        "open_store": "store",
        "TuneConfig": "tuning",
        "TuneReport": "tuning",
    },
    globals(),
)


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
    "create_store",
    "open_store",
    "split_document",
]
