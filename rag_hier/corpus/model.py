"""The corpus model: documents (a title tree of sections and paragraphs) and the passages cut from them."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_hier._limits import MAX_NESTING_DEPTH, first_control_character
from rag_hier.corpus.sentences import split_sentences
from rag_hier.errors import InvalidInputError

__all__ = ["Document", "Passage", "Section", "passage_id", "split_document", "split_documents"]

_JSON_SCALARS = (str, int, float, bool, type(None))


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A UTF-16 surrogate code point on its own (JSON's ``"\\ud800"``): not text, and not encodable as UTF-8."""


def _check_unicode(owner: str, name: str, value: str) -> None:
    bad = _SURROGATE.search(value)
    if bad is not None:
        raise InvalidInputError(
            f"{owner}.{name} holds a lone surrogate {bad.group()!r} at character {bad.start()}: text must be "
            "valid Unicode (check the file's escapes or decoding)"
        )


def _check_text(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidInputError(f"{owner}.{name} must be a string, got {_type_name(value)} {value!r:.80}")
    _check_unicode(owner, name, value)


def _check_texts(owner: str, name: str, values: tuple[str, ...]) -> None:
    for i, value in enumerate(values):
        _check_unicode(owner, f"{name}[{i}]", value)


def _as_tuple(owner: str, name: str, value: Any, item_type: type, item_name: str) -> tuple[Any, ...]:
    """``value`` (a list or tuple of ``item_type``) as a tuple; anything else is an InvalidInputError."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInputError(
            f"{owner}.{name} must be a list or tuple of {item_name}, got {_type_name(value)} {value!r:.80}"
        )
    for i, item in enumerate(value):
        if not isinstance(item, item_type):
            raise InvalidInputError(
                f"{owner}.{name}[{i}] must be a {item_name[:-1] if item_name.endswith('s') else item_name}, "
                f"got {_type_name(item)} {item!r:.80}"
            )
    return tuple(value)


def _check_metadata(owner: str, metadata: Any, name: str = "metadata") -> None:
    """Metadata must be a mapping of JSON values (the store keeps it as JSON), nested at most 100 deep.

    One iterative walk (safe on any depth); a container reached again by another path is walked again
    only when reached deeper, so shared references cost no more than distinct ones.
    """
    if not isinstance(metadata, Mapping):
        raise InvalidInputError(f"{owner}.{name} must be a mapping (dict), got {_type_name(metadata)}")
    if not metadata:
        return
    stack: list[tuple[str, Any, int]] = [(name, metadata, 1)]
    deepest: dict[int, int] = {}
    while stack:
        where, value, depth = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidInputError(f"{owner}.{where} is {value!r}: not a finite number (JSON has no NaN or infinity)")
        if isinstance(value, str):
            _check_unicode(owner, where, value)
            continue
        if isinstance(value, _JSON_SCALARS):
            continue
        if not isinstance(value, Mapping | list | tuple):
            raise InvalidInputError(
                f"{owner}.{where} must hold JSON values (str, int, float, bool, None, lists and dicts), "
                f"got {_type_name(value)} {value!r:.80}"
            )
        if depth > MAX_NESTING_DEPTH:
            raise InvalidInputError(f"{owner}.{name} is nested more than {MAX_NESTING_DEPTH} levels deep")
        if deepest.get(id(value), 0) >= depth:
            continue
        deepest[id(value)] = depth
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidInputError(f"{owner}.{where} has a key that is not a string: {key!r:.80}")
                _check_unicode(owner, f"{where} key", key)
                stack.append((f"{where}[{key!r}]", item, depth + 1))
        else:
            stack.extend((f"{where}[{i}]", item, depth + 1) for i, item in enumerate(value))


@dataclass(frozen=True)
class Section:
    """A titled section of a document: its own paragraphs, then its subsections (pre-order)."""

    title: str
    paragraphs: tuple[str, ...] = ()
    subsections: tuple[Section, ...] = ()

    def __post_init__(self) -> None:
        """Check the field types (lists are accepted and stored as tuples)."""
        _check_text("Section", "title", self.title)
        object.__setattr__(self, "paragraphs", _as_tuple("Section", "paragraphs", self.paragraphs, str, "strings"))
        _check_texts("Section", "paragraphs", self.paragraphs)
        object.__setattr__(
            self, "subsections", _as_tuple("Section", "subsections", self.subsections, Section, "Sections")
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Section:
        """Build a section from ``{"title", "paragraphs", "sections", "subsections"}``.

        ``sections`` and ``subsections`` are two names for the child sections; when both are present the
        children of both are kept, in the order the keys appear in ``data``.
        """
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"Section.from_dict() takes a mapping, got {_type_name(data)} {data!r:.80}")
        subs = [s for key in data if key in ("sections", "subsections") for s in data[key] or ()]
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

    def __post_init__(self) -> None:
        """Check the field types and the id (lists are accepted and stored as tuples).

        Raises:
            InvalidInputError: A field of the wrong type, an empty ``doc_id`` or one with a control
                character (tab, newline, ...), metadata that is not JSON or nests more than 100 levels,
                or sections nested more than 100 levels.

        """
        doc_id = self.doc_id
        if not isinstance(doc_id, str):
            raise InvalidInputError(f"Document.doc_id must be a string, got {_type_name(doc_id)} {doc_id!r:.80}")
        if not doc_id.strip():
            raise InvalidInputError(f"Document.doc_id must not be empty, got {doc_id!r}")
        bad = first_control_character(doc_id)
        if bad is not None:
            raise InvalidInputError(
                f"Document.doc_id {doc_id!r:.120} contains the control character {bad!r}; ids may not hold "
                "tabs, line breaks or other control characters"
            )
        _check_text("Document", "title", self.title)
        object.__setattr__(self, "paragraphs", _as_tuple("Document", "paragraphs", self.paragraphs, str, "strings"))
        _check_texts("Document", "paragraphs", self.paragraphs)
        object.__setattr__(self, "sections", _as_tuple("Document", "sections", self.sections, Section, "Sections"))
        _check_metadata("Document", self.metadata)
        level, frontier = 0, list(self.sections)
        while frontier:
            level += 1
            if level > MAX_NESTING_DEPTH:
                raise InvalidInputError(f"Document {doc_id!r}: sections nest more than {MAX_NESTING_DEPTH} levels deep")
            frontier = [sub for s in frontier for sub in s.subsections]

    @property
    def has_text(self) -> bool:
        """Whether any paragraph holds a word: a document without one yields no passages."""
        if any(p and not p.isspace() for p in self.paragraphs):
            return True
        return any(p and not p.isspace() for _, s in self.iter_sections() for p in s.paragraphs)

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

    def __post_init__(self) -> None:
        """Check the text fields and the metadata (ids are checked by the store that writes the passage).

        Raises:
            InvalidInputError: A text or title that is not a string or holds a lone surrogate, or ``meta`` /
                ``extra`` that is not a mapping of JSON values (string keys, finite numbers).

        """
        owner = f"Passage {self.id!r:.80}"  # the message names the passage
        _check_text(owner, "text", self.text)
        object.__setattr__(self, "title_path", _as_tuple(owner, "title_path", self.title_path, str, "strings"))
        _check_texts(owner, "title_path", self.title_path)
        _check_metadata(owner, self.meta, name="meta")
        if self.extra:
            _check_metadata(owner, self.extra, name="extra")

    @property
    def embedding_text(self) -> str:
        """The text that dense encoders see: the title path, then the text, comma-separated (as in DHR)."""
        parts = [t for t in self.title_path if t]
        return ", ".join([*parts, self.text]) if parts else self.text


def passage_id(doc_id: str, n: int) -> str:
    """Return the readable, stable passage id ``<doc_id>#<n>``."""
    return f"{doc_id}#{n}"


def _balanced_blocks(words: Sequence[str], max_words: int) -> list[list[str]]:
    """Cut ``words`` into the fewest consecutive blocks of at most ``max_words``, sizes differing by <= 1."""
    if max_words <= 0 or len(words) <= max_words:
        return [list(words)]
    n_blocks = math.ceil(len(words) / max_words)
    base, extra = divmod(len(words), n_blocks)
    blocks: list[list[str]] = []
    start = 0
    for i in range(n_blocks):
        end = start + base + (1 if i < extra else 0)
        blocks.append(list(words[start:end]))
        start = end
    return blocks


def _even_pack(sizes: Sequence[int], capacity: int) -> list[tuple[int, int]]:
    """Pack units into the fewest blocks ``[start, end)`` of at most ``capacity`` words, spread evenly.

    Each block ends at the unit boundary closest to an equal share of the words still to place (the
    longer block on a tie) among the ends that still let the rest fit in the remaining blocks. Linear
    time: the fewest blocks for every suffix come from one right-to-left pass. Every size must be <=
    ``capacity``.
    """
    n = len(sizes)
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    furthest = [0] * n  # furthest end of a block starting at j
    end = 0
    for j in range(n):
        end = max(end, j + 1)
        while end < n and prefix[end + 1] - prefix[j] <= capacity:
            end += 1
        furthest[j] = end
    fewest = [0] * (n + 1)  # fewest blocks for units j.. (greedy from the left is optimal)
    for j in range(n - 1, -1, -1):
        fewest[j] = 1 + fewest[furthest[j]]
    blocks: list[tuple[int, int]] = []
    start, remaining = 0, fewest[0]
    while start < n:
        share = (prefix[n] - prefix[start]) / remaining
        best = furthest[start]
        for candidate in range(start + 1, furthest[start] + 1):
            if fewest[candidate] > remaining - 1:
                continue
            gap = abs(prefix[candidate] - prefix[start] - share)
            if gap <= abs(prefix[best] - prefix[start] - share):
                best = candidate
        blocks.append((start, best))
        start, remaining = best, remaining - 1
    return blocks


def _sentence_blocks(paragraphs: Sequence[str], max_words: int, overlap: int) -> list[str]:
    """Cut the paragraphs of one section into passages of at most ``max_words`` words at sentence ends.

    Sentences come from :func:`~rag_hier.corpus.sentences.split_sentences`, paragraph ends are sentence
    ends, and a sentence longer than the limit is cut into balanced word blocks. The sentences go into
    the fewest passages of at most ``max_words - overlap`` words, spread as evenly as sentence ends allow
    (no short tail passage when a more even cut exists). With ``overlap``, each passage after the first
    then starts with the last whole sentences of the passage before (not of its own overlap) that hold
    at most ``overlap`` words.
    """
    words = [w for p in paragraphs for w in p.split()]
    if not words:
        return []
    if len(words) <= max_words:
        return [" ".join(words)]
    capacity = max_words - overlap
    units: list[list[str]] = []
    for paragraph in paragraphs:
        for sentence in split_sentences(paragraph):
            units.extend(_balanced_blocks(sentence.split(), capacity))
    blocks = _even_pack([len(u) for u in units], capacity)
    passages: list[str] = []
    for k, (start, end) in enumerate(blocks):
        first, used = start, 0
        if k and overlap:
            previous_start = blocks[k - 1][0]
            while first > previous_start and used + len(units[first - 1]) <= overlap:
                first -= 1
                used += len(units[first])
        passages.append(" ".join(w for unit in units[first:end] for w in unit))
    return passages


def split_document(document: Document, max_words: int = 100, *, overlap: int = 0) -> list[Passage]:
    """Cut a document into passages that never cross a section boundary.

    With ``max_words=0`` every paragraph is one passage, so ``n`` in ``<doc_id>#<n>`` is the paragraph's
    index in :meth:`Document.iter_paragraphs` order. Otherwise the paragraphs of one section are cut at
    sentence boundaries into passages of at most ``max_words`` words: a section that fits is one passage
    (its paragraphs joined), a longer one is packed sentence by sentence into the fewest passages that
    fit, as even as sentence boundaries allow; a single sentence longer than ``max_words`` is cut into
    balanced word blocks. Empty paragraphs are skipped (but still counted when ``max_words=0``, so
    paragraph indices stay aligned with the source). Whitespace is collapsed to single spaces. The cut
    depends only on the text, so an unchanged document always gives the same passages.

    Args:
        document: The document.
        max_words: Most words in one passage; 0 keeps paragraphs whole.
        overlap: Words of each passage kept for context from the passage before it in the same section:
            sections are cut into passages of at most ``max_words - overlap`` words, then each passage
            after the first is prefixed with the longest run of whole sentences at the end of the one
            before (not of its own overlap) that holds at most ``overlap`` words (none when its last
            sentence alone is longer).
            Must be smaller than ``max_words``; 0 (the default) cuts without overlap.

    Returns:
        The passages, ``<doc_id>#0``, ``<doc_id>#1``, ... (none for a document without text: the corpus
        readers warn about those, naming the file and line, and :meth:`HierStore.add_documents
        <rag_hier.store.HierStore.add_documents>` counts them in ``WriteSummary.documents_empty``).

    Raises:
        InvalidInputError: ``document`` is not a Document, ``max_words`` or ``overlap`` is not an
            integer, is negative, or ``overlap`` is not below ``max_words``.

    """
    if not isinstance(document, Document):
        raise InvalidInputError(f"split_document() takes a Document, got {_type_name(document)}")
    for name, value in (("max_words", max_words), ("overlap", overlap)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInputError(f"{name} must be an integer, got {_type_name(value)} {value!r:.40}")
        if value < 0:
            raise InvalidInputError(f"{name} must be >= 0, got {value}")
    if overlap and overlap >= max_words:
        raise InvalidInputError(
            f"overlap must be smaller than max_words, got overlap={overlap} with max_words={max_words}"
            + (" (0 keeps paragraphs whole, without overlap)" if max_words == 0 else "")
        )
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
    else:
        groups: dict[int, tuple[tuple[str, ...], list[str]]] = {}
        for section, path, paragraph in document.iter_paragraphs():
            groups.setdefault(section, (path, []))[1].append(paragraph)
        n = 0
        for section, (path, paragraphs) in groups.items():
            for block in _sentence_blocks(paragraphs, max_words, overlap):
                emit(block, section, path, n)
                n += 1
    return passages


def split_documents(documents: Sequence[Document], max_words: int = 100, *, overlap: int = 0) -> list[Passage]:
    """:func:`split_document` over many documents."""
    return [p for d in documents for p in split_document(d, max_words, overlap=overlap)]
