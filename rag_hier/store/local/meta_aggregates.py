"""Metadata aggregates of a local store: :mod:`rag_hier.store.meta_stats` in SQLite, Python where SQL cannot answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rag_hier.store import meta_stats
from rag_hier.store.contract import Filters
from rag_hier.store.filters import compile_filter
from rag_hier.store.local.base import LocalBase
from rag_hier.store.records import PassageRecord, records_by_rowid

__all__ = ["LocalMetaAggregates"]


class LocalMetaAggregates(LocalBase):
    """``count_unique_meta``, ``meta_min_max``, ``meta_field_types``, ``count_with_extra``."""

    def _aggregate_rowids(self, filters: Filters) -> list[int] | None:
        """Rowids matching ``filters`` (SQL where it translates, else the predicate), ``None`` for every row."""
        predicate = compile_filter(filters)
        if predicate is None:
            return None
        ids = self._select_matching(filters)
        if ids is None:
            return [r.rowid for r in self._core.records() if predicate(r)]
        return sorted(int(i) for i in ids)

    def _aggregate_records(self, rowids: list[int] | None) -> list[PassageRecord]:
        if rowids is None:
            return list(self._core.records())
        found = records_by_rowid(self._core.db, rowids)
        return [found[i] for i in sorted(found)]

    def count_unique_meta(self, fields: Sequence[str], filters: Filters = None) -> dict[str, int]:
        """Distinct non-null values of each metadata key in ``fields`` among the passages matching ``filters``.

        Counted in SQLite (``json_extract`` over the stored metadata); see :mod:`rag_hier.store.meta_stats`
        for how values compare (``1 == 1.0 == True``, lists and objects by content).

        Raises:
            InvalidInputError: A field is not a non-empty string without control characters.

        """
        names = meta_stats.check_fields(fields)
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            counted = meta_stats.sql_count_unique(self._core.db, names, rowids)
            if counted is not None:
                return counted
            return meta_stats.count_unique((r.meta for r in self._aggregate_records(rowids)), names)

    def meta_min_max(self, field: str, filters: Filters = None) -> tuple[Any, Any]:
        """``(min, max)`` of metadata key ``field`` among the passages matching ``filters``.

        Over its numbers (booleans count as 0 and 1) or its strings; ``(None, None)`` when it holds neither, or
        both. Of equal values (``1``, ``1.0``, ``True``) the first passage's is returned. Computed in SQLite.

        Raises:
            InvalidInputError: ``field`` is not a non-empty string without control characters.

        """
        name = meta_stats.check_field(field)
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            found = meta_stats.sql_min_max(self._core.db, name, rowids)
            if found is not None:
                return found
            return meta_stats.min_max((r.meta for r in self._aggregate_records(rowids)), name)

    def meta_field_types(self, filters: Filters = None) -> dict[str, str]:
        """Each metadata key holding a non-null value among the passages matching ``filters``, with its kind.

        The kind (``boolean``, ``int``, ``float`` or ``keyword``) of the key's value in the last passage (rowid
        order) holding one. Computed in SQLite (``json_each``).
        """
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            kinds = meta_stats.sql_field_types(self._core.db, rowids)
            if kinds is not None:
                return kinds
            return meta_stats.field_types(r.meta for r in self._aggregate_records(rowids))

    def count_with_extra(self, paths: Sequence[Sequence[str]], filters: Filters = None) -> tuple[int, list[int]]:
        """``(passages matching filters, how many of them hold a non-null value at each path into extra)``.

        A path is a tuple of keys (``("haystack", "meta_exact")``); an adapter uses it to see whether the
        passages carry a payload that changes what their metadata means to it. Counted in SQLite.
        """
        keys = [meta_stats.check_path(p) for p in paths]
        with self._reading():
            rowids = self._aggregate_rowids(filters)
            counted = meta_stats.sql_count_present(self._core.db, keys, rowids)
            if counted is not None:
                return counted
            return meta_stats.count_present((r.extra for r in self._aggregate_records(rowids)), keys)
