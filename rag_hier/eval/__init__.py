"""Evaluation: IR metrics (via pytrec_eval) and TREC run files."""

from rag_hier.eval.metrics import DEFAULT_METRICS, evaluate, evaluate_per_query, metric_list, parse_metric
from rag_hier.eval.trec import hits_to_run, read_run, write_run

__all__ = [
    "DEFAULT_METRICS",
    "evaluate",
    "evaluate_per_query",
    "hits_to_run",
    "metric_list",
    "parse_metric",
    "read_run",
    "write_run",
]
