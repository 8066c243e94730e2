"""The Milvus backend: the store contract on a Milvus server, cluster or Milvus Lite file.

Install it with ``pip install 'rag-hier[milvus]'``.

See ``docs/milvus.md``. :class:`MilvusStore` implements :class:`~rag_hier.store.contract.StoreBackend`;
:mod:`~rag_hier.store.milvus.migrate` moves a collection between a local directory and Milvus without
re-encoding anything.
"""

from rag_hier.store.milvus.client import MilvusUnavailableError, is_milvus_uri, split_uri
from rag_hier.store.milvus.filters import translate
from rag_hier.store.milvus.store import GPU_INDEXES, MilvusRowids, MilvusStore, milvus_index_params

__all__ = [
    "GPU_INDEXES",
    "MilvusRowids",
    "MilvusStore",
    "MilvusUnavailableError",
    "is_milvus_uri",
    "milvus_index_params",
    "split_uri",
    "translate",
]
