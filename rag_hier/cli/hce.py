"""CLI plugin: HCE (Hierarchical Corpus Encoder).

- ``rag-hier index CORPUS --store S --tree [--branching B]`` builds the cluster tree of the passage vectors
  (rebuilds it when given again); later writes route new passages to their nearest leaf;
- ``rag-hier search|eval --strategy tree [--beam B]`` searches by beam search over the tree (the strategy and
  its flag come from the registry; ``-v`` logs how many passages were scored);
- ``rag-hier train hce CORPUS --output DIR [--mode unsupervised|supervised|joint] [--queries Q --qrels R] ...``
  fine-tunes a sentence-transformers model with HCE and saves it as a standard model directory.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from rag_hier.cli._train import (
    add_config_arguments,
    add_eval_arguments,
    add_runtime_arguments,
    check_eval_arguments,
    cli_error,
    existing_corpus,
    passage_words,
    print_before_after,
    qa_or_beir_judgements,
    train_parser,
)

__all__ = ["add_index_arguments", "add_train_parser", "after_index"]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------
# index
# ----------------------------------------------------------------------------------------------------
def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tree`` and ``--branching``."""
    parser.add_argument(
        "--tree",
        action="store_true",
        help="build (or rebuild) the HCE cluster tree of the passage vectors, for --strategy tree; "
        "later writes route new passages to their nearest leaf",
    )
    parser.add_argument(
        "--branching",
        type=int,
        default=None,
        help="tree branching factor b (default: smallest power of 2 >= N^(1/3), as in HCE)",
    )


def after_index(store: Any, args: argparse.Namespace) -> str | None:
    """Build the tree when ``--tree`` is given; report it whenever the store has one."""
    from rag_hier.store.extensions.tree import TreeExtension

    ext = store.extension(TreeExtension.name)
    branching = getattr(args, "branching", None)
    if branching is not None and branching < 2:
        raise cli_error(f"--branching must be >= 2, got {branching}")
    if not getattr(args, "tree", False):
        if branching is not None and ext is None:
            raise cli_error("--branching needs --tree")
        if not isinstance(ext, TreeExtension) or ext.tree is None:
            return None
        info = ext.tree.describe()
        return (
            f"tree: {info['items']} passages, {info['routed_since_build']} routed and "
            f"{info['removed_since_build']} removed since it was built (rebuild with --tree)"
        )
    t0 = time.perf_counter()
    new = TreeExtension(branching=branching)
    store.add_extension(new, replace=ext is not None)
    info = new.describe()
    verb = "rebuilt" if ext is not None else "built"
    return (
        f"tree: {info['items']} passages, b={info['branching']}, levels {info['level_sizes']}, "
        f"largest leaf {info['leaf_size_max']} ({verb} in {time.perf_counter() - t0:.1f}s)"
    )


# ----------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------
def add_train_parser(subparsers: Any) -> None:
    """``rag-hier train hce``: HCEConfig's flags generated from its fields, the data and runtime flags by hand."""
    from rag_hier.corpus.formats import CORPUS_FORMATS
    from rag_hier.training.hce.config import HCE_MODES, HCEConfig

    p = train_parser(
        subparsers,
        "hce",
        description="Fine-tune a sentence-transformers model on a corpus with HCE: a hierarchical spherical "
        "k-means tree of the corpus supplies tiered sibling negatives; the tree is rebuilt after every epoch "
        "that improves the dev metric (EM). The output is a standard sentence-transformers model directory "
        "(use it with `rag-hier index --model DIR`).",
    )
    p.add_argument("corpus", help="corpus file or directory (the documents to adapt to)")
    p.add_argument("--output", required=True, help="directory for the trained model")
    p.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    p.add_argument(
        "--mode",
        choices=HCE_MODES,
        default=None,
        help="training signal (default: supervised when --queries are given, else unsupervised)",
    )
    p.add_argument("--queries", default=None, help="training queries (supervised and joint modes)")
    p.add_argument("--qrels", default=None, help="training judgements (BEIR TSV or TREC)")
    p.add_argument("--base-model", default=None, help="model to start from (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--dev-queries", default=None, help="explicit dev queries (instead of --dev-fraction)")
    p.add_argument("--dev-qrels", default=None, help="judgements for --dev-queries")
    p.add_argument(
        "--max-passage-words",
        type=int,
        default=None,
        help="split documents like `rag-hier index` (default: 0 for BEIR and QA documents, else 100)",
    )
    add_eval_arguments(p)
    add_runtime_arguments(p)
    add_config_arguments(p, HCEConfig, skip={"mode"})  # --mode: chosen from --queries when not given
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from rag_hier.corpus.readers import detect_format, read_corpus, read_qrels, read_queries
    from rag_hier.encoders.dense import DEFAULT_MODEL
    from rag_hier.training.hce import HCETrainer

    check_eval_arguments(args)
    corpus_path = existing_corpus(args.corpus)
    if args.mode is None:  # the queries a user gives are what the model should learn from
        args.mode = "supervised" if args.queries else "unsupervised"
    elif args.mode == "unsupervised" and args.queries:
        raise cli_error("--mode unsupervised trains on the corpus alone: leave out --queries, or use supervised/joint")
    if args.mode in ("supervised", "joint") and not args.queries:
        raise cli_error(f"--mode {args.mode} needs --queries (and --qrels, unless they are QA questions)")
    if bool(args.dev_queries) != bool(args.dev_qrels):
        raise cli_error("--dev-queries and --dev-qrels go together")
    fmt = args.format or detect_format(corpus_path)
    max_words = passage_words(args, fmt)
    config = args.config_flags.build(args, mode=args.mode)
    documents = read_corpus(corpus_path, fmt)
    queries, qrels = qa_or_beir_judgements(args.queries, args.qrels, max_words) if args.queries else (None, None)
    dev_queries = read_queries(args.dev_queries) if args.dev_queries else None
    dev_qrels = read_qrels(args.dev_qrels) if args.dev_qrels else None
    trainer = HCETrainer(
        config, model=args.base_model or DEFAULT_MODEL, device=args.device, show_progress_bar=not args.no_progress
    )
    result = trainer.train(
        documents,
        args.output,
        queries=queries if config.mode != "unsupervised" else None,
        qrels=qrels if config.mode != "unsupervised" else None,
        dev_queries=dev_queries,
        dev_qrels=dev_qrels,
        max_passage_words=max_words,
    )
    dev = f", best dev ndcg@10 {result.best_dev:.4f} (epoch {result.best_epoch})" if result.best_dev is not None else ""
    print(
        f"trained HCE ({config.mode}) on {len(documents)} {fmt} documents: {result.steps} steps in "
        f"{result.seconds:.0f}s{dev}\n  model saved to {result.output_dir} "
        f"(use it with: rag-hier index CORPUS --store DIR --model {result.output_dir})"
    )
    print_before_after(
        args,
        documents,
        args.base_model or DEFAULT_MODEL,
        result.output_dir,
        corpus_format=fmt,
        max_passage_words=max_words,
    )
    return 0
