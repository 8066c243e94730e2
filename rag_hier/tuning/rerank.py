"""Scoring a candidate model on dev queries without encoding the whole store: re-ranking the base's candidates.

The usual re-ranking estimate of a new retriever's quality: each dev query's **pool** is the base search's top
``depth`` passages plus every passage of its judged-relevant ids (documents or passages). Only the pool's
passages (the union over the dev queries) are encoded by the candidate; each query's pool is ranked by the
candidate's scores (documents by their best passage, as the store's document aggregation ranks them), and the
ranking is scored with the conventions of ``rag-hier eval`` (:func:`~rag_hier.tuning.scoring.score_results`'s
identical-id rule and cut-off).

What the estimate misses: a passage outside the base's top ``depth`` that is not judged relevant, which the
candidate would rank above a pool passage. Such a passage can only push relevant ones down, so the estimate is
an upper bound of the candidate's full-search figures at cut-offs up to ``depth``; docs/tuning.md gives how far
it was from a full encode on the data sets measured. The base's own figures from its full search equal its
re-ranked figures at those cut-offs (its pool is its own top ``depth``), so the paired difference compares like
with like.

Encoding the pool costs what the dev queries need, not what the store holds: :meth:`RerankPool.size` passages,
against every passage for a full encode (:func:`prefer_rerank` chooses).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rag_hier.eval.judged import JudgedQueries
from rag_hier.eval.metrics import evaluate_per_query, parse_metric, remove_identical_ids
from rag_hier.retrieval.base import Queries
from rag_hier.retrieval.dense import DenseRetriever

__all__ = ["RERANK_SHARE", "RerankPool", "prefer_rerank", "rerank_pool"]

RERANK_SHARE = 0.5
"""``dev_scoring="auto"`` re-ranks when the pools hold at most this share of the store's passages."""


@dataclass(frozen=True)
class RerankPool:
    """The passages each dev query's candidates are drawn from, and their texts.

    Attributes:
        judged: The dev queries and their judgements.
        rowids: The union of the pools (ascending).
        texts: The text each of ``rowids`` is encoded from (title path and passage, as the store encodes it).
        keys: The id each of ``rowids`` counts as in the judgements (its document id at document level).
        members: Per query (``judged.queries`` order), positions into ``rowids`` of its pool.
        depth: The base's top results taken into each pool.

    """

    judged: JudgedQueries
    rowids: np.ndarray
    texts: tuple[str, ...]
    keys: tuple[str, ...]
    members: tuple[np.ndarray, ...]
    depth: int

    def measurable(self, metrics: Sequence[str]) -> list[str]:
        """The metrics a re-ranking of these pools can measure: cut-off at most :attr:`depth`."""
        out = _measurable(metrics, self.depth)
        if not out:
            raise ValueError(f"no metric of {list(metrics)} has a cut-off within the re-ranking depth {self.depth}")
        return out

    @property
    def size(self) -> int:
        """Passages to encode."""
        return int(self.rowids.size)

    def score(
        self, candidate: Any, metrics: Sequence[str], *, ignore_identical_ids: bool = True
    ) -> dict[str, dict[str, float]]:
        """Per-query values of ``candidate`` (a :class:`~rag_hier.encoders.DenseEncoder`) on the pools.

        Only the metrics whose cut-off is within the pools' :attr:`depth` (:meth:`measurable`): deeper ones would
        count every judged passage as found.
        """
        qids = list(self.judged.queries)
        q = np.asarray(candidate.encode_queries(list(self.judged.queries.values())), dtype=np.float32)
        p = np.asarray(candidate.encode_documents(list(self.texts)), dtype=np.float32)
        return self.score_vectors(q, p, metrics, ignore_identical_ids=ignore_identical_ids, qids=qids)

    def score_vectors(
        self,
        query_vectors: np.ndarray,
        passage_vectors: np.ndarray,
        metrics: Sequence[str],
        *,
        ignore_identical_ids: bool = True,
        qids: list[str] | None = None,
    ) -> dict[str, dict[str, float]]:
        """Per-query metric values from the pool passages' vectors (rows in :attr:`rowids` order)."""
        qids = qids or list(self.judged.queries)
        metrics = self.measurable(metrics)
        top_k = max(parse_metric(m)[1] for m in metrics)
        run: dict[str, dict[str, float]] = {}
        for i, qid in enumerate(qids):
            members = self.members[i]
            scores = passage_vectors[members] @ query_vectors[i]
            # ties as the store breaks them: ascending rowid first, then the best passage of a document wins
            order = np.lexsort((self.rowids[members], -scores))
            ranked: dict[str, float] = {}
            for j in order.tolist():
                key = self.keys[int(members[j])]
                if key not in ranked:
                    ranked[key] = float(scores[j])
            run[qid] = ranked
        if ignore_identical_ids:
            run = remove_identical_ids(run)[0]
        run = {q: dict(list(ranked.items())[:top_k]) for q, ranked in run.items()}
        return evaluate_per_query(run, self.judged.qrels, metrics, ignore_identical_ids=False)


def _measurable(metrics: Sequence[str], depth: int) -> list[str]:
    return [m for m in metrics if parse_metric(m)[1] <= depth]


def rerank_pool(store: Any, judged: JudgedQueries, query_vectors: np.ndarray, depth: int) -> RerankPool:
    """Each query's pool: the store's top ``depth`` passages for it (base model) plus its judged-relevant ones.

    Args:
        store: The store (searched with its own index; ``query_vectors`` come from its model).
        judged: The dev queries and their judgements.
        query_vectors: ``judged``'s queries encoded by the store's model, rows in ``judged.queries`` order.
        depth: Passages of the base search taken into each pool.

    """
    qids = list(judged.queries)
    level = judged.level
    results = DenseRetriever(store).run(Queries(vectors=query_vectors), depth, aggregate="passage")
    relevant_ids = sorted({d for q in qids for d, g in judged.qrels[q].items() if g > 0})
    lookup = store.rowids_of(doc_ids=relevant_ids) if level == "doc" else store.rowids_of(passage_ids=relevant_ids)
    relevant_rows = np.asarray(lookup, dtype=np.int64)
    pools: list[set[int]] = [{h.rowid for h in r.hits} for r in results]
    records = store.records(sorted(set(relevant_rows.tolist()) | set().union(*pools)))
    rows_of_key: dict[str, list[int]] = {}
    for r in relevant_rows.tolist():
        rec = records.get(r)
        if rec is not None:
            rows_of_key.setdefault(rec.doc_id if level == "doc" else rec.passage_id, []).append(r)
    for i, qid in enumerate(qids):
        for d, g in judged.qrels[qid].items():
            if g > 0:
                pools[i].update(rows_of_key.get(d, ()))
    rowids = np.asarray(sorted(r for r in set().union(*pools) if r in records), dtype=np.int64)
    position = {int(r): i for i, r in enumerate(rowids.tolist())}
    texts, keys = [], []
    for r in rowids.tolist():
        rec = records[r]
        texts.append(rec.to_passage().embedding_text)
        keys.append(rec.doc_id if level == "doc" else rec.passage_id)
    members = tuple(np.asarray(sorted(position[r] for r in pool if r in position), dtype=np.int64) for pool in pools)
    return RerankPool(judged=judged, rowids=rowids, texts=tuple(texts), keys=tuple(keys), members=members, depth=depth)


def prefer_rerank(pool_size: int, store_size: int, mode: str, *, reuse_full: bool = True) -> bool:
    """Whether to score by re-ranking: ``mode`` ``"rerank"``/``"full"``, or ``"auto"``.

    ``"auto"``: when a full encode would be adopted as it is (``reuse_full``), re-rank when the pools hold at most
    :data:`RERANK_SHARE` of the store (the full encode is wasted only when the run does not adopt); otherwise
    (the adopted model is trained further, so every passage is encoded again anyway) whenever the pools are
    smaller than the store.
    """
    if mode == "rerank":
        return True
    if mode == "full":
        return False
    return pool_size <= (RERANK_SHARE * store_size if reuse_full else store_size - 1)
