"""HierarchicalRetriever: Dense Hierarchical Retrieval (DHR) — documents first, then their passages.

Liu et al., "Dense Hierarchical Retrieval for Open-Domain Question Answering" (Findings of EMNLP 2021).
A query is answered in two stages over one store:

1. **document level**: the top-``k1`` documents of the store's document index
   (:class:`~rag_hier.store.extensions.doc_index.DocumentIndex`);
2. **passage level**: only the passages of those documents are scored — their stored vectors are gathered
   and multiplied with the query (pools up to ``gather_max``), or searched through a FAISS id selector on
   the store's passage index (larger pools); no index is built per query,

and every passage gets the fused score ``passage + λ·document``. ``mode="parallel"`` instead fuses the
scores of *all* passages and documents (no restriction to the top-``k1`` documents; as costly as flat
search). Each :class:`~rag_hier.retrieval.hit.Hit` carries the three scores in ``Hit.scores``
(``"passage"``, ``"document"``, ``"fused"``); ``Hit.score`` is the fused one. Per query,
``QueryResult.stats`` reports ``documents_searched`` and ``passages_scored``.

Both modes are exact for their definition over an exact (flat) passage index — the fused top-``top_k`` is
found with a threshold bound (the passage search is widened until no unseen passage can beat the
``top_k``-th fused score) — and serial pools scored by gathering their vectors are exact over any index.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.index.selection import select_top_k
from rag_hier.retrieval.base import Aggregate, Queries, Ranking, Retriever
from rag_hier.retrieval.params import (
    DEFAULT_K1,
    DEFAULT_LAMBDA,
    HIERARCHICAL_MODES,
    HierarchicalMode,
    HierarchicalParams,
)
from rag_hier.store.candidates import gather_vectors

if TYPE_CHECKING:
    from rag_hier.retrieval.hit import Hit
    from rag_hier.store.contract import Filters
    from rag_hier.store.extensions.doc_index import DocumentIndex

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_K1",
    "DEFAULT_LAMBDA",
    "HIERARCHICAL_MODES",
    "DualQueries",
    "HierarchicalMode",
    "HierarchicalParams",
    "HierarchicalRetriever",
]


class DualQueries(NamedTuple):
    """Passage-level and document-level query vectors (the same array when the encoder is shared)."""

    passage: np.ndarray
    document: np.ndarray


def _pack(
    rows: np.ndarray, ps: np.ndarray, ds: np.ndarray, fused: np.ndarray, k: int, documents: int, scored: int
) -> Ranking:
    """The fused top ``k`` (ties by passage score, then insertion order), with the three scores."""
    order = select_top_k(fused, rows, k, secondary=ps)
    return Ranking(
        rowids=rows[order].astype(np.int64, copy=False),
        scores=fused[order],
        components={"passage": ps[order], "document": ds[order], "fused": fused[order]},
        stats={"documents_searched": float(documents), "passages_scored": float(scored)},
    )


class HierarchicalRetriever(Retriever[DualQueries]):
    """Document-then-passage retrieval over a store with a ``doc-index`` extension.

    Args:
        store: The store; it needs a :class:`~rag_hier.store.extensions.doc_index.DocumentIndex`
            (``store.add_extension(DocumentIndex())`` or ``rag-hier index --hierarchical``).
        params: :class:`HierarchicalParams` (or a mapping): ``k1``, ``lambda_``, ``mode``, ``extension``,
            ``gather_max``; also accepted as keyword arguments.

    Raises:
        ParameterError: ``k1`` < 1, ``lambda_`` not finite, or an unknown ``mode``.
        StoreError: The store has no document index (when searching).

    Example:
        >>> retriever = HierarchicalRetriever(store, k1=100)  # doctest: +SKIP
        >>> hit = retriever.search("who painted the ceiling?", top_k=3)[0]  # doctest: +SKIP
        >>> hit.scores  # doctest: +SKIP
        {'passage': 0.61, 'document': 0.43, 'fused': 0.61}

    """

    name = "hierarchical"
    Params = HierarchicalParams
    params: HierarchicalParams

    @property
    def k1(self) -> int:
        """Documents kept by the first stage."""
        return self.params.k1

    @property
    def lambda_(self) -> float:
        """λ, the weight of the document score."""
        return self.params.lambda_

    @property
    def mode(self) -> HierarchicalMode:
        """``"serial"`` or ``"parallel"``."""
        return self.params.mode

    @property
    def document_index(self) -> DocumentIndex:
        """The store's document index."""
        from rag_hier.store.extensions.doc_index import DocumentIndex

        ext = self.store.extension(self.params.extension)
        if ext is None:
            raise StoreError(
                f"the store at {self.store.location} has no document index (the {self.params.extension!r} "
                "extension); build it with "
                "store.add_extension(DocumentIndex()) or `rag-hier index ... --hierarchical`"
            )
        if not isinstance(ext, DocumentIndex):
            raise StoreError(f"extension {self.params.extension!r} of {self.store.location} is not a DocumentIndex")
        return ext

    # -- queries --------------------------------------------------------------------------------------
    def prepare(self, queries: Queries) -> DualQueries:
        """Passage-level vectors (given or encoded) and document-level ones (same, or the document encoder's)."""
        ext = self.document_index
        passage = self.dense_vectors(queries)
        if queries.document_vectors is not None:
            document = queries.document_vectors
        elif ext.shares_encoder:
            document = passage
        elif queries.texts is not None:
            document = ext.encode_queries(self.store, list(queries.texts))
        else:
            raise ValueError(
                f"the document index of {self.store.location} has its own encoder ({ext.model}): pass the query "
                "texts, or document-level query vectors (Queries(document_vectors=...))"
            )
        if document.shape[0] != passage.shape[0]:
            raise ValueError(f"document_vectors has {document.shape[0]} rows for {passage.shape[0]} queries")
        return DualQueries(passage, document)

    def encode_queries(self, queries: list[str]) -> DualQueries:
        """Both query vectors of texts."""
        return self.prepare(Queries(texts=queries))

    def select(self, queries: DualQueries, rows: Sequence[int]) -> DualQueries:
        """The queries at ``rows``."""
        idx = list(rows)
        return DualQueries(queries.passage[idx], queries.document[idx])

    def search_vectors(
        self,
        vectors: np.ndarray,
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
        *,
        doc_vectors: np.ndarray | None = None,
    ) -> list[list[Hit]]:
        """Search with passage-level query vectors; ``doc_vectors`` for a distinct document encoder."""
        arr = np.asarray(vectors)
        if arr.ndim == 2 and arr.shape[0] == 0:
            return []
        queries = Queries(vectors=arr, document_vectors=doc_vectors)
        return [r.hits for r in self.run(queries, top_k, filters, aggregate)]

    # -- ranking --------------------------------------------------------------------------------------
    def rank(
        self, queries: DualQueries, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """The fused top ``k`` passages of each query."""
        k1 = max(self.params.k1, min_documents or 0)
        q, dq = queries.passage, queries.document
        ext = self.document_index
        if q.shape[0] == 0 or len(ext) == 0:
            return [Ranking.empty() for _ in range(q.shape[0])]
        allowed_docs = None
        if allowed is not None:
            docs_of = ext.documents_of(allowed)
            allowed_docs = np.unique(docs_of[docs_of >= 0])
            if allowed_docs.size == 0:
                return [Ranking.empty() for _ in range(q.shape[0])]
        if self.params.mode == "serial":
            return self._rank_serial(ext, q, dq, k, k1, allowed, allowed_docs)
        return self._rank_parallel(ext, q, dq, k, allowed, allowed_docs)

    def _rank_serial(
        self,
        ext: DocumentIndex,
        q: np.ndarray,
        dq: np.ndarray,
        top_k: int,
        k1: int,
        allowed: np.ndarray | None,
        allowed_docs: np.ndarray | None,
    ) -> list[Ranking]:
        lam = self.params.lambda_
        d_scores, d_ids = ext.search(dq, k1, allowed_docs)
        out: list[Ranking] = []
        for i in range(q.shape[0]):
            keep = d_ids[i] >= 0
            fids, fscores = d_ids[i][keep], d_scores[i][keep]
            pool, owner = ext.passages_of(fids.tolist())
            if allowed is not None:
                mask = np.isin(pool, allowed)
                pool, owner = pool[mask], owner[mask]
            if pool.size == 0:
                out.append(Ranking.empty(documents_searched=float(fids.size), passages_scored=0.0))
                continue
            pool_doc = fscores[owner].astype(np.float64)
            vectors = gather_vectors(self.store, pool, self.params.gather_max)  # None: search them in the index
            if vectors is not None:
                ps = (vectors @ q[i]).astype(np.float64)
                out.append(_pack(pool, ps, pool_doc, ps + lam * pool_doc, top_k, int(fids.size), int(pool.size)))
                continue
            order = np.argsort(pool, kind="stable")
            pool, pool_doc = pool[order], pool_doc[order]
            # start with a few times top_k passages and widen until no unseen passage can beat the
            # top_k-th fused score (with lambda = 0 the first round is always enough)
            m = min(pool.size, max(4 * top_k, 64))
            best_doc = float(pool_doc.max() if lam >= 0 else pool_doc.min())
            while True:
                s, ids = self.store.search_dense(q[i : i + 1], m, pool)
                valid = ids[0] >= 0
                rows, ps = ids[0][valid], s[0][valid].astype(np.float64)
                ds = pool_doc[np.searchsorted(pool, rows)]
                fused = ps + lam * ds
                if m >= pool.size or rows.size < m:
                    break
                kth = np.partition(fused, -min(top_k, fused.size))[-min(top_k, fused.size)]
                if kth >= float(ps[-1]) + lam * best_doc:
                    break
                m = min(pool.size, m * 4)
            out.append(_pack(rows, ps, ds, fused, top_k, int(fids.size), int(pool.size)))
        return out

    def _rank_parallel(
        self,
        ext: DocumentIndex,
        q: np.ndarray,
        dq: np.ndarray,
        top_k: int,
        allowed: np.ndarray | None,
        allowed_docs: np.ndarray | None,
    ) -> list[Ranking]:
        lam = self.params.lambda_
        n_live = self.store.count_vectors() if allowed is None else int(allowed.size)
        n_docs = len(ext) if allowed_docs is None else int(allowed_docs.size)
        # the best document score any unseen passage could add (the top document of each query)
        top_doc, _ = ext.search(dq, 1, allowed_docs)
        bottom_doc = (-ext.search(-dq, 1, allowed_docs)[0]) if lam < 0 else top_doc
        bound_doc = (top_doc if lam >= 0 else bottom_doc)[:, 0]
        out: list[Ranking | None] = [None] * q.shape[0]
        todo = np.arange(q.shape[0])
        m = min(n_live, max(4 * top_k, 64))
        while todo.size:
            s, ids = self.store.search_dense(q[todo], m, allowed)
            retry: list[int] = []
            for j, i in enumerate(todo.tolist()):
                valid = ids[j] >= 0
                exhausted = m >= n_live or int(valid.sum()) < m
                rows, ps = ids[j][valid], s[j][valid].astype(np.float64)
                docs = ext.documents_of(rows)
                known = docs >= 0
                if not known.all():
                    logger.warning("%d passages are not in the document index yet (mid-batch?)", int((~known).sum()))
                rows, ps, docs = rows[known], ps[known], docs[known]
                uniq, inv = np.unique(docs, return_inverse=True)
                ds = ext.scores(dq[i : i + 1], uniq)[0][inv].astype(np.float64) if uniq.size else np.zeros(0)
                fused = ps + lam * ds
                if not exhausted and rows.size:
                    kth = np.partition(fused, -min(top_k, fused.size))[-min(top_k, fused.size)]
                    if kth < float(ps[-1]) + lam * float(bound_doc[i]):
                        retry.append(i)
                        continue
                out[i] = _pack(rows, ps, ds, fused, top_k, n_docs, n_live)
            todo = np.asarray(retry, dtype=np.int64)
            m = min(n_live, m * 4)
        return [r if r is not None else Ranking.empty() for r in out]
