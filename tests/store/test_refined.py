"""``Refined`` filters: what is not a store's behaviour (their checks), and the local store's fallback.

How every backend answers a ``Refined`` filter (pushed down, predicate decides, writes by filter) is the contract
suite's ``RefinedFiltersContract`` (``tests/store/contract/filters.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rag_hier import Document, HierStore
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import FilterError
from rag_hier.store import Refined

SEA = {"field": "meta.topic", "operator": "==", "value": "sea"}
TOPICS = ["sea", "animals", "earth", "sky"]


def test_refined_checks_its_parts() -> None:
    with pytest.raises(FilterError, match="non-empty"):
        Refined({}, lambda rec: True)
    with pytest.raises(FilterError, match="predicate"):
        Refined(SEA, "not callable")  # type: ignore[arg-type]
    with pytest.raises(FilterError):
        Refined({"field": "meta.topic", "operator": "~", "value": 1}, lambda rec: True)
    refined = Refined(SEA, lambda rec: rec["id"] == "x")
    assert refined({"id": "x"}) is True and refined({"id": "y"}) is False


def test_rows_the_sql_flags_fall_back_to_the_predicate(tmp_path: Path, tiny_encoder: DenseEncoder) -> None:
    # Python would raise on ordering a string against a number; SQL flags such rows, so the local store falls back
    # to the predicate alone and never evaluates the coarse filter in Python (on Milvus the expression simply selects
    # nothing: the predicate is never wrong, only the superset promise is the caller's)
    store = HierStore.create(tmp_path / "store", encoder=tiny_encoder)
    store.add_documents(
        [
            Document(f"d{i}", f"Title {i}", (f"passage {i} one", f"passage {i} two"), metadata={"topic": TOPICS[i % 4]})
            for i in range(12)
        ],
        max_passage_words=0,
    )
    seen = 0

    def sky(record: Mapping[str, Any]) -> bool:
        nonlocal seen
        seen += 1
        return record["meta"].get("topic") == "sky"

    got = store.filter_passages(Refined({"field": "meta.topic", "operator": ">", "value": 5}, sky))
    assert len(got) == 6 and seen == 24
    store.close()
