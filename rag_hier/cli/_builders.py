"""The ``rag-hier`` sub-commands' parsers, built by the modules that declare their flags.

The strategies' flags come from the strategy registry (:mod:`rag_hier.cli.strategies`), the methods' ``index``
flags from their plugins (:mod:`rag_hier.cli.plugins`). :func:`rag_hier.cli.main.build_parser` calls these;
``rag-hier`` itself repeats their calls from the generated tables (:mod:`rag_hier.cli._generate`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rag_hier.cli._base import COMMAND_HELP as _COMMAND_HELP
from rag_hier.cli._base import positive_int as _positive_int

__all__ = ["BUILDERS"]


def _index_parser(sub: Any) -> None:
    from rag_hier.cli.plugins import plugins
    from rag_hier.corpus.formats import CORPUS_FORMATS
    from rag_hier.index.kinds import INDEX_KINDS

    p = sub.add_parser(
        "index",
        help=_COMMAND_HELP["index"],
        description="Read a corpus, split it into passages, encode them and store them. Re-running on the "
        "same store adds new documents, re-encodes changed passages only, and leaves unchanged ones alone.",
    )
    p.add_argument("corpus", help="corpus file or directory")
    p.add_argument(
        "--store",
        required=True,
        help="store directory (created if missing), or a Milvus URI (./x.db, http://host:19530#name)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="sentence-transformers model name or path "
        "(default: the offline all-MiniLM-L6-v2; must match an existing store's model)",
    )
    p.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    p.add_argument("--index", choices=INDEX_KINDS, default=None, help="FAISS index kind for a new store (default flat)")
    p.add_argument("--nlist", type=int, default=None, help="IVF lists (default: chosen from the corpus size)")
    p.add_argument("--nprobe", type=int, default=None, help="IVF lists probed per query (default 16)")
    p.add_argument(
        "--max-passage-words",
        type=int,
        default=None,
        help="split sections into passages of at most N words, cut at sentence ends; 0 keeps paragraphs whole "
        "(default: 0 for BEIR corpora, whose documents are kept whole, and for QA documents, whose questions "
        "are judged by paragraph; else 100)",
    )
    p.add_argument("--prune", action="store_true", help="also delete stored documents absent from the corpus")
    for mod in plugins():
        if hasattr(mod, "add_index_arguments"):
            mod.add_index_arguments(p)
    _add_runtime_args(p)


def _search_parser(sub: Any) -> None:
    s = sub.add_parser(
        "search",
        help=_COMMAND_HELP["search"],
        description="Search with one query (printed) or a queries file (BEIR queries.jsonl or QA questions.jsonl; "
        "written as a TREC run 'qid Q0 id rank score tag').",
    )
    s.add_argument("--store", required=True, help="store directory, or a Milvus URI")
    q = s.add_mutually_exclusive_group(required=True)
    q.add_argument("--query", help="one query text")
    q.add_argument("--queries", help="queries file: BEIR queries.jsonl, QA questions.jsonl, or qid<TAB>text")
    s.add_argument("--top-k", type=int, default=10, help="results per query (default 10)")
    s.add_argument("--output", help="write the TREC run here (default: stdout)")
    _add_search_args(s)
    _add_runtime_args(s)


def _eval_parser(sub: Any) -> None:
    e = sub.add_parser(
        "eval",
        help=_COMMAND_HELP["eval"],
        description="Run every query that has relevance judgements and compute IR metrics with pytrec_eval, "
        "as BEIR and MTEB do (hits whose id equals the query id removed first). See docs/evaluation.md.",
    )
    from rag_hier.cli.evaluate import add_eval_arguments

    add_eval_arguments(e)
    _add_search_args(e)
    _add_runtime_args(e)


def _compare_parser(sub: Any) -> None:
    from rag_hier.cli.compare import add_compare_parser

    add_compare_parser(sub, _COMMAND_HELP["compare"])


def _info_parser(sub: Any) -> None:
    i = sub.add_parser("info", help=_COMMAND_HELP["info"])
    i.add_argument("--store", required=True, help="store directory, or a Milvus URI (./x.db, http://host:19530#name)")
    i.add_argument("--json", action="store_true", help="print the full manifest as JSON")
    i.add_argument("--no-verify", action="store_true", help="skip checksum verification")


def _migrate_parser(sub: Any) -> None:
    m = sub.add_parser(
        "migrate",
        help=_COMMAND_HELP["migrate"],
        description="Copy a collection — passages, vectors, extensions — from a local store directory into a new "
        "Milvus collection (--to URI: a Milvus Lite file ./x.db, or http://host:19530; #name picks the "
        "collection), or from Milvus into a new local directory. Nothing is re-encoded; rowids are kept, so the "
        "extensions' files are copied as they are. Token and database: RAG_HIER_MILVUS_TOKEN, RAG_HIER_MILVUS_DB.",
    )
    m.add_argument("--store", required=True, help="the source: a store directory or a Milvus URI")
    m.add_argument("--to", required=True, help="the target: a Milvus URI (from a directory) or a new directory")


def _tune_parser(sub: Any) -> None:
    from rag_hier.cli.tune import add_tune_parser

    _add_runtime_args(
        add_tune_parser(sub, _COMMAND_HELP["tune"]),
        batch_help="texts per encoding batch, when the store's model or a candidate encodes queries and passages "
        "(default: the model's); not training's batch, which is --train-batch-size",
    )


BUILDERS: dict[str, Callable[[Any], None]] = {
    "index": _index_parser,
    "search": _search_parser,
    "eval": _eval_parser,
    "compare": _compare_parser,
    "info": _info_parser,
    "migrate": _migrate_parser,
    "tune": _tune_parser,
}
"""Sub-command builders (``train`` is assembled by :func:`_assemble` from the methods' ``add_train_parser``)."""


def _add_search_args(p: argparse.ArgumentParser) -> None:
    from rag_hier.cli.strategies import add_strategy_arguments

    add_strategy_arguments(p)
    p.add_argument(
        "--aggregate",
        choices=("passage", "doc"),
        default=None,
        help="rank passages, or documents by their best passage (MaxP); default: doc for BEIR "
        "stores (evaluated at the document level), else passage",
    )
    p.add_argument("--filters", default=None, help="metadata filter as JSON in the Haystack syntax")
    p.add_argument("--batch-size", type=_positive_int, default=None, help="query encoding batch size")


def _add_runtime_args(p: argparse.ArgumentParser, batch_help: str = "encoding batch size") -> None:
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: CUDA when available)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    if "--batch-size" not in p._option_string_actions:
        p.add_argument("--batch-size", type=_positive_int, default=None, help=batch_help)
