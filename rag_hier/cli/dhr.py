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
    add_config_arguments,
    add_eval_arguments,
    add_runtime_arguments,
    check_eval_arguments,
    cli_error,
    existing_corpus,
    passage_words,
    print_before_after,
    train_parser,
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
    """``rag-hier train dhr``: DHRTrainingConfig's flags generated from its fields, the data flags by hand."""
    from rag_hier.corpus.formats import CORPUS_FORMATS
    from rag_hier.training.dhr.config import DHRTrainingConfig

    p = train_parser(
        subparsers,
        "dhr",
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
    p.add_argument("--format", choices=CORPUS_FORMATS, default=None, help="corpus format (default: detect)")
    p.add_argument(
        "--max-passage-words",
        type=int,
        default=None,
        help="cut documents into passages as `rag-hier index` will (default: 0, whole paragraphs, for BEIR and QA "
        "documents, else 100); the store the model is used with must be indexed the same way",
    )
    add_eval_arguments(p)
    # an older spelling of --eval-queries (held-out questions, scored for the base and the trained model)
    p.add_argument("--eval-qa", dest="eval_queries", default=None, help=argparse.SUPPRESS)
    add_runtime_arguments(p, precision=False)
    add_config_arguments(p, DHRTrainingConfig, skip={"max_passage_words"}, rename={"learning_rate": "--learning-rate"})
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from rag_hier.corpus.readers import detect_format, read_corpus
    from rag_hier.training.dhr import DHRTrainer, read_examples

    check_eval_arguments(args)
    corpus = existing_corpus(args.corpus)
    fmt = args.format or detect_format(corpus)
    words = passage_words(args, fmt)
    config = args.config_flags.build(args, max_passage_words=words)
    if (args.qa is None) == (args.queries is None):
        raise cli_error("give the training questions as --qa FILE or as --queries FILE [--qrels FILE]")
    if args.qrels and not args.queries:
        raise cli_error("--qrels goes with --queries")
    documents = read_corpus(corpus, fmt)
    if args.queries and args.qrels:
        from rag_hier.corpus.readers import read_qrels, read_queries
        from rag_hier.training.dhr import examples_from_qrels

        examples = examples_from_qrels(
            read_queries(args.queries), read_qrels(args.qrels), documents, max_passage_words=words
        )
    else:
        examples = read_examples(args.qa or args.queries, documents, max_passage_words=words)
    result = DHRTrainer(config).train(documents, args.output, examples=examples)
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
    print_before_after(
        args, documents, config.base_model, result.passage_model, corpus_format=fmt, max_passage_words=words
    )
    return 0
