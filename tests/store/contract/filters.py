"""Filters: Haystack-syntax filters answered like the reference predicate, values that cannot inject, ``Refined``
filters pushed down as far as the backend's ``filter_pushdown`` says, and writes by filter."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from rag_hier import Document
from rag_hier.errors import FilterError
from rag_hier.retrieval import build_retriever
from rag_hier.store import Refined
from rag_hier.store.contract import FilterPushdown, StoreBackend
from rag_hier.store.filters import compile_filter

from .base import HOSTILE, ContractBase, StoreFactory, unique_name

FILTERS = [
    {"field": "meta.note", "operator": "==", "value": HOSTILE},
    {"field": "meta.note", "operator": "!=", "value": HOSTILE},
    {"field": "meta.path", "operator": "==", "value": "C:\\temp\\'q'"},
    {"field": "meta.topic", "operator": "in", "value": ['sea" or "1"=="1', "animals"]},
    {"field": "id", "operator": "==", "value": '" || true || "'},
    {"operator": "NOT", "conditions": [{"field": "meta.year", "operator": ">", "value": 2000}]},
    {"field": "meta.year", "operator": "==", "value": None},
    {"field": "meta.missing", "operator": "!=", "value": 3},
    {"field": "meta.tags", "operator": "==", "value": ["insect", "farm"]},
    {
        "operator": "OR",
        "conditions": [
            {"field": "doc_id", "operator": "==", "value": "tides"},
            {"field": "content", "operator": "==", "value": "Honey is stored in wax cells."},
        ],
    },
    {"field": "meta.year", "operator": ">=", "value": 2001},
    {"field": "meta.topic", "operator": "not in", "value": ["sea", "earth"]},
]


def reference_ids(store: StoreBackend, filters: Mapping[str, Any]) -> list[str]:
    """The passage ids the reference predicate (``rag_hier.store.filters``) accepts, in rowid order."""
    predicate = compile_filter(filters)
    assert predicate is not None
    return [rec.passage_id for rec in store.iter_records() if predicate(rec)]


class FiltersContract(ContractBase):
    """Filters answer what ``rag_hier.store.filters`` (the reference) answers, on every method that takes one."""

    @pytest.mark.parametrize("filters", FILTERS, ids=range(len(FILTERS)))
    def test_filters_match_the_reference_and_values_cannot_inject(
        self, shared_store: StoreBackend, filters: dict[str, Any]
    ) -> None:
        want = reference_ids(shared_store, filters)
        assert [p.id for p in shared_store.filter_passages(filters)] == want, filters
        assert [p.id for p in shared_store.iter_passages(filters)] == want, filters
        assert shared_store.count_passages(filters) == len(want)
        rowids = shared_store.matching_rowids(filters)
        assert rowids is not None
        assert sorted(r.passage_id for r in shared_store.records(rowids.tolist()).values()) == sorted(want)

    def test_the_hostile_value_matches_itself_only(self, shared_store: StoreBackend) -> None:
        assert [p.id for p in shared_store.filter_passages(FILTERS[0])] == ["volcano#0", "volcano#1"]
        assert shared_store.count_passages(FILTERS[4]) == 0
        assert shared_store.count_passages(FILTERS[3]) == 3  # only "animals" matched

    def test_filters_are_prefilters_with_exact_top_k(self, shared_store: StoreBackend) -> None:
        store = shared_store
        flt = {"field": "meta.topic", "operator": "in", "value": ["earth", "sea"]}
        hits = store.search("honey bees", top_k=3, filters=flt)
        assert len(hits) == 3 and {h.doc_id for h in hits} == {"volcano", "tides"}
        logical = {
            "operator": "AND",
            "conditions": [
                {"field": "meta.year", "operator": ">=", "value": 2000},
                {"operator": "NOT", "conditions": [{"field": "doc_id", "operator": "==", "value": "bees"}]},
            ],
        }
        assert [p.id for p in store.filter_passages(logical)] == ["tides#0"]
        assert store.count_passages({"field": "meta.missing", "operator": "==", "value": None}) == 6
        assert store.matching_rowids(None) is None
        with pytest.raises(FilterError):
            store.filter_passages({"field": "meta.year", "operator": ">", "value": "not a date"})
        with pytest.raises(FilterError):
            store.filter_passages({"operator": "XOR", "conditions": []})

    def test_filter_pushdown_limits_never_change_an_answer(self, shared_store: StoreBackend) -> None:
        pushdown = shared_store.filter_pushdown
        assert isinstance(pushdown, FilterPushdown)
        assert isinstance(pushdown.numbers, bool) and pushdown.max_members > 0
        many = ["tides#0", "volcano#1", *(f"absent#{i}" for i in range(pushdown.max_members + 5))]
        longer = {"field": "id", "operator": "in", "value": many}  # past what the engine takes
        assert [p.id for p in shared_store.filter_passages(longer)] == ["tides#0", "volcano#1"]
        assert shared_store.count_passages({"field": "id", "operator": "not in", "value": many}) == 4
        numeric = {"field": "meta.year", "operator": "<", "value": 2005.5}  # in the engine or by the predicate
        assert [p.id for p in shared_store.filter_passages(numeric)] == reference_ids(shared_store, numeric)


# -- Refined filters (the coarse part pushed down, the predicate decides) -----------------------------------------
TOPICS = ["sea", "animals", "earth", "sky"]
SEA = {"field": "meta.topic", "operator": "==", "value": "sea"}


def _refined_docs() -> list[Document]:
    return [
        Document(
            f"d{i}",
            f"Title {i}",
            (f"passage {i} one", f"passage {i} two"),
            metadata={"topic": TOPICS[i % 4], "year": 2000 + i, "label": "odd" if i % 2 else "even"},
        )
        for i in range(12)
    ]


class Counting:
    """A predicate that counts the records it sees: ``label == "odd"`` (with the ``topic`` coarse filters below)."""

    def __init__(self, test: Any = None) -> None:
        self.seen = 0
        self.test = test or (lambda rec: rec["meta"].get("label") == "odd")

    def __call__(self, record: Mapping[str, Any]) -> bool:
        self.seen += 1
        return bool(self.test(record))


def _ids(passages: Any) -> list[str]:
    return [p.id for p in passages]


class RefinedFiltersContract(ContractBase):
    """``Refined`` filters: the coarse part pushed down where the backend can, the predicate's answer always."""

    @pytest.fixture()
    def refined_store(self, make_store: Any, encoder: Any) -> StoreBackend:
        """12 documents x 2 passages, topics in turn sea / animals / earth / sky, labels odd / even."""
        s = make_store(encoder=encoder)
        s.add_documents(_refined_docs(), max_passage_words=0)
        return s

    @pytest.fixture(scope="class")
    @classmethod
    def shared_refined_store(cls, factory: StoreFactory, encoder: Any) -> Iterator[StoreBackend]:
        s = factory.create(unique_name("refined"), encoder=encoder)
        s.add_documents(_refined_docs(), max_passage_words=0)
        yield s
        factory.dispose(s)

    def test_reads_push_the_coarse_filter_down(self, shared_refined_store: StoreBackend) -> None:
        store = shared_refined_store
        pred = Counting(lambda rec: rec["meta"].get("topic") == "sea" and rec["meta"].get("label") == "odd")
        refined = Refined(SEA, pred)
        # d0 d4 d8 are "sea" (even): nothing; a predicate that also accepts even ones sees the same 6 rows
        assert store.filter_passages(refined) == []
        assert pred.seen == 6  # only the rows the coarse filter selected
        both = Counting(lambda rec: rec["meta"].get("topic") == "sea")
        refined = Refined(SEA, both)
        got = _ids(store.filter_passages(refined))
        assert got == ["d0#0", "d0#1", "d4#0", "d4#1", "d8#0", "d8#1"]
        assert both.seen == 6
        assert store.count_passages(refined) == 6
        rowids = store.matching_rowids(refined)
        assert [r.passage_id for r in store.records(rowids.tolist()).values()] == got
        # the predicate narrows the coarse selection
        narrow = Refined(SEA, lambda rec: rec["meta"].get("year") > 2003)
        assert _ids(store.filter_passages(narrow)) == ["d4#0", "d4#1", "d8#0", "d8#1"]
        assert store.count_passages(narrow) == 4
        narrow_ids = store.matching_rowids(narrow)
        assert sorted(r.passage_id for r in store.records(narrow_ids.tolist()).values()) == [
            "d4#0",
            "d4#1",
            "d8#0",
            "d8#1",
        ]
        assert list(np.asarray(narrow_ids)) == sorted(np.asarray(narrow_ids).tolist())

    def test_search_keeps_exact_top_k_among_the_predicate_matches(self, shared_refined_store: StoreBackend) -> None:
        dense = build_retriever("dense", shared_refined_store)
        narrow = Refined(SEA, lambda rec: rec["meta"].get("year") > 2003)
        hits = dense.search("passage", top_k=10, filters=narrow)
        assert sorted(h.passage_id for h in hits) == ["d4#0", "d4#1", "d8#0", "d8#1"]
        plain = dense.search(
            "passage", top_k=10, filters=lambda rec: rec["meta"].get("year") > 2003 and rec["meta"]["topic"] == "sea"
        )
        assert [(h.passage_id, h.score) for h in hits] == [(h.passage_id, h.score) for h in plain]
        all_sea = Refined(SEA, lambda rec: True)  # the predicate accepts every coarse row
        assert len(dense.search("passage", top_k=10, filters=all_sea)) == 6

    def test_untranslatable_coarse_filter_runs_the_predicate_on_every_row(
        self, shared_refined_store: StoreBackend
    ) -> None:
        # title_path cannot be pushed down on either backend: the predicate sees every passage
        pred = Counting()
        refined = Refined({"field": "title_path", "operator": "==", "value": ["x"]}, pred)
        assert len(shared_refined_store.filter_passages(refined)) == 12
        assert pred.seen == 24

    def test_a_coarse_filter_that_breaks_its_promise_never_adds_a_row(self, shared_refined_store: StoreBackend) -> None:
        # ordering a string against a number: the coarse filter is never evaluated in Python (no error), and
        # whatever the backend makes of it, only rows the predicate accepts come back (the superset promise is
        # the caller's; the local store falls back to the predicate: tests/store/test_refined.py)
        pred = Counting(lambda rec: rec["meta"].get("topic") == "sky")
        refined = Refined({"field": "meta.topic", "operator": ">", "value": 5}, pred)
        got = shared_refined_store.filter_passages(refined)
        assert set(_ids(got)) <= {f"d{i}#{j}" for i in (3, 7, 11) for j in (0, 1)}

    def test_writes_by_filter(self, refined_store: StoreBackend) -> None:
        store = refined_store
        refined = Refined(SEA, lambda rec: rec["meta"].get("year") > 2003)
        assert store.update_by_filter(refined, {"flag": True}) == 4
        assert _ids(store.filter_passages({"field": "meta.flag", "operator": "==", "value": True})) == [
            "d4#0",
            "d4#1",
            "d8#0",
            "d8#1",
        ]
        assert store.delete_by_filter(refined) == 4
        assert store.count_passages() == 20
        assert store.count_passages(SEA) == 2

    def test_an_equivalent_coarse_filter_answers_alone(self, refined_store: StoreBackend) -> None:
        store = refined_store
        pred = Counting(lambda rec: rec["meta"].get("topic") == "sea")
        refined = Refined(SEA, pred, equivalent=True)
        assert _ids(store.filter_passages(refined)) == ["d0#0", "d0#1", "d4#0", "d4#1", "d8#0", "d8#1"]
        assert store.count_passages(refined) == 6
        assert len(store.matching_rowids(refined)) == 6
        assert len(build_retriever("dense", store).search("passage", top_k=10, filters=refined)) == 6
        assert pred.seen == 0  # no record was read to run the predicate
        # where the backend cannot answer the coarse filter, the predicate still decides
        fallback = Refined({"field": "title_path", "operator": "==", "value": ["x"]}, pred, equivalent=True)
        assert len(store.filter_passages(fallback)) == 6
        assert pred.seen == 24
        pred.seen = 0
        assert store.update_by_filter(refined, {"flag": 1}) == 6
        assert store.delete_by_filter(refined) == 6
        assert pred.seen == 0
        assert store.count_passages() == 18
        assert store.count_passages({"field": "meta.flag", "operator": "==", "value": 1}) == 0
