"""The data folder and the two data sets the benchmarks read: BEIR SciFact and XQuAD-en.

The data folder holds ``scifact/`` (BEIR: ``corpus.jsonl.gz``, ``queries.jsonl``, ``qrels/{train,test}.tsv``) and
``xquad_en/`` (``documents.jsonl``, ``questions.jsonl``). It is, in this order: the script's ``--data`` argument,
the ``RAG_HIER_DATA`` environment variable, or ``../shared/data`` next to the repository. Nothing is copied into
the repository.
"""

from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
"""The repository root (scripts run from here: ``python -m benchmarks.<folder>.<script>``)."""
DATA_ENV = "RAG_HIER_DATA"
"""The environment variable naming the data folder when ``--data`` is not given."""

Qrels = dict[str, dict[str, int]]


def data_dir(value: str | Path | None = None) -> Path:
    """The data folder: ``value`` (a script's ``--data``), else ``$RAG_HIER_DATA``, else ``../shared/data``."""
    if value:
        return Path(value)
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    return REPO.parent / "shared" / "data"


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--data DIR`` (default ``None``: pass ``args.data`` to :func:`data_dir` or the loaders)."""
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help=f"the data folder holding scifact/ and xquad_en/ (default: ${DATA_ENV}, else ../shared/data "
        "next to the repository)",
    )


def scifact_dir(data: str | Path | None = None) -> Path:
    """``<data folder>/scifact``."""
    return data_dir(data) / "scifact"


def xquad_dir(data: str | Path | None = None) -> Path:
    """``<data folder>/xquad_en``."""
    return data_dir(data) / "xquad_en"


def dev_split(train_qrels: Qrels, fraction: float, seed: int) -> tuple[Qrels, Qrels]:
    """(train part, dev part) of training judgements, split by query: ``fraction`` of the queries held out (seeded)."""
    import numpy as np

    qids = sorted(train_qrels)
    rng = np.random.default_rng(seed)
    held = set(rng.choice(qids, size=round(fraction * len(qids)), replace=False).tolist())
    return {q: r for q, r in train_qrels.items() if q not in held}, {q: r for q, r in train_qrels.items() if q in held}


@dataclass(frozen=True)
class BeirData:
    """A BEIR collection read for one evaluation.

    Attributes:
        documents: Every corpus document (:class:`rag_hier.corpus.Document`).
        queries: Query id -> text (all queries of ``queries.jsonl``).
        qrels: The evaluation judgements: ``qrels/test.tsv``, or the held-out part of the training judgements.
        train_qrels: The training judgements (without the held-out part).

    """

    documents: list[Any]
    queries: dict[str, str]
    qrels: Qrels
    train_qrels: Qrels

    def passages(self) -> list[Any]:
        """One passage per document (SciFact abstracts are kept whole)."""
        from rag_hier.corpus import split_documents

        return split_documents(self.documents, 0)


def load_scifact(data: str | Path | None = None, *, dev: float = 0.0, seed: int = 0) -> BeirData:
    """SciFact from the data folder ``data`` (see :func:`data_dir`).

    With ``dev > 0`` the evaluation judgements are that share of the *training* queries (held out with
    :func:`dev_split`) and the training judgements are the rest: settings are chosen there, never on the test
    queries.
    """
    from rag_hier.corpus import read_beir_corpus, read_qrels, read_queries

    root = scifact_dir(data)
    train = read_qrels(root / "qrels" / "train.tsv")
    if dev > 0:
        train, qrels = dev_split(train, dev, seed)
    else:
        qrels = read_qrels(root / "qrels" / "test.tsv")
    return BeirData(read_beir_corpus(root), read_queries(root / "queries.jsonl"), qrels, train)


@dataclass(frozen=True)
class QAData:
    """XQuAD-en: documents (paragraphs as sections) and questions (:class:`rag_hier.corpus.readers.QAQuestion`)."""

    documents: list[Any]
    questions: list[Any]


def load_xquad(data: str | Path | None = None) -> QAData:
    """XQuAD-en from the data folder ``data`` (see :func:`data_dir`)."""
    from rag_hier.corpus.readers import read_qa_documents, read_qa_questions

    root = xquad_dir(data)
    return QAData(read_qa_documents(root), read_qa_questions(root))


def halves(documents: list[Any], seed: int = 0, fraction: float = 0.5) -> tuple[set[str], set[str]]:
    """Document ids split by document: sorted, shuffled with ``random.Random(seed)``, the first ``fraction`` first.

    The XQuAD-en protocol of the DHR, fusion, HCE and tuning benchmarks: ``halves(docs)`` gives the 24 training
    documents and the 24 test documents.
    """
    ids = sorted(d.doc_id for d in documents)
    random.Random(seed).shuffle(ids)
    cut = round(len(ids) * fraction)
    return set(ids[:cut]), set(ids[cut:])
