"""Queries, relevance judgements (qrels: BEIR TSV or TREC) and QA questions, as plain dicts and records."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rag_hier.corpus.input_files import (
    _QUERY_FILES,
    _QUESTION_FILES,
    READERS_LOGGER,
    StrPath,
    _check_id,
    _existing,
    _iter_jsonl,
    _iter_lines,
    _looks_like_jsonl,
    _non_empty,
    _resolve_file,
    _UniqueIds,
)
from rag_hier.corpus.model import passage_id
from rag_hier.errors import CorpusFormatError

__all__ = [
    "QAQuestion",
    "QrelsFile",
    "beir_split_files",
    "qa_qrels",
    "read_qa_questions",
    "read_qrels",
    "read_qrels_file",
    "read_queries",
]

logger = logging.getLogger(READERS_LOGGER)


@dataclass(frozen=True)
class QAQuestion:
    """One question of a doc→paragraph QA data set (XQuAD, SQuAD-style).

    Args:
        qid: Question id, unique in its file.
        question: The question text.
        answers: Gold answer strings (may be empty).
        doc_id: The document that holds the answer.
        paragraph_index: Index of the answering paragraph in the document's ``paragraphs``; ``None`` when
            unknown.

    """

    qid: str
    question: str
    answers: tuple[str, ...]
    doc_id: str
    paragraph_index: int | None = None


_QUERY_TSV_HEADER_IDS = {"query-id", "query_id", "qid", "_id", "id"}


def read_queries(path: StrPath) -> dict[str, str]:
    """Read queries as ``{query id: text}`` in file order.

    Accepts a BEIR ``queries.jsonl`` (``{"_id", "text"}``), a QA ``questions.jsonl`` (``{"qid",
    "question"}``), either gzipped, or a ``qid<TAB>text`` file (a header line such as
    ``query-id<TAB>text`` is skipped); a directory is searched for ``queries.jsonl[.gz]``,
    ``questions.jsonl[.gz]`` or ``queries.tsv``.

    Raises:
        CorpusFormatError: A missing file, malformed JSON or TSV, a missing field, a field of the wrong
            type, a duplicate query id, or no queries at all.

    """
    file = _resolve_file(path, _QUERY_FILES, "queries")
    ids = _UniqueIds(file, "query id")
    queries: dict[str, str] = {}
    if _looks_like_jsonl(file):
        for record in _iter_jsonl(file):
            if "_id" in record.data:
                qid, text = record.identifier("_id"), record.text("text")
            elif "qid" in record.data:
                qid, text = record.identifier("qid"), record.text("question")
            else:
                raise record.error("missing required field '_id' (BEIR queries) or 'qid' (QA questions)")
            ids.add(qid, record.line)
            queries[qid] = text
    else:
        first = True
        for line_no, line in _iter_lines(file):
            if not line.strip():
                continue
            qid, sep, text = line.partition("\t")
            qid = qid.strip()
            if first and qid.lower() in _QUERY_TSV_HEADER_IDS:
                first = False
                continue  # a header line
            first = False
            if not sep:
                raise CorpusFormatError(
                    "expected 2 tab-separated columns (query id, text), got 1", path=str(file), line=line_no
                )
            if not qid:
                raise CorpusFormatError("empty query id", path=str(file), line=line_no)
            _check_id(qid, "query id", file, line_no)
            ids.add(qid, line_no)
            queries[qid] = text.strip()
    _non_empty(queries, file, "queries")
    logger.info("read %d queries from %s", len(queries), file)
    return queries


_QRELS_LAYOUTS = {
    3: "3 columns (query-id, corpus-id, score)",
    4: "4 columns (TREC: qid iteration docid relevance)",
}


def _parse_score(value: str) -> int | None:
    """Parse an integer relevance score (``"1"`` or ``"1.0"``); ``None`` when ``value`` is not one."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


@dataclass(frozen=True)
class QrelsFile:
    """Relevance judgements as read from one file, with what :func:`read_qrels` passes over silently.

    Args:
        path: The file read.
        qrels: ``{query id: {doc id: score}}``.
        rows: Judgement rows read (header excluded, repeated rows included).
        duplicates: ``(query id, doc id, line, first line)`` of every row that repeats an earlier one
            with the same score (kept once).

    """

    path: Path
    qrels: dict[str, dict[str, int]]
    rows: int
    duplicates: tuple[tuple[str, str, int, int], ...] = ()


def read_qrels(path: StrPath) -> dict[str, dict[str, int]]:
    """Read relevance judgements as ``{query id: {doc id: score}}``.

    Two layouts are accepted, and one file must use one of them throughout: BEIR (3 columns ``query-id
    corpus-id score``, tab-separated, header line optional) and TREC (4 whitespace-separated columns
    ``qid iteration docid relevance``). ``.gz`` files are gunzipped. A judgement repeated with the same
    score is ignored (:func:`read_qrels_file` lists such rows); with a different score it is an error.

    Raises:
        CorpusFormatError: A missing file, a wrong number of columns, a score that is not an integer,
            conflicting duplicate judgements, or no judgements at all.

    """
    return read_qrels_file(path).qrels


def read_qrels_file(path: StrPath) -> QrelsFile:
    """Read relevance judgements like :func:`read_qrels`, keeping the repeated rows' lines.

    Raises:
        CorpusFormatError: As :func:`read_qrels`.

    """
    file = _existing(path)
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[tuple[str, str], int] = {}
    duplicates: list[tuple[str, str, int, int]] = []
    rows = 0
    n_columns: int | None = None
    header_allowed = True
    for line_no, line in _iter_lines(file):
        if not line.strip():
            continue
        columns = [c.strip() for c in line.split("\t")] if "\t" in line else line.split()
        if len(columns) not in (3, 4) or len(columns) != (n_columns or len(columns)):
            expected = _QRELS_LAYOUTS[n_columns] if n_columns else " or ".join(_QRELS_LAYOUTS.values())
            raise CorpusFormatError(f"expected {expected}, got {len(columns)} columns", path=str(file), line=line_no)
        if len(columns) == 3:
            qid, doc_id, raw_score = columns
        else:
            qid, _, doc_id, raw_score = columns
        _check_id(qid, "query id", file, line_no)
        _check_id(doc_id, "document id", file, line_no)
        score = _parse_score(raw_score)
        if score is None:
            if header_allowed:
                header_allowed = False
                continue  # a header line such as "query-id corpus-id score"
            raise CorpusFormatError(f"score must be an integer, got {raw_score!r}", path=str(file), line=line_no)
        header_allowed = False
        n_columns = len(columns)
        previous = qrels.setdefault(qid, {}).get(doc_id)
        if previous is not None and previous != score:
            raise CorpusFormatError(
                f"conflicting judgements for query {qid!r} and document {doc_id!r}: {previous} on line "
                f"{seen[qid, doc_id]}, {score} on line {line_no}",
                path=str(file),
                line=line_no,
            )
        rows += 1
        if previous is not None:
            duplicates.append((qid, doc_id, line_no, seen[qid, doc_id]))
        seen.setdefault((qid, doc_id), line_no)
        qrels[qid][doc_id] = score
    _non_empty(qrels, file, "relevance judgements")
    logger.info("read %d judgements for %d queries from %s", len(seen), len(qrels), file)
    return QrelsFile(path=file, qrels=qrels, rows=rows, duplicates=tuple(duplicates))


_QRELS_SUFFIXES = (".tsv", ".tsv.gz", ".txt", ".txt.gz", ".trec", ".trec.gz", ".qrels", ".qrels.gz")


def beir_split_files(directory: StrPath, split: str = "test") -> tuple[Path, Path]:
    """The queries file and the qrels file of one split of a BEIR data set folder.

    A BEIR folder holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``, each possibly
    gzipped (``queries.jsonl.gz``, ``qrels/test.tsv.gz``).

    Args:
        directory: The data set folder.
        split: The qrels split, e.g. ``"test"``, ``"dev"``, ``"train"``.

    Returns:
        ``(queries file, qrels file)``.

    Raises:
        CorpusFormatError: The folder does not exist, holds no ``queries.jsonl[.gz]``, or has no qrels
            file for ``split`` (the message lists the splits it has).

    """
    root = _existing(directory)
    if not root.is_dir():
        raise CorpusFormatError("a BEIR data set must be a folder (queries.jsonl, qrels/SPLIT.tsv)", path=str(root))
    queries = next((root / n for n in ("queries.jsonl", "queries.jsonl.gz") if (root / n).is_file()), None)
    if queries is None:
        raise CorpusFormatError("BEIR folder holds no queries.jsonl or queries.jsonl.gz", path=str(root))
    qrels_dir = root / "qrels"
    candidates = [qrels_dir / f"{split}{suffix}" for suffix in (".tsv", ".tsv.gz")]
    qrels = next((c for c in candidates if c.is_file()), None)
    if qrels is None:
        have = sorted(
            {
                f.name[: -len(s)]
                for f in (qrels_dir.iterdir() if qrels_dir.is_dir() else ())
                for s in _QRELS_SUFFIXES
                if f.is_file() and f.name.endswith(s)
            }
        )
        listed = f"it has {', '.join(have)}" if have else "it has no qrels/ folder or no qrels files in it"
        raise CorpusFormatError(
            f"BEIR folder has no qrels/{split}.tsv[.gz] for split {split!r} ({listed})", path=str(root)
        )
    return queries, qrels


def read_qa_questions(path: StrPath) -> list[QAQuestion]:
    """Read QA questions (``{"qid", "question", "answers", "doc_id", "paragraph_index"}`` a line).

    ``answers`` (a list of strings) and ``paragraph_index`` (a non-negative integer) are optional.

    Args:
        path: ``questions.jsonl``, ``questions.jsonl.gz``, or a directory holding one of them.

    Raises:
        CorpusFormatError: A missing file, malformed JSON, a missing field, a field of the wrong type, a
            duplicate ``qid``, or no questions at all.

    """
    file = _resolve_file(path, _QUESTION_FILES, "QA questions")
    ids = _UniqueIds(file, "qid")
    questions: list[QAQuestion] = []
    for record in _iter_jsonl(file):
        qid = record.identifier("qid")
        raw_answers = record.data.get("answers")
        index = record.data.get("paragraph_index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise record.error(f"field 'paragraph_index' must be a non-negative integer, got {index!r}")
        question = QAQuestion(
            qid=qid,
            question=record.text("question"),
            answers=() if raw_answers is None else record.strings("answers", raw_answers),
            doc_id=record.identifier("doc_id"),
            paragraph_index=index,
        )
        ids.add(qid, record.line)
        questions.append(question)
    _non_empty(questions, file, "questions")
    logger.info("read %d QA questions from %s", len(questions), file)
    return questions


def qa_qrels(questions: Iterable[QAQuestion], level: Literal["doc", "paragraph"]) -> dict[str, dict[str, int]]:
    """Relevance judgements from QA questions: the answering document, or the answering paragraph.

    Args:
        questions: Questions as read by :func:`read_qa_questions`.
        level: ``"doc"`` (``{qid: {doc_id: 1}}``) or ``"paragraph"`` (``{qid: {"<doc_id>#<i>": 1}}``,
            the passage ids that ``split_document(..., max_words=0)`` gives a document's paragraphs).

    Raises:
        CorpusFormatError: An unknown ``level``, or a question without ``paragraph_index`` at paragraph
            level.

    """
    if level not in ("doc", "paragraph"):
        raise CorpusFormatError(f"unknown qrels level {level!r}; expected 'doc' or 'paragraph'")
    qrels: dict[str, dict[str, int]] = {}
    for q in questions:
        if level == "doc":
            target = q.doc_id
        elif q.paragraph_index is None:
            raise CorpusFormatError(f"question {q.qid!r} has no paragraph_index; paragraph-level qrels need one")
        else:
            target = passage_id(q.doc_id, q.paragraph_index)
        qrels.setdefault(q.qid, {})[target] = 1
    return qrels
