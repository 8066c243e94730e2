"""Searching a set of candidate passages where the store keeps their data: the branch on the backend, in one place.

Strategies that narrow the passages before scoring them (HCE's and EHI's leaves, DHR's documents, SVDR's token
rows, stored sparse embeddings) ask this module instead of asking which backend they run on:

- :func:`search_routed`: queries routed to leaves by a leaf-routed extension (:class:`LeafRouting`), the passages
  filed there scored exactly. In this process over the vectors the extension holds (the local store: one batched
  call of the extension's own search), else inside the engine: one dense search per query filtered by the engine's
  leaf field when it keeps one (Milvus ``search_in_leaves``), else by the leaves' rowids (``search_dense``).
- :func:`gather_vectors`: a small candidate set's vectors to score here, or ``None`` when a filtered search in the
  engine is the cheaper way (vectors in a remote engine, or more candidates than worth gathering).
- :func:`search_sparse_rows`: a sparse extension's top rows, searched by the engine when it keeps them in a sparse
  field (Milvus), else by the extension's index here; :func:`sparse_rows_engine` says which, and
  :func:`sparse_rows_kept_in_engine` whether a store keeps (or would keep) an extension's rows there;
  :func:`sparse_rowids` and :func:`idf_weighted_queries` read a sparse extension's rowids and idf wherever they are.

A backend offers the engine side through the optional capabilities of :mod:`rag_hier.store.contract`
(``remote_vectors``, :class:`~rag_hier.store.contract.EngineExtensions`); a new backend that keeps no extension data
in its engine needs nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from rag_hier.index.tree import TreeSearchResult
from rag_hier.store.capabilities import supports
from rag_hier.store.contract import EngineExtensions, engine_extension, remote_vectors

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend

__all__ = [
    "LeafRouting",
    "complete_with_zeros",
    "gather_vectors",
    "idf_weighted_queries",
    "search_routed",
    "search_sparse_rows",
    "sparse_rowids",
    "sparse_rows_engine",
    "sparse_rows_kept_in_engine",
    "vectors_in_client",
]


class LeafRouting(Protocol):
    """A leaf-routed extension as a search sees it (``TreeExtension``: HCE's tree; ``EHIExtension``: EHI's leaves)."""

    name: ClassVar[str]

    def routed_total(self) -> int:
        """Passages filed under the leaves (what ``fraction_scored`` is a share of)."""

    def route(self, queries: np.ndarray, beam: int) -> Iterable[np.ndarray]:
        """The leaves each query reaches with a beam of ``beam``."""

    def leaf_members(self, leaves: np.ndarray) -> np.ndarray:
        """The rowids filed under ``leaves``."""

    def search_here(
        self, store: StoreBackend, queries: np.ndarray, beam: int, k: int, allowed: np.ndarray | None
    ) -> TreeSearchResult:
        """The whole search in this process, over passage vectors the extension reads from ``store`` once."""


def vectors_in_client(store: object) -> bool:
    """Whether ``store`` keeps its passage vectors in this process (reading them costs no network transfer)."""
    return not remote_vectors(store)


def search_routed(
    store: StoreBackend, ext: LeafRouting, queries: np.ndarray, k: int, beam: int, allowed: np.ndarray | None
) -> TreeSearchResult:
    """Route ``queries`` to leaves and score the passages filed there (among ``allowed``) exactly, where they live.

    Returns the top ``k`` per query with what was scored: ``scored`` (passages compared with the query) and
    ``leaves_visited`` per query, ``n_items`` = :meth:`LeafRouting.routed_total`.
    """
    if vectors_in_client(store):
        return ext.search_here(store, queries, beam, k, allowed)
    engine = engine_extension(store, ext.name)
    n = queries.shape[0]
    scores = np.full((n, k), -np.inf, np.float32)
    ids = np.full((n, k), -1, np.int64)
    scored = np.zeros(n, np.int64)
    visited = np.zeros(n, np.int64)
    allowed_ids = None if allowed is None else np.asarray(allowed, dtype=np.int64)
    for i, leaves in enumerate(ext.route(queries, beam)):
        visited[i] = leaves.size
        items = ext.leaf_members(leaves)
        if allowed_ids is not None:
            items = items[np.isin(items, allowed_ids)]
        scored[i] = items.size
        if items.size == 0:
            continue
        m = min(k, int(items.size))
        if engine is not None:  # the engine keeps each passage's leaves: one search filtered by them
            s, r = engine.search_in_leaves(ext.name, queries[i : i + 1], m, leaves, allowed)
        else:  # filtered by the leaves' rowids
            s, r = store.search_dense(queries[i : i + 1], m, items)
        keep = r[0] >= 0
        got = int(keep.sum())
        scores[i, :got], ids[i, :got] = s[0][keep], r[0][keep]
    return TreeSearchResult(scores=scores, ids=ids, scored=scored, leaves_visited=visited, n_items=ext.routed_total())


def gather_vectors(store: StoreBackend, rowids: np.ndarray, limit: int) -> np.ndarray | None:
    """The vectors of ``rowids`` to score in this process, or ``None``: search them with ``search_dense(allowed=...)``.

    Gathering pays off for at most ``limit`` candidates on a store whose vectors are in this process; a passage
    deleted earlier in an open write batch (the index then skips it) also gives ``None``.
    """
    if rowids.size > limit or not vectors_in_client(store):
        return None
    try:
        return store.vectors(rowids)
    except RuntimeError:
        return None


def sparse_rows_engine(store: object, name: str) -> EngineExtensions | None:
    """The store's engine when it keeps the rows of sparse extension ``name`` (Milvus' sparse field), else ``None``."""
    return engine_extension(store, name)


def sparse_rows_kept_in_engine(store: object, name: str, *, attached: bool) -> bool:
    """Whether ``store`` keeps the rows of sparse extension ``name`` in its engine, or would once it is attached.

    ``attached``: the store has the extension. One that has not attached it yet is answered by the backend's kind
    (a store that can keep extension rows in its engine will keep a new one there); one that has, by where it
    keeps that extension's rows (a collection created before its engine kept them keeps them here).
    """
    if not supports(store, EngineExtensions):
        return False
    return not attached or bool(store.extension_in_engine(name))


def sparse_rowids(store: object, ext: Any) -> np.ndarray:
    """Rowids (ascending) holding a row of sparse extension ``ext``, in the engine or in the extension's index here."""
    engine = sparse_rows_engine(store, ext.name)
    return engine.sparse_rowids(ext.name) if engine is not None else ext.index.ids()


def idf_weighted_queries(store: object, ext: Any, queries: Any) -> Any:
    """T(q) of query texts weighted by the idf of token-index ``ext``'s rows, wherever the store keeps them.

    Here: the token index's own :meth:`~rag_hier.index.token.TokenIndex.query_vectors`; in the engine: the same
    weights from the engine's document frequencies.
    """
    engine = sparse_rows_engine(store, ext.name)
    if engine is None:
        return ext.index.query_vectors(queries, weighting="idf")
    import scipy.sparse as sp

    from rag_hier.index.token import TokenIndex

    idx, counts, n = engine.sparse_document_frequency(ext.name)
    df = np.zeros(ext.index.vocab_size, np.int64)
    df[idx] = counts
    binary = ext.index.binarizer.transform(queries, max_length=None)
    return sp.csr_matrix(binary.multiply(TokenIndex.idf_of(df, n)[None, :]))


def search_sparse_rows(
    store: StoreBackend,
    name: str,
    k: int,
    allowed: np.ndarray | None,
    *,
    queries: Callable[[], Any],
    here: Callable[[], tuple[np.ndarray, np.ndarray]],
    zero_padded: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` inner products of sparse queries with extension ``name``'s rows: ``(scores, rowids)``, padded.

    ``here()``: the extension's own search in this process, used unless the engine keeps the rows; then one sparse
    search there with the ``(n, columns)`` CSR rows ``queries()`` builds. An engine leaves out the rows sharing no
    index with a query; ``zero_padded`` completes a short result with them (score 0, ascending rowid, among
    ``allowed``), as an index here that ranks every row does.
    """
    engine = sparse_rows_engine(store, name)
    if engine is None:
        return here()
    scores, ids = engine.search_sparse(name, queries(), k, allowed)
    return complete_with_zeros(store, scores, ids, allowed) if zero_padded else (scores, ids)


def complete_with_zeros(
    store: StoreBackend, scores: np.ndarray, ids: np.ndarray, allowed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Fill short rows with the passages an engine's sparse search left out (score 0, by rowid).

    One read of the candidate rowids, only when a query matched fewer than asked.
    """
    depth = ids.shape[1]
    found = (ids >= 0).sum(axis=1)
    if not (found < depth).any():
        return scores, ids
    pool = (
        np.asarray(store.passage_rowids(), np.int64)
        if allowed is None
        else np.unique(np.asarray(allowed, dtype=np.int64))
    )
    scores, ids = scores.copy(), ids.copy()
    for r in np.flatnonzero(found < depth):
        got = ids[r, : found[r]]
        rest = pool[~np.isin(pool, got)][: depth - found[r]]
        ids[r, found[r] : found[r] + rest.size] = rest
        scores[r, found[r] : found[r] + rest.size] = 0.0
    return scores, ids
