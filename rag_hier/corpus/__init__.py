"""Corpus model, readers and the in-section splitter (names load on first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.corpus.formats import (
        CORPUS_FORMATS,
    )
    from rag_hier.corpus.model import (
        Document,
        Passage,
        Section,
        passage_id,
        split_document,
        split_documents,
    )
    from rag_hier.corpus.readers import (
        QAQuestion,
        QrelsFile,
        beir_split_files,
        detect_format,
        qa_qrels,
        read_beir_corpus,
        read_corpus,
        read_markdown,
        read_qa_documents,
        read_qa_questions,
        read_qrels,
        read_qrels_file,
        read_queries,
        read_text,
    )

__getattr__ = lazy_getattr(
    __name__,
    {
        "CORPUS_FORMATS": "formats",
        "Document": "model",
        "Passage": "model",
        "QAQuestion": "readers",
        "QrelsFile": "readers",
        "Section": "model",
        "beir_split_files": "readers",
        "detect_format": "readers",
        "passage_id": "model",
        "qa_qrels": "readers",
        "read_beir_corpus": "readers",
        "read_corpus": "readers",
        "read_markdown": "readers",
        "read_qa_documents": "readers",
        "read_qa_questions": "readers",
        "read_qrels": "readers",
        "read_qrels_file": "readers",
        "read_queries": "readers",
        "read_text": "readers",
        "split_document": "model",
        "split_documents": "model",
    },
    globals(),
)

__all__ = [
    "CORPUS_FORMATS",
    "Document",
    "Passage",
    "QAQuestion",
    "QrelsFile",
    "Section",
    "beir_split_files",
    "detect_format",
    "passage_id",
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
    "split_document",
    "split_documents",
]
