"""Store extensions: extra indexes that live in a store directory and follow its writes.

One module per extension (``doc_index``: DHR's document index, ``token_index``: SVDR's binary token index,
``svdr_vectors``: SVDR's learned passage vectors, ``sparse_embeddings``: caller-supplied sparse vectors,
``tree``: HCE's cluster tree, ``ehi``: EHI's leaf lists, ``bm25``: term frequencies for BM25), registered by
name by their method's registration (:mod:`rag_hier.index.methods`; :func:`known_extensions` lists them).
Import an extension class from its module, e.g. ``from rag_hier.store.extensions.doc_index import DocumentIndex``.
"""

from rag_hier.store.extensions.base import StoreExtension, extension_class, known_extensions, register_extension

__all__ = ["StoreExtension", "extension_class", "known_extensions", "register_extension"]
