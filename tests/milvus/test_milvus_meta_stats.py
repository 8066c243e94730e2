"""Metadata aggregates of the Milvus backend against the Python reference (tests/store/test_meta_stats.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rag_hier.corpus.model import Passage
from rag_hier.store import HierStore
from tests.store.test_meta_stats import check_aggregates, check_bad_fields, fill, mixed_passages


@pytest.fixture(scope="module")
def milvus_mixed(milvus_db: Path) -> Iterator[Any]:
    store = HierStore.create(uri=f"{milvus_db}#meta_stats", model=None, dimension=4)
    passages = mixed_passages()
    for k, p in enumerate(passages[:40]):
        if k % 2:
            payload: dict[str, Any] = {"meta_exact": {"i": 1}} if k % 4 == 1 else {}
            passages[k] = Passage(
                id=p.id, doc_id=p.doc_id, position=p.position, text=p.text, meta=p.meta, extra={"haystack": payload}
            )
    fill(store, passages)
    yield store
    store.close()


def test_aggregates_equal_the_reference(milvus_mixed: Any) -> None:
    check_aggregates(milvus_mixed)
    assert milvus_mixed.count_with_extra([("haystack",), ("haystack", "meta_exact")]) == (120, [20, 10])


def test_bad_field_names(milvus_mixed: Any) -> None:
    check_bad_fields(milvus_mixed)


def test_aggregates_inside_one_reading_block(milvus_mixed: Any) -> None:
    """Inside reading() the rows fetched for one aggregate serve the next one over the same filter."""
    with milvus_mixed.reading():
        check_aggregates(milvus_mixed)
        assert milvus_mixed.count_with_extra([("haystack",)]) == (120, [20])


def test_rows_kept_for_aggregates_go_when_the_reading_block_ends(milvus_mixed: Any) -> None:
    """The rows a reading() block kept for its aggregates are not held by the handle after the block."""
    with milvus_mixed.reading():
        first = milvus_mixed.count_unique_meta(["s"])
        assert first == {"s": 6}
        assert milvus_mixed._meta_rows is not None  # kept for the next aggregate of the block
        with milvus_mixed.reading():  # a nested block leaves them to the outer one
            assert milvus_mixed.count_unique_meta(["s"]) == first
        assert milvus_mixed._meta_rows is not None
    assert milvus_mixed._meta_rows is None
    assert milvus_mixed.count_unique_meta(["s"]) == first  # read again, kept by nothing
    assert milvus_mixed._meta_rows is None
