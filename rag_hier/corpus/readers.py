"""Readers that turn corpus, query and relevance files into :class:`Document` objects and plain dicts.

Corpus formats (see :data:`CORPUS_FORMATS`):

- ``"beir"``: a BEIR ``corpus.jsonl[.gz]``, one ``{"_id", "title", "text", "metadata"}`` object a line.
- ``"qa-docs"``: a ``documents.jsonl[.gz]`` of structured documents, one
  ``{"doc_id", "title", "paragraphs", "sections", "metadata"}`` object a line (doc→paragraph QA data
  such as XQuAD/SQuAD, or anything with nested sections).
- ``"markdown"``: ``*.md`` / ``*.markdown`` files, parsed with markdown-it-py; headings (ATX and setext)
  become nested sections, YAML front matter becomes typed metadata.
- ``"text"``: ``*.txt`` files; blank lines separate paragraphs.

Queries (BEIR ``queries.jsonl``, QA ``questions.jsonl`` or a ``qid<TAB>text`` file) and qrels (BEIR TSV or
TREC) come back as plain dicts in the shape IR metric libraries expect. Every malformed input raises
:class:`~rag_hier.errors.CorpusFormatError` naming the file and, where there is one, the 1-based line:
among others ids with control characters (tab, newline, ...) and records nested more than 100 levels
deep. Documents without any text are read, and logged as a warning (they yield no passages).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rag_hier.corpus.formats import CORPUS_FORMATS
from rag_hier.corpus.input_files import (
    _BEIR_FILES,
    _JSONL_SUFFIXES,
    _MARKDOWN_SUFFIXES,
    _QA_DOC_FILES,
    _TEXT_SUFFIXES,
    StrPath,
    _existing,
    _first_record,
    _has_suffix,
)
from rag_hier.corpus.jsonl import read_beir_corpus, read_qa_documents
from rag_hier.corpus.markdown import read_markdown
from rag_hier.corpus.model import Document
from rag_hier.corpus.queries import (
    QAQuestion,
    QrelsFile,
    beir_split_files,
    qa_qrels,
    read_qa_questions,
    read_qrels,
    read_qrels_file,
    read_queries,
)
from rag_hier.corpus.text_files import _corpus_files, read_text
from rag_hier.errors import CorpusFormatError

__all__ = [
    "CORPUS_FORMATS",
    "QAQuestion",
    "QrelsFile",
    "beir_split_files",
    "detect_format",
    "qa_qrels",
    "read_beir_corpus",
    "read_corpus",
    "read_markdown",
    "read_qa_documents",
    "read_qa_questions",
    "read_qrels",
    "read_qrels_file",
    "read_queries",
    "read_text",
]

logger = logging.getLogger(__name__)


def detect_format(path: StrPath) -> str:
    """Guess the corpus format of ``path`` (one of :data:`CORPUS_FORMATS`).

    A directory holding ``corpus.jsonl[.gz]`` is ``"beir"``, one holding ``documents.jsonl[.gz]`` is
    ``"qa-docs"``; otherwise a directory is ``"markdown"`` if it holds any ``*.md``/``*.markdown`` file,
    else ``"text"`` if it holds ``*.txt`` files. A ``.jsonl[.gz]`` file is ``"beir"`` when its first
    record has ``_id`` and ``"qa-docs"`` when it has ``doc_id``; ``.md``/``.markdown`` files are
    ``"markdown"`` and ``.txt`` files ``"text"``.

    Raises:
        CorpusFormatError: The path does not exist or matches none of the rules.

    """
    p = _existing(path)
    if p.is_dir():
        if any((p / name).is_file() for name in _BEIR_FILES):
            return "beir"
        if any((p / name).is_file() for name in _QA_DOC_FILES):
            return "qa-docs"
        if _corpus_files(p, _MARKDOWN_SUFFIXES):
            return "markdown"
        if _corpus_files(p, _TEXT_SUFFIXES):
            return "text"
        raise CorpusFormatError(
            "cannot detect the corpus format: the directory holds no corpus.jsonl[.gz], "
            "documents.jsonl[.gz], *.md, *.markdown or *.txt files",
            path=str(p),
        )
    if _has_suffix(p, _JSONL_SUFFIXES):
        record = _first_record(p)
        if record is None:
            raise CorpusFormatError("cannot detect the corpus format: the file holds no records", path=str(p))
        if "_id" in record.data:
            return "beir"
        if "doc_id" in record.data:
            return "qa-docs"
        raise record.error("cannot detect the corpus format: the first record has neither '_id' nor 'doc_id'")
    if _has_suffix(p, _MARKDOWN_SUFFIXES):
        return "markdown"
    if _has_suffix(p, _TEXT_SUFFIXES):
        return "text"
    raise CorpusFormatError(
        "cannot detect the corpus format from the file name (expected .jsonl, .jsonl.gz, .md, .markdown "
        "or .txt); pass format= explicitly",
        path=str(p),
    )


_CORPUS_READERS: dict[str, Callable[[StrPath], list[Document]]] = {
    "beir": read_beir_corpus,
    "qa-docs": read_qa_documents,
    "markdown": read_markdown,
    "text": read_text,
}


def read_corpus(path: StrPath, format: str | None = None) -> list[Document]:
    """Read a corpus in any of :data:`CORPUS_FORMATS`, detecting the format when ``format`` is ``None``.

    Args:
        path: A corpus file or directory.
        format: ``"beir"``, ``"qa-docs"``, ``"markdown"``, ``"text"``, or ``None`` for
            :func:`detect_format`.

    Returns:
        The documents, in file order (file-per-document formats: sorted by relative path).

    Raises:
        CorpusFormatError: An unknown ``format``, an undetectable one, or a malformed corpus.

    """
    if format is None:
        format = detect_format(path)
    reader = _CORPUS_READERS.get(format)
    if reader is None:
        raise CorpusFormatError(
            f"unknown corpus format {format!r}; expected one of {', '.join(CORPUS_FORMATS)} (or None to detect it)"
        )
    return reader(path)
