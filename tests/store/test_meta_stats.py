"""Metadata aggregates of the local store against the Python reference (rag_hier.store.meta_stats).

``check_aggregates`` is shared with tests/milvus/test_milvus_meta_stats.py: the same store contents and
checks on the Milvus backend.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier.corpus.model import Passage
from rag_hier.errors import InvalidInputError
from rag_hier.store import HierStore, meta_stats
from rag_hier.store.contract import StoreBackend

FIELDS = ["i", "f", "s", "b", "mixed", "lst", "nested", "num", "sparse", "absent", "a.b", 'q"k']

FILTERS: list[Any] = [
    None,
    {"field": "meta.i", "operator": ">=", "value": 3},
    {"field": "meta.s", "operator": "in", "value": ["x", "y"]},
    {
        "operator": "OR",
        "conditions": [
            {"field": "meta.b", "operator": "==", "value": True},
            {"field": "meta.sparse", "operator": "!=", "value": None},
        ],
    },
    {"field": "meta.nested.k", "operator": "==", "value": 1},  # nested: Python in part
    lambda rec: rec.meta.get("s") in ("é", "Z"),  # a predicate: evaluated in Python
    {"field": "meta.i", "operator": "<", "value": -100},  # matches nothing
]


def mixed_passages(n: int = 120, seed: int = 0) -> list[Passage]:
    """Passages whose metadata mixes ints, floats, strings, booleans, lists, objects and missing keys."""
    rng = random.Random(seed)
    scalars: list[Any] = [0, 1, 1.0, True, False, 0.0, 2.5, -3, "1", "a", "b", "", None]
    out = []
    for k in range(n):
        meta: dict[str, Any] = {
            "i": rng.randint(-5, 9),
            "f": rng.choice([0.5, 1.0, 2.25, -0.75, 3.0]),
            "s": rng.choice(["x", "y", "z", "é", "ab", "Z"]),
            "b": rng.random() < 0.5,
            "mixed": rng.choice(scalars),
            "lst": rng.choice([[1, 2], [1.0, 2], [True, 2], ["a"], [], [[1], {"k": 1}]]),
            "nested": rng.choice([{"k": 1, "j": "x"}, {"j": "x", "k": 1.0}, {"k": 2}, {}]),
            "num": rng.choice([1, 1.0, True, 0, False, 7, 7.0]),
            "a.b": rng.choice(["dot", "ted"]),
            'q"k': rng.choice([1, 2]),
        }
        if k % 3 == 0:
            meta["sparse"] = rng.choice([None, "p", 3])
        if k % 7 == 0:
            del meta["i"]
        out.append(Passage(id=f"p{k}", doc_id=f"d{k % 10}", position=k // 10, text=f"text {k}", meta=meta))
    return out


def fill(store: StoreBackend, passages: list[Passage]) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(passages), 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store.add_passages(passages, vectors)


def check_aggregates(store: StoreBackend) -> None:
    """Every aggregate, with every filter, equals the reference over ``filter_passages``."""
    for filters in FILTERS:
        metas = [p.meta for p in store.filter_passages(filters)]
        assert store.count_unique_meta(FIELDS, filters) == meta_stats.count_unique(metas, FIELDS), filters
        for field in FIELDS:
            got = store.meta_min_max(field, filters)
            want = meta_stats.min_max(metas, field)
            assert got == want, (field, filters)
            assert [type(v) for v in got] == [type(v) for v in want], (field, filters)
        assert store.meta_field_types(filters) == meta_stats.field_types(metas), filters
        extras = [p.extra for p in store.filter_passages(filters)]
        paths = [("haystack",), ("haystack", "meta_exact"), ("absent",)]
        assert store.count_with_extra(paths, filters) == meta_stats.count_present(extras, paths)


def check_bad_fields(store: StoreBackend) -> None:
    for bad in ["", 3, None, "a\nb"]:
        with pytest.raises(InvalidInputError, match="field"):
            store.count_unique_meta(["i", bad])  # type: ignore[list-item]
        with pytest.raises(InvalidInputError, match="field"):
            store.meta_min_max(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="'i'"):
        store.count_unique_meta("i")  # type: ignore[arg-type]  # a string, not a list of names
    with pytest.raises(InvalidInputError, match="paths"):
        store.count_with_extra(["haystack"])  # type: ignore[list-item]


@pytest.fixture
def mixed_store(tmp_path: Path) -> HierStore:
    store = HierStore.create(tmp_path / "s", model=None, dimension=4)
    fill(store, mixed_passages())
    return store


def test_aggregates_equal_the_reference(mixed_store: HierStore) -> None:
    check_aggregates(mixed_store)


def test_aggregates_with_extra_payloads(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None, dimension=4)
    passages = mixed_passages(30)
    for k, p in enumerate(passages):
        if k % 2:
            payload: dict[str, Any] = {"meta_exact": {"i": 1}} if k % 4 == 1 else {}
            passages[k] = Passage(
                id=p.id, doc_id=p.doc_id, position=p.position, text=p.text, meta=p.meta, extra={"haystack": payload}
            )
    fill(store, passages)
    check_aggregates(store)
    assert store.count_with_extra([("haystack",), ("haystack", "meta_exact")]) == (30, [15, 8])


def test_sql_answers_without_the_reference(mixed_store: HierStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain keys are answered in SQL (the reference is never called) with and without a pushed filter."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Python reference ran")

    plain = ["i", "f", "s", "b", "mixed", "lst", "nested", "num", "a.b"]
    want = {f: mixed_store.count_unique_meta([f], FILTERS[1]) for f in plain}
    for name in ("count_unique", "min_max", "field_types", "count_present"):
        monkeypatch.setattr(meta_stats, name, refuse)
    assert mixed_store.count_unique_meta(plain, FILTERS[1]) == {f: want[f][f] for f in plain}
    mixed_store.meta_min_max("f", FILTERS[2])
    mixed_store.meta_field_types(FILTERS[3])
    mixed_store.count_with_extra([("haystack",)])


def test_big_numbers_and_nul_fall_back(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None, dimension=4)
    metas: list[dict[str, Any]] = [
        {"n": 2**70, "t": "a\x00b"},
        {"n": 2**70 + 1, "t": "a\x00c"},
        {"n": 1e300, "t": "a"},
    ]
    fill(store, [Passage(id=f"p{k}", doc_id="d", position=k, text="t", meta=m) for k, m in enumerate(metas)])
    assert store.count_unique_meta(["n", "t"]) == {"n": 3, "t": 3}
    assert store.meta_min_max("n") == (2**70, 1e300)
    assert store.meta_field_types() == {"n": "float", "t": "keyword"}


def test_bad_field_names(mixed_store: HierStore) -> None:
    check_bad_fields(mixed_store)
