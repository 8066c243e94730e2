"""What every reader goes through: paths, lines of UTF-8 (gzipped or not), JSONL records with checked fields, ids.

The corpus, query and relevance readers (:mod:`rag_hier.corpus.readers` and the modules it gathers) share
these, and one logger, :data:`READERS_LOGGER`.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import zlib
from collections.abc import Generator, Iterable, Mapping, Sequence, Sized
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from rag_hier._limits import MAX_NESTING_DEPTH, exceeds_depth, first_control_character
from rag_hier.errors import CorpusFormatError

__all__ = [
    "READERS_LOGGER",
    "_BEIR_FILES",
    "_JSONL_SUFFIXES",
    "_MARKDOWN_SUFFIXES",
    "_QA_DOC_FILES",
    "_QUERY_FILES",
    "_QUESTION_FILES",
    "_TEXT_SUFFIXES",
    "StrPath",
    "_Record",
    "_UniqueIds",
    "_check_id",
    "_existing",
    "_first_record",
    "_has_suffix",
    "_iter_jsonl",
    "_iter_lines",
    "_json_type",
    "_looks_like_jsonl",
    "_non_empty",
    "_resolve_file",
    "_warn_without_text",
]

READERS_LOGGER = "rag_hier.corpus.readers"
"""The one logger of every reader (what a caller silences or captures), whichever module logs."""

logger = logging.getLogger(READERS_LOGGER)

StrPath: TypeAlias = "str | os.PathLike[str]"

_MARKDOWN_SUFFIXES = (".md", ".markdown")
_TEXT_SUFFIXES = (".txt",)
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")
_BEIR_FILES = ("corpus.jsonl", "corpus.jsonl.gz")
_QA_DOC_FILES = ("documents.jsonl", "documents.jsonl.gz")
_QUERY_FILES = ("queries.jsonl", "queries.jsonl.gz", "questions.jsonl", "questions.jsonl.gz", "queries.tsv")
_QUESTION_FILES = ("questions.jsonl", "questions.jsonl.gz")


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


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""A UTF-16 surrogate code point on its own (JSON's ``"\\ud800"``): not text, and not encodable as UTF-8."""


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

    def text(self, name: str) -> str:
        """A required string field that must be valid Unicode (a query to encode): a lone surrogate is refused."""
        value = self.string(name)
        bad = _LONE_SURROGATE.search(value)
        if bad is not None:
            raise self.error(
                f"field {name!r} holds a lone surrogate {bad.group()!r} at character {bad.start()}: text must be "
                "valid Unicode (check the file's escapes or decoding)"
            )
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
