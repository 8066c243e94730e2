"""Metadata aggregates: counted by the store where the Documents' meta is its stored metadata (a store mixin)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from haystack_integrations.document_stores.rag_hier._convert import (
    EXTRA_KEY,
)
from haystack_integrations.document_stores.rag_hier._lifecycle import _engine_errors

from rag_hier.store.contract import StoreBackend as Store
from rag_hier.store.filters import Predicate
from rag_hier.store.meta_stats import check_field, check_fields

__all__ = ["MetadataAggregates"]


def _hashable(value: Any) -> Any:
    """A hashable stand-in for a metadata value (lists, tuples and dicts included), for distinct counts."""
    if isinstance(value, list):
        return ("list", tuple(_hashable(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((_hashable(k), _hashable(v)) for k, v in value.items()))
    return value


def _meta_key(field: str) -> str:
    # a field that is not a string is left as it is: check_field names it
    return field.removeprefix("meta.") if isinstance(field, str) else field


_ADDED_KEYS = frozenset({"source_id", "split_id", "title_path"})
"""Keys :func:`document_meta` adds to the meta of passages the engine wrote (not Haystack)."""
_PAYLOAD_PATHS = ((EXTRA_KEY,), (EXTRA_KEY, "meta_exact"))
"""Paths into a passage's ``extra``: the Haystack payload, and the exact values it keeps beside the JSON form."""


class MetadataAggregates:
    """RagHierDocumentStore's metadata aggregates (distinct counts, field types, min / max, distinct values)."""

    def _meta_is_stored_meta(self, store: Store, predicate: Predicate | None, keys: Iterable[str] | None) -> bool:
        """Whether the Documents' meta of the matching passages is their stored metadata, for ``keys`` (``None``: all).

        Then the store computes metadata aggregates itself (SQL, a Milvus query). It is not where a passage
        keeps exact values beside their JSON form (tuples, datetimes: ``meta_exact``), or where a passage the
        engine wrote gets ``source_id``/``split_id``/``title_path`` added (:func:`document_meta`) and a key
        asked for is one of those.
        """
        total, (haystack, exact) = store.count_with_extra(_PAYLOAD_PATHS, predicate)
        if exact:
            return False
        return haystack == total or (keys is not None and not _ADDED_KEYS.intersection(keys))

    def count_unique_metadata_by_filter(self, filters: dict[str, Any], metadata_fields: list[str]) -> dict[str, int]:
        """Return, per metadata field, the number of distinct non-null values among matching documents.

        Counted by the store (SQLite ``json_extract``, or over the rows a Milvus query filtered), not by reading
        every Document.

        Args:
            filters: A Haystack filter; ``{}`` means every document.
            metadata_fields: Field names, with or without the ``meta.`` prefix.

        Returns:
            ``{field (without "meta."): number of distinct values}``.

        """
        keys = check_fields([_meta_key(name) for name in metadata_fields], "metadata_fields")
        with _engine_errors():
            store = self._read_handle()
            predicate = self._predicate(filters, store)
            with store.reading():  # one generation; Milvus fetches the rows once for both calls
                if self._meta_is_stored_meta(store, predicate, keys):
                    return store.count_unique_meta(keys, predicate)
        metas = self._matching_metas(filters)
        result: dict[str, int] = {}
        for key in keys:
            result[key] = len({_hashable(m[key]) for m in metas if m.get(key) is not None})
        return result

    def get_metadata_fields_info(self) -> dict[str, dict[str, str]]:
        """Return the metadata fields in use with their type (``keyword``, ``int``, ``float`` or ``boolean``).

        A field's type is that of its value in the last document holding one; computed by the store.
        """
        with _engine_errors():
            store = self._read_handle()
            with store.reading():
                if self._meta_is_stored_meta(store, None, None):
                    return {key: {"type": kind} for key, kind in store.meta_field_types().items()}
        types: dict[str, str] = {}
        for meta in self._matching_metas(None):
            for key, value in meta.items():
                if value is None:
                    continue
                if isinstance(value, bool):
                    types[key] = "boolean"
                elif isinstance(value, int):
                    types[key] = "int"
                elif isinstance(value, float):
                    types[key] = "float"
                else:
                    types[key] = "keyword"
        return {key: {"type": kind} for key, kind in types.items()}

    def get_metadata_field_min_max(self, metadata_field: str) -> dict[str, Any]:
        """Return ``{"min", "max"}`` of a metadata field (``None`` for both when it has no comparable values)."""
        key = check_field(_meta_key(metadata_field), "metadata_field")
        with _engine_errors():
            store = self._read_handle()
            with store.reading():
                if self._meta_is_stored_meta(store, None, [key]):
                    low, high = store.meta_min_max(key)
                    return {"min": low, "max": high}
        values = [
            m[key]
            for m in self._matching_metas(None)
            if m.get(key) is not None and isinstance(m[key], int | float | str)
        ]
        if not values:
            return {"min": None, "max": None}
        try:
            return {"min": min(values), "max": max(values)}
        except TypeError:
            return {"min": None, "max": None}

    def get_metadata_field_unique_values(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """Return a page of the distinct values of a metadata field, and how many there are.

        Args:
            metadata_field: The field, with or without the ``meta.`` prefix.
            search_term: Keep values containing this text (case-insensitive).
            from_: Offset of the page in the sorted distinct values.
            size: Page size.
            filters: Restrict to documents matching this filter.

        Returns:
            ``(values, total)``; values keep their type (``1``, ``1.0``, ``"1"`` and ``True`` are distinct).

        """
        key = _meta_key(metadata_field)
        unique: dict[tuple[str, Any], Any] = {}
        for meta in self._matching_metas(filters):
            value = meta.get(key)
            if value is not None:
                unique.setdefault((type(value).__name__, _hashable(value)), value)
        if search_term:
            needle = search_term.lower()
            unique = {k: v for k, v in unique.items() if needle in str(v).lower()}
        ordered = sorted(unique, key=lambda k: (str(unique[k]), k[0]))
        return [unique[k] for k in ordered[from_ : from_ + size]], len(ordered)
