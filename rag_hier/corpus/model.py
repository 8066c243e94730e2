"""The corpus model: documents (a title tree of sections and paragraphs) and the passages cut from them."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Document", "Passage", "Section", "passage_id", "split_document", "split_documents"]


@dataclass(frozen=True)
class Section:
    """A titled section of a document: its own paragraphs, then its subsections (pre-order)."""

    title: str
    paragraphs: tuple[str, ...] = ()
    subsections: tuple[Section, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Section:
        """Build a section from ``{"title", "paragraphs", "sections"|"subsections"}``."""
        subs = data.get("sections", data.get("subsections", ())) or ()
        return cls(
            title=str(data.get("title", "") or ""),
            paragraphs=tuple(str(p) for p in data.get("paragraphs", ()) or ()),
            subsections=tuple(cls.from_dict(s) for s in subs),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, the inverse of :meth:`from_dict`."""
        return {
            "title": self.title,
            "paragraphs": list(self.paragraphs),
            "sections": [s.to_dict() for s in self.subsections],
        }


@dataclass(frozen=True)
class Document:
    """A document: title, lead paragraphs (the abstract), optional nested sections, and metadata.

    Args:
        doc_id: Stable identifier, unique in a corpus.
        title: Document title ("" when there is none).
        paragraphs: Paragraphs before the first section; for a corpus without structure, the whole text.
        sections: Titled sections in document order, each with paragraphs and subsections.
        metadata: Free JSON-serialisable metadata, stored with every passage of the document.

    """

    doc_id: str
    title: str = ""
    paragraphs: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """All paragraphs of the document, lead then sections in pre-order, separated by blank lines."""
        return "\n\n".join(p for _, _, p in self.iter_paragraphs())

    def iter_sections(self) -> Iterator[tuple[tuple[str, ...], Section]]:
        """Yield ``(section title path, section)`` in pre-order; the path excludes the document title."""

        def walk(prefix: tuple[str, ...], sections: Sequence[Section]) -> Iterator[tuple[tuple[str, ...], Section]]:
            for s in sections:
                path = (*prefix, s.title) if s.title else prefix
                yield path, s
                yield from walk(path, s.subsections)

        yield from walk((), self.sections)

    def iter_paragraphs(self) -> Iterator[tuple[int, tuple[str, ...], str]]:
        """Yield ``(section index, section title path, paragraph)``; section 0 is the lead."""
        for p in self.paragraphs:
            yield 0, (), p
        for i, (path, s) in enumerate(self.iter_sections(), start=1):
            for p in s.paragraphs:
                yield i, path, p

    def table_of_contents(self) -> list[str]:
        """Section titles in pre-order (the linearised table of contents)."""
        return [s.title for _, s in self.iter_sections() if s.title]


@dataclass(frozen=True)
class Passage:
    """A retrievable unit: a piece of one section of one document.

    Args:
        id: ``"<doc_id>#<n>"``, ``n`` counting the document's passages from 0.
        doc_id: The parent document's id.
        position: ``n``: the passage's index within its document.
        text: The passage text (without headings).
        title_path: Document title, then the enclosing section titles.
        section: Pre-order index of the enclosing section (0 = lead paragraphs).
        meta: Metadata (the document's, plus anything the caller adds); filterable.
        extra: Opaque JSON payload kept with the passage but neither encoded nor filterable (integrations
            keep framework-specific fields here).

    """

    id: str
    doc_id: str
    position: int
    text: str
    title_path: tuple[str, ...] = ()
    section: int = 0
    meta: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def embedding_text(self) -> str:
        """The text that dense encoders see: the title path, then the text, comma-separated (as in DHR)."""
        parts = [t for t in self.title_path if t]
        return ", ".join([*parts, self.text]) if parts else self.text


def passage_id(doc_id: str, n: int) -> str:
    """Return the readable, stable passage id ``<doc_id>#<n>``."""
    return f"{doc_id}#{n}"


def _split_words(text: str, max_words: int) -> list[str]:
    """Split ``text`` into balanced consecutive blocks of at most ``max_words`` words.

    Uses the fewest blocks that fit, and block sizes differ by at most one word (the longer first).
    """
    words = text.split()
    if not words:
        return []
    if max_words <= 0 or len(words) <= max_words:
        return [" ".join(words)]
    n_blocks = math.ceil(len(words) / max_words)
    base, extra = divmod(len(words), n_blocks)
    blocks: list[str] = []
    start = 0
    for i in range(n_blocks):
        end = start + base + (1 if i < extra else 0)
        blocks.append(" ".join(words[start:end]))
        start = end
    return blocks


def split_document(document: Document, max_words: int = 100) -> list[Passage]:
    """Cut a document into passages that never cross a section boundary.

    With ``max_words=0`` every paragraph is one passage, so ``n`` in ``<doc_id>#<n>`` is the paragraph's
    index in :meth:`Document.iter_paragraphs` order. Otherwise the paragraphs of one section are joined
    and cut into balanced blocks of at most ``max_words`` words. Empty paragraphs are skipped (but still
    counted when ``max_words=0``, so paragraph indices stay aligned with the source).
    """
    if max_words < 0:
        raise ValueError(f"max_words must be >= 0, got {max_words}")
    title = document.title
    meta = dict(document.metadata)
    passages: list[Passage] = []

    def emit(text: str, section: int, path: tuple[str, ...], position: int) -> None:
        passages.append(
            Passage(
                id=passage_id(document.doc_id, position),
                doc_id=document.doc_id,
                position=position,
                text=text,
                title_path=(title, *path) if title else path,
                section=section,
                meta=meta,
            )
        )

    if max_words == 0:
        for n, (section, path, paragraph) in enumerate(document.iter_paragraphs()):
            text = " ".join(paragraph.split())
            if text:
                emit(text, section, path, n)
        return passages

    groups: dict[int, tuple[tuple[str, ...], list[str]]] = {}
    for section, path, paragraph in document.iter_paragraphs():
        groups.setdefault(section, (path, []))[1].append(paragraph)
    n = 0
    for section, (path, paragraphs) in groups.items():
        for block in _split_words(" ".join(paragraphs), max_words):
            emit(block, section, path, n)
            n += 1
    return passages


def split_documents(documents: Sequence[Document], max_words: int = 100) -> list[Passage]:
    """:func:`split_document` over many documents."""
    return [p for d in documents for p in split_document(d, max_words)]
