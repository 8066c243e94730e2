"""Evaluation: IR metrics (pytrec_eval) with BEIR/MTEB conventions, qrels hygiene, runs, paired comparisons.

TREC runs, per-query files and paired comparisons of systems live here too. The MTEB search adapter is
:mod:`rag_hier.eval.mteb` (imported on its own: it needs the ``mteb`` extra).
"""

from rag_hier.eval.compare import Comparison, PairedDifference, compare_systems, holm, paired_difference
from rag_hier.eval.hygiene import QrelsHygiene, check_qrels
from rag_hier.eval.metrics import (
    DEFAULT_METRICS,
    IdenticalIds,
    evaluate,
    evaluate_per_query,
    metric_list,
    parse_metric,
    remove_identical_ids,
)
from rag_hier.eval.perquery import read_per_query, write_per_query
from rag_hier.eval.trec import hits_to_run, read_run, write_run

__all__ = [
    "DEFAULT_METRICS",
    "Comparison",
    "IdenticalIds",
    "PairedDifference",
    "QrelsHygiene",
    "check_qrels",
    "compare_systems",
    "evaluate",
    "evaluate_per_query",
    "hits_to_run",
    "holm",
    "metric_list",
    "paired_difference",
    "parse_metric",
    "read_per_query",
    "read_run",
    "remove_identical_ids",
    "write_per_query",
    "write_run",
]
