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

import datetime
import gzip
import json
import logging
import os
import re
import zlib
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence, Sized
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeAlias

import yaml
from markdown_it import MarkdownIt

from rag_hier._limits import MAX_NESTING_DEPTH, exceeds_depth, first_control_character
from rag_hier.corpus.formats import CORPUS_FORMATS
from rag_hier.corpus.model import Document, Section, passage_id
from rag_hier.errors import CorpusFormatError, InvalidInputError

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

StrPath: TypeAlias = "str | os.PathLike[str]"

"""The corpus formats :func:`read_corpus` understands."""

_MARKDOWN_SUFFIXES = (".md", ".markdown")
_TEXT_SUFFIXES = (".txt",)
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
_BEIR_FILES = ("corpus.jsonl", "corpus.jsonl.gz")
_QA_DOC_FILES = ("documents.jsonl", "documents.jsonl.gz")
_QUERY_FILES = ("queries.jsonl", "queries.jsonl.gz", "questions.jsonl", "questions.jsonl.gz", "queries.tsv")
_QUESTION_FILES = ("questions.jsonl", "questions.jsonl.gz")


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


# --------------------------------------------------------------------------------------------------------
# Low-level file access: every reader goes through these.
# --------------------------------------------------------------------------------------------------------


def _existing(path: StrPath) -> Path:
    """Return ``path`` as a :class:`Path`, or raise a :class:`CorpusFormatError` saying it does not exist."""
    p = Path(path)
    if not p.exists():
        raise CorpusFormatError("path does not exist", path=str(p))
    return p


def _resolve_file(path: StrPath, names: Sequence[str], what: str) -> Path:
    """Return the file ``path``, or the first of ``names`` inside the directory ``path``."""
    p = _existing(path)
    if not p.is_dir():
        return p
    for name in names:
        if (p / name).is_file():
            return p / name
    raise CorpusFormatError(f"directory holds no {what} file (looked for {', '.join(names)})", path=str(p))


def _has_suffix(path: Path, suffixes: Iterable[str]) -> bool:
    name = path.name.lower()
    return any(name.endswith(s) for s in suffixes)


def _iter_lines(path: Path) -> Generator[tuple[int, str], None, None]:
    """Yield ``(1-based line number, line without its line break)`` of a UTF-8 file, gunzipping ``*.gz``."""
    line_no = 0
    try:
        with gzip.open(path, "rb") if _has_suffix(path, (".gz",)) else path.open("rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise CorpusFormatError(
                        f"not valid UTF-8 ({exc.reason} at byte {exc.start} of the line)",
                        path=str(path),
                        line=line_no,
                    ) from exc
                yield line_no, text.rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as exc:  # unreadable, or a corrupt or truncated gzip stream
        where = line_no + 1 if line_no else None
        raise CorpusFormatError(f"cannot read file: {exc}", path=str(path), line=where) from exc


def _json_type(value: Any) -> str:
    """Return the JSON name of ``value``'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


@dataclass(frozen=True)
class _Record:
    """One JSON object of a JSONL file, with typed accessors whose errors name the file and line."""

    path: Path
    line: int
    data: Mapping[str, Any]

    def error(self, message: str) -> CorpusFormatError:
        return CorpusFormatError(message, path=str(self.path), line=self.line)

    def required(self, name: str) -> Any:
        value = self.data.get(name)
        if value is None:
            raise self.error(f"missing required field {name!r}")
        return value

    def identifier(self, name: str) -> str:
        """Return a required, non-empty id (a JSON string, or an integer converted to one)."""
        value = self.required(name)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.error(f"field {name!r} must be a string, got {_json_type(value)}")
        text = str(value)
        if not text.strip():
            raise self.error(f"field {name!r} must not be empty")
        _check_id(text, f"field {name!r}", self.path, self.line)
        return text

    def string(self, name: str, *, required: bool = True) -> str:
        """Return a string field; an optional one that is absent or null reads as ``""``."""
        value = self.required(name) if required else self.data.get(name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(f"field {name!r} must be a string, got {_json_type(value)}")
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        """Return an optional object field (absent or null reads as ``{}``)."""
        value = self.data.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(f"field {name!r} must be an object, got {_json_type(value)}")
        return dict(value)

    def strings(self, name: str, value: Any) -> tuple[str, ...]:
        """``value`` (the content of field ``name``) checked to be a list of strings."""
        if not isinstance(value, list):
            raise self.error(f"field {name!r} must be a list of strings, got {_json_type(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(f"field {name!r} must be a list of strings, got {_json_type(item)} at index {i}")
        return tuple(value)


def _check_id(value: str, what: str, path: Path, line: int | None) -> None:
    """Reject an id holding a control character (tab, newline, ...): it would break TREC and TSV lines."""
    bad = first_control_character(value)
    if bad is not None:
        raise CorpusFormatError(
            f"{what} {value!r:.120} contains the control character {bad!r}; ids may not hold tabs, line breaks "
            "or other control characters",
            path=str(path),
            line=line,
        )


class _Ambiguous(ValueError):
    """A JSON record whose meaning JSON leaves open: a key given twice, NaN or Infinity."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a key given twice in one object is an error (JSON would keep the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Ambiguous(f"the key {key!r:.80} appears twice in one object (which one is meant?)")
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    """``json.loads``' hook for NaN, Infinity and -Infinity, which JSON does not have."""
    raise _Ambiguous(f"{name} is not a JSON number (write null, or a finite number)")


def _iter_jsonl(path: Path) -> Generator[_Record, None, None]:
    """Yield every JSON object of a JSONL file (``*.gz`` gunzipped) with its line; blank lines are skipped."""
    for line_no, line in _iter_lines(path):
        if not line.strip():
            continue
        try:
            data = json.loads(line, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise CorpusFormatError(
                f"malformed JSON: {exc.msg} (column {exc.colno})", path=str(path), line=line_no
            ) from exc
        except _Ambiguous as exc:
            raise CorpusFormatError(str(exc), path=str(path), line=line_no) from None
        except RecursionError as exc:
            data = None
            too_deep: Exception | None = exc
        else:
            too_deep = None
        # depth <= number of opening brackets: most records need no walk at all
        maybe_deep = line.count("[") + line.count("{") > MAX_NESTING_DEPTH
        if too_deep is not None or (maybe_deep and exceeds_depth(data, MAX_NESTING_DEPTH)):
            raise CorpusFormatError(
                f"the record nests lists or objects more than {MAX_NESTING_DEPTH} levels deep",
                path=str(path),
                line=line_no,
            ) from too_deep
        if not isinstance(data, dict):
            raise CorpusFormatError(f"expected a JSON object, got {_json_type(data)}", path=str(path), line=line_no)
        yield _Record(path, line_no, data)


def _first_record(path: Path) -> _Record | None:
    """Return the first JSON object of a JSONL file, or ``None`` when it has none."""
    with closing(_iter_jsonl(path)) as records:
        return next(records, None)


def _looks_like_jsonl(path: Path) -> bool:
    """Whether ``path`` is JSONL: by suffix, else by its first non-blank line starting with ``{``."""
    if _has_suffix(path, _JSONL_SUFFIXES):
        return True
    if _has_suffix(path, (".tsv", ".tsv.gz", ".txt", ".txt.gz", ".qrels", ".trec")):
        return False
    with closing(_iter_lines(path)) as lines:
        for _, line in lines:
            if line.strip():
                return line.lstrip().startswith("{")
    return False


class _UniqueIds:
    """Remembers where each id was first seen and rejects a second one, naming both places."""

    def __init__(self, path: Path, kind: str) -> None:
        self._path = path
        self._kind = kind
        self._first: dict[str, int] = {}

    def add(self, key: str, line: int) -> None:
        first = self._first.setdefault(key, line)
        if first != line:
            raise CorpusFormatError(
                f"duplicate {self._kind} {key!r} (first on line {first}, again on line {line})",
                path=str(self._path),
                line=line,
            )


def _non_empty(items: Sized, path: Path, what: str) -> None:
    if not items:
        raise CorpusFormatError(f"no {what} found (the file holds none)", path=str(path))


# --------------------------------------------------------------------------------------------------------
# JSONL corpora
# --------------------------------------------------------------------------------------------------------


def _warn_without_text(path: Path, empty: list[str]) -> None:
    """Log one warning for the documents of ``path`` that hold no text (``where`` strings, first few shown)."""
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        logger.warning(
            "%s: %d document(s) have no text and will yield no passages (cannot be found by search): %s",
            path,
            len(empty),
            shown,
        )


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


# --------------------------------------------------------------------------------------------------------
# File-per-document corpora: Markdown and plain text
# --------------------------------------------------------------------------------------------------------


def _read_text_file(path: Path) -> str:
    """Return the UTF-8 text of ``path``, without a BOM and with ``LF`` line breaks."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusFormatError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise CorpusFormatError(f"not valid UTF-8 ({exc.reason})", path=str(path), line=line) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _pretty_stem(path: Path) -> str:
    """Make a title from a file name: the stem with ``_`` and ``-`` turned into single spaces."""
    return " ".join(re.sub(r"[_-]+", " ", path.stem).split())


def _corpus_files(root: Path, suffixes: tuple[str, ...]) -> list[tuple[Path, str]]:
    """List ``(file, relative POSIX path)`` for the file ``root``, or for the matching files under it.

    Directories are searched recursively; hidden files and folders (names starting with ``.``) are skipped.
    The result is sorted by relative path.
    """
    if not root.is_dir():
        return [(root, root.name)]
    found: list[tuple[Path, str]] = []
    for file in root.rglob("*"):
        relative = file.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if file.is_file() and file.suffix.lower() in suffixes:
            found.append((file, relative.as_posix()))
    return sorted(found, key=lambda item: item[1])


def _read_file_corpus(
    path: StrPath, suffixes: tuple[str, ...], parse: Callable[[str, str, Path], Document], fmt: str
) -> list[Document]:
    """Read one document per file: ``parse(text, doc_id, file)`` for each file under ``path``."""
    root = _existing(path)
    documents: list[Document] = []
    sources: dict[str, str] = {}
    empty: list[str] = []
    for file, relative in _corpus_files(root, suffixes):
        doc_id = file.stem if file == root else PurePosixPath(relative).with_suffix("").as_posix()
        _check_id(doc_id, "doc_id (from the file name)", file, None)
        if doc_id in sources:
            raise CorpusFormatError(f"duplicate doc_id {doc_id!r} (also produced by {sources[doc_id]})", path=str(file))
        sources[doc_id] = relative
        try:
            document = parse(_read_text_file(file), doc_id, file)
            documents.append(replace(document, metadata={**document.metadata, "source": relative}))
        except InvalidInputError as exc:
            raise CorpusFormatError(str(exc), path=str(file)) from exc
        if not document.has_text:
            empty.append(repr(doc_id))
    if not documents:
        patterns = " or ".join(f"*{s}" for s in suffixes)
        raise CorpusFormatError(f"no documents found (no {patterns} files)", path=str(root))
    _warn_without_text(root, empty)
    logger.info("read %d %s documents from %s", len(documents), fmt, root)
    return documents


def _split_paragraphs(lines: Iterable[str]) -> list[str]:
    """Split ``lines`` into paragraphs: runs of non-blank lines, joined by newlines and stripped."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            current.append(line.rstrip())
        elif current:
            paragraphs.append("\n".join(current).strip())
            current = []
    return paragraphs


def _text_document(text: str, doc_id: str, file: Path) -> Document:
    return Document(doc_id=doc_id, title=_pretty_stem(file), paragraphs=tuple(_split_paragraphs(text.split("\n"))))


def read_text(path: StrPath) -> list[Document]:
    """Read plain-text files: blank lines separate paragraphs, the file name gives the title.

    Args:
        path: A ``.txt`` file, or a directory searched recursively (sorted) for ``*.txt``.

    Returns:
        One document per file: ``doc_id`` is the path relative to the directory without its suffix, with
        ``/`` separators (for a single file: its stem); ``title`` the stem with ``_``/``-`` as spaces;
        ``metadata={"source": <relative path>}``.

    Raises:
        CorpusFormatError: A missing path, a file that is not UTF-8, or no ``*.txt`` files at all.

    """
    return _read_file_corpus(path, _TEXT_SUFFIXES, _text_document, "text")


_MARKDOWN = MarkdownIt("commonmark", {"maxNesting": 20}).enable("table")
"""CommonMark (plus GFM tables) with bounded nesting, so hostile input cannot exhaust the stack."""

_MAX_FRONT_MATTER_VALUES = 10_000
"""Most values (scalars, lists and mappings) in one file's front matter; YAML aliases cannot inflate past it."""


@dataclass
class _SectionBuilder:
    """A mutable section while a Markdown file is parsed."""

    level: int
    title: str
    paragraphs: list[str] = field(default_factory=list)
    children: list[_SectionBuilder] = field(default_factory=list)

    def freeze(self) -> Section:
        return Section(self.title, tuple(self.paragraphs), tuple(c.freeze() for c in self.children))


def _json_value(value: Any, where: str, budget: list[int], error: Callable[[str], CorpusFormatError]) -> Any:
    """A YAML value as JSON: dates and datetimes become ISO 8601 strings, sets become lists."""
    budget[0] -= 1
    if budget[0] < 0:
        raise error(f"front matter holds more than {_MAX_FRONT_MATTER_VALUES} values")
    if isinstance(value, datetime.date):  # datetime.datetime is a date too
        return value.isoformat()
    if isinstance(value, bytes):
        raise error(f"front matter value {where} is binary (!!binary); only text, numbers, dates and lists are kept")
    if isinstance(value, dict):
        result: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, datetime.date):
                key = key.isoformat()
            elif isinstance(key, bool | int | float) or key is None:
                key = json.dumps(key)  # how JSON would write it: 1, 1.5, true, null
            if not isinstance(key, str):
                raise error(f"front matter key {key!r:.40} in {where} is not text")
            result[key] = _json_value(item, f"{where}.{key}", budget, error)
        return result
    if isinstance(value, set):
        items = [_json_value(item, where, budget, error) for item in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if isinstance(value, list | tuple):
        return [_json_value(item, f"{where}[{i}]", budget, error) for i, item in enumerate(value)]
    return value


def _front_matter(lines: list[str], file: Path) -> tuple[dict[str, Any], int]:
    """Parse YAML front matter between ``---`` lines at the top; return it and the first body line.

    Values keep their YAML types (numbers, booleans, lists, mappings); dates and timestamps become ISO
    8601 strings (``"2021-03-04"``, ``"2021-03-04T10:00:00+02:00"``), which the store's filters order as
    dates. Only ``yaml.safe_load`` is used: no tags that build Python objects.
    """
    if not lines or lines[0].strip() != "---":
        return {}, 0
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            break
    else:
        return {}, 0  # no closing marker: a thematic break, not front matter

    def error(message: str, line: int | None = 1) -> CorpusFormatError:
        return CorpusFormatError(message, path=str(file), line=line)

    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 2 if mark is not None else 1
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise error(f"front matter is not valid YAML: {problem}", line) from exc
    except yaml.YAMLError as exc:
        raise error(f"front matter is not valid YAML: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise error(f"front matter is nested too deeply (more than {MAX_NESTING_DEPTH} levels allowed)") from exc
    if data is None:
        return {}, end + 1
    if not isinstance(data, dict):
        raise error(f"front matter must be a YAML mapping of keys to values, got {_json_type(data)}")
    if exceeds_depth(data, MAX_NESTING_DEPTH):
        raise error(f"front matter is nested more than {MAX_NESTING_DEPTH} levels deep")
    return _json_value(data, "front matter", [_MAX_FRONT_MATTER_VALUES], error), end + 1


def _markdown_document(text: str, doc_id: str, file: Path) -> Document:
    """Parse Markdown: front matter, an optional leading title heading, lead paragraphs, nested sections."""
    lines = text.split("\n")
    metadata, body_start = _front_matter(lines, file)
    body = lines[body_start:]
    root = _SectionBuilder(0, "")
    stack = [root]
    title: str | None = None
    seen_content = False
    tokens = _MARKDOWN.parse("\n".join(body))
    for i, token in enumerate(tokens):
        if token.level != 0 or token.nesting == -1 or token.map is None:
            continue  # inside a container block (kept with it), or a closing token
        if token.type == "heading_open":
            level = int(token.tag[1:])
            heading_text = tokens[i + 1].content.strip()
            if level == 1 and not seen_content:
                title = heading_text
            else:
                while stack[-1] is not root and stack[-1].level >= level:
                    stack.pop()
                section = _SectionBuilder(level, heading_text)
                stack[-1].children.append(section)
                stack.append(section)
            seen_content = True
        elif token.type == "fence":
            code = "\n".join(line.rstrip() for line in token.content.split("\n")).strip("\n")
            if code.strip():
                stack[-1].paragraphs.append(code)
                seen_content = True
        elif token.type != "hr":
            # Any other block (paragraph, list, quote, table, HTML, indented code) keeps its source text;
            # blank lines inside it (loose lists, long quotes) separate paragraphs.
            start, stop = token.map
            paragraphs = _split_paragraphs(body[start:stop])
            stack[-1].paragraphs.extend(paragraphs)
            seen_content = seen_content or bool(paragraphs)
    front_title = metadata.get("title")
    if isinstance(front_title, bool) or not isinstance(front_title, str | int | float):
        front_title = None
    return Document(
        doc_id=doc_id,
        title=title or (str(front_title) if front_title is not None else "") or _pretty_stem(file),
        paragraphs=tuple(root.paragraphs),
        sections=tuple(c.freeze() for c in root.children),
        metadata=metadata,
    )


def read_markdown(path: StrPath) -> list[Document]:
    """Read Markdown files with markdown-it-py: headings (ATX ``#`` and setext underlines) make nested sections.

    A level-1 heading that comes before any other heading or text is the document title (otherwise the
    front matter's ``title``, else the file stem with ``_``/``-`` as spaces). Text before the first
    section heading is the lead; a heading of level *n* opens a section inside the nearest open section
    of a lower level. Every top-level block (paragraph, list, quote, table, HTML block) is kept as its
    source text, blank lines inside it separating paragraphs; a fenced code block is one paragraph
    without its fence lines; thematic breaks are dropped. Headings inside quotes or lists are text.

    Front matter between ``---`` lines at the top is parsed as YAML (``yaml.safe_load``) into
    ``metadata``, keeping types: ``year: 2021`` is the number 2021, ``tags: [a, b]`` a list, ``draft:
    true`` a boolean; dates become ISO 8601 strings (``date: 2021-03-04`` is ``"2021-03-04"``), which
    filters compare as dates. YAML 1.1 rules apply (unquoted ``yes``/``no``/``on``/``off`` are booleans).

    Args:
        path: A ``.md``/``.markdown`` file, or a directory searched recursively (sorted) for them.

    Returns:
        One document per file: ``doc_id`` is the path relative to the directory without its suffix, with
        ``/`` separators (for a single file: its stem); ``metadata["source"]`` is the relative path.

    Raises:
        CorpusFormatError: A missing path, a file that is not UTF-8, front matter that is not a YAML
            mapping (naming the line), two files with the same ``doc_id`` (``a.md`` and ``a.markdown``),
            a file name with a control character, or no Markdown files at all.

    """
    return _read_file_corpus(path, _MARKDOWN_SUFFIXES, _markdown_document, "markdown")


# --------------------------------------------------------------------------------------------------------
# Format detection and the generic entry point
# --------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------
# Queries, qrels and QA questions
# --------------------------------------------------------------------------------------------------------

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
                qid, text = record.identifier("_id"), record.string("text")
            elif "qid" in record.data:
                qid, text = record.identifier("qid"), record.string("question")
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
            question=record.string("question"),
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
