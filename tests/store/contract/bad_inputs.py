"""Bad inputs: refused before anything changes, with an error naming the field or parameter."""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier import Document, Passage
from rag_hier.errors import DimensionMismatchError, FilterError, InvalidInputError, StoreError
from rag_hier.store.contract import StoreBackend

from .base import ContractBase

BAD_VECTORS = [
    (np.full((1, 4), np.nan), "NaN"),
    (np.array([[1 + 2j, 0, 0, 0]]), "complex"),
    ([[1e39, 0, 0, 0]], "float32"),
    ([["a", "b", "c", "d"]], "numbers"),
    ([[]], "non-empty"),
]


class BadInputsContract(ContractBase):
    """Wrong vectors, ids, types, metadata and filters: a clear error, and the store as it was."""

    def test_bad_vectors_are_refused(self, vector_store: StoreBackend) -> None:
        for bad, message in BAD_VECTORS:
            with pytest.raises(ValueError, match=message):
                vector_store.add_passages([Passage("p", "d", 0, "x")], bad)
        with pytest.raises(DimensionMismatchError):
            vector_store.add_passages([Passage("p", "d", 0, "x")], np.ones((1, 5)))
        assert vector_store.count_passages() == 0

    @pytest.mark.parametrize(
        "bad_id", ["tab\there", "new\nline", "", "nul\x00"], ids=["tab", "newline", "empty", "nul"]
    )
    def test_ids_with_control_characters_are_refused(self, vector_store: StoreBackend, bad_id: str) -> None:
        store = vector_store
        with pytest.raises(StoreError, match="id"):
            store.add_passages([Passage(bad_id, "d", 0, "x")], np.ones((1, 4)))
        with pytest.raises(StoreError, match="document id of passage"):
            store.add_passages([Passage("p", bad_id, 0, "x")], np.ones((1, 4)))
        # a Document checks its own id when it is built, before it can reach any store
        with pytest.raises(InvalidInputError, match=r"Document\.doc_id"):
            store.add_documents([Document(bad_id, "", ("x",))], encode=False)
        assert store.count_passages() == 0 and store.count_documents() == 0

    def test_wrong_types_are_refused_before_anything_changes(self, vector_store: StoreBackend) -> None:
        store = vector_store
        store.add_passages([Passage("d1#0", "d1", 0, "x"), Passage("d", "d", 0, "y")], np.ones((2, 4)))
        with pytest.raises(TypeError, match="list of ids"):
            store.delete_passages("d1#0")  # would delete 'd', '1', '#', '0' one character at a time
        with pytest.raises(TypeError, match="list of ids"):
            store.delete_documents("d")
        with pytest.raises(TypeError, match="Document"):
            store.add_documents([{"doc_id": "x"}])  # type: ignore[list-item]
        with pytest.raises(InvalidInputError, match=r"Document\.doc_id must be a string, got None"):
            store.add_documents([Document(None, "", ("x",))], encode=False)  # type: ignore[arg-type]
        assert store.count_passages() == 2

    def test_metadata_nested_too_deeply_is_a_clear_error(self, vector_store: StoreBackend) -> None:
        deep: dict = {}
        node = deep
        for _ in range(5000):
            node["x"] = {}
            node = node["x"]
        with pytest.raises(InvalidInputError, match="nested"):
            vector_store.add_passages([Passage("p", "d", 0, "x", meta=deep)], np.ones((1, 4)))
        with pytest.raises(StoreError, match="meta is nested"):
            vector_store.update_meta(["p"], deep)
        assert vector_store.count_passages() == 0

    def test_bad_filters_are_filter_errors(self, vector_store: StoreBackend) -> None:
        for bad in (
            {"field": "meta.year", "operator": "~", "value": 1},
            {"operator": "AND", "conditions": "not a list"},
            {"field": "meta.year"},
            "meta.year == 1",
        ):
            with pytest.raises(FilterError):
                vector_store.count_passages(bad)  # type: ignore[arg-type]
            with pytest.raises(FilterError):
                vector_store.delete_by_filter(bad)  # type: ignore[arg-type]

    def test_a_text_query_without_an_encoder_is_a_clear_error(self, vector_store: StoreBackend) -> None:
        vector_store.add_passages([Passage("a", "d", 0, "alpha")], np.ones((1, 4)))
        with pytest.raises(StoreError, match="encoder"):
            vector_store.search("text query")
