"""Search results: one :class:`Hit` type for every strategy, and a query's :class:`QueryResult`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Hit", "QueryResult"]


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
        scores: Component scores of strategies that combine several; the keys are documented per
            strategy (``hierarchical``: ``passage``, ``document``, ``fused``; ``svdr-*``: ``beta``, ``rerank``,
            ``full``, ``alpha``, ``lexical``; ``fusion``: the component strategies' names and ``fused``).
            Empty for single-score strategies (``dense``, ``tree``).
        rowid: The passage's store rowid (its FAISS id, never reused).
        extra: Integration payloads stored with the passage (a framework's node or document fields).

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
    rowid: int = -1
    extra: Mapping[str, Any] = field(default_factory=dict)

    def with_rank(self, rank: int) -> Hit:
        """This hit at another rank."""
        return replace(self, rank=rank)


@dataclass(frozen=True)
class QueryResult:
    """One query's ranked hits and what the search measured.

    Args:
        hits: Ranked hits.
        stats: Per-query facts a strategy reports (documented per strategy), e.g. ``passages_scored`` and
            ``fraction_scored`` (tree: the passages whose vectors were compared with the query, and their share
            of the collection) or ``documents_searched`` (hierarchical).

    """

    hits: list[Hit]
    stats: Mapping[str, float] = field(default_factory=dict)
