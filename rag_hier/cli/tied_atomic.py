"""CLI plugin: Tied-Atomic (generative retrieval as dense retrieval).

- ``rag-hier train tied-atomic CORPUS --queries Q --qrels R --output DIR [--base-model M] ...`` trains an
  encoder-decoder embedding (InfoNCE over in-batch + BM25 negatives, or MarginMSE with ``--cross-encoder``)
  and saves a sentence-transformers directory;
- then ``rag-hier index CORPUS --store S --model DIR`` and ``rag-hier search|eval --store S`` as for any
  dense model: the store's passage vectors are the docid embeddings, its dense search is the one-step
  decoding (``rag_hier.retrieval.generative.TiedAtomicHead`` gives the generative view in Python).
"""

from __future__ import annotations

import argparse
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
    print_before_after,
    qa_or_beir_judgements,
    train_parser,
)

__all__ = ["add_train_parser"]


def add_train_parser(subparsers: Any) -> None:
    """``rag-hier train tied-atomic``: TiedAtomicConfig's flags generated from its fields, the data flags by hand."""
    from rag_hier.corpus.formats import CORPUS_FORMATS
    from rag_hier.training.tied_atomic.config import TiedAtomicConfig

    p = train_parser(
        subparsers,
        "tied-atomic",
        description="Train an encoder-decoder (T5, BART, EncoderDecoderModel) whose one-step decoder state "
        "embeds queries and documents alike (Nguyen & Yates, 2023): InfoNCE over in-batch and BM25 negatives "
        "(raw dot products), or MarginMSE distillation from --cross-encoder. Without --base-model the start is "
        "an encoder-decoder warm-started from the offline all-MiniLM-L6-v2 (cross-attention copied from "
        "self-attention); pass --base-model t5-base for the paper's setting. Saves a sentence-transformers "
        "directory: index with "
        "`rag-hier index CORPUS --store S --model DIR`. Under torchrun the training is data-parallel.",
    )
    p.add_argument("corpus", help="corpus file or directory (the documents the queries are judged against)")
    p.add_argument(
        "--queries", required=True, help="training queries (BEIR queries.jsonl, qid<TAB>text, or QA questions.jsonl)"
    )
    p.add_argument(
        "--qrels", default=None, help="training judgements (BEIR TSV or TREC; optional for QA questions.jsonl)"
    )
    p.add_argument("--output", required=True, help="directory for the trained model")
    p.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    p.add_argument(
        "--max-passage-words",
        type=int,
        default=None,
        help="split documents as `rag-hier index` will (default: 0 for BEIR and QA documents, else 100)",
    )
    add_eval_arguments(p)
    add_runtime_arguments(p)
    # --max-passage-words: by hand, its default depends on the corpus format
    add_config_arguments(p, TiedAtomicConfig, skip={"max_passage_words"})
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from rag_hier.corpus.readers import detect_format, read_corpus
    from rag_hier.training.distributed import rank
    from rag_hier.training.tied_atomic import TiedAtomicTrainer

    corpus_path = existing_corpus(args.corpus)
    check_eval_arguments(args)
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise cli_error(f"--output {out} exists and is not a directory")
    fmt = args.format or detect_format(corpus_path)
    max_words = passage_words(args, fmt)
    config = args.config_flags.build(args, max_passage_words=max_words)
    documents = read_corpus(corpus_path, fmt)
    queries, qrels = qa_or_beir_judgements(args.queries, args.qrels, max_words)
    result = TiedAtomicTrainer(config).train(documents, out, queries=queries, qrels=qrels)
    if rank() == 0:
        loss = "n/a" if result.train_loss is None else f"{result.train_loss:.4f}"
        print(
            f"trained Tied-Atomic on {result.rows} query-document pairs over {len(documents)} {fmt} documents: "
            f"{result.steps} steps in {result.seconds:.0f}s (loss {loss}, {result.world_size} process(es))\n"
            f"  model saved to {result.output_dir} (use it with: rag-hier index CORPUS --store DIR --model "
            f"{result.output_dir})"
        )
        # the base: the model training started from (the warm-start encoder unless --base-model)
        print_before_after(
            args,
            documents,
            args.base_model or args.warm_start_encoder,
            result.output_dir,
            corpus_format=fmt,
            max_passage_words=max_words,
        )
    return 0
