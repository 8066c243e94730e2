"""JSONL corpora: BEIR ``corpus.jsonl[.gz]`` and QA ``documents.jsonl[.gz]`` (nested sections)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rag_hier.corpus.input_files import (
    _BEIR_FILES,
    _QA_DOC_FILES,
    READERS_LOGGER,
    StrPath,
    _iter_jsonl,
    _json_type,
    _non_empty,
    _Record,
    _resolve_file,
    _UniqueIds,
    _warn_without_text,
)
from rag_hier.corpus.model import Document, Section
from rag_hier.errors import InvalidInputError

__all__ = ["read_beir_corpus", "read_qa_documents"]

logger = logging.getLogger(READERS_LOGGER)


def _read_jsonl_documents(path: Path, parse: Callable[[_Record], Document], fmt: str) -> list[Document]:
    """Parse every record of a JSONL corpus, rejecting duplicate ids and empty corpora."""
    ids = _UniqueIds(path, "doc_id")
    documents: list[Document] = []
    empty: list[str] = []
    for record in _iter_jsonl(path):
        try:
            document = parse(record)
        except InvalidInputError as exc:  # a value the document model refuses
            raise record.error(str(exc)) from exc
        ids.add(document.doc_id, record.line)
        documents.append(document)
        if not document.has_text:
            empty.append(f"{document.doc_id!r} (line {record.line})")
    _non_empty(documents, path, "documents")
    _warn_without_text(path, empty)
    logger.info("read %d %s documents from %s", len(documents), fmt, path)
    return documents


def _beir_document(record: _Record) -> Document:
    text = record.string("text")
    return Document(
        doc_id=record.identifier("_id"),
        title=record.string("title", required=False),
        paragraphs=(text,) if text else (),
        metadata=record.mapping("metadata"),
    )


def read_beir_corpus(path: StrPath) -> list[Document]:
    """Read a BEIR corpus: one document per record, its ``text`` as the single lead paragraph.

    Args:
        path: ``corpus.jsonl``, ``corpus.jsonl.gz``, or a directory holding one of them.

    Returns:
        The documents in file order (``doc_id=str(_id)``, ``title`` or ``""``, ``metadata`` or ``{}``).

    Raises:
        CorpusFormatError: A missing file, malformed JSON, a missing ``_id``/``text``, a field of the
            wrong type, a duplicate ``_id``, or no documents at all.

    """
    file = _resolve_file(path, _BEIR_FILES, "BEIR corpus")
    return _read_jsonl_documents(file, _beir_document, "beir")


def _check_section(record: _Record, data: Any, where: str) -> None:
    """Validate one nested section object (``where`` is its path in the record, for messages)."""
    if not isinstance(data, dict):
        raise record.error(f"field {where!r} must be an object, got {_json_type(data)}")
    title = data.get("title")
    if title is not None and not isinstance(title, str):
        raise record.error(f"field {where + '.title'!r} must be a string, got {_json_type(title)}")
    if data.get("paragraphs") is not None:
        record.strings(f"{where}.paragraphs", data["paragraphs"])
    for key in ("sections", "subsections"):
        subsections = data.get(key)
        if subsections is None:
            continue
        if not isinstance(subsections, list):
            raise record.error(f"field {where + '.' + key!r} must be a list, got {_json_type(subsections)}")
        for i, sub in enumerate(subsections):
            _check_section(record, sub, f"{where}.{key}[{i}]")


def _qa_document(record: _Record) -> Document:
    doc_id = record.identifier("doc_id")
    raw_paragraphs = record.data.get("paragraphs")
    section_keys = [key for key in record.data if key in ("sections", "subsections")]
    if raw_paragraphs is None and all(record.data[key] is None for key in section_keys):
        raise record.error("missing required field 'paragraphs' (or 'sections')")
    paragraphs = () if raw_paragraphs is None else record.strings("paragraphs", raw_paragraphs)
    sections: list[Section] = []
    for key in section_keys:  # two names for the same thing: both are kept, in the order they appear
        raw_sections = record.data[key]
        if raw_sections is None:
            continue
        if not isinstance(raw_sections, list):
            raise record.error(f"field {key!r} must be a list, got {_json_type(raw_sections)}")
        for i, raw in enumerate(raw_sections):
            _check_section(record, raw, f"{key}[{i}]")
        sections.extend(Section.from_dict(raw) for raw in raw_sections)
    return Document(
        doc_id=doc_id,
        title=record.string("title", required=False),
        paragraphs=paragraphs,
        sections=tuple(sections),
        metadata=record.mapping("metadata"),
    )


def read_qa_documents(path: StrPath) -> list[Document]:
    """Read structured documents: lead ``paragraphs`` and/or nested ``sections``.

    Each line is ``{"doc_id", "title", "paragraphs": [str, ...], "sections": [{"title", "paragraphs",
    "sections"}, ...], "metadata"}``; ``title``, ``metadata`` and one of ``paragraphs``/``sections`` are
    optional. ``subsections`` is accepted as another name for ``sections`` (at any level); where both are
    given, the sections of both are kept, in the order the keys appear. A document without any text is
    read (and logged as a warning): it yields no passages. Paragraph ``i`` of a document without
    sections becomes passage ``<doc_id>#<i>`` under ``split_document(..., max_words=0)``, which is what
    :func:`qa_qrels` assumes (and what ``rag-hier index`` uses for this format by default).

    Args:
        path: ``documents.jsonl``, ``documents.jsonl.gz``, or a directory holding one of them.

    Returns:
        The documents in file order.

    Raises:
        CorpusFormatError: A missing file, malformed JSON, a missing field, a field of the wrong type
            (e.g. ``paragraphs`` not a list of strings), a duplicate ``doc_id``, or no documents at all.

    """
    file = _resolve_file(path, _QA_DOC_FILES, "QA documents")
    return _read_jsonl_documents(file, _qa_document, "qa-docs")
