"""CLI plugin: EHI (End-to-end Hierarchical Indexing).

- ``rag-hier index CORPUS --store S --model DIR --ehi [DIR]`` attaches the trained indexer (from the ``--model``
  directory, or the one given) to the store: every passage is filed under its leaf; later writes route new
  passages with the learned indexer, without retraining;
- ``rag-hier search|eval --strategy ehi [--beam B]`` searches by beam search over the learned tree (the
  strategy and its flag come from the registry); ``eval`` reports the measured ``fraction_scored``;
- ``rag-hier train ehi CORPUS --queries Q --qrels R --output DIR [--branching B --height H] [--lambdas L1 L2 L3]
  [--encoder-lr LR --indexer-lr LR] [--epochs E --refresh-every R] [--freeze-encoder] [--init random|kmeans] ...``
  trains the EHI tree indexer jointly with a sentence-transformers encoder (or alone, on the encoder's fixed
  vectors) and writes the encoder as a standard model directory with the indexer files next to it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rag_hier.cli._train import (
    add_config_arguments,
    add_eval_arguments,
    add_runtime_arguments,
    check_eval_arguments,
    cli_error,
    existing_corpus,
    passage_words,
    qa_or_beir_judgements,
    show_before_after,
    train_parser,
)

__all__ = ["add_index_arguments", "add_train_parser", "after_index"]


# ----------------------------------------------------------------------------------------------------
# index
# ----------------------------------------------------------------------------------------------------
def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ehi [DIR]``."""
    parser.add_argument(
        "--ehi",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="attach (or replace) the EHI index for --strategy ehi: the indexer trained by `rag-hier train ehi` "
        "in DIR (default: the --model directory); later writes route new passages without retraining",
    )


def after_index(store: Any, args: argparse.Namespace) -> str | None:
    """Attach the trained indexer when ``--ehi`` is given; report the index whenever the store has one."""
    given = getattr(args, "ehi", None)
    if given is None and store.extension("ehi") is None:
        return None  # no EHI index: nothing of it (nor PyTorch) is imported
    from rag_hier.store.extensions.ehi import EHIExtension

    ext = store.extension(EHIExtension.name)
    if given is None:
        if not isinstance(ext, EHIExtension) or ext.indexer is None:
            return None
        info = ext.describe()
        return (
            f"ehi: {info['items']} passages in {info['leaves_nonempty']} of {info['leaves']} leaves "
            "(new passages routed by the learned indexer)"
        )
    from rag_hier.index.ehi import INDEXER_FILES  # PyTorch: only when an indexer is attached

    directory = Path(given or getattr(args, "model", None) or "")
    if not given and not getattr(args, "model", None):
        raise cli_error("--ehi without a directory needs --model DIR (the output of `rag-hier train ehi`)")
    missing = [name for name in INDEXER_FILES if not (directory / name).is_file()]
    if missing:
        raise cli_error(
            f"--ehi {directory}: no EHI indexer there (missing {', '.join(missing)}); "
            "train one with `rag-hier train ehi ... --output DIR`"
        )
    t0 = time.perf_counter()
    new = EHIExtension(directory)
    store.add_extension(new, replace=ext is not None)
    info = new.describe()
    return (
        f"ehi: {info['items']} passages in {info['leaves_nonempty']} of {info['leaves']} leaves "
        f"(B={info['branching']}, H={info['height']}), largest leaf {info['leaf_size_max']} "
        f"({'replaced' if ext is not None else 'attached'} in {time.perf_counter() - t0:.1f}s)"
    )


# ----------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------
_LAMBDAS = {
    "lambda_siamese": "--lambdas (1st)",
    "lambda_indexing": "--lambdas (2nd)",
    "lambda_intra": "--lambdas (3rd)",
}
"""The loss weights, set together by ``--lambdas`` (and how its errors name each)."""


def add_train_parser(subparsers: Any) -> None:
    """``rag-hier train ehi``: EHIConfig's flags generated from its fields; data, ``--lambdas`` and runtime by hand."""
    from rag_hier.corpus.formats import CORPUS_FORMATS
    from rag_hier.training.ehi.config import EHIConfig

    d = EHIConfig()
    p = train_parser(
        subparsers,
        "ehi",
        description="Train EHI (End-to-end Hierarchical Indexing): a tree of height H and branching B whose "
        "per-level classifiers route queries and documents to leaves, trained with triplet losses on encoder "
        "vectors and path embeddings, hard negatives mined from each query's top leaves and refreshed every R "
        "epochs. The output directory holds a standard sentence-transformers model and the indexer "
        "(ehi_indexer.safetensors + ehi_indexer.json).",
    )
    p.add_argument("corpus", help="corpus file or directory")
    p.add_argument("--queries", required=True, help="training queries (BEIR queries.jsonl, ..., or QA questions.jsonl)")
    p.add_argument(
        "--qrels", default=None, help="training judgements (BEIR TSV or TREC; optional for QA questions.jsonl)"
    )
    p.add_argument("--output", required=True, help="directory for the model and the indexer (new or empty)")
    p.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    p.add_argument("--base-model", default=None, help="encoder to start from (default: the offline all-MiniLM-L6-v2)")
    p.add_argument(
        "--lambdas",
        type=float,
        nargs=3,
        metavar=("SIAMESE", "INDEXING", "INTRA"),
        default=list(d.lambdas),
        help=f"loss weights lambda1..3 (default {' '.join(map(str, d.lambdas))}, the paper's SciFact values)",
    )
    p.add_argument(
        "--max-passage-words",
        type=int,
        default=None,
        help="split documents like `rag-hier index` (default: 0 for BEIR and QA documents, else 100)",
    )
    add_eval_arguments(p)
    add_runtime_arguments(p)
    add_config_arguments(p, EHIConfig, skip=set(_LAMBDAS), rename=_LAMBDAS)
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from rag_hier.corpus.readers import detect_format, read_corpus
    from rag_hier.encoders.dense import DEFAULT_MODEL
    from rag_hier.training.ehi import EHITrainer

    corpus_path = existing_corpus(args.corpus)
    check_eval_arguments(args)
    for flag, value in (("--queries", args.queries), ("--qrels", args.qrels)):
        if value is not None and not Path(value).exists():
            raise cli_error(f"{flag} {value} does not exist")
    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise cli_error(f"--output {out} exists and is not an empty directory (nothing was written)")
    fmt = args.format or detect_format(corpus_path)
    max_words = passage_words(args, fmt)
    lambdas = dict(zip(_LAMBDAS, args.lambdas, strict=True))
    config = args.config_flags.build(args, **lambdas)
    documents = read_corpus(corpus_path, fmt)
    queries, qrels = qa_or_beir_judgements(args.queries, args.qrels, max_words)
    trainer = EHITrainer(
        config, model=args.base_model or DEFAULT_MODEL, device=args.device, show_progress_bar=not args.no_progress
    )
    result = trainer.train(documents, out, queries=queries, qrels=qrels, max_passage_words=max_words)
    leaves = result.leaf_stats
    config = result.config
    mode = "indexer only (frozen encoder)" if config.freeze_encoder else "encoder + indexer"
    if result.warmup_history:
        mode += f", indexer warmed up alone for {config.warmup_epochs} epochs first"
    if result.refit_history:
        mode += f", indexer refit on the final vectors for {config.refit_epochs} epochs"
    print(
        f"trained EHI ({mode}, B={config.branching}, H={config.height}: {config.n_leaves} leaves) on "
        f"{len(documents)} {fmt} documents: {result.steps} steps in {result.seconds:.0f}s\n"
        f"  leaves: {leaves['leaves_nonempty']} non-empty, largest {leaves['leaf_size_max']} of {leaves['items']} "
        f"passages\n  model and indexer saved to {result.output_dir}"
    )
    if args.eval_queries:
        _before_after(args, documents, args.base_model or DEFAULT_MODEL, out, fmt, max_words)
    return 0


def _before_after(args: argparse.Namespace, documents: Any, base: str, out: Path, fmt: str, max_words: int) -> None:
    """The base model's exact search against the trained encoder searched through its EHI index."""
    from rag_hier.store.extensions.ehi import EHIExtension
    from rag_hier.tuning.before_after import SearchSide, before_after_searches

    report = before_after_searches(
        documents,
        SearchSide(model=base),
        SearchSide(model=str(out), strategy="ehi", extensions=lambda: [EHIExtension(out)]),
        args.eval_queries,
        args.eval_qrels,
        corpus_format=fmt,
        max_passage_words=max_words,
        base_name=f"{base} (exact search)",
        device=args.device,
        show_progress_bar=not args.no_progress,
    )
    show_before_after(report)
