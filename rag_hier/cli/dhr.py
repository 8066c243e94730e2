"""CLI plugin: Dense Hierarchical Retrieval (DHR).

- ``rag-hier index CORPUS --store S --hierarchical [--doc-representation mean|summary] [--doc-model M]``
  builds the document-level index next to the passage index (it then follows every later write);
- ``rag-hier search|eval --strategy hierarchical [--k1 K] [--lambda L] [--hierarchical-mode serial|parallel]``;
- ``rag-hier train dhr CORPUS --qa QUESTIONS --output DIR [--base-model M] ...``.
"""

from __future__ import annotations

import argparse
from typing import Any

from rag_hier.cli._train import (
    add_attention_dropout_argument,
    add_eval_arguments,
    attention_dropout,
    check_eval_arguments,
    cli_error,
    existing_corpus,
    print_before_after,
)

__all__ = ["add_index_arguments", "add_train_parser", "after_index", "configure_search"]


# ----------------------------------------------------------------------------------------------------
# index
# ----------------------------------------------------------------------------------------------------
def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """``--hierarchical``, ``--doc-representation``, ``--doc-model``."""
    from rag_hier.corpus.summary import DOC_REPRESENTATIONS

    parser.add_argument(
        "--hierarchical",
        action="store_true",
        help="also build the document-level index for --strategy hierarchical (DHR); kept in sync afterwards",
    )
    parser.add_argument(
        "--doc-representation",
        choices=DOC_REPRESENTATIONS,
        default=None,
        help="how a document is represented in the document index: mean of its passage vectors (default) "
        "or its DHR summary (title + abstract + table of contents) encoded",
    )
    parser.add_argument(
        "--doc-model",
        default=None,
        help="a distinct document encoder for --doc-representation summary (e.g. `rag-hier train dhr "
        "--separate-encoders` output DIR/document); default: the store's model",
    )


def after_index(store: Any, args: argparse.Namespace) -> str | None:
    """Attach (or rebuild) the document index when asked; report it whenever the store has one."""
    from rag_hier.store.extensions.doc_index import DocumentIndex

    ext = store.extension(DocumentIndex.name)
    rep = getattr(args, "doc_representation", None)
    model = getattr(args, "doc_model", None)
    wanted = bool(getattr(args, "hierarchical", False) or rep or model)
    if not wanted:
        return None if ext is None else f"document index ({ext.representation}): follows this write"
    if model and rep == "mean":
        raise cli_error("--doc-model applies to --doc-representation summary, not mean")
    if rep is None:
        rep = "summary" if model else (ext.representation if isinstance(ext, DocumentIndex) else "mean")
    if model is None and isinstance(ext, DocumentIndex) and rep == "summary":
        model = ext.model
    if isinstance(ext, DocumentIndex) and ext.representation == rep and ext.model == model:
        return f"document index ({rep}): follows this write"
    encoder = None
    if model is not None:
        from rag_hier.encoders.dense import DenseEncoder

        encoder = DenseEncoder(model, device=args.device, show_progress_bar=not args.no_progress)
        if args.batch_size:
            encoder.batch_size = args.batch_size
    new = DocumentIndex(rep, encoder=encoder) if encoder is not None else DocumentIndex(rep)
    store.add_extension(new, replace=ext is not None)
    return f"document index: {len(new)} documents ({rep}{', ' + model if model else ''}), built"


# ----------------------------------------------------------------------------------------------------
# search (the ``hierarchical`` strategy and its flags come from the registry)
# ----------------------------------------------------------------------------------------------------
def configure_search(name: str, store: Any, args: argparse.Namespace) -> dict[str, Any]:
    """A distinct document encoder encodes queries with ``--batch-size`` too."""
    if name == "hierarchical" and getattr(args, "batch_size", None):
        from rag_hier.store.extensions.doc_index import DocumentIndex

        ext = store.extension(DocumentIndex.name)
        if isinstance(ext, DocumentIndex) and not ext.shares_encoder:
            ext.document_encoder(store).batch_size = args.batch_size
    return {}


# ----------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------
def add_train_parser(subparsers: Any) -> None:
    """``rag-hier train dhr``."""
    from rag_hier.corpus.formats import CORPUS_FORMATS
    from rag_hier.encoders.identity import DEFAULT_MODEL
    from rag_hier.training.dhr_config import DHRTrainingConfig

    d = DHRTrainingConfig()
    p = subparsers.add_parser(
        "dhr",
        help="train DHR document/passage encoders (In-Doc, In-Sec and BM25 negatives)",
        description="Contrastive training of Dense Hierarchical Retrieval encoders on a corpus and training "
        "questions: document level (question -> summary, BM25 negatives) and passage level (question -> "
        "passage, BM25 + In-Doc + In-Sec negatives), in-batch negatives throughout. Saves "
        "sentence-transformers model directories.",
    )
    p.add_argument("corpus", help="corpus file or directory (the documents the questions are about)")
    p.add_argument(
        "--qa",
        default=None,
        help="training questions: QA questions.jsonl (qid, question, doc_id, paragraph_index, answers) or "
        'pairs JSONL ({"query", "passage_id"} or {"query", "doc_id"})',
    )
    p.add_argument(
        "--queries",
        default=None,
        help="training queries instead of --qa: BEIR queries.jsonl with --qrels (or a QA questions.jsonl alone)",
    )
    p.add_argument("--qrels", default=None, help="judgements of --queries (BEIR TSV or TREC; document or passage ids)")
    p.add_argument("--output", required=True, help="output directory for the model(s)")
    p.add_argument("--base-model", default=DEFAULT_MODEL, help=f"model to start from (default {DEFAULT_MODEL})")
    p.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    p.add_argument(
        "--max-passage-words",
        type=int,
        default=d.max_passage_words,
        help=f"cut passages as `rag-hier index` will (0 = whole paragraphs; default {d.max_passage_words})",
    )
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"epochs per iteration (default {d.epochs})")
    p.add_argument("--learning-rate", type=float, default=d.learning_rate, help=f"default {d.learning_rate}")
    p.add_argument(
        "--iterations", type=int, choices=(1, 2), default=d.iterations, help="2: retrain with mined negatives"
    )
    p.add_argument(
        "--separate-encoders",
        action="store_true",
        help="train a document and a passage model (DIR/document, DIR/passage) instead of one shared model",
    )
    p.add_argument("--levels", default=",".join(d.levels), help="levels to train: document,passage (default both)")
    p.add_argument("--bm25-negatives", type=int, default=d.bm25_negatives, help="per question (default 1)")
    p.add_argument(
        "--in-doc-negatives",
        type=int,
        default=d.in_doc_negatives,
        help=f"per question: passages of the gold document without the answer (default {d.in_doc_negatives}, "
        "the paper's)",
    )
    p.add_argument(
        "--in-sec-negatives",
        type=int,
        default=d.in_sec_negatives,
        help=f"per question: passages of the gold passage's section, else of its document (default "
        f"{d.in_sec_negatives})",
    )
    p.add_argument(
        "--mined-negatives",
        choices=("add", "replace"),
        default=d.mined_negatives,
        help="iteration 2 / --negatives-model: add the mined negatives to the BM25 and In-Doc ones (paper) or "
        "replace them",
    )
    p.add_argument(
        "--negatives-model",
        default=None,
        help="mine negatives with this trained model instead of BM25 (DHR's second iteration on its own)",
    )
    p.add_argument(
        "--mini-batch-size",
        type=int,
        default=d.mini_batch_size,
        help=f"bound memory: cached (GradCache) loss over mini-batches of N texts (default {d.mini_batch_size}; "
        "0: plain loss)",
    )
    add_attention_dropout_argument(p)
    p.add_argument("--doc-negatives", type=int, default=d.doc_negatives, help="document level (default 1)")
    p.add_argument(
        "--doc-negative-text",
        choices=("summary", "full_text", "alternate"),
        default=d.doc_negative_text,
        help=f"what document negatives are BM25-ranked on (default {d.doc_negative_text}: the paper's Table 3)",
    )
    p.add_argument("--max-seq-length", type=int, default=None, help="override the model's sequence limit")
    p.add_argument("--max-steps", type=int, default=None, help="stop each iteration after N optimizer steps")
    p.add_argument("--max-minutes", type=float, default=None, help="stop training after this many minutes")
    p.add_argument("--eval-qa", default=None, help="held-out questions over the same corpus, scored after training")
    p.add_argument("--seed", type=int, default=d.seed, help=f"default {d.seed}")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when available)")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"questions per batch (default {d.batch_size})")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_eval_arguments(p)
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:

    from rag_hier.corpus.readers import detect_format, read_corpus
    from rag_hier.training.dhr import DHRTrainer, DHRTrainingConfig, read_examples

    check_eval_arguments(args)
    corpus = existing_corpus(args.corpus)
    levels = tuple(x.strip() for x in args.levels.split(",") if x.strip())
    try:
        config = DHRTrainingConfig(
            base_model=args.base_model,
            shared_encoder=not args.separate_encoders,
            levels=levels,
            max_passage_words=args.max_passage_words,
            epochs=args.epochs,
            max_steps=args.max_steps,
            max_minutes=args.max_minutes,
            batch_size=args.batch_size,
            learning_rate=args.learning_rate,
            bm25_negatives=args.bm25_negatives,
            in_doc_negatives=args.in_doc_negatives,
            in_sec_negatives=args.in_sec_negatives,
            doc_negatives=args.doc_negatives,
            doc_negative_text=args.doc_negative_text,
            iterations=args.iterations,
            negatives_model=args.negatives_model,
            mined_negatives=args.mined_negatives,
            mini_batch_size=args.mini_batch_size or None,
            attention_dropout=attention_dropout(args),
            max_seq_length=args.max_seq_length,
            device=args.device,
            seed=args.seed,
            show_progress_bar=not args.no_progress,
        )
    except ValueError as exc:
        raise cli_error(f"invalid training option: {exc}") from exc
    if (args.qa is None) == (args.queries is None):
        raise cli_error("give the training questions as --qa FILE or as --queries FILE [--qrels FILE]")
    if args.qrels and not args.queries:
        raise cli_error("--qrels goes with --queries")
    documents = read_corpus(corpus, args.format or detect_format(corpus))
    if args.queries and args.qrels:
        from rag_hier.corpus.readers import read_qrels, read_queries
        from rag_hier.training.dhr import examples_from_qrels

        examples = examples_from_qrels(
            read_queries(args.queries), read_qrels(args.qrels), documents, max_passage_words=args.max_passage_words
        )
    else:
        examples = read_examples(args.qa or args.queries, documents, max_passage_words=args.max_passage_words)
    held_out = read_examples(args.eval_qa, documents, max_passage_words=args.max_passage_words) if args.eval_qa else ()
    result = DHRTrainer(config).train(documents, examples, args.output, eval_examples=held_out)
    where = (
        f"model: {result.passage_model}"
        if result.passage_model == result.document_model
        else f"document model: {result.document_model}\n  passage model:  {result.passage_model}"
    )
    losses = ", ".join("n/a" if v is None else f"{v:.4f}" for v in result.losses)
    print(
        f"trained DHR on {len(examples)} questions over {len(documents)} documents in {result.seconds:.0f}s\n"
        f"  rows: {', '.join(f'{k} {v}' for k, v in result.rows.items())}; final loss per iteration: {losses}\n"
        f"  {where}"
    )
    for name, value in sorted(result.metrics.items()):
        if name.endswith(("accuracy@1", "accuracy@5", "accuracy@20", "ndcg@10")):
            print(f"  held-out {name}: {value:.4f}")
    print_before_after(
        args,
        documents,
        config.base_model,
        result.passage_model,
        corpus_format=args.format or detect_format(corpus),
        max_passage_words=args.max_passage_words,
    )
    return 0
