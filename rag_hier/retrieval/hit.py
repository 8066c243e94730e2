"""Search results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Hit"]


@dataclass(frozen=True)
class Hit:
    """One ranked result.

    Args:
        passage_id: ``<doc_id>#<n>`` (or the id the passage was written with).
        doc_id: The parent document's id.
        text: The passage text.
        title_path: Document title, then section titles.
        meta: The passage's metadata.
        score: The ranking score (higher is better).
        rank: 1-based rank in its result list.
        position: The passage's index within its document.
        scores: Component scores where a strategy fuses several (e.g. ``passage``, ``document``).

    """

    passage_id: str
    doc_id: str
    text: str
    title_path: tuple[str, ...]
    meta: Mapping[str, Any]
    score: float
    rank: int
    position: int = 0
    scores: Mapping[str, float] = field(default_factory=dict)
