"""What the ``rag-hier train ...`` commands share: errors, runtime flags, the corpus check, passage length."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = [
    "add_attention_dropout_argument",
    "add_eval_arguments",
    "add_runtime_arguments",
    "attention_dropout",
    "cli_error",
    "existing_corpus",
    "passage_words",
    "print_before_after",
    "qa_or_beir_judgements",
]


def cli_error(message: str) -> Exception:
    """A one-line CLI error (exit 2)."""
    from rag_hier.cli.main import CliError  # main imports the plugins: imported on use

    return CliError(message)


def add_runtime_arguments(p: Any, *, precision: bool = True) -> None:
    """``--fp16``/``--bf16`` (exclusive, with ``precision``), ``--device`` and ``--no-progress``."""
    if precision:
        group = p.add_mutually_exclusive_group()
        group.add_argument("--fp16", action="store_true", help="float16 mixed precision (GPU)")
        group.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when available)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def existing_corpus(path: str) -> Path:
    """The corpus path, or a CLI error when there is nothing there."""
    corpus = Path(path)
    if not corpus.exists():
        raise cli_error(f"corpus {corpus} does not exist")
    return corpus


def passage_words(args: argparse.Namespace, fmt: str) -> int:
    """``--max-passage-words``, defaulting as ``rag-hier index`` does (0 for BEIR and QA documents, else 100)."""
    words = args.max_passage_words if args.max_passage_words is not None else (0 if fmt in ("beir", "qa-docs") else 100)
    if words < 0:
        raise cli_error(f"--max-passage-words must be >= 0, got {words}")
    return words


def add_attention_dropout_argument(p: Any) -> None:
    """``--attention-dropout`` (off by default while training; see :mod:`rag_hier.training._attention`)."""
    p.add_argument(
        "--attention-dropout",
        type=float,
        default=0.0,
        help="dropout on attention probabilities while training (default 0: the fused CPU attention kernel, "
        "1.7x faster and 1/7 of the memory at 256 tokens; -1 keeps the model's own rate)",
    )


def attention_dropout(args: argparse.Namespace) -> float | None:
    """The trainer's ``attention_dropout``: ``None`` (the model's own rate) for a negative flag value."""
    return None if args.attention_dropout < 0 else args.attention_dropout


def add_eval_arguments(p: Any) -> None:
    """``--eval-queries FILE [--eval-qrels FILE]``: held-out judged queries scored for base and trained model."""
    p.add_argument(
        "--eval-queries",
        default=None,
        help="held-out judged queries (BEIR queries.jsonl or QA questions.jsonl): after training, the base and the "
        "trained model are scored on them over the training corpus, side by side (rag-hier eval's metrics)",
    )
    p.add_argument("--eval-qrels", default=None, help="judgements of --eval-queries (optional for QA questions)")


def check_eval_arguments(args: argparse.Namespace) -> None:
    """Refuse ``--eval-queries/--eval-qrels`` that could not be scored, before anything is trained."""
    queries, qrels = getattr(args, "eval_queries", None), getattr(args, "eval_qrels", None)
    if qrels and not queries:
        raise cli_error("--eval-qrels needs --eval-queries")
    if not queries:
        return
    for flag, value in (("--eval-queries", queries), ("--eval-qrels", qrels)):
        if value is not None and not Path(value).exists():
            raise cli_error(f"{flag} {value} does not exist")
    if qrels is None:
        from rag_hier.corpus.readers import read_qa_questions

        try:
            read_qa_questions(queries)
        except Exception as exc:
            raise cli_error(
                f"--eval-qrels is required unless --eval-queries is a QA questions.jsonl ({queries}: {exc})"
            ) from exc


def print_before_after(
    args: argparse.Namespace,
    documents: Any,
    base_model: str,
    trained_model: str | Path,
    *,
    corpus_format: str,
    max_passage_words: int,
) -> None:
    """When ``--eval-queries`` was given: score base and trained model on them and print both with the difference."""
    if not getattr(args, "eval_queries", None):
        if getattr(args, "eval_qrels", None):
            raise cli_error("--eval-qrels needs --eval-queries")
        return

    from rag_hier.tuning.before_after import before_after

    report = before_after(
        documents,
        base_model,
        trained_model,
        args.eval_queries,
        args.eval_qrels,
        corpus_format=corpus_format,
        max_passage_words=max_passage_words,
        device=getattr(args, "device", None),
        show_progress_bar=not getattr(args, "no_progress", False),
    )
    show_before_after(report)


def show_before_after(report: Any) -> None:
    """Print a held-out comparison (a :class:`~rag_hier.tuning.TuneReport`): its warnings on stderr, then it."""
    import sys

    for line in report.warnings:
        print(f"rag-hier train: warning: {line}", file=sys.stderr)
    print(report.summary())


def qa_or_beir_judgements(queries: str, qrels: str | None, max_passage_words: int) -> tuple[dict, dict]:
    """Training queries and judgements from BEIR queries + qrels, or from QA ``questions.jsonl`` alone.

    QA questions judge their gold paragraph (``<doc_id>#<index>``) when paragraphs are kept whole
    (``max_passage_words == 0``), else their gold document.
    """
    from rag_hier.corpus.readers import qa_qrels, read_qa_questions, read_qrels, read_queries

    if qrels:
        return read_queries(queries), read_qrels(qrels)
    try:
        questions = read_qa_questions(queries)
    except Exception as exc:
        raise cli_error(f"--qrels is required unless --queries is a QA questions.jsonl ({exc})") from exc
    level = "paragraph" if max_passage_words == 0 and all(q.paragraph_index is not None for q in questions) else "doc"
    return {q.qid: q.question for q in questions}, qa_qrels(questions, level)  # type: ignore[arg-type]
