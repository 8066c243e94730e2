"""DenseRetriever: exact or approximate inner-product search over a store's passage index."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from rag_hier.retrieval.hit import Hit
from rag_hier.store.filters import Predicate

if TYPE_CHECKING:
    from rag_hier.store.store import HierStore

__all__ = ["Aggregate", "DenseRetriever", "aggregate_max_passage"]

Aggregate = Literal["passage", "doc"]
Filters = Mapping[str, Any] | Predicate | None


def aggregate_max_passage(hits: Sequence[Hit], top_k: int) -> list[Hit]:
    """Document-level ranking from passage hits: each document scored by its best passage (MaxP)."""
    best: dict[str, Hit] = {}
    for h in hits:
        if h.doc_id not in best or h.score > best[h.doc_id].score:
            best[h.doc_id] = h
    ranked = sorted(best.values(), key=lambda h: -h.score)[:top_k]
    return [
        Hit(
            passage_id=h.passage_id,
            doc_id=h.doc_id,
            text=h.text,
            title_path=h.title_path,
            meta=h.meta,
            score=h.score,
            rank=i,
            position=h.position,
            scores=h.scores,
        )
        for i, h in enumerate(ranked, start=1)
    ]


class DenseRetriever:
    """Dense retrieval over a :class:`~rag_hier.store.HierStore`.

    Filters are applied before the vector search (FAISS id selectors), so a filtered search returns
    ``top_k`` hits whenever that many passages match. ``aggregate="doc"`` ranks documents by their best
    passage (MaxP), fetching more passages until ``top_k`` distinct documents are found.
    """

    def __init__(self, store: HierStore) -> None:
        self.store = store

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
        """Search with query text: ``str`` → ``list[Hit]``; a list of queries → one list per query."""
        single = isinstance(query, str)
        queries: list[str] = [query] if isinstance(query, str) else list(query)
        if not queries:
            return []
        vectors = self.store.encode_queries(queries)
        results = self.search_vectors(vectors, top_k=top_k, filters=filters, aggregate=aggregate)
        return results[0] if single else results

    def search_vectors(
        self, vectors: np.ndarray, top_k: int = 10, filters: Filters = None, aggregate: Aggregate = "passage"
    ) -> list[list[Hit]]:
        """Search with query vectors ``(n, dim)``; returns one ranked list per query."""
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if aggregate not in ("passage", "doc"):
            raise ValueError(f"aggregate must be 'passage' or 'doc', got {aggregate!r}")
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        index = self.store.index
        if index is None or q.shape[0] == 0:
            return [[] for _ in range(q.shape[0])]
        allowed = self.store.allowed_rowids(filters)
        if aggregate == "passage":
            scores, ids = index.search(q, top_k, allowed_ids=allowed)
            return self._to_hits(scores, ids)
        # MaxP: widen the passage search until each query sees top_k documents (or everything).
        n_live = len(index) if allowed is None else int(allowed.size)
        k = min(max(top_k * 4, 32), max(n_live, 1))
        while True:
            scores, ids = index.search(q, k, allowed_ids=allowed)
            hits = self._to_hits(scores, ids)
            docs = [aggregate_max_passage(h, top_k) for h in hits]
            if k >= n_live or all(len(d) >= top_k for d in docs):
                return docs
            k = min(k * 4, n_live)

    def _to_hits(self, scores: np.ndarray, ids: np.ndarray) -> list[list[Hit]]:
        records = self.store.records_by_rowid(ids.ravel().tolist())
        out: list[list[Hit]] = []
        for srow, irow in zip(scores, ids, strict=True):
            hits: list[Hit] = []
            for s, i in zip(srow.tolist(), irow.tolist(), strict=True):
                rec = records.get(i)
                if rec is None:
                    continue
                hits.append(
                    Hit(
                        passage_id=rec["id"],
                        doc_id=rec["doc_id"],
                        text=rec["content"],
                        title_path=rec["title_path"],
                        meta=rec["meta"],
                        score=float(s),
                        rank=len(hits) + 1,
                        position=rec["position"],
                    )
                )
            out.append(hits)
        return out
