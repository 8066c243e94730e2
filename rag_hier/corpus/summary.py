"""Document summaries (DHR): title, abstract and linearised table of contents in one short text.

Dense Hierarchical Retrieval (Liu et al., 2021) represents a document by its *summary*: the title, the
abstract (the text before the first section, or the first section when there is no lead), and the table of
contents (section titles in pre-order). The parts are joined with ", " — the separator DHR's ablation
prefers over ``[SEP]`` — in that order. The abstract is cut to ``abstract_words`` words so the table of
contents still fits a small encoder's sequence limit (the public DHR code lost the table of contents at
inference time; cutting the abstract keeps it in).

The same text comes out whether the summary is built from a :class:`~rag_hier.corpus.model.Document`
(training) or from passages read back from a store (indexing): both take the lead section's paragraphs,
whitespace-normalised, in document order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: the CLI's parsers read this module's constants without the model module
    from rag_hier.corpus.model import Document

__all__ = [
    "DEFAULT_ABSTRACT_WORDS",
    "DOC_REPRESENTATIONS",
    "DocRepresentation",
    "document_summary",
    "summarize_document",
]

DocRepresentation = Literal["mean", "summary"]
DOC_REPRESENTATIONS: tuple[str, ...] = ("mean", "summary")
"""How DHR's document index represents a document: the mean of its passage vectors, or its summary encoded."""

DEFAULT_ABSTRACT_WORDS = 100
"""Words of the abstract kept in a summary (the length of one DHR passage)."""


def document_summary(
    title: str,
    abstract: str | Iterable[str],
    toc: Sequence[str] = (),
    *,
    abstract_words: int = DEFAULT_ABSTRACT_WORDS,
    include_toc: bool = True,
) -> str:
    """Join a document's title, abstract and table of contents into its DHR summary.

    Args:
        title: The document title ("" when there is none).
        abstract: The abstract text, or its paragraphs in order.
        toc: Section titles in pre-order (the linearised table of contents).
        abstract_words: Keep at most this many words of the abstract (0 keeps none).
        include_toc: Append the table of contents.

    Returns:
        ``"title, abstract, section 1, section 2, ..."`` with empty parts left out.

    Raises:
        ValueError: ``abstract_words`` is negative.

    Example:
        >>> document_summary("Bees", "Bees make honey. They live in hives.", ["Honey", "Hives"], abstract_words=3)
        'Bees, Bees make honey., Honey, Hives'

    """
    if abstract_words < 0:
        raise ValueError(f"abstract_words must be >= 0, got {abstract_words}")
    text = abstract if isinstance(abstract, str) else " ".join(abstract)
    words = text.split()[:abstract_words]
    parts = [" ".join(title.split()), " ".join(words)]
    if include_toc:
        parts.extend(" ".join(t.split()) for t in toc)
    return ", ".join(p for p in parts if p)


def summarize_document(
    document: Document, *, abstract_words: int = DEFAULT_ABSTRACT_WORDS, include_toc: bool = True
) -> str:
    """The DHR summary of a :class:`Document`: title, lead paragraphs (else the first section's), TOC.

    Args:
        document: The document.
        abstract_words: Keep at most this many words of the abstract.
        include_toc: Append the table of contents.

    Example:
        >>> from rag_hier.corpus.model import Section
        >>> doc = Document("d", "Rivers", ("Rivers flow.",), (Section("Deltas", ("Deltas form.",)),))
        >>> summarize_document(doc)
        'Rivers, Rivers flow., Deltas'

    """
    first_section: int | None = None
    lead: list[str] = []
    for section, _, paragraph in document.iter_paragraphs():
        if not paragraph.split():
            continue
        if first_section is None:
            first_section = section
        if section != first_section:
            break
        lead.append(paragraph)
    return document_summary(
        document.title,
        lead,
        document.table_of_contents(),
        abstract_words=abstract_words,
        include_toc=include_toc,
    )
