"""Corpus model, readers and the in-section splitter."""

from rag_hier.corpus.model import Document, Passage, Section, passage_id, split_document, split_documents
from rag_hier.corpus.readers import (
    CORPUS_FORMATS,
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
