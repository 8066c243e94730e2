"""IR metrics through pytrec_eval (trec_eval's reference code), named ``ndcg@10``, ``recall@100``, ``mrr@10``.

Conventions (those of BEIR's ``EvaluateRetrieval.evaluate`` and MTEB's retrieval evaluator, see
``docs/evaluation.md``): a hit whose id equals its query's id is removed before scoring unless
``ignore_identical_ids=False``; grade-0 judgements are kept and count as non-relevant; nDCG uses the
judged grades as linear gains; equal scores are ranked by id, descending, as trec_eval does, for every
measure (MRR included).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rag_hier.errors import RagHierError

__all__ = [
    "DEFAULT_METRICS",
    "IdenticalIds",
    "Qrels",
    "Run",
    "evaluate",
    "evaluate_per_query",
    "parse_metric",
    "remove_identical_ids",
]

Run = Mapping[str, Mapping[str, float]]
"""query id → {doc or passage id → score} (higher is better)."""
Qrels = Mapping[str, Mapping[str, int]]
"""query id → {doc or passage id → relevance grade}."""

DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
_METRIC = re.compile(r"^(ndcg|recall|mrr|map|precision|p|hits|success)@(\d+)$")


def parse_metric(name: str) -> tuple[str, int]:
    """Split ``"ndcg@10"`` into ``("ndcg", 10)``; raises on unknown names."""
    m = _METRIC.match(name.strip().lower())
    if not m:
        raise RagHierError(f"unknown metric {name!r}; use ndcg@K, recall@K, mrr@K, map@K, precision@K or success@K")
    kind = "precision" if m.group(1) == "p" else "success" if m.group(1) == "hits" else m.group(1)
    k = int(m.group(2))
    if k < 1:
        # trec_eval aborts the whole process on a zero cut-off, so refuse it here.
        raise RagHierError(f"metric {name!r}: the cut-off K must be >= 1")
    return kind, k


def _trec_measure(kind: str, k: int) -> str:
    return {
        "ndcg": f"ndcg_cut_{k}",
        "recall": f"recall_{k}",
        "map": f"map_cut_{k}",
        "precision": f"P_{k}",
        "success": f"success_{k}",
        "mrr": "recip_rank",
    }[kind]


def _truncate(run: Run, k: int) -> dict[str, dict[str, float]]:
    out = {}
    for qid, scores in run.items():
        # Ties in the order trec_eval ranks them (score, then doc id, both descending), so that MRR@k
        # agrees with the other measures on the same run.
        pairs = ((d, float(s)) for d, s in scores.items())
        ranked = sorted(pairs, key=lambda kv: (kv[1], kv[0]), reverse=True)
        out[qid] = dict(ranked[:k])
    return out


@dataclass(frozen=True)
class IdenticalIds:
    """What :func:`remove_identical_ids` removed: ``hits`` in all, from ``queries`` queries."""

    hits: int = 0
    queries: int = 0


def remove_identical_ids(run: Run) -> tuple[dict[str, dict[str, float]], IdenticalIds]:
    """A copy of ``run`` without the hits whose id equals their query's id (BEIR's ``ignore_identical_ids``).

    Some public sets (e.g. two of BEIR's) use corpus documents as queries, under the same id; the query's
    own document then tops its ranking and is not an answer. Ranking order is kept.

    Returns:
        The new run and the counts of what was removed.

    """
    out: dict[str, dict[str, float]] = {}
    hits = queries = 0
    for qid, scores in run.items():
        if qid in scores:
            hits += 1
            queries += 1
            out[qid] = {d: s for d, s in scores.items() if d != qid}
        else:
            out[qid] = dict(scores)
    return out, IdenticalIds(hits=hits, queries=queries)


def evaluate_per_query(
    run: Run, qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS, *, ignore_identical_ids: bool = True
) -> dict[str, dict[str, float]]:
    """Per-query values: metric name → {query id → value}, over the queries that have qrels.

    Queries in ``qrels`` that the run misses, or for which it holds no hit, count as 0 (as trec_eval's
    ``-c``; BEIR and MTEB leave such queries out of the mean instead); run queries without qrels are
    ignored.

    Args:
        run: Query id → {id → score}.
        qrels: Query id → {id → grade}; grade 0 (or below) is judged non-relevant.
        metrics: Names such as ``ndcg@10`` (see :func:`parse_metric`).
        ignore_identical_ids: Remove hits whose id equals the query id first (BEIR's default).

    Raises:
        RagHierError: An unknown metric, or qrels without any judgement.

    """
    import pytrec_eval

    for name in metrics:
        parse_metric(name)
    qrels_clean = {q: {d: int(r) for d, r in rel.items()} for q, rel in qrels.items() if rel}
    if not qrels_clean:
        raise RagHierError("the qrels hold no relevance judgements")
    if ignore_identical_ids:
        run = remove_identical_ids({q: run[q] for q in qrels_clean if q in run})[0]
    base_run = {q: {d: float(s) for d, s in run.get(q, {}).items()} for q in qrels_clean}
    out: dict[str, dict[str, float]] = {}
    for name in metrics:
        kind, k = parse_metric(name)
        measure = _trec_measure(kind, k)
        # MRR@k: reciprocal rank on the run cut at k (trec_eval's recip_rank has no cut-off).
        this_run = _truncate(base_run, k) if kind == "mrr" else base_run
        # pytrec_eval drops queries with an empty ranking; they score 0.
        evaluator = pytrec_eval.RelevanceEvaluator(qrels_clean, {measure})
        values = evaluator.evaluate({q: r for q, r in this_run.items() if r})
        out[name] = {q: float(values.get(q, {}).get(measure, 0.0)) for q in qrels_clean}
    return out


def evaluate(
    run: Run, qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS, *, ignore_identical_ids: bool = True
) -> dict[str, float]:
    """Mean of each metric over the queries that have qrels (see :func:`evaluate_per_query`)."""
    per_query = evaluate_per_query(run, qrels, metrics, ignore_identical_ids=ignore_identical_ids)
    return {name: (sum(v.values()) / len(v) if v else 0.0) for name, v in per_query.items()}


def metric_list(names: Iterable[str] | str | None) -> tuple[str, ...]:
    """Normalise a comma-separated string or list of metric names, validating each."""
    if names is None:
        return DEFAULT_METRICS
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    for n in items:
        parse_metric(n)
    return tuple(items)
