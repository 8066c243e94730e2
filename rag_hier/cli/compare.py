"""``rag-hier compare A B [C ...]``: paired comparison of systems over the same queries.

Each system is a TREC run (scored against ``--qrels``) or a per-query file written by ``rag-hier eval
--per-query`` (TSV or JSON). The first system is the baseline; the statistics are
:func:`rag_hier.eval.compare.compare_systems`'s. Markdown goes to stdout (and ``--markdown FILE``), JSON
to ``--output FILE``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rag_hier.errors import RagHierError

__all__ = ["add_compare_parser", "run_compare"]


def add_compare_parser(subparsers: Any, help_line: str) -> None:
    """Add the ``compare`` sub-command (``help_line``: its line in ``rag-hier --help``)."""
    from rag_hier.eval.choices import PAIRED_TESTS

    p = subparsers.add_parser(
        "compare",
        help=help_line,
        description="Compare systems on the same queries against the first: mean per system, mean paired "
        "difference with a seeded bootstrap interval, a paired test, wins/losses/ties, and Holm's correction "
        "when more than two systems are compared. See docs/evaluation.md.",
    )
    p.add_argument("systems", nargs="+", metavar="SYSTEM", help="TREC run files or per-query files (first = baseline)")
    p.add_argument("--qrels", default=None, help="qrels (BEIR TSV or TREC) to score TREC runs with")
    p.add_argument("--metrics", default="ndcg@10", help="comma-separated metrics to compare (default ndcg@10)")
    p.add_argument("--names", default=None, help="comma-separated system names (default: the file names)")
    p.add_argument("--test", choices=PAIRED_TESTS, default="t", help="paired test: t (default) or randomization")
    p.add_argument("--seed", type=int, default=42, help="seed of the bootstrap and the randomization test (42)")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--confidence", type=float, default=0.95, help="bootstrap interval level (default 0.95)")
    p.add_argument(
        "--keep-identical-ids",
        action="store_true",
        help="when scoring runs, keep hits whose id equals the query id (removed by default, as in eval)",
    )
    p.add_argument("--output", default=None, help="write the comparison as JSON here")
    p.add_argument("--markdown", default=None, help="also write the Markdown tables here")


def _names(args: argparse.Namespace) -> list[str]:
    paths = [Path(s) for s in args.systems]
    if args.names:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != len(paths) or not all(names):
            raise RagHierError(f"--names gives {len(names)} names for {len(paths)} systems")
    else:
        names = [p.name for p in paths]
        if len(set(names)) < len(names):
            names = [str(p) for p in paths]
    if len(set(names)) < len(names):
        raise RagHierError(f"system names must differ, got {names}")
    return names


def run_compare(args: argparse.Namespace) -> int:
    """``rag-hier compare`` (see the module docstring)."""
    from rag_hier.corpus.readers import read_qrels
    from rag_hier.errors import CorpusFormatError
    from rag_hier.eval.compare import compare_systems
    from rag_hier.eval.metrics import evaluate_per_query, metric_list
    from rag_hier.eval.perquery import is_per_query_file, read_per_query
    from rag_hier.eval.trec import read_run

    if len(args.systems) < 2:
        raise RagHierError(f"compare needs at least two systems, got {len(args.systems)}")
    metrics = metric_list(args.metrics)
    names = _names(args)
    qrels = read_qrels(args.qrels) if args.qrels else None
    per_query: dict[str, dict[str, dict[str, float]]] = {}
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for name, path_text in zip(names, args.systems, strict=True):
        path = Path(path_text)
        if not path.is_file():
            raise CorpusFormatError("system file does not exist", path=str(path))
        if is_per_query_file(path):
            per_query[name] = read_per_query(path)
        else:
            if qrels is None:
                raise RagHierError(f"{path} is a TREC run: give --qrels to score it (or a --per-query file)")
            runs[name] = read_run(path)
    if runs and qrels is not None:
        judged = {q for q, rel in qrels.items() if rel}
        searched = {q for run in runs.values() for q in run} & judged
        for name, run in runs.items():
            if not set(run) & judged:
                source = args.systems[names.index(name)]
                raise RagHierError(f"the qrels {args.qrels} and the run {source} share no query id")
        for name, run in runs.items():
            per_query[name] = evaluate_per_query(
                run, {q: qrels[q] for q in searched}, metrics, ignore_identical_ids=not args.keep_identical_ids
            )
    ordered = {n: per_query[n] for n in names}
    result = compare_systems(
        ordered,
        metrics=metrics,
        test=args.test,
        seed=args.seed,
        n_resamples=args.resamples,
        confidence=args.confidence,
        sources=dict(zip(names, args.systems, strict=True)),
    )
    markdown = result.to_markdown()
    print(markdown, end="")
    if args.markdown:
        Path(args.markdown).write_text(markdown, encoding="utf-8")
    if args.output:
        body = result.to_dict() | {
            "qrels": args.qrels,
            "identical_ids": "kept" if args.keep_identical_ids else "removed",
        }
        Path(args.output).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return 0
