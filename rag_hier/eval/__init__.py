"""Evaluation: IR metrics (pytrec_eval) with BEIR/MTEB conventions, qrels hygiene, runs, paired comparisons.

TREC runs, per-query files and paired comparisons of systems live here too. The MTEB search adapter is
:mod:`rag_hier.eval.mteb` (imported on its own: it needs the ``mteb`` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
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

# names load on first use: the CLI's --help imports no NumPy
__getattr__ = lazy_getattr(
    __name__,
    {
        "Comparison": "compare",
        "DEFAULT_METRICS": "metrics",
        "IdenticalIds": "metrics",
        "PairedDifference": "compare",
        "QrelsHygiene": "hygiene",
        "check_qrels": "hygiene",
        "compare_systems": "compare",
        "evaluate": "metrics",
        "evaluate_per_query": "metrics",
        "hits_to_run": "trec",
        "holm": "compare",
        "metric_list": "metrics",
        "paired_difference": "compare",
        "parse_metric": "metrics",
        "read_per_query": "perquery",
        "read_run": "trec",
        "remove_identical_ids": "metrics",
        "write_per_query": "perquery",
        "write_run": "trec",
    },
    globals(),
)

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
