"""Markdown corpora: ``*.md`` / ``*.markdown`` files parsed with markdown-it-py.

Headings (ATX and setext) become nested sections, YAML front matter as typed metadata.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from markdown_it import MarkdownIt

from rag_hier._limits import MAX_NESTING_DEPTH, exceeds_depth
from rag_hier.corpus.input_files import _MARKDOWN_SUFFIXES, StrPath, _json_type
from rag_hier.corpus.model import Document, Section
from rag_hier.corpus.text_files import _pretty_stem, _read_file_corpus, _split_paragraphs
from rag_hier.errors import CorpusFormatError

__all__ = ["read_markdown"]

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
