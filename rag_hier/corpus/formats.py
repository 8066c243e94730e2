"""The corpus formats ``rag-hier index --format`` reads (no reader imported: the CLI's ``--help`` lists them)."""

from __future__ import annotations

__all__ = ["CORPUS_FORMATS"]

CORPUS_FORMATS: tuple[str, ...] = ("beir", "qa-docs", "markdown", "text")
"""Every corpus format :func:`rag_hier.corpus.readers.read_corpus` reads."""
