"""File-per-document corpora (one document per file under a directory), and plain text: ``*.txt`` files."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path, PurePosixPath

from rag_hier.corpus.input_files import (
    _TEXT_SUFFIXES,
    READERS_LOGGER,
    StrPath,
    _check_id,
    _existing,
    _warn_without_text,
)
from rag_hier.corpus.model import Document
from rag_hier.errors import CorpusFormatError, InvalidInputError

__all__ = ["read_text"]

logger = logging.getLogger(READERS_LOGGER)


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
