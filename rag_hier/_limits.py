"""Limits on untrusted input shared by the corpus readers, the document model and the filters."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["CONTROL_CHARACTERS", "MAX_NESTING_DEPTH", "exceeds_depth", "first_control_character"]

MAX_NESTING_DEPTH = 100
"""Deepest nesting of lists and objects accepted in metadata, filters and JSON corpus records.

Far beyond what real metadata or filters use, and far below Python's recursion limit, so that nothing
downstream (``json.dumps``, ``repr``, comparisons) can raise :class:`RecursionError`.
"""

CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Characters never allowed in ids: C0 and C1 control characters (tab and newline among them), DEL, and the
Unicode line and paragraph separators. They break line-based files (TREC runs, TSV qrels, logs)."""


def first_control_character(text: str) -> str | None:
    """Return the first character of ``text`` matched by :data:`CONTROL_CHARACTERS`, or ``None``."""
    match = CONTROL_CHARACTERS.search(text)
    return match.group() if match else None


def exceeds_depth(value: Any, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether lists, tuples, sets and mappings in ``value`` nest more than ``limit`` levels deep.

    Iterative (no recursion, so it is safe on any depth) and stops as soon as the limit is passed. A
    scalar has depth 0, ``[]`` and ``{}`` depth 1, ``[[1]]`` depth 2. A container reached again by another
    path is walked again only when reached deeper, so shared references (YAML aliases) cost no more than
    distinct ones; a self-referencing structure counts as infinitely deep.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    deepest: dict[int, int] = {}
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple | set | frozenset):
            if deepest.get(id(item), -1) >= depth:
                continue
            deepest[id(item)] = depth
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple | set | frozenset):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return True
        stack.extend((child, depth) for child in children)
    return False
