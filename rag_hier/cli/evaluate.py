"""``rag-hier eval``: search the judged queries and score them the way BEIR and MTEB do.

- A hit whose id equals its query's id is removed before scoring (BEIR's ``ignore_identical_ids``); the
  search fetches one more hit whenever that can happen, so each query keeps ``top_k``.
  ``--keep-identical-ids`` turns the rule off.
- Qrels hygiene (judged ids absent from the store, unanswerable queries, repeated rows, judged queries
  without text) is reported as warnings and in the metrics JSON.
- ``--beir DIR [--split test]`` reads ``queries.jsonl`` and ``qrels/SPLIT.tsv`` (gzipped or not).
- ``--per-query FILE`` writes every query's values (trec_eval ``-q`` TSV, or JSON by suffix); the metrics
  JSON records what it takes to reproduce the figures (version, model and weights digest, store
  generation, strategy and parameters, input digests, timing, device).

The command's wiring (the search function, store opening) comes from :mod:`rag_hier.cli.main`, passed in
by :func:`run_eval`'s caller, so that this module never imports ``main``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rag_hier.errors import RagHierError

__all__ = ["add_eval_arguments", "run_eval", "strategy_parameters"]


SearchFn = Callable[[Any, argparse.Namespace, list[str], int, Any], list[Any]]
"""``(store, args, query texts, top_k, aggregate) -> one QueryResult per query`` (main's ``_search``)."""


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``rag-hier eval`` (``--strategy``, its parameters and the runtime flags are added by ``main``)."""
    parser.add_argument("--store", required=True, help="store directory, or a Milvus URI")
    parser.add_argument(
        "--queries", default=None, help="queries file (BEIR queries.jsonl or QA questions.jsonl); or use --beir"
    )
    parser.add_argument(
        "--qrels",
        default=None,
        help="qrels (BEIR TSV or TREC); optional for QA questions.jsonl, whose gold doc/paragraph give the judgements",
    )
    parser.add_argument(
        "--beir",
        default=None,
        metavar="DIR",
        help="a BEIR data set folder: reads DIR/queries.jsonl and DIR/qrels/SPLIT.tsv (either may be gzipped)",
    )
    parser.add_argument("--split", default="test", help="qrels split of --beir (default test)")
    parser.add_argument(
        "--metrics",
        default="ndcg@10,recall@10,recall@100,mrr@10",
        help="comma-separated metrics (ndcg@K, recall@K, mrr@K, map@K, precision@K, success@K)",
    )
    parser.add_argument(
        "--top-k", type=int, default=None, help="results per query (default: the largest metric cut-off)"
    )
    parser.add_argument(
        "--keep-identical-ids",
        action="store_true",
        help="keep hits whose id equals the query id (by default they are removed before scoring, as BEIR "
        "and MTEB do on sets whose queries are corpus documents)",
    )
    parser.add_argument("--output", help="write the metrics and what it takes to reproduce them as JSON here")
    parser.add_argument("--run-output", help="also write the scored TREC run here")
    parser.add_argument(
        "--per-query",
        default=None,
        metavar="FILE",
        help="write every query's value of every metric: trec_eval -q style TSV, or JSON if FILE ends in .json",
    )


def strategy_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """The strategy's name and parameters, as its registry dataclass validated them.

    ``parameters`` holds every parameter (defaults included), ``given`` the names of those set by flags.
    """
    from rag_hier.cli.strategies import given_parameters, params_from_args

    return {
        "name": args.strategy,
        "parameters": params_from_args(args.strategy, args).to_dict(),
        "given": sorted(given_parameters(args.strategy, args)),
    }


def _truncate(run: Mapping[str, Mapping[str, float]], top_k: int) -> dict[str, dict[str, float]]:
    """The first ``top_k`` hits of each query, in ranking order."""
    return {q: dict(list(scores.items())[:top_k]) for q, scores in run.items()}


def _device(store: Any, args: argparse.Namespace) -> dict[str, Any]:
    from rag_hier.encoders.device import resolve_device
    from rag_hier.eval.provenance import host_description

    encoder = store.encoder
    resolved = encoder.device if encoder is not None and encoder.is_loaded else resolve_device(args.device)
    return {"requested": args.device, "used": resolved, "host": host_description()}


def run_eval(
    args: argparse.Namespace,
    *,
    open_store: Callable[..., Any],
    search: SearchFn,
    default_aggregate: Callable[[Any, str | None], str],
) -> int:
    """``rag-hier eval`` (see the module docstring); ``main`` passes its store and search helpers."""
    from rag_hier._version import __version__
    from rag_hier.cli.strategies import mean_stats
    from rag_hier.eval.judged import judged_files, load_judged
    from rag_hier.eval.metrics import evaluate_per_query, metric_list, parse_metric, remove_identical_ids
    from rag_hier.eval.perquery import write_per_query
    from rag_hier.eval.provenance import file_sha256, model_fingerprint
    from rag_hier.eval.trec import hits_to_run, write_run

    metrics = metric_list(args.metrics)
    top_k = args.top_k if args.top_k is not None else max(parse_metric(m)[1] for m in metrics)
    if top_k < 1:
        raise RagHierError(f"--top-k must be >= 1, got {top_k}")
    queries_path, qrels_path = judged_files(args.queries, args.qrels, args.beir, args.split)
    ignore_identical = not args.keep_identical_ids
    store = open_store(args, read_only=True)
    try:
        aggregate = default_aggregate(store, args.aggregate)
        judged = load_judged(store, queries_path, qrels_path, aggregate)
        qids, queries, qrels, hygiene = list(judged.queries), judged.queries, judged.qrels, judged.hygiene
        fetch_k = top_k + 1 if ignore_identical and any(q in judged.known for q in qids) else top_k
        if store.encoder is not None:
            _ = store.encoder.model  # load it first: the timing is of encoding and search
        t0 = time.perf_counter()
        query_results = search(store, args, [queries[q] for q in qids], fetch_k, aggregate)
        elapsed = time.perf_counter() - t0
        results = [r.hits for r in query_results]
        generation = store.generation
        # the model the search used (a model kept inside the store: its path there)
        model = store.encoder.model_name if store.encoder is not None else None
        device = _device(store, args)
    finally:
        store.close()
    for line in hygiene.warnings(level=aggregate):
        print(f"rag-hier eval: warning: {qrels_path or queries_path}: {line}", file=sys.stderr)
    run = hits_to_run(qids, results, level=aggregate)
    removed_hits = removed_queries = 0
    if ignore_identical:
        run, removed = remove_identical_ids(run)
        removed_hits, removed_queries = removed.hits, removed.queries
    run = _truncate(run, top_k)
    if removed_hits:
        print(
            f"rag-hier eval: removed {removed_hits} hits whose id equals the query id, from {removed_queries} queries "
            "(BEIR/MTEB convention; --keep-identical-ids keeps them)",
            file=sys.stderr,
        )
    per_query = evaluate_per_query(run, {q: qrels[q] for q in qids}, metrics, ignore_identical_ids=False)
    scores = {name: sum(v.values()) / len(v) for name, v in per_query.items()}
    if args.run_output:
        write_run(run, args.run_output)
    if args.per_query:
        write_per_query(per_query, args.per_query)
    report = {
        "rag_hier_version": __version__,
        "store": {"path": str(args.store), "generation": generation},
        "model": model_fingerprint(model),
        "strategy": args.strategy,
        "strategy_parameters": strategy_parameters(args),
        "level": aggregate,
        "filters": args.filters,
        "top_k": top_k,
        "identical_ids": {
            "rule": "removed" if ignore_identical else "kept",
            "removed_hits": removed_hits,
            "queries_affected": removed_queries,
            "fetched_per_query": fetch_k,
        },
        "inputs": {
            "queries": {"path": str(queries_path), "sha256": file_sha256(queries_path)},
            "qrels": (
                {"path": str(qrels_path), "sha256": file_sha256(qrels_path)}
                if qrels_path is not None
                else {"derived_from": str(queries_path), "sha256": file_sha256(queries_path)}
            ),
            "beir": {"folder": str(args.beir), "split": args.split} if args.beir else None,
        },
        "queries": len(qids),
        "search_seconds": round(elapsed, 3),
        "queries_per_second": round(len(qids) / elapsed, 2) if elapsed > 0 else None,
        "device": device,
        "qrels_hygiene": hygiene.to_dict(),
        "metrics": {k: round(v, 6) for k, v in scores.items()},
    }
    # what the strategy measured, averaged over the queries (e.g. fraction_scored of tree indexes)
    report.update({k: round(v, 6) for k, v in mean_stats(query_results).items()})
    width = max(len(m) for m in metrics)
    print(f"{len(qids)} queries, {aggregate} level, top {top_k}, {args.strategy} ({elapsed:.1f}s)")
    for name, value in scores.items():
        print(f"  {name:<{width}}  {value:.4f}")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0
