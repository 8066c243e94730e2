"""HierarchicalRetriever: Dense Hierarchical Retrieval (DHR) — documents first, then their passages.

Liu et al., "Dense Hierarchical Retrieval for Open-Domain Question Answering" (Findings of EMNLP 2021).
A query is answered in two stages over one store:

1. **document level**: the top-``k1`` documents of the store's :class:`~rag_hier.index.document.DocumentIndex`;
2. **passage level**: only the passages of those documents are scored — their stored vectors are gathered
   and multiplied with the query (pools up to ``gather_max``), or searched through a FAISS id selector on
   the store's passage index (larger pools); no index is built per query,

and every passage gets the fused score ``passage + λ·document``. ``mode="parallel"`` instead fuses the
scores of *all* passages and documents (no restriction to the top-``k1`` documents; as costly as flat
search). Each :class:`~rag_hier.retrieval.hit.Hit` carries the three scores in ``Hit.scores``
(``"passage"``, ``"document"``, ``"fused"``); ``Hit.score`` is the fused one.

Both modes are exact for their definition over an exact (flat) passage index — the fused top-``top_k`` is
found with a threshold bound (the passage search is widened until no unseen passage can beat the
``top_k``-th fused score) — and serial pools scored by gathering their vectors are exact over any index.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.retrieval.dense import Aggregate, aggregate_max_passage
from rag_hier.retrieval.hit import Hit
from rag_hier.store.filters import Predicate

if TYPE_CHECKING:
    from rag_hier.index.document import DocumentIndex
    from rag_hier.store.store import HierStore

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_K1",
    "DEFAULT_LAMBDA",
    "HIERARCHICAL_MODES",
    "HierarchicalMode",
    "HierarchicalRetriever",
    "RankedPassages",
]

HierarchicalMode = Literal["serial", "parallel"]
HIERARCHICAL_MODES: tuple[str, ...] = ("serial", "parallel")
DEFAULT_K1 = 500
"""Documents kept by the first stage. Measured (docs/dhr.md): on 1M passages in 50k documents, k1=500 keeps
flat search's top-1 accuracy at 8x its speed (k1=100, the paper's NQ setting, loses 3 points of top-10)."""
DEFAULT_LAMBDA = 0.0
"""Weight of the document score in the fused score. Measured (docs/dhr.md): with one shared cosine encoder,
λ > 0 never helped on XQuAD-en (untrained or DHR-trained) nor on the synthetic corpus."""

Filters = Mapping[str, Any] | Predicate | None


@dataclass(frozen=True)
class RankedPassages:
    """One query's ranking as arrays (the form benchmarks and adapters use before building Hits).

    Args:
        rowids: Passage FAISS ids, best first.
        passage_scores: Passage-level scores ``f_p(q, p)``.
        document_scores: Document-level scores ``f_d(q, doc(p))``.
        fused_scores: ``passage_scores + λ·document_scores`` in float64 (the ranking key), so
            ``fused == passage + λ·document`` holds exactly for the Python floats in ``Hit.scores``.
        documents_searched: Documents whose passages were eligible (``k1`` or fewer in serial mode).
        passages_scored: Passage vectors the passage search compared with the query.

    """

    rowids: np.ndarray
    passage_scores: np.ndarray
    document_scores: np.ndarray
    fused_scores: np.ndarray
    documents_searched: int
    passages_scored: int


def _empty(documents: int = 0) -> RankedPassages:
    z = np.zeros(0, np.float64)
    return RankedPassages(np.zeros(0, np.int64), z, z, z, documents, 0)


class HierarchicalRetriever:
    """Document-then-passage retrieval over a store with a ``doc-index`` extension.

    Args:
        store: The store; it needs a :class:`~rag_hier.index.document.DocumentIndex` (``store.add_extension
            (DocumentIndex())`` or ``rag-hier index --hierarchical``).
        k1: Documents kept by the first stage (serial mode).
        lambda_: λ, the weight of the document score in ``passage + λ·document``.
        mode: ``"serial"`` (DHR: passages of the top-``k1`` documents only) or ``"parallel"`` (all passages,
            fused with their document's score).
        extension: Name of the document-index extension in the store.
        gather_max: Serial mode scores a pool of up to this many passages by gathering their stored vectors
            (``DenseIndex.reconstruct``) and one matrix-vector product — exact even over an approximate
            index, and cheaper than an id-selector scan of the whole index; larger pools go through
            ``DenseIndex.search(..., allowed_ids=pool)``.

    Raises:
        ValueError: ``k1`` < 1, ``lambda_`` not finite, or an unknown ``mode``.
        StoreError: The store has no document index.

    Example:
        >>> retriever = HierarchicalRetriever(store, k1=100)  # doctest: +SKIP
        >>> hit = retriever.search("who painted the ceiling?", top_k=3)[0]  # doctest: +SKIP
        >>> hit.scores  # doctest: +SKIP
        {'passage': 0.61, 'document': 0.43, 'fused': 0.61}

    """

    def __init__(
        self,
        store: HierStore,
        *,
        k1: int = DEFAULT_K1,
        lambda_: float = DEFAULT_LAMBDA,
        mode: HierarchicalMode = "serial",
        extension: str = "doc-index",
        gather_max: int = 65_536,
    ) -> None:
        if isinstance(k1, bool) or not isinstance(k1, int) or k1 < 1:
            raise ValueError(f"k1 must be an integer >= 1, got {k1!r}")
        if not isinstance(lambda_, int | float) or not math.isfinite(lambda_):
            raise ValueError(f"lambda_ must be a finite number, got {lambda_!r}")
        if mode not in HIERARCHICAL_MODES:
            raise ValueError(f"mode must be one of {', '.join(HIERARCHICAL_MODES)}; got {mode!r}")
        if gather_max < 0:
            raise ValueError(f"gather_max must be >= 0, got {gather_max}")
        self.store = store
        self.k1 = k1
        self.lambda_ = float(lambda_)
        self.mode: HierarchicalMode = mode
        self.extension = extension
        self.gather_max = gather_max

    @property
    def document_index(self) -> DocumentIndex:
        """The store's document index."""
        from rag_hier.index.document import DocumentIndex

        ext = self.store.extension(self.extension)
        if ext is None:
            raise StoreError(
                f"the store at {self.store.path} has no {self.extension!r} extension; build it with "
                "store.add_extension(DocumentIndex()) or `rag-hier index ... --hierarchical`"
            )
        if not isinstance(ext, DocumentIndex):
            raise StoreError(f"extension {self.extension!r} of {self.store.path} is not a DocumentIndex")
        return ext

    # ------------------------------------------------------------------------------------------------
    # text in, Hits out
    # ------------------------------------------------------------------------------------------------
    def encode_queries(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Passage-level and document-level query vectors (the same array when the encoder is shared)."""
        passage_q = self.store.encode_queries(queries)
        ext = self.document_index
        doc_q = passage_q if ext.shares_encoder else ext.encode_queries(self.store, queries)
        return passage_q, doc_q

    @overload
    def search(  # type: ignore[overload-overlap]  # str is also a Sequence[str]; str wins
        self, query: str, top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[Hit]: ...
    @overload
    def search(
        self, query: Sequence[str], top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[list[Hit]]: ...
    def search(
        self,
        query: str | Sequence[str],
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
    ) -> list[Hit] | list[list[Hit]]:
        """Search with query text: ``str`` → ``list[Hit]``; a list of queries → one list per query.

        Args:
            query: One query or several.
            top_k: Hits per query.
            filters: Metadata filter (Haystack syntax or a predicate); only documents with a matching passage
                are ranked, and only matching passages are returned.
            aggregate: ``"passage"`` ranks passages; ``"doc"`` ranks documents by their best fused passage.

        """
        single = isinstance(query, str)
        queries: list[str] = [query] if isinstance(query, str) else list(query)
        if not queries:
            return []
        passage_q, doc_q = self.encode_queries(queries)
        results = self.search_vectors(passage_q, top_k=top_k, filters=filters, aggregate=aggregate, doc_vectors=doc_q)
        return results[0] if single else results

    def search_vectors(
        self,
        vectors: np.ndarray,
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
        *,
        doc_vectors: np.ndarray | None = None,
    ) -> list[list[Hit]]:
        """Search with query vectors ``(n, dim)``; ``doc_vectors`` for a distinct document encoder.

        ``doc_vectors`` defaults to ``vectors`` (shared encoder). Returns one ranked list per query.
        """
        if aggregate not in ("passage", "doc"):
            raise ValueError(f"aggregate must be 'passage' or 'doc', got {aggregate!r}")
        if aggregate == "passage":
            ranked = self.rank(vectors, top_k, filters=filters, doc_vectors=doc_vectors)
            return self._to_hits(ranked)
        # documents by their best fused passage: widen until each query sees top_k documents
        k = max(4 * top_k, 32)
        while True:
            ranked = self.rank(vectors, k, filters=filters, doc_vectors=doc_vectors, k1=max(self.k1, top_k))
            docs = [aggregate_max_passage(h, top_k) for h in self._to_hits(ranked)]
            if all(len(d) >= top_k or len(r.rowids) < k for d, r in zip(docs, ranked, strict=True)):
                return docs
            k *= 4

    # ------------------------------------------------------------------------------------------------
    # vectors in, arrays out
    # ------------------------------------------------------------------------------------------------
    def rank(
        self,
        vectors: np.ndarray,
        top_k: int = 10,
        *,
        filters: Filters = None,
        doc_vectors: np.ndarray | None = None,
        k1: int | None = None,
    ) -> list[RankedPassages]:
        """The fused top-``top_k`` passages of each query, as arrays (no store records read).

        Args:
            vectors: Passage-level query vectors ``(n, dim)``.
            top_k: Passages per query.
            filters: Metadata filter on passages.
            doc_vectors: Document-level query vectors (default: ``vectors``).
            k1: Override the retriever's ``k1`` for this call.

        """
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
        k1 = self.k1 if k1 is None else k1
        if k1 < 1:
            raise ValueError(f"k1 must be >= 1, got {k1}")
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        dq = q if doc_vectors is None else np.asarray(doc_vectors, dtype=np.float32)
        if dq.ndim == 1:
            dq = dq[None, :]
        if dq.shape[0] != q.shape[0]:
            raise ValueError(f"doc_vectors has {dq.shape[0]} rows for {q.shape[0]} query vectors")
        ext = self.document_index
        index = self.store.index
        if index is None or q.shape[0] == 0 or len(ext) == 0:
            return [_empty() for _ in range(q.shape[0])]
        allowed = self.store.allowed_rowids(filters)
        allowed_docs = None
        if allowed is not None:
            docs_of = ext.documents_of(allowed)
            allowed_docs = np.unique(docs_of[docs_of >= 0])
            if allowed_docs.size == 0:
                return [_empty() for _ in range(q.shape[0])]
        if self.mode == "serial":
            return self._rank_serial(q, dq, top_k, k1, allowed, allowed_docs)
        return self._rank_parallel(q, dq, top_k, allowed, allowed_docs)

    def _rank_serial(
        self,
        q: np.ndarray,
        dq: np.ndarray,
        top_k: int,
        k1: int,
        allowed: np.ndarray | None,
        allowed_docs: np.ndarray | None,
    ) -> list[RankedPassages]:
        ext = self.document_index
        index = self.store.index
        if index is None:  # pragma: no cover - rank() checked it
            return [_empty() for _ in range(q.shape[0])]
        d_scores, d_ids = ext.search(dq, k1, allowed_docs)
        out: list[RankedPassages] = []
        for i in range(q.shape[0]):
            keep = d_ids[i] >= 0
            fids, fscores = d_ids[i][keep], d_scores[i][keep]
            pool, owner = ext.passages_of(fids.tolist())
            if allowed is not None:
                mask = np.isin(pool, allowed)
                pool, owner = pool[mask], owner[mask]
            if pool.size == 0:
                out.append(_empty(int(fids.size)))
                continue
            pool_doc = fscores[owner].astype(np.float64)
            if pool.size <= self.gather_max:
                try:
                    vectors = index.reconstruct(pool)
                except RuntimeError:  # a passage deleted earlier in an open batch: let the index skip it
                    vectors = None
                if vectors is not None:
                    ps = (vectors @ q[i]).astype(np.float64)
                    fused = ps + self.lambda_ * pool_doc
                    out.append(self._top(pool, ps, pool_doc, fused, top_k, int(fids.size), int(pool.size)))
                    continue
            order = np.argsort(pool, kind="stable")
            pool, pool_doc = pool[order], pool_doc[order]
            # start with a few times top_k passages and widen until no unseen passage can beat the
            # top_k-th fused score (with lambda = 0 the first round is always enough)
            m = min(pool.size, max(4 * top_k, 64))
            best_doc = float(pool_doc.max() if self.lambda_ >= 0 else pool_doc.min())
            while True:
                s, ids = index.search(q[i : i + 1], m, allowed_ids=pool)
                valid = ids[0] >= 0
                rows, ps = ids[0][valid], s[0][valid].astype(np.float64)
                ds = pool_doc[np.searchsorted(pool, rows)]
                fused = ps + self.lambda_ * ds
                if m >= pool.size or rows.size < m:
                    break
                kth = np.partition(fused, -min(top_k, fused.size))[-min(top_k, fused.size)]
                if kth >= float(ps[-1]) + self.lambda_ * best_doc:
                    break
                m = min(pool.size, m * 4)
            out.append(self._top(rows, ps, ds, fused, top_k, int(fids.size), int(pool.size)))
        return out

    def _rank_parallel(
        self,
        q: np.ndarray,
        dq: np.ndarray,
        top_k: int,
        allowed: np.ndarray | None,
        allowed_docs: np.ndarray | None,
    ) -> list[RankedPassages]:
        ext = self.document_index
        index = self.store.index
        if index is None:  # pragma: no cover - rank() checked it
            return [_empty() for _ in range(q.shape[0])]
        n_live = len(index) if allowed is None else int(allowed.size)
        n_docs = len(ext) if allowed_docs is None else int(allowed_docs.size)
        # the best document score any unseen passage could add (the top document of each query)
        top_doc, _ = ext.search(dq, 1, allowed_docs)
        bottom_doc = (-ext.search(-dq, 1, allowed_docs)[0]) if self.lambda_ < 0 else top_doc
        bound_doc = (top_doc if self.lambda_ >= 0 else bottom_doc)[:, 0]
        out: list[RankedPassages | None] = [None] * q.shape[0]
        todo = np.arange(q.shape[0])
        m = min(n_live, max(4 * top_k, 64))
        while todo.size:
            s, ids = index.search(q[todo], m, allowed_ids=allowed)
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
                fused = ps + self.lambda_ * ds
                if not exhausted and rows.size:
                    kth = np.partition(fused, -min(top_k, fused.size))[-min(top_k, fused.size)]
                    if kth < float(ps[-1]) + self.lambda_ * float(bound_doc[i]):
                        retry.append(i)
                        continue
                out[i] = self._top(rows, ps, ds, fused, top_k, n_docs, n_live)
            todo = np.asarray(retry, dtype=np.int64)
            m = min(n_live, m * 4)
        return [r if r is not None else _empty() for r in out]

    @staticmethod
    def _top(
        rows: np.ndarray,
        ps: np.ndarray,
        ds: np.ndarray,
        fused: np.ndarray,
        top_k: int,
        documents: int,
        scored: int,
    ) -> RankedPassages:
        # best fused first; ties by passage score, then by insertion order (FAISS id)
        if fused.size > 4 * top_k:  # only the candidates at or above the top_k-th fused score need sorting
            keep = np.nonzero(fused >= np.partition(fused, -top_k)[-top_k])[0]
            rows, ps, ds, fused = rows[keep], ps[keep], ds[keep], fused[keep]
        order = np.lexsort((rows, -ps, -fused))[:top_k]
        return RankedPassages(
            rowids=rows[order].astype(np.int64, copy=False),
            passage_scores=ps[order].astype(np.float64, copy=False),
            document_scores=ds[order].astype(np.float64, copy=False),
            fused_scores=fused[order].astype(np.float64, copy=False),
            documents_searched=documents,
            passages_scored=scored,
        )

    def _to_hits(self, ranked: Sequence[RankedPassages]) -> list[list[Hit]]:
        records = self.store.records_by_rowid(np.concatenate([r.rowids for r in ranked]).tolist() if ranked else [])
        out: list[list[Hit]] = []
        for r in ranked:
            hits: list[Hit] = []
            for rowid, ps, ds, fs in zip(
                r.rowids.tolist(),
                r.passage_scores.tolist(),
                r.document_scores.tolist(),
                r.fused_scores.tolist(),
                strict=True,
            ):
                rec = records.get(rowid)
                if rec is None:
                    continue
                hits.append(
                    Hit(
                        passage_id=rec["id"],
                        doc_id=rec["doc_id"],
                        text=rec["content"],
                        title_path=rec["title_path"],
                        meta=rec["meta"],
                        score=fs,
                        rank=len(hits) + 1,
                        position=rec["position"],
                        scores={"passage": ps, "document": ds, "fused": fs},
                    )
                )
            out.append(hits)
        return out
