"""``Refined`` filters: the coarse part is pushed down (SQLite, a Milvus expression), the predicate decides.

Every reading and writing method that takes ``Filters`` answers with the predicate's choice; the predicate sees
only the rows the coarse filter selects when the backend can answer the coarse filter, and every row otherwise
(the coarse filter is never evaluated in Python). Runs on a local store and, with ``pymilvus`` and
``milvus-lite``, on a Milvus Lite collection.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier import Document, HierStore
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import FilterError
from rag_hier.retrieval import build_retriever
from rag_hier.store import Refined

TOPICS = ["sea", "animals", "earth", "sky"]


def _docs() -> list[Document]:
    return [
        Document(
            f"d{i}",
            f"Title {i}",
            (f"passage {i} one", f"passage {i} two"),
            metadata={"topic": TOPICS[i % 4], "year": 2000 + i, "label": "odd" if i % 2 else "even"},
        )
        for i in range(12)
    ]


@pytest.fixture(params=["local", "milvus"])
def store(request, tmp_path: Path, tiny_encoder: DenseEncoder) -> Iterator[Any]:
    if request.param == "local":
        s = HierStore.create(tmp_path / "store", encoder=tiny_encoder)
    else:
        pytest.importorskip("pymilvus")
        pytest.importorskip("milvus_lite")
        s = HierStore.create(uri=f"{tmp_path / 'm.db'}#refined", encoder=tiny_encoder)
    s.add_documents(_docs(), max_passage_words=0)
    yield s
    if request.param == "milvus":
        s.drop()
    s.close()


class Counting:
    """A predicate that counts the records it sees: ``label == "odd"`` (with the ``topic`` coarse filters below)."""

    def __init__(self, test: Any = None) -> None:
        self.seen = 0
        self.test = test or (lambda rec: rec["meta"].get("label") == "odd")

    def __call__(self, record: Mapping[str, Any]) -> bool:
        self.seen += 1
        return bool(self.test(record))


SEA = {"field": "meta.topic", "operator": "==", "value": "sea"}


def _ids(passages: Any) -> list[str]:
    return [p.id for p in passages]


def test_reads_push_the_coarse_filter_down(store: Any) -> None:
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
    assert sorted(r.passage_id for r in store.records(narrow_ids.tolist()).values()) == ["d4#0", "d4#1", "d8#0", "d8#1"]
    assert list(np.asarray(narrow_ids)) == sorted(np.asarray(narrow_ids).tolist())


def test_search_keeps_exact_top_k_among_the_predicate_matches(store: Any, tiny_encoder: DenseEncoder) -> None:
    dense = build_retriever("dense", store)
    narrow = Refined(SEA, lambda rec: rec["meta"].get("year") > 2003)
    hits = dense.search("passage", top_k=10, filters=narrow)
    assert sorted(h.passage_id for h in hits) == ["d4#0", "d4#1", "d8#0", "d8#1"]
    plain = dense.search(
        "passage", top_k=10, filters=lambda rec: rec["meta"].get("year") > 2003 and rec["meta"]["topic"] == "sea"
    )
    assert [(h.passage_id, h.score) for h in hits] == [(h.passage_id, h.score) for h in plain]
    all_sea = Refined(SEA, lambda rec: True)  # the predicate accepts every coarse row (Milvus: filtered by expression)
    assert len(dense.search("passage", top_k=10, filters=all_sea)) == 6


def test_untranslatable_coarse_filter_runs_the_predicate_on_every_row(store: Any) -> None:
    # title_path cannot be pushed down on either backend: the predicate sees every passage
    pred = Counting()
    refined = Refined({"field": "title_path", "operator": "==", "value": ["x"]}, pred)
    assert len(store.filter_passages(refined)) == 12
    assert pred.seen == 24


def test_the_coarse_filter_is_never_evaluated_in_python(store: Any) -> None:
    # Python would raise on ordering a string against a number; SQL flags such rows, so the backend falls back to
    # the predicate alone (on Milvus the expression simply selects nothing: the predicate is never wrong, only the
    # superset promise is the caller's)
    pred = Counting(lambda rec: rec["meta"].get("topic") == "sky")
    refined = Refined({"field": "meta.topic", "operator": ">", "value": 5}, pred)
    got = store.filter_passages(refined)
    if isinstance(store, HierStore):
        assert len(got) == 6 and pred.seen == 24


def test_writes_by_filter(store: Any) -> None:
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


def test_refined_checks_its_parts() -> None:
    with pytest.raises(FilterError, match="non-empty"):
        Refined({}, lambda rec: True)
    with pytest.raises(FilterError, match="predicate"):
        Refined(SEA, "not callable")  # type: ignore[arg-type]
    with pytest.raises(FilterError):
        Refined({"field": "meta.topic", "operator": "~", "value": 1}, lambda rec: True)
    refined = Refined(SEA, lambda rec: rec["id"] == "x")
    assert refined({"id": "x"}) is True and refined({"id": "y"}) is False


def test_an_equivalent_coarse_filter_answers_alone(store: Any) -> None:
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
    assert (
        store.count_passages() == 18 and store.count_passages({"field": "meta.flag", "operator": "==", "value": 1}) == 0
    )
