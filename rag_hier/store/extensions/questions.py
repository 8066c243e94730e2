"""Questions generated for a store's passages (``rag-hier tune --generator``), kept so none is asked twice.

A question generator (an LLM behind a callable) is slow and may cost money: what it wrote is kept in the store,
committed in small batches as it goes, so an interrupted run resumes where it stopped and a second run asks
nothing again. Entries are keyed by passage rowid with the content hash of the text they were generated from; a
passage whose text changed is asked again, a deleted passage's questions go with it. The extension records which
generator wrote them (``generator``): questions of another generator are not reused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.errors import StoreCorruptedError
from rag_hier.store.contract import StoreBackend, StoreExtension
from rag_hier.store.extensions.base import register_extension

__all__ = ["GeneratedQuestions"]

_MAX_BYTES = 256 << 20
_MAX_PER_PASSAGE = 64


@register_extension
class GeneratedQuestions(StoreExtension):
    """Generated questions per passage: ``entries[rowid] = {"hash": content hash, "questions": [...]}``.

    Args:
        generator: A name for the generator that wrote them (questions of another name are not reused).

    """

    name = "questions"
    FILE = "questions.json"
    FILES = (FILE,)

    def __init__(self, generator: str = "") -> None:
        self.generator = str(generator)
        self.entries: dict[int, dict[str, Any]] = {}

    def config(self) -> dict[str, Any]:
        """``{"generator": name}``."""
        return {"generator": self.generator}

    def write(self, paths: Mapping[str, Path]) -> None:
        """Write every entry as JSON."""
        data = {"format": 1, "entries": {str(k): v for k, v in sorted(self.entries.items())}}
        paths[self.FILE].write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read and check the entries (sizes checked before anything is parsed)."""
        path = paths[self.FILE]
        if path.stat().st_size > _MAX_BYTES:
            raise StoreCorruptedError(f"{path}: larger than {_MAX_BYTES >> 20} MB; not a questions file")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise StoreCorruptedError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict) or data.get("format") != 1 or not isinstance(data.get("entries"), dict):
            raise StoreCorruptedError(f"{path}: not a questions file (format 1 with entries)")
        entries: dict[int, dict[str, Any]] = {}
        for key, entry in data["entries"].items():
            ok = (
                isinstance(key, str)
                and key.isdigit()
                and isinstance(entry, dict)
                and isinstance(entry.get("hash"), str)
                and isinstance(entry.get("questions"), list)
                and len(entry["questions"]) <= _MAX_PER_PASSAGE
                and all(isinstance(q, str) for q in entry["questions"])
            )
            if not ok:
                raise StoreCorruptedError(f"{path}: entry {key!r} is not {{'hash': str, 'questions': [str, ...]}}")
            entries[int(key)] = {"hash": entry["hash"], "questions": list(entry["questions"])}
        self.entries = entries

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Forget the questions of removed passages."""
        for r in np.asarray(rowids).tolist():
            self.entries.pop(int(r), None)

    def describe(self) -> dict[str, Any]:
        """Counts, for ``rag-hier info``."""
        return {
            "generator": self.generator,
            "passages": len(self.entries),
            "questions": sum(len(e["questions"]) for e in self.entries.values()),
        }
