"""Filters pushed down to SQLite answer exactly like the Python evaluator (the reference), or fall back to it.

A differential test: random Haystack filters over a store whose metadata mixes every JSON type (bools next to
ints and floats, numbers beyond 64 bits, strings that look like numbers or dates or hold NUL, lists, objects,
nested keys next to flat dotted keys, missing keys and nulls) give the same rowids through the SQL translation
as through :func:`rag_hier.store.filters.compile_filter`; where the Python evaluator raises a FilterError, the
SQL path declines (so the store raises the same error).
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_hier.corpus.model import Passage
from rag_hier.errors import FilterError, StoreCorruptedError, StoreError
from rag_hier.store import HierStore, sql_filters
from rag_hier.store.filters import compile_filter
from rag_hier.store.sql_filters import select_matching, translate

SCALARS: list[Any] = [
    None, True, False, 0, 1, -1, 2, 1.0, 0.5, -2.5, 1e300, 2**63 - 1, 2**63, -(2**63), 2**70 + 1, -(2**70),
    "", "a", "b", "1", "\\u0000", "true", "2021-01-01", "2021-01-01T10:00:00+00:00", 'q"uote', "é", "a\x00b", "a\x00",
]  # fmt: skip
CONTAINERS: list[Any] = [[], [1], ["a", 1, None], {"b": 1}, {"b": "a", "c": {"d": 1}}, {}, [[1]]]
KEYS = ["k", "a", "a.b", "b", 'q"k', "x y", "l", "n", "é"]


def _meta(rng: random.Random) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key in KEYS:
        r = rng.random()
        if r < 0.3:
            continue  # missing
        if key == "a" and r < 0.65:
            meta[key] = {"b": rng.choice([*SCALARS, *CONTAINERS]), **({"c": 1} if rng.random() < 0.5 else {})}
        elif key == "b":  # no NUL: string lookups through its index are answered in SQL
            meta[key] = rng.choice([v for v in SCALARS if not (isinstance(v, str) and ("\x00" in v or "\\" in v))])
        elif r < 0.9:
            meta[key] = rng.choice(SCALARS)
        else:
            meta[key] = rng.choice(CONTAINERS)
    return meta


@pytest.fixture(scope="module", params=["plain", "indexed-before", "indexed-after"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> HierStore:
    """The mixed-metadata store; with metadata indexes created before the writes or after them."""
    rng = random.Random(7)
    passages, vectors = [], []
    for i in range(160):
        doc = f"d{i % 9}"
        passages.append(
            Passage(f"{doc}#{i}", doc, i % 5, rng.choice(["a", "b", "text", "1", "é"]), section=i % 3, meta=_meta(rng))
        )
        vectors.append(None if i % 4 == 0 else np.random.default_rng(i).standard_normal(4).astype(np.float32))
    s = HierStore.create(tmp_path_factory.mktemp("sqlf") / "s", model=None, dimension=4)
    if request.param == "indexed-before":
        for key in INDEXED:
            s.index_meta_field(key)
    s.add_passages(passages, vectors)
    # updates through every write path: upserts with new metadata, metadata merges, deletes
    s.add_passages([replace(p, meta=_meta(rng)) for p in passages[:20]], vectors[:20])
    s.update_meta([p.id for p in passages[20:40]], {"k": rng.choice(SCALARS), "n": 1})
    s.delete_passages([p.id for p in passages[40:50]])
    if request.param == "indexed-after":
        for key in INDEXED:
            s.index_meta_field(f"meta.{key}")
    if request.param != "plain":
        assert s.meta_indexes == sorted(INDEXED)
        # a string lookup through the index of "b" (which holds no NUL) is answered in SQL, not Python
        spec = {"field": "meta.b", "operator": "in", "value": ["a", 1]}
        assert select_matching(s._core.db, spec, indexed=INDEXED) is not None
    return s


INDEXED = ["k", "l", "n", "b"]


FIELDS = [
    "meta.k", "meta.a", "meta.a.b", "meta.a.c", "meta.a.b.c", "meta.missing", "meta.missing.deeper", "k", "a.b",
    "meta.n", "meta.l", 'meta.q"k', "meta.x y", "meta.é", "meta.", "meta.a..b", "id", "doc_id", "content", "text",
    "position", "section", "title_path", "l",
]  # fmt: skip
FILTER_VALUES = st.sampled_from(
    [*SCALARS, float("nan"), float("inf"), "d1", "d1#10", 3, 1.5, *CONTAINERS, (1,), frozenset({1, "a"}), set()]
)
IN_VALUES = st.lists(FILTER_VALUES, max_size=4) | st.frozensets(st.sampled_from([None, 1, "a", "d2", 0.5]), max_size=3)
leaves = st.one_of(
    st.fixed_dictionaries(
        {
            "field": st.sampled_from(FIELDS),
            "operator": st.sampled_from(["==", "!=", ">", ">=", "<", "<="]),
            "value": FILTER_VALUES,
        }
    ),
    st.fixed_dictionaries(
        {"field": st.sampled_from(FIELDS), "operator": st.sampled_from(["in", "not in"]), "value": IN_VALUES}
    ),
)
filters = st.recursive(
    leaves,
    lambda inner: st.fixed_dictionaries(
        {"operator": st.sampled_from(["AND", "OR", "NOT"]), "conditions": st.lists(inner, max_size=3)}
    ),
    max_leaves=6,
)

_ERROR = object()


def _reference(store: HierStore, spec: Any, with_vector: bool) -> Any:
    predicate = compile_filter(spec)
    assert predicate is not None
    try:
        return [r.rowid for r in store.iter_records() if (r.has_vector or not with_vector) and predicate(r)]
    except FilterError:
        return _ERROR


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=filters)
def test_sql_and_python_agree(store: HierStore, spec: Any) -> None:
    _check(store, spec)


def _check(store: HierStore, spec: Any) -> int:
    """Compare both paths on ``spec``; returns how many of its two reads the SQL path answered."""
    db = store._core.db
    answered = 0
    for with_vector in (True, False):
        expected = _reference(store, spec, with_vector)
        got = select_matching(db, spec, restrict="has_vector=1" if with_vector else "")
        answered += got is not None
        if expected is _ERROR:
            assert got is None, spec  # the SQL path must not answer where Python raises
            with pytest.raises(FilterError):
                store.matching_rowids(spec, with_vector=with_vector)
            continue
        if got is not None:
            assert sorted(got) == expected, spec
        assert store.matching_rowids(spec, with_vector=with_vector).tolist() == expected, spec
    if expected is not _ERROR:
        assert store.count_passages(spec) == len(expected)
        found = [p.id for p in store.filter_passages(spec)]
        assert found == [r.passage_id for r in store.records(expected).values()]
    return answered


def _random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    if depth < 2 and rng.random() < 0.4:
        op = rng.choice(["AND", "OR", "NOT"])
        return {"operator": op, "conditions": [_random_filter(rng, depth + 1) for _ in range(rng.randint(0, 3))]}
    op = rng.choice(["==", "!=", ">", ">=", "<", "<=", "in", "not in"])
    pool = [*SCALARS, 3, 1.5, "d1"]
    if op in ("in", "not in"):
        value: Any = rng.sample(pool, rng.randint(0, 4))
    else:
        value = rng.choice(pool)
    return {"field": rng.choice(FIELDS), "operator": op, "value": value}


def test_most_plain_filters_are_answered_in_sql(store: HierStore) -> None:
    # the differential check on filters of scalar values only: the SQL path must answer a good share
    rng = random.Random(11)
    answered = sum(_check(store, _random_filter(rng)) for _ in range(150))
    assert answered > 0.25 * 300, answered  # the rest: dates, big numbers, keys SQLite cannot name, raising rows


@pytest.mark.parametrize(
    "spec",
    [
        {"field": "meta.k", "operator": "==", "value": 1},
        {"field": "meta.k", "operator": "==", "value": "a"},
        {"field": "meta.k", "operator": "==", "value": None},
        {"field": "meta.k", "operator": "!=", "value": True},
        {"field": "meta.a.b", "operator": "in", "value": [1, "a", None]},
        {"field": "doc_id", "operator": "in", "value": ["d1", "d2"]},
        {"field": "position", "operator": ">=", "value": 2},
        {"operator": "NOT", "conditions": [{"field": "id", "operator": "==", "value": "d1#10"}]},
    ],
)
def test_simple_filters_are_translated(spec: dict[str, Any]) -> None:
    assert translate(spec) is not None


@pytest.mark.parametrize(
    "spec",
    [
        {"field": "meta.k", "operator": ">", "value": "2021-01-01"},  # dates: Python
        {"field": "meta.k", "operator": "==", "value": [1]},
        {"field": "meta.k", "operator": "in", "value": "abc"},  # Python raises its error
        {"field": "meta.k", "operator": "<", "value": 2**63},
        {"field": "meta.k", "operator": "==", "value": float("inf")},
        {"field": "title_path", "operator": "==", "value": ["T"]},
        {"field": 'meta.q"k', "operator": "==", "value": 1},
        {"field": "meta.k", "operator": "==", "value": "a\x00"},
    ],
)
def test_what_sql_cannot_answer_exactly_is_left_to_python(spec: dict[str, Any]) -> None:
    assert translate(spec) is None


def test_ordering_on_a_string_value_keeps_the_python_error(store: HierStore) -> None:
    # meta.k holds strings in some rows: a numeric ordering raises in Python, so the SQL path declines
    spec = {"field": "meta.k", "operator": "<", "value": 5}
    assert select_matching(store._core.db, spec, restrict="") is None
    with pytest.raises(FilterError):
        store.count_passages(spec)


HOSTILE_FIELDS = [
    "meta.x'); DROP TABLE passages; --",
    "meta.k') OR 1=1 --",
    'x" OR 1=1 --',
    "meta.$[0]",
    "meta.k' || '",
    "meta.*",
]


@pytest.mark.parametrize("field_name", HOSTILE_FIELDS)
@pytest.mark.parametrize("value", ["x'); DROP TABLE passages; --", "' OR '1'='1", 1, None])
def test_hostile_fields_and_values_are_bound_never_executed(tmp_path: Any, field_name: str, value: Any) -> None:
    s = HierStore.create(tmp_path / "h", model=None, dimension=2)
    meta = {field_name[5:] if field_name.startswith("meta.") else field_name: value, "k": "x"}
    s.add_passages(
        [Passage("p#0", "p", 0, "t", meta=meta), Passage("p#1", "p", 1, "t", meta={"k": "y"})],
        np.eye(2, dtype=np.float32),
    )
    for op in ("==", "!=", "in"):
        spec = {"field": field_name, "operator": op, "value": [value] if op == "in" else value}
        predicate = compile_filter(spec)
        assert predicate is not None
        expected = [r.rowid for r in s.iter_records() if predicate(r)]
        sf = translate(spec)
        if sf is not None:
            assert "DROP" not in sf.where and "OR 1=1" not in sf.where
        assert s.matching_rowids(spec).tolist() == expected
    assert s.count_passages() == 2  # the table is still there, untouched
    s.close()


def _plant_meta(store: HierStore, passage_id: str, raw: str) -> None:
    """A metadata row as an earlier version could write it: Python's JSON writes NaN and Infinity, which
    SQLite's JSON reader (3.40) refuses (passages refuse such values now, but stores may hold them)."""
    store._core.db.execute("UPDATE passages SET meta=? WHERE passage_id=?", (raw, passage_id))


def test_metadata_sqlite_cannot_read_falls_back(tmp_path: Any) -> None:
    s = HierStore.create(tmp_path / "n", model=None, dimension=2)
    s.add_passages(
        [Passage("p#0", "p", 0, "t", meta={"k": 0}), Passage("p#1", "p", 1, "t", meta={"k": 1})],
        np.eye(2, dtype=np.float32),
    )
    _plant_meta(s, "p#0", '{"k":NaN}')  # SQLite cannot read this row's metadata: Python answers
    assert s.count_passages({"field": "meta.k", "operator": "==", "value": 1}) == 1
    assert s.count_passages({"field": "meta.k", "operator": "!=", "value": 1}) == 1
    s.close()


def test_writes_by_filter(tmp_path: Any) -> None:
    s = HierStore.create(tmp_path / "w", model=None, dimension=2)
    s.add_passages(
        [Passage(f"p#{i}", "p", i, "t", meta={"k": i % 3, "s": "a" if i % 2 else "b"}) for i in range(12)],
        np.tile(np.eye(2, dtype=np.float32), (6, 1)),
    )
    assert s.update_by_filter({"field": "meta.k", "operator": "==", "value": 1}, {"tag": True}) == 4
    assert s.count_passages({"field": "meta.tag", "operator": "==", "value": True}) == 4
    spec = {"operator": "AND", "conditions": [{"field": "meta.tag", "operator": "==", "value": 1},
                                              {"field": "meta.s", "operator": "==", "value": "a"}]}  # fmt: skip
    assert s.delete_by_filter(spec) == 2
    assert s.count_passages() == 10
    assert s.count_passages({"field": "meta.tag", "operator": "==", "value": True}) == 2
    s.close()


def test_an_indexed_field_is_looked_up_and_persists(tmp_path: Any) -> None:
    s = HierStore.create(tmp_path / "i", model=None, dimension=2)
    s.add_passages(
        [Passage(f"p#{i}", "p", i, "t", meta={"cat": ["x", "y", 3][i % 3], "n": i}) for i in range(30)],
        np.tile(np.eye(2, dtype=np.float32), (15, 1)),
    )
    generation = s.generation
    s.index_meta_field("meta.cat")
    s.index_meta_field("cat")  # twice: nothing more
    assert s.generation == generation + 1
    spec = {"field": "meta.cat", "operator": "==", "value": "x"}
    sf = translate(spec, ["cat"])
    assert sf is not None and "meta_index" in sf.where and "json_extract" not in sf.where
    plan = " ".join(str(r) for r in s._core.db.execute("EXPLAIN QUERY PLAN " + sf.query("id")[0], sf.params))
    assert "meta_index_by_value" in plan, plan
    assert s.count_passages(spec) == 10
    assert s.matching_rowids(spec).tolist() == [r.rowid for r in s.iter_records() if r.meta["cat"] == "x"]
    s.close()
    s = HierStore.open(tmp_path / "i")  # the schema check accepts the index, the state lists it
    assert s.meta_indexes == ["cat"]
    s.add_passages([Passage("q#0", "q", 0, "t", meta={"cat": "x"})], np.eye(2, dtype=np.float32)[:1])
    assert s.count_passages(spec) == 11
    s.update_meta(["q#0"], {"cat": "z"})
    assert s.count_passages(spec) == 10
    assert s.count_passages({"field": "meta.cat", "operator": "in", "value": ["z", 3]}) == 11
    s.delete_by_filter({"field": "meta.cat", "operator": "==", "value": "z"})
    assert s.count_passages({"field": "meta.cat", "operator": "==", "value": "z"}) == 0
    # a numeric ordering on a field holding strings keeps Python's error
    with pytest.raises(FilterError):
        s.count_passages({"field": "meta.cat", "operator": ">", "value": 1})
    s.close()


@pytest.mark.parametrize("field_name", ["meta.a.b", "x y", "", "meta.", 3, "a'b", "-a", "k" * 65])
def test_only_plain_top_level_keys_can_be_indexed(tmp_path: Any, field_name: Any) -> None:
    s = HierStore.create(tmp_path / "b", model=None, dimension=2)
    with pytest.raises(StoreError, match="index"):
        s.index_meta_field(field_name)
    assert s.meta_indexes == []
    s.close()


def test_an_index_on_unreadable_metadata_answers_in_python(tmp_path: Any) -> None:
    s = HierStore.create(tmp_path / "u", model=None, dimension=2)
    s.add_passages(
        [Passage("p#0", "p", 0, "t", meta={"k": 1, "z": 0}), Passage("p#1", "p", 1, "t", meta={"k": 1})],
        np.eye(2, dtype=np.float32),
    )
    _plant_meta(s, "p#0", '{"k":1,"z":Infinity}')
    s.index_meta_field("k")  # built over a row SQLite cannot read
    assert s.count_passages({"field": "meta.k", "operator": "==", "value": 1}) == 2
    s.close()


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE meta_index (field TEXT, value, passage INTEGER, extra)",
        "CREATE INDEX meta_index_by_value ON passages(doc_id)",
    ],
)
def test_a_planted_metadata_index_of_another_shape_is_refused(tmp_path: Any, sql: str) -> None:
    import sqlite3

    s = HierStore.create(tmp_path / "p", model=None, dimension=2)
    s.close()
    db = sqlite3.connect(tmp_path / "p" / "store.sqlite")
    db.execute(sql)
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptedError, match="differs from the rag-hier schema"):
        HierStore.open(tmp_path / "p", verify_checksums=False)


def test_a_slow_scan_of_unindexed_metadata_says_once_how_to_index_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sql_filters, "SCAN_HINT_SECONDS", 0.0)
    monkeypatch.setattr(sql_filters, "_hinted", set())
    s = HierStore.create(tmp_path / "hint", model=None, dimension=2)
    s.add_passages(
        [Passage(f"p{i}", "d", i, "t", meta={"bucket": i % 3, "kind": "a"}) for i in range(6)],
        np.eye(2, dtype=np.float32)[[i % 2 for i in range(6)]],
    )
    s.index_meta_field("kind")
    with caplog.at_level(logging.WARNING, logger="rag_hier.store.sql_filters"):
        assert s.count_passages({"field": "meta.bucket", "operator": "==", "value": 1}) == 2
        assert s.count_passages({"field": "meta.bucket", "operator": ">", "value": 0}) == 4
        assert s.count_passages({"field": "meta.kind", "operator": "==", "value": "a"}) == 6
    hints = [r.getMessage() for r in caplog.records]
    assert len(hints) == 1, hints  # once per key; the indexed key never
    assert "meta.bucket" in hints[0] and "store.index_meta_field('bucket')" in hints[0]
    s.close()
