"""Training rows from judged queries: positives and hard negatives mined from the store itself.

Each training query's positive is the text of a relevant passage (at document level: the relevant
document's passage the store's model scores highest for the query). Hard negatives come from the store's
own dense search with the current model, as sentence-transformers' ``mine_hard_negatives`` picks them, but
without encoding the corpus again (the store holds its vectors):

- the top ``range_max`` results are the candidates, after skipping the first ``range_min``;
- judged-relevant ids are never negatives;
- the false-negative margin: a candidate scoring above ``(1 - relative_margin)`` times the positive's
  score (or above the positive minus ``absolute_margin``) is skipped, since unjudged relevant passages
  score close to the positive and would otherwise be pushed away (NV-Retriever's "TopK-PercPos", 95 %);
- ``num_negatives`` are drawn at random (seeded) among those left, fresh for each pass over the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rag_hier.eval.judged import JudgedQueries
from rag_hier.retrieval.base import Queries
from rag_hier.retrieval.dense import DenseRetriever

__all__ = ["MinedExample", "mine_examples", "training_rows"]


@dataclass(frozen=True)
class MinedExample:
    """One training query: its text, its positive passage texts and its pool of hard negative texts."""

    qid: str
    query: str
    positives: tuple[str, ...]
    negatives: tuple[str, ...]


def _texts(store: Any, rowids: list[int]) -> dict[int, str]:
    records = store.records(rowids)
    return {r: rec.to_passage().embedding_text for r, rec in records.items()}


def mine_examples(
    store: Any,
    judged: JudgedQueries,
    query_vectors: np.ndarray,
    *,
    range_min: int = 0,
    range_max: int = 30,
    relative_margin: float | None = 0.05,
    absolute_margin: float | None = None,
) -> list[MinedExample]:
    """Positives and hard-negative pools of every judged query (see the module docstring).

    Args:
        store: The store (searched with its own index and model).
        judged: Training queries and their judgements.
        query_vectors: The queries encoded by the store's model, rows in ``judged.queries`` order.
        range_min: Skip this many top results before taking candidates.
        range_max: Consider the top this many results.
        relative_margin: Skip candidates scoring above ``(1 - relative_margin) x`` the positive's score.
        absolute_margin: Skip candidates scoring above the positive's score minus this.

    """
    qids = list(judged.queries)
    level = judged.level
    retriever = DenseRetriever(store)
    results = retriever.run(Queries(vectors=query_vectors), range_max, aggregate=level)  # type: ignore[arg-type]
    # positives: every relevant passage (or document's best passage) with its score for the query
    relevant = {q: {d for d, g in judged.qrels[q].items() if g > 0} for q in qids}
    wanted_ids = sorted({d for ids in relevant.values() for d in ids})
    found = store.rowids_of(doc_ids=wanted_ids) if level == "doc" else store.rowids_of(passage_ids=wanted_ids)
    rowids = np.asarray(found, dtype=np.int64)
    vectors = store.vectors(rowids) if rowids.size else np.zeros((0, query_vectors.shape[1]), np.float32)
    records = store.records(rowids.tolist())
    texts = {r: rec.to_passage().embedding_text for r, rec in records.items()}
    key_of = {r: (rec.doc_id if level == "doc" else rec.passage_id) for r, rec in records.items()}
    by_key: dict[str, list[int]] = {}
    for i, r in enumerate(rowids.tolist()):
        if r in key_of:
            by_key.setdefault(key_of[r], []).append(i)
    out: list[MinedExample] = []
    for qi, (qid, result) in enumerate(zip(qids, results, strict=True)):
        qv = query_vectors[qi]
        positives: list[tuple[float, str]] = []
        for key in relevant[qid]:
            rows = by_key.get(key)
            if not rows:
                continue  # judged but not in the store (reported by the qrels hygiene)
            scores = vectors[rows] @ qv
            best = rows[int(np.argmax(scores))]
            positives.append((float(scores.max()), texts[int(rowids[best])]))
        if not positives:
            continue
        positives.sort(key=lambda x: -x[0])
        floor = positives[-1][0]  # the lowest-scoring positive bounds the negatives (as the library does per pair)
        limit = np.inf
        if relative_margin is not None:
            limit = min(limit, floor - abs(floor) * relative_margin)  # (1 - margin) x positive, for positive scores
        if absolute_margin is not None:
            limit = min(limit, floor - absolute_margin)
        judged_ids = set(judged.qrels[qid])
        pool: list[int] = []
        for hit in result.hits[range_min:]:
            key = hit.doc_id if level == "doc" else hit.passage_id
            if key in judged_ids and judged.qrels[qid][key] > 0:
                continue
            if hit.score > limit:
                continue
            pool.append(hit.rowid)
        neg_texts = _texts(store, pool)
        out.append(
            MinedExample(
                qid=qid,
                query=judged.queries[qid],
                positives=tuple(t for _, t in positives),
                negatives=tuple(neg_texts[r] for r in pool if r in neg_texts),
            )
        )
    return out


def training_rows(examples: list[MinedExample], *, num_negatives: int, rows: int, seed: int) -> dict[str, list[str]]:
    """Columns ``anchor``, ``positive``, ``negative_1..n`` for ``rows`` rows: shuffled passes over the pairs.

    Every (query, positive) pair appears once per pass; its negatives are drawn afresh from the query's pool
    in each pass (with replacement when the pool is smaller than ``num_negatives``; a query with an empty
    pool takes negatives from other queries' pools).
    """
    rng = np.random.default_rng(seed)
    pairs = [(e, p) for e in examples for p in e.positives]
    everyone = [t for e in examples for t in e.negatives] or [p for _, p in pairs]
    cols: dict[str, list[str]] = {"anchor": [], "positive": []}
    for j in range(num_negatives):
        cols[f"negative_{j + 1}"] = []
    if not pairs:
        return cols
    while len(cols["anchor"]) < rows:
        for i in rng.permutation(len(pairs)).tolist():
            if len(cols["anchor"]) >= rows:
                break
            example, positive = pairs[i]
            cols["anchor"].append(example.query)
            cols["positive"].append(positive)
            # a query whose pool the margin emptied (a weak base model) takes other queries' texts
            pool = list(example.negatives) or [t for t in everyone if t not in example.positives] or everyone
            if num_negatives:
                picks = rng.choice(len(pool), size=num_negatives, replace=len(pool) < num_negatives)
                for j, k in enumerate(picks.tolist()):
                    cols[f"negative_{j + 1}"].append(pool[k])
    return cols
