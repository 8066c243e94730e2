"""CLI plugin: SVDR — the binary token index, its search strategies, and ``rag-hier train svdr``.

- ``rag-hier index CORPUS --store DIR --token-index [--no-dense] [--svdr-vectors]``
- ``rag-hier search|eval --strategy svdr-full|svdr-alpha|svdr-beta|svdr-beta-rerank|svdr-lexical
  [--rerank-m M] [--vocab-model M] [--no-cache]`` (strategies and flags from the registry)
- ``rag-hier train svdr CORPUS --queries FILE [--qrels FILE] --output DIR`` (``--qrels`` optional for QA questions)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from rag_hier.cli._train import (
    add_config_arguments,
    add_eval_arguments,
    add_runtime_arguments,
    check_eval_arguments,
    show_before_after,
    train_parser,
)

logger = logging.getLogger("rag_hier.cli")


def _vocab_encoder(store: Any, args: argparse.Namespace) -> Any:
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.retrieval.svdr import default_vocab_model

    kwargs: dict[str, Any] = {
        "device": getattr(args, "device", None),
        "show_progress_bar": not getattr(args, "no_progress", True),
    }
    if getattr(args, "batch_size", None):
        kwargs["batch_size"] = args.batch_size
    model = getattr(args, "strategy_vocab_model", None) or getattr(args, "vocab_model", None)
    return VocabEncoder(model or default_vocab_model(store), **kwargs)


def _persist_unsaved(store: Any, retriever: Any) -> None:
    """Write the E(d) that search computed into the store through a short-lived writable handle."""
    from rag_hier.errors import RagHierError
    from rag_hier.retrieval.svdr import save_vectors
    from rag_hier.store.capabilities import Reopenable, supports
    from rag_hier.store.store import HierStore

    pending = retriever.take_unsaved()
    if pending is None:
        return
    ids, rows = pending
    writable: Any
    try:
        if supports(store, Reopenable):  # a Milvus collection: the same connection options
            writable = store.reopen(read_only=False)
        else:
            writable = HierStore.open(store.path, encoder=store.encoder)
        with writable:
            n = save_vectors(writable, retriever.encoder, ids, rows)
    except (RagHierError, OSError) as exc:
        logger.warning("could not cache %d SVDR passage vectors in %s: %s", ids.shape[0], store.location, exc)
        return
    if n:
        logger.info("cached %d SVDR passage vectors in %s", n, store.location)


def configure_search(name: str, store: Any, args: argparse.Namespace) -> dict[str, Any]:
    """SVDR strategies that need a vocabulary encoder get one on ``--device``, with ``--batch-size``."""
    if not name.startswith("svdr-"):
        return {}
    mode = name.removeprefix("svdr-")
    if mode in ("full", "beta", "beta-rerank") or getattr(args, "strategy_vocab_model", None):
        return {"encoder": _vocab_encoder(store, args)}
    return {}


def after_search(name: str, store: Any, retriever: Any, args: argparse.Namespace) -> None:
    """Keep the E(d) that search computed (the search handle is read-only)."""
    if name.startswith("svdr-") and retriever.cache and store.read_only:
        _persist_unsaved(store, retriever)


def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """``--token-index``, ``--no-dense``, ``--token-max-length``, ``--svdr-vectors``, ``--vocab-model``."""
    g = parser.add_argument_group("SVDR")
    g.add_argument(
        "--token-index",
        action="store_true",
        help="keep a binary token index of the passages (tokenization only, no model) for SVDR search",
    )
    g.add_argument(
        "--no-dense",
        action="store_true",
        help="new store without dense vectors (nothing encoded; needs --token-index or --bm25; --model names the "
        "token index's tokenizer)",
    )
    g.add_argument(
        "--token-max-length",
        type=int,
        default=256,
        help="tokens per passage in the token index, special tokens included; 0 = no limit (default 256, "
        "the SVDR encoder's passage length)",
    )
    g.add_argument(
        "--svdr-vectors",
        action="store_true",
        help="also encode every passage's SVDR vector E(d) (needed by svdr-full/svdr-alpha; slow on CPU)",
    )
    g.add_argument(
        "--vocab-model",
        default=None,
        help="vocabulary encoder for --svdr-vectors (default: the store's model)",
    )


def _token_rows(store: Any, ext: Any) -> str:
    """How many passages (and tokens) the token index holds, wherever its rows are."""
    from rag_hier.store.candidates import sparse_rows_engine

    if sparse_rows_engine(store, ext.name) is not None:  # rows in the engine (a Milvus sparse field), not here
        return f"{store.count_passages()} passages (a Milvus sparse field)"
    return f"{len(ext.index)} passages, {ext.index.rows.nnz} tokens"


def after_index(store: Any, args: argparse.Namespace) -> str | None:
    """Attach or check the token index; encode E(d) with ``--svdr-vectors``."""
    from rag_hier.encoders.dense import DEFAULT_MODEL
    from rag_hier.retrieval.svdr import encode_missing_vectors
    from rag_hier.store.extensions.svdr_vectors import SparseVectorExtension
    from rag_hier.store.extensions.token_index import TokenIndexExtension

    lines: list[str] = []
    has_tokens = isinstance(store.extension(TokenIndexExtension.name), TokenIndexExtension)
    if getattr(args, "no_dense", False):
        if store.manifest["counts"]["vectors"] or store.encoder is not None:
            raise ValueError(f"--no-dense: the store at {store.path} already holds dense vectors")
        has_bm25 = store.extension("bm25") is not None
        if not (args.token_index or has_tokens or getattr(args, "bm25", False) or has_bm25):
            raise ValueError("--no-dense needs --token-index or --bm25 (a store with neither could not be searched)")
    if args.token_index and not has_tokens:
        max_length = args.token_max_length or None
        if max_length is not None and max_length < 2:
            raise ValueError(f"--token-max-length must be 0 or >= 2, got {args.token_max_length}")
        model = store.encoder.model_name if store.encoder is not None else (args.model or DEFAULT_MODEL)
        if Path(model).exists():  # a local model is recorded by its absolute path
            model = str(Path(model).absolute())
        t0 = time.perf_counter()
        ext = TokenIndexExtension(model=model, max_length=max_length)
        store.add_extension(ext)
        lines.append(f"token index: {_token_rows(store, ext)} ({time.perf_counter() - t0:.1f}s, tokenizer of {model})")
    elif has_tokens:
        ext = TokenIndexExtension.of(store)
        lines.append(f"token index: {_token_rows(store, ext)}")
    if getattr(args, "svdr_vectors", False):
        encoder = _vocab_encoder(store, args)
        t0 = time.perf_counter()
        n = encode_missing_vectors(store, encoder, show_progress_bar=not args.no_progress)
        vec = store.extension(SparseVectorExtension.name)
        total = len(vec.index) if isinstance(vec, SparseVectorExtension) else 0
        lines.append(f"SVDR vectors: {n} encoded ({time.perf_counter() - t0:.1f}s), {total} stored")
    return "\n  ".join(lines) if lines else None


# ----------------------------------------------------------------------------------------------------
# rag-hier train svdr
# ----------------------------------------------------------------------------------------------------
def add_train_parser(subparsers: Any) -> None:
    """``rag-hier train svdr``: SvdrTrainingConfig's flags generated from its fields, the data and encoder by hand."""
    from rag_hier.training.svdr.config import SvdrTrainingConfig

    p = train_parser(
        subparsers,
        "svdr",
        description="Fine-tune a BERT-family model into an SVDR vocabulary encoder: L = L(E(q),E(p)) + "
        "1/2 L(E(q),T(p)) + 1/2 L(T(q),E(p)), bidirectional contrastive with in-batch negatives and hard "
        "negatives retrieved by beta search over a binary token index of the corpus. Writes a directory "
        "that --vocab-model accepts.",
    )
    p.add_argument("corpus", help="corpus file or directory (documents are kept whole unless --max-passage-words)")
    p.add_argument("--queries", required=True, help="training queries (BEIR queries.jsonl, ...)")
    p.add_argument(
        "--qrels",
        default=None,
        help="training judgements (BEIR TSV or TREC): document ids (each of the document's passages is a "
        "positive) or passage ids such as DOC#N (that passage is the positive). Optional with a QA questions "
        "file as --queries: each question then judges its paragraph (DOC#PARAGRAPH; with --max-passage-words the "
        "passages of that paragraph that contain an answer), or its document when no passage qualifies",
    )
    p.add_argument("--output", required=True, help="directory to write the trained encoder to")
    p.add_argument("--model", default=None, help="starting model (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--format", default=None, help="corpus format (default: detect)")
    p.add_argument("--max-passage-words", type=int, default=0, help="split documents into passages (default 0: whole)")
    p.add_argument("--max-minutes", type=float, default=None, help="stop after this much training time")
    p.add_argument("--top-k", type=int, default=None, help="kept dimensions per text (default 768)")
    p.add_argument(
        "--selection-precision",
        choices=("float32", "bfloat16"),
        default=None,
        help="precision of the projection that picks the kept dimensions (default float32)",
    )
    add_eval_arguments(p)
    add_runtime_arguments(p)  # --fp16/--bf16; --device places the encoder
    add_config_arguments(p, SvdrTrainingConfig, rename={"max_seconds": "--max-minutes"})
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    from rag_hier.corpus.readers import detect_format, read_corpus, read_qrels, read_queries
    from rag_hier.encoders.dense import DEFAULT_MODEL
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.training.svdr import SvdrTrainer

    corpus = Path(args.corpus)
    if not corpus.exists():
        raise ValueError(f"corpus {corpus} does not exist")
    check_eval_arguments(args)
    if args.max_minutes is not None and not args.max_minutes > 0:
        raise ValueError(f"--max-minutes must be > 0; got {args.max_minutes}")
    max_seconds = args.max_minutes * 60 if args.max_minutes is not None else None
    config = args.config_flags.build(args, max_seconds=max_seconds)  # checked before anything is read or loaded
    fmt = args.format or detect_format(corpus)
    documents = read_corpus(corpus, fmt)
    queries = read_queries(args.queries)
    questions = None
    try:  # a QA questions file: its answer strings filter the hard negatives (the paper's filter)
        from rag_hier.corpus.readers import read_qa_questions
        from rag_hier.errors import CorpusFormatError

        questions = read_qa_questions(args.queries)
    except (CorpusFormatError, KeyError, ValueError):  # BEIR queries: relevance judgements filter them
        questions = None
    answers = {q.qid: q.answers for q in questions if q.answers} if questions else None
    if args.qrels is not None:
        qrels = read_qrels(args.qrels)
    elif questions:
        # the gold passages DHR's trainer takes from the same questions (DOC#N when paragraphs are kept whole);
        # a question without one judges its document
        from rag_hier.training.dhr import examples_from_questions

        examples = examples_from_questions(questions, documents, max_passage_words=args.max_passage_words)
        qrels = {
            q.qid: dict.fromkeys(ex.passage_ids or (ex.doc_id,), 1) for q, ex in zip(questions, examples, strict=True)
        }
    else:
        raise ValueError(
            f"--qrels is required: {args.queries} is not a QA questions file (qid, question, doc_id, "
            "paragraph_index, answers) from which the judgements could be taken"
        )
    overrides: dict[str, Any] = {}
    if args.top_k is not None:
        overrides["top_k"] = args.top_k
    encoder = VocabEncoder(
        args.model or DEFAULT_MODEL,
        device=args.device,
        selection_precision=args.selection_precision,
        **overrides,
    )
    result = SvdrTrainer(config, model=encoder).train(
        documents,
        args.output,
        queries=queries,
        qrels=qrels,
        answers=answers,
        max_passage_words=args.max_passage_words,
    )
    out = Path(args.output)
    from rag_hier.training.distributed import rank

    if rank() != 0:  # torchrun: rank 0 saved the model and reports
        return 0
    print(
        f"trained SVDR encoder from {args.model or DEFAULT_MODEL}: {result.steps} steps "
        f"({result.epochs_completed:.2f} epochs, {result.seconds:.0f}s, stopped by {result.stopped_by}), "
        f"mean loss of the last 10 steps {result.last_loss:.4f}\n  saved to {out}"
    )
    if args.verbose:
        print(json.dumps(result.to_dict()), file=sys.stderr)
    if args.eval_queries:
        _before_after(args, documents, args.model or DEFAULT_MODEL, out, fmt)
    return 0


def _before_after(args: argparse.Namespace, documents: Any, base: str, out: Path, fmt: str) -> None:
    """β search + re-rank over a token index of the corpus, with the base and with the trained encoder."""
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.tuning.before_after import SearchSide, before_after_searches

    tokenizer = str(Path(base).absolute()) if Path(base).exists() else base

    def side(model: str) -> SearchSide:
        return SearchSide(
            model=tokenizer,
            strategy="svdr-beta-rerank",
            params={"vocab_model": model},
            extensions=lambda: [TokenIndexExtension(model=tokenizer, max_length=256)],
            dense=False,
        )

    report = before_after_searches(
        documents,
        side(base),
        side(str(Path(out).absolute())),
        args.eval_queries,
        args.eval_qrels,
        corpus_format=fmt,
        max_passage_words=args.max_passage_words,
        base_name=base,
        device=args.device,
        show_progress_bar=not args.no_progress,
    )
    show_before_after(report)
