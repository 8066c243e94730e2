"""The local store's parts, one job per module.

:class:`~rag_hier.store.store.HierStore` is the front; the jobs are mixins over
:class:`~rag_hier.store.local.base.LocalBase` (as :mod:`rag_hier.store.milvus` does for Milvus).
"""
