"""Metadata aggregates of RagHierDocumentStore computed by the store equal the Python scan over Documents."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

import pytest
from haystack import Document
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.corpus.model import Passage
from rag_hier.errors import InvalidInputError

FIELDS = ["i", "f", "s", "b", "mixed", "lst", "nested", "num", "sparse", "absent", "source_id", "split_id"]
FILTERS: list[dict[str, Any]] = [
    {},
    {"field": "meta.i", "operator": ">=", "value": 3},
    {"field": "meta.s", "operator": "in", "value": ["x", "y"]},
    {"field": "meta.nested.k", "operator": "==", "value": 1},
]


def _documents(n: int = 60, seed: int = 1) -> list[Document]:
    rng = random.Random(seed)
    docs = []
    for k in range(n):
        meta: dict[str, Any] = {
            "i": rng.randint(-5, 9),
            "f": rng.choice([0.5, 1.0, 2.25, -0.75]),
            "s": rng.choice(["x", "y", "z", "é"]),
            "b": rng.random() < 0.5,
            "mixed": rng.choice([0, 1, 1.0, True, False, "1", "a", None]),
            "lst": rng.choice([[1, 2], [1.0, 2], ["a"], []]),
            "nested": rng.choice([{"k": 1, "j": "x"}, {"j": "x", "k": 1.0}, {"k": 2}]),
            "num": rng.choice([1, 1.0, True, 0, 7]),
        }
        if k % 3 == 0:
            meta["sparse"] = rng.choice(["p", 3])
        docs.append(Document(id=f"d{k}", content=f"text {k}", meta=meta))
    return docs


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return ("list", tuple(_hashable(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((k, _hashable(v)) for k, v in value.items()))
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int"
    return "float" if isinstance(value, float) else "keyword"


def check_against_scan(store: RagHierDocumentStore) -> None:
    """The rules the adapter had (a scan over filter_documents' meta), as the reference."""
    for filters in FILTERS:
        metas = [d.meta for d in store.filter_documents(filters)]
        want = {f: len({_hashable(m[f]) for m in metas if m.get(f) is not None}) for f in FIELDS}
        assert store.count_unique_metadata_by_filter(filters, [f"meta.{f}" for f in FIELDS]) == want, filters
    metas = [d.meta for d in store.filter_documents()]
    kinds: dict[str, str] = {}
    for meta in metas:
        kinds.update({k: _kind(v) for k, v in meta.items() if v is not None})
    assert store.get_metadata_fields_info() == {k: {"type": t} for k, t in kinds.items()}
    for f in [*FIELDS, "when", "pair"]:
        values = [m[f] for m in metas if m.get(f) is not None and isinstance(m[f], int | float | str)]
        try:
            want_mm = {"min": min(values), "max": max(values)} if values else {"min": None, "max": None}
        except TypeError:
            want_mm = {"min": None, "max": None}
        got = store.get_metadata_field_min_max(f)
        assert got == want_mm, f
        assert [type(v) for v in got.values()] == [type(v) for v in want_mm.values()], f


@pytest.fixture
def document_store(store_location: dict[str, Any]) -> Any:
    store = RagHierDocumentStore(**store_location)
    yield store
    store.close()


def test_store_computed_aggregates(document_store: RagHierDocumentStore, monkeypatch: pytest.MonkeyPatch) -> None:
    document_store.write_documents(_documents())
    check_against_scan(document_store)

    def no_scan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the adapter read every Document")

    monkeypatch.setattr(document_store, "_matching_metas", no_scan)
    document_store.count_unique_metadata_by_filter(FILTERS[1], ["i", "s"])
    document_store.get_metadata_fields_info()
    document_store.get_metadata_field_min_max("f")


def test_exact_values_and_engine_passages(document_store: RagHierDocumentStore) -> None:
    """Tuples and datetimes (kept exact beside their JSON form) and passages the engine wrote (source_id ...)."""
    docs = _documents(20)
    docs[3].meta["pair"] = (1, 2)
    docs[4].meta["pair"] = [1, 2]
    docs[5].meta["when"] = datetime(2024, 1, 2)
    docs[6].meta["when"] = "2024-01-03"
    document_store.write_documents(docs)
    check_against_scan(document_store)
    document_store.delete_documents([d.id for d in docs[3:7]])
    engine = document_store._write_handle()
    engine.add_passages(
        [Passage(id="e0", doc_id="book", position=4, text="t", meta={"i": 2, "s": "x"}, title_path=("Book",))],
        encode_missing=False,
    )
    check_against_scan(document_store)


def test_bad_field_names(document_store: RagHierDocumentStore) -> None:
    document_store.write_documents(_documents(5))
    with pytest.raises(InvalidInputError, match="metadata_fields"):
        document_store.count_unique_metadata_by_filter({}, ["i", 7])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="metadata_field"):
        document_store.get_metadata_field_min_max("meta.")
