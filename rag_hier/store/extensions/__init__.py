"""Store extensions: extra indexes that live in a store directory and follow its writes.

One module per extension (``doc_index``: DHR's document index, ``token_index``: SVDR's binary token index,
``svdr_vectors``: SVDR's learned passage vectors, ``sparse_embeddings``: caller-supplied sparse vectors,
``tree``: HCE's cluster tree, ``ehi``: EHI's leaf lists, ``bm25``: term frequencies for BM25), registered by
name in :data:`~rag_hier.store.extensions.base.KNOWN_EXTENSIONS`.
Import an extension class from its module, e.g. ``from rag_hier.store.extensions.doc_index import DocumentIndex``.
"""

from rag_hier.store.extensions.base import KNOWN_EXTENSIONS, StoreExtension, extension_class, register_extension

__all__ = ["KNOWN_EXTENSIONS", "StoreExtension", "extension_class", "register_extension"]
