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
    add_eval_arguments,
    add_runtime_arguments,
    check_eval_arguments,
    cli_error,
    existing_corpus,
    passage_words,
    print_before_after,
    qa_or_beir_judgements,
)

__all__ = ["add_train_parser"]


def add_train_parser(subparsers: Any) -> None:
    """``rag-hier train tied-atomic``."""
    from rag_hier.corpus.formats import CORPUS_FORMATS
    from rag_hier.training.tied_atomic_config import TiedAtomicConfig

    d = TiedAtomicConfig()
    p = subparsers.add_parser(
        "tied-atomic",
        help="train a Tied-Atomic encoder-decoder embedding (generative retrieval as dense retrieval)",
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
    p.add_argument(
        "--base-model",
        default=None,
        help="encoder-decoder to start from: t5-small, t5-base, google/flan-t5-base, facebook/bart-base, a "
        "directory (default: warm-start from --warm-start-encoder)",
    )
    p.add_argument(
        "--warm-start-encoder",
        default=d.warm_start_encoder,
        help="without --base-model: the BERT-style encoder the encoder-decoder is built from "
        f"(default {d.warm_start_encoder}, offline)",
    )
    p.add_argument(
        "--warm-start-cross-attention",
        choices=("random", "self_attention"),
        default=d.warm_start_cross_attention,
        help="without --base-model: start the cross-attention random or as a copy of each layer's self-attention "
        f"(default {d.warm_start_cross_attention})",
    )
    p.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"passes over the training pairs (default {d.epochs})")
    p.add_argument("--max-steps", type=int, default=None, help="optimizer steps in total (overrides --epochs)")
    p.add_argument("--max-minutes", type=float, default=None, help="stop training after this many minutes")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"queries per step (default {d.batch_size})")
    p.add_argument("--lr", type=float, default=d.learning_rate, help=f"learning rate (default {d.learning_rate})")
    p.add_argument(
        "--max-seq-length", type=int, default=d.max_seq_length, help=f"tokens kept (default {d.max_seq_length})"
    )
    p.add_argument(
        "--scale", type=float, default=d.scale, help=f"InfoNCE inverse temperature on dot products (default {d.scale})"
    )
    p.add_argument(
        "--bm25-negatives", type=int, default=d.bm25_negatives, help=f"per query (default {d.bm25_negatives})"
    )
    p.add_argument(
        "--bm25-depth",
        type=int,
        default=d.bm25_depth,
        help=f"draw BM25 negatives from this top-k (default {d.bm25_depth})",
    )
    p.add_argument("--bm25-k1", type=float, default=d.bm25_k1, help=f"BM25 k1 for negatives (default {d.bm25_k1})")
    p.add_argument("--bm25-b", type=float, default=d.bm25_b, help=f"BM25 b for negatives (default {d.bm25_b})")
    p.add_argument(
        "--cross-encoder",
        default=None,
        help="a sentence-transformers CrossEncoder: train with MarginMSE on its score margins instead of InfoNCE",
    )
    p.add_argument(
        "--max-passage-words",
        type=int,
        default=None,
        help="split documents as `rag-hier index` will (default: 0 for BEIR and QA documents, else 100)",
    )
    add_eval_arguments(p)
    p.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps (default 1)")
    p.add_argument("--seed", type=int, default=d.seed, help=f"seed (default {d.seed})")
    add_runtime_arguments(p)
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from rag_hier.corpus.readers import detect_format, read_corpus
    from rag_hier.training.hce.distributed import rank
    from rag_hier.training.tied_atomic import TiedAtomicConfig, TiedAtomicTrainer

    corpus_path = existing_corpus(args.corpus)
    check_eval_arguments(args)
    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise cli_error(f"--output {out} exists and is not a directory")
    fmt = args.format or detect_format(corpus_path)
    max_words = passage_words(args, fmt)
    try:
        config = TiedAtomicConfig(
            base_model=args.base_model,
            warm_start_encoder=args.warm_start_encoder,
            warm_start_cross_attention=args.warm_start_cross_attention,
            max_seq_length=args.max_seq_length,
            batch_size=args.batch_size,
            learning_rate=args.lr,
            epochs=args.epochs,
            max_steps=args.max_steps,
            max_minutes=args.max_minutes,
            max_passage_words=max_words,
            scale=args.scale,
            bm25_negatives=args.bm25_negatives,
            bm25_depth=args.bm25_depth,
            bm25_k1=args.bm25_k1,
            bm25_b=args.bm25_b,
            cross_encoder=args.cross_encoder,
            gradient_accumulation_steps=args.grad_accum,
            fp16=args.fp16,
            bf16=args.bf16,
            device=args.device,
            seed=args.seed,
            show_progress_bar=not args.no_progress,
        )
    except ValueError as exc:
        raise cli_error(str(exc).replace("TiedAtomicConfig.", "--").replace("_", "-")) from exc
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
