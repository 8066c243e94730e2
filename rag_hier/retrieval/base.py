"""The retriever contract: one base class owns everything but the ranking.

A strategy subclasses :class:`Retriever`, declares its parameters as a frozen :class:`RetrieverParams`
dataclass (validated once, on construction; CLI flags, Haystack component parameters and LlamaIndex retriever
keyword arguments all come from it), and implements one method, :meth:`Retriever.rank`: the best candidate
rowids of each query, with their scores. The base class owns the rest, identically for every strategy:

- the three ways to search — one query text (``search("q")`` → ``list[Hit]``), a batch
  (``search([...])`` → one list per query) and ready query vectors (``search_vectors``) — plus
  :meth:`Retriever.run`, which takes any :class:`Queries` and also returns per-query statistics;
- filters (Haystack syntax or a predicate), turned into the candidate rowids once per call;
- ``top_k`` validated and capped at what the store holds (never allocated beyond it);
- ``aggregate="doc"``: documents ranked by their best passage (MaxP), widening the passage search until every
  query has ``top_k`` documents or the strategy has nothing more;
- ties (higher score, then a strategy's own tie key if it gives one, then lower rowid, i.e. insertion order)
  and the building of :class:`~rag_hier.retrieval.hit.Hit`
  objects from one read of the store per call.

Writing a strategy::

    @dataclass(frozen=True)
    class MyParams(RetrieverParams):
        depth: int = param(100, help="candidates per query", minimum=1)

    class MyRetriever(Retriever[np.ndarray]):
        name = "mine"
        Params = MyParams
        def rank(self, queries, k, allowed, *, min_documents=None):
            ...  # one Ranking per query

plus one line in :mod:`rag_hier.retrieval.registry`.
"""

from __future__ import annotations

import contextlib
import math
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, TypeVar, overload

import numpy as np

from rag_hier.errors import ParameterError, StoreError
from rag_hier.index.selection import select_top_k
from rag_hier.retrieval.hit import Hit, QueryResult
from rag_hier.retrieval.params import RetrieverParams, param
from rag_hier.store.capabilities import EncoderIdentity, HitRows, supports
from rag_hier.store.contract import Filters, StoreBackend
from rag_hier.store.records import new_hit

__all__ = [
    "READ_BLOCK_QUERIES",
    "Aggregate",
    "Filters",
    "ParameterError",
    "Queries",
    "Ranking",
    "Retriever",
    "RetrieverParams",
    "aggregate_max_passage",
    "param",
]

Aggregate = Literal["passage", "doc"]
AGGREGATES: tuple[str, ...] = ("passage", "doc")
Q = TypeVar("Q")
READ_BLOCK_QUERIES = 64
"""Queries searched in one read of the store: a writer in another process waits for one such group at most."""


# ----------------------------------------------------------------------------------------------------
# queries and rankings
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Queries:
    """What a caller knows about a batch of queries: their text, dense vectors, sparse vectors (any of them).

    Each strategy takes what it needs (:meth:`Retriever.prepare`): dense strategies use ``vectors`` when given
    and encode ``texts`` otherwise; SVDR needs ``texts``; the sparse-embedding strategy needs ``sparse``.

    Args:
        texts: Query texts.
        vectors: Dense query vectors ``(n, dimension)``.
        sparse: One ``(indices, values)`` sparse query vector per query.
        document_vectors: Document-level query vectors, for a hierarchical store whose documents have an
            encoder of their own (default: ``vectors``).

    """

    texts: Sequence[str] | None = None
    vectors: np.ndarray | None = None
    sparse: Sequence[tuple[Sequence[int], Sequence[float]]] | None = None
    document_vectors: np.ndarray | None = None

    def __post_init__(self) -> None:
        if isinstance(self.texts, str):
            object.__setattr__(self, "texts", [self.texts])
        if self.texts is not None:
            for t in self.texts:
                if not isinstance(t, str):
                    raise TypeError(f"query texts must be strings, got {type(t).__name__}")
        for name in ("vectors", "document_vectors"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _query_matrix(getattr(self, name)))
        sizes = {len(x) for x in (self.texts, self.vectors, self.sparse, self.document_vectors) if x is not None}
        if len(sizes) > 1:
            raise ValueError(f"texts, vectors and sparse vectors disagree on the number of queries: {sorted(sizes)}")
        if not sizes:
            raise ValueError("queries need texts, vectors or sparse vectors")

    def __len__(self) -> int:
        for x in (self.texts, self.vectors, self.sparse, self.document_vectors):
            if x is not None:
                return len(x)
        return 0  # pragma: no cover - __post_init__ refuses empty Queries

    def select(self, rows: Sequence[int]) -> Queries:
        """The queries at ``rows``."""
        idx = list(rows)
        return Queries(
            texts=None if self.texts is None else [self.texts[i] for i in idx],
            vectors=None if self.vectors is None else self.vectors[idx],
            sparse=None if self.sparse is None else [self.sparse[i] for i in idx],
            document_vectors=None if self.document_vectors is None else self.document_vectors[idx],
        )


def _query_matrix(vectors: Any) -> np.ndarray:
    """Dense query vectors as a finite float32 ``(n, dimension)`` array."""
    if type(vectors) is np.ndarray and vectors.dtype == np.float32 and vectors.ndim == 2 and vectors.shape[1]:
        if not np.isfinite(vectors).all():  # an embedder's output: only the values to check
            raise ValueError("query vectors contain NaN or infinite values")
        return vectors
    v = np.asarray(vectors)
    if np.iscomplexobj(v):
        raise ValueError("query vectors must be real numbers")
    if v.dtype == object or not (np.issubdtype(v.dtype, np.number) or v.dtype == np.bool_):
        raise ValueError(f"query vectors must be numbers, got dtype {v.dtype}")
    v = np.asarray(v, dtype=np.float32)
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] == 0:
        raise ValueError(f"query vectors must be (n, dimension), got shape {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError("query vectors contain NaN or infinite values")
    return v


@dataclass(frozen=True)
class Ranking:
    """One query's ranked candidates, as a strategy returns them.

    Args:
        rowids: Passage rowids (int64). Order does not matter: the base class sorts by score, then ``tiebreak``
            (when given), then rowid.
        scores: Their scores (higher is better).
        components: Named component scores, aligned with ``rowids`` (become :attr:`Hit.scores`).
        stats: Per-query facts (become :attr:`QueryResult.stats`).
        exhausted: The strategy has no candidate beyond these (so asking for more cannot help).
        tiebreak: A second key for equal scores (higher first), aligned with ``rowids``; the rowid decides last.

    """

    rowids: np.ndarray
    scores: np.ndarray
    components: Mapping[str, np.ndarray] = field(default_factory=dict)
    stats: Mapping[str, float] = field(default_factory=dict)
    exhausted: bool = False
    tiebreak: np.ndarray | None = None

    @classmethod
    def empty(cls, **stats: float) -> Ranking:
        """No candidate."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.float64), stats=stats, exhausted=True)


def aggregate_max_passage(hits: Sequence[Hit], top_k: int) -> list[Hit]:
    """Document-level ranking from ranked passage hits: each document scored by its best passage (MaxP)."""
    best: dict[str, Hit] = {}
    for h in hits:
        if h.doc_id not in best or h.score > best[h.doc_id].score:
            best[h.doc_id] = h
    ranked = sorted(best.values(), key=lambda h: -h.score)[:top_k]
    return [h.with_rank(i) for i, h in enumerate(ranked, start=1)]


def _check_top_k(top_k: Any) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    return int(top_k)


# ----------------------------------------------------------------------------------------------------
# the base class
# ----------------------------------------------------------------------------------------------------
class Retriever(ABC, Generic[Q]):
    """Base of every retrieval strategy over a store (see the module docstring).

    Args:
        store: The store to search.
        params: The strategy's parameters (its :attr:`Params` dataclass, or a mapping of them).
        **kwargs: Parameters by name (override ``params``).

    """

    name: ClassVar[str] = ""
    Params: ClassVar[type[RetrieverParams]] = RetrieverParams
    over_vectors: ClassVar[bool] = True
    """Whether candidates are passages with dense vectors (``False``: every passage, e.g. token search)."""

    def __init__(
        self, store: StoreBackend, params: RetrieverParams | Mapping[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if params is None or isinstance(params, Mapping):
            resolved = self.Params.from_mapping(
                {**dict(params or {}), **kwargs}, where=f"{self.name or type(self).__name__}"
            )
        elif isinstance(params, self.Params):
            resolved = params.replace(**kwargs) if kwargs else params
        else:
            raise ParameterError(f"params must be a {self.Params.__name__} or a mapping, got {type(params).__name__}")
        self.store = store
        self.params = resolved

    # -- what a strategy provides ---------------------------------------------------------------------
    def prepare(self, queries: Queries) -> Q:
        """The strategy's own query representation (default: dense vectors, encoded from text if needed)."""
        return self.dense_vectors(queries)  # type: ignore[return-value]

    @abstractmethod
    def rank(
        self, queries: Q, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """The best ``k`` (or fewer) candidates of each query among ``allowed`` rowids (``None``: all).

        ``min_documents`` is set when documents are being ranked (MaxP): a strategy that limits its candidates
        to some documents should let at least that many in.
        """

    def warm_up(self) -> None:
        """Load what searching needs (models, tokenizers) now rather than at the first query; idempotent.

        Default: the store's dense model, for strategies that rank dense vectors.
        """
        if self.over_vectors and self.store.encoder is not None:
            self.store.encoder.model  # noqa: B018 - loads it

    def candidates(self) -> int:
        """How many passages this strategy ranks at most (caps ``k``)."""
        return int(self.store.count_vectors() if self.over_vectors else self.store.count_passages())

    @property
    def uses_query_vectors(self) -> bool:
        """Whether :meth:`prepare` ranks with dense query vectors (``Queries.vectors``, else the store's encoder).

        Adapters embed a query with their framework's embedding model only when this is true (a text-only
        strategy such as SVDR never needs it).
        """
        return True

    # -- shared helpers for strategies ----------------------------------------------------------------
    def dense_vectors(self, queries: Queries) -> np.ndarray:
        """Dense query vectors: as given, else encoded by the store's model (an error naming the alternatives)."""
        if queries.vectors is not None:
            vectors = queries.vectors
        elif queries.texts is not None:
            if self.store.encoder is None:
                raise StoreError(
                    f"the store at {self.store.location} has no model to encode query text: pass query vectors "
                    "(search_vectors(), Queries(vectors=...)), or open the store with encoder=DenseEncoder(model)"
                )
            vectors = self.store.encode_queries(list(queries.texts))
        else:
            raise ValueError(f"the {self.name} strategy needs query texts or dense query vectors")
        dim = self.store.dimension
        if dim is not None and vectors.shape[1] != dim:
            raise ValueError(f"query vectors have {vectors.shape[1]} dimensions; the store holds {dim}-d vectors")
        return vectors

    def select(self, queries: Q, rows: Sequence[int]) -> Q:
        """The prepared queries at ``rows`` (for widening part of a batch; default: array indexing)."""
        return queries[list(rows)]  # type: ignore[index]

    # -- searching ------------------------------------------------------------------------------------
    @overload
    def search(  # type: ignore[overload-overlap]  # str is also a Sequence[str]; str wins
        self, query: str, top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[Hit]: ...
    @overload
    def search(
        self, query: Sequence[str], top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[list[Hit]]: ...
    def search(
        self, query: str | Sequence[str], top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[Hit] | list[list[Hit]]:
        """Search with query text: ``str`` → ``list[Hit]``; a list of queries → one list per query."""
        single = isinstance(query, str)
        texts = [query] if isinstance(query, str) else list(query)
        if not texts:
            return []
        results = [r.hits for r in self.run(Queries(texts=texts), top_k, filters, aggregate)]
        return results[0] if single else results

    def search_vectors(
        self, vectors: np.ndarray, top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[list[Hit]]:
        """Search with dense query vectors ``(n, dimension)``; one ranked list per query."""
        arr = np.asarray(vectors)
        if arr.ndim == 2 and arr.shape[0] == 0:
            return []
        return [r.hits for r in self.run(Queries(vectors=arr), top_k, filters, aggregate)]

    def run(
        self, queries: Queries, top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[QueryResult]:
        """Search a batch of :class:`Queries`; per query the ranked hits and the strategy's statistics."""
        top_k = _check_top_k(top_k)
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be 'passage' or 'doc', got {aggregate!r}")
        if not isinstance(queries, Queries):
            raise TypeError(f"queries must be a Queries, got {type(queries).__name__}")
        if queries.vectors is not None or queries.texts is None:
            return self.run_prepared(self.prepare(queries), len(queries), top_k, filters, aggregate)
        # Query text is encoded by the store's model before the search: if the store switched models
        # meanwhile (HierStore.adopt_model in another process), the vectors and the index would come from
        # different models. The encoder key before encoding and after searching tells; when it changed, the
        # queries are encoded again and searched within one read block (no commit can land inside it).
        store = self.store
        if not supports(store, EncoderIdentity):  # a store that cannot tell: searched once
            return self.run_prepared(self.prepare(queries), len(queries), top_k, filters, aggregate)
        before = store.encoder_key
        results = self.run_prepared(self.prepare(queries), len(queries), top_k, filters, aggregate)
        if store.encoder_key == before:
            return results
        for _ in range(_SWITCH_RETRIES):
            with self.read_block():
                before = store.encoder_key
                results = self.run_prepared(self.prepare(queries), len(queries), top_k, filters, aggregate)
                if store.encoder_key == before:
                    return results
        raise StoreError(
            f"the store at {self.store.location} switched models during {_SWITCH_RETRIES} searches in a row"
        )

    def run_prepared(
        self, prepared: Q, n_queries: int, top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[QueryResult]:
        """:meth:`run` with queries already in the strategy's own representation (:meth:`prepare`'s output).

        The store reads of each query (filter, candidates, ranking, records) answer from one committed
        generation, even while another process writes. Queries are searched :data:`READ_BLOCK_QUERIES` at a
        time, each group in its own read, so a writer in another process waits for one group at most, not
        for the whole batch (a batch searched while another process commits may see the commit part-way).
        """
        top_k = _check_top_k(top_k)
        if aggregate not in AGGREGATES:
            raise ValueError(f"aggregate must be 'passage' or 'doc', got {aggregate!r}")
        if n_queries <= READ_BLOCK_QUERIES:
            with self.read_block():
                return self._run_prepared(prepared, n_queries, top_k, filters, aggregate)
        out: list[QueryResult] = []
        for start in range(0, n_queries, READ_BLOCK_QUERIES):
            rows = range(start, min(start + READ_BLOCK_QUERIES, n_queries))
            with self.read_block():
                out.extend(self._run_prepared(self.select(prepared, rows), len(rows), top_k, filters, aggregate))
        return out

    def read_block(self) -> contextlib.AbstractContextManager[Any]:
        """The block one search's store reads run in: by default one committed generation (``store.reading()``).

        A strategy that writes to the store while it searches (SVDR caching the E(d) it computes) overrides
        this; its reads are then each consistent on their own.
        """
        return self.store.reading()

    def _run_prepared(
        self, prepared: Q, n_queries: int, top_k: int, filters: Filters, aggregate: Aggregate
    ) -> list[QueryResult]:
        allowed = self.store.matching_rowids(filters, with_vector=self.over_vectors)
        pool = self.candidates() if allowed is None else int(allowed.size)
        if pool == 0:
            return [QueryResult([], {}) for _ in range(n_queries)]
        if aggregate == "passage":
            rankings = self.rank(prepared, min(top_k, pool), allowed)
            return [
                QueryResult(hits, dict(r.stats)) for hits, r in zip(self._hits(rankings, top_k), rankings, strict=True)
            ]
        # documents by their best passage: widen the passage search until top_k documents (or nothing more)
        out: list[QueryResult | None] = [None] * n_queries
        todo = list(range(n_queries))
        k = min(max(4 * top_k, 32), pool)
        while todo:
            part = prepared if len(todo) == n_queries else self.select(prepared, todo)
            rankings = self.rank(part, k, allowed, min_documents=top_k)
            retry = []
            for i, hits, ranking in zip(todo, self._hits(rankings, k), rankings, strict=True):
                docs = aggregate_max_passage(hits, top_k)
                if len(docs) >= top_k or ranking.exhausted or k >= pool or len(hits) < k:
                    out[i] = QueryResult(docs, dict(ranking.stats))
                else:
                    retry.append(i)
            todo = retry
            k = min(k * 4, pool)
        return [r if r is not None else QueryResult([]) for r in out]

    def _hits(self, rankings: Sequence[Ranking], top_k: int) -> list[list[Hit]]:
        """Sorted, cut to ``top_k`` and turned into hits with one read of the store."""
        orders = [select_top_k(r.scores, r.rowids, top_k, secondary=r.tiebreak) for r in rankings]
        wanted = [r.rowids[o] for r, o in zip(rankings, orders, strict=True)]
        ids = (wanted[0] if len(wanted) == 1 else np.concatenate(wanted)).tolist() if wanted else []
        store = self.store
        rows: Mapping[int, Any]
        make: _MakeHit
        if supports(store, HitRows):  # the store's fast path: rows of exactly the Hit fields
            rows, make = store.hit_rows(ids), typing.cast(_MakeHit, new_hit)
        else:
            rows, make = self.store.records(ids), _hit_from_record
        out: list[list[Hit]] = []
        for ranking, order, rowids in zip(rankings, orders, wanted, strict=True):
            hits: list[Hit] = []
            scores = np.asarray(ranking.scores, dtype=np.float64)[order].tolist()
            parts = {name: np.asarray(v, dtype=np.float64)[order].tolist() for name, v in ranking.components.items()}
            for j, rowid in enumerate(rowids.tolist()):
                row = rows.get(rowid)
                if row is None:  # deleted meanwhile, or padding
                    continue
                components = {name: v[j] for name, v in parts.items() if math.isfinite(v[j])} if parts else None
                hits.append(make(row, scores[j], len(hits) + 1, components))
            out.append(hits)
        return out


_SWITCH_RETRIES = 5
"""Searches retried when the store's model changed between encoding a query and searching with it."""

_MakeHit = Callable[[Any, float, int, Mapping[str, float] | None], Hit]
"""Builds a hit from a stored row or record, its score, rank and component scores."""


def _hit_from_record(rec: Any, score: float, rank: int, scores: Mapping[str, float] | None) -> Hit:
    """A :class:`Hit` from a record of a backend without :class:`~rag_hier.store.capabilities.HitRows`."""
    return Hit(
        passage_id=rec.passage_id,
        doc_id=rec.doc_id,
        text=rec.text,
        title_path=rec.title_path,
        meta=rec.meta,
        score=score,
        rank=rank,
        position=rec.position,
        scores={} if scores is None else scores,
        rowid=rec.rowid,
        extra=rec.extra,
    )
