"""Search results: one :class:`Hit` type for every strategy, and a query's :class:`QueryResult`.

They are defined with the store's records (:mod:`rag_hier.store.records`), whose ``search`` returns them too.
"""

from rag_hier.store.records import Hit, QueryResult

__all__ = ["Hit", "QueryResult"]
