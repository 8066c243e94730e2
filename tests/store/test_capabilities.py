"""The optional store capabilities: which backend implements which, the named check, and its error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier.corpus.model import Passage
from rag_hier.errors import CapabilityError, StoreError
from rag_hier.index.dense import DenseIndex
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.store import HierStore
from rag_hier.store.capabilities import (
    CAPABILITIES,
    DenseHitSearch,
    EncoderIdentity,
    HitRows,
    Maintenance,
    ModelSwitching,
    Reopenable,
    capability_members,
    require,
    supports,
)
from rag_hier.store.contract import EngineExtensions, StoreBackend
from rag_hier.tuning.scoring import CandidateView, candidate_view

LOCAL = {EncoderIdentity, HitRows, DenseHitSearch, ModelSwitching, Maintenance}
MILVUS = {EncoderIdentity, ModelSwitching, Reopenable, Maintenance, EngineExtensions}


def _store(path: Path) -> HierStore:
    store = HierStore.create(path, model=None, dimension=4)
    passages = [Passage(id=f"p{i}", doc_id=f"d{i}", position=0, text=f"passage {i}") for i in range(6)]
    vectors = np.eye(6, 4, dtype=np.float32) + 0.01 * np.arange(24, dtype=np.float32).reshape(6, 4)
    store.add_passages(passages, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return store


def test_members_of_each_capability() -> None:
    assert capability_members(EncoderIdentity) == ("encoder_key",)
    assert capability_members(HitRows) == ("hit_rows",)
    assert capability_members(DenseHitSearch) == ("search_dense_hits",)
    assert capability_members(ModelSwitching) == (
        "adopt_model",
        "check_switchable",
        "encoder_for",
        "model_info",
        "rollback_model",
    )
    assert capability_members(Reopenable) == ("reopen",)
    assert capability_members(Maintenance) == ("index_meta_field", "meta_indexes", "optimize")


def test_the_local_store_implements_its_capabilities(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    try:
        assert isinstance(store, StoreBackend)
        for cap in (*CAPABILITIES, EngineExtensions):
            assert supports(store, cap) is (cap in LOCAL), cap.__name__
            assert isinstance(store, cap) is (cap in LOCAL), cap.__name__  # the protocol's own check agrees
    finally:
        store.close()


def test_the_milvus_store_implements_its_capabilities(milvus_db: str) -> None:
    from rag_hier.store.milvus import MilvusStore

    store = MilvusStore.create(f"{milvus_db}#capabilities", model=None, dimension=4, exist_ok=True)
    try:
        assert isinstance(store, StoreBackend)
        for cap in (*CAPABILITIES, EngineExtensions):
            assert supports(store, cap) is (cap in MILVUS), cap.__name__
            assert isinstance(store, cap) is (cap in MILVUS), cap.__name__
    finally:
        store.drop()
        store.close()


def test_the_candidate_view_has_only_what_it_means_to(tmp_path: Path) -> None:
    """A view of the local store: the store's hit rows, none of its other capabilities, no forwarding."""
    store = _store(tmp_path / "s")
    try:
        index = DenseIndex(4, store.index_config)
        view = candidate_view(store, index)
        assert isinstance(view, CandidateView)
        assert {c for c in (*CAPABILITIES, EngineExtensions) if supports(view, c)} == {HitRows}
        assert {c for c in (*CAPABILITIES, EngineExtensions) if isinstance(view, c)} == {HitRows}
        for member in ("search_dense_hits", "encoder_key", "add_passages", "model_info", "iter_records"):
            assert not hasattr(view, member), member  # nothing of the store arrives by forwarding
        assert view.encoder is None  # query text needs the candidate's model, not the store's
    finally:
        store.close()


def test_a_view_of_a_store_without_hit_rows_has_none() -> None:
    class Plain:
        location = "nowhere"

    view = candidate_view(Plain(), DenseIndex(4))  # type: ignore[arg-type]
    assert not supports(view, HitRows) and not isinstance(view, HitRows)


def test_a_search_through_the_view_ranks_the_candidate_index(tmp_path: Path) -> None:
    """The store's own fast path (its index) is not taken: the view's hits come from the candidate's vectors."""
    store = _store(tmp_path / "s")
    try:
        rowids = store.passage_rowids()
        flipped = store.vectors(rowids)[::-1].copy()  # the candidate gives passage i the vector of passage 5 - i
        index = DenseIndex(4, store.index_config)
        index.add(rowids, flipped)
        query = store.vectors(rowids[:1])  # closest to p0 in the store, to p5 in the candidate
        own = DenseRetriever(store).search_vectors(query, top_k=3)[0]
        view = DenseRetriever(candidate_view(store, index)).search_vectors(query, top_k=3)[0]  # type: ignore[arg-type]
        assert own[0].passage_id == "p0"
        assert view[0].passage_id == "p5"
        assert [h.passage_id for h in view] == [f"p{5 - int(h.passage_id[1:])}" for h in own]
        assert [h.score for h in view] == pytest.approx([h.score for h in own])
    finally:
        store.close()


def test_require_names_the_missing_capability(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    try:
        assert require(store, ModelSwitching, what="tuning") is store
        with pytest.raises(CapabilityError) as info:
            require(store, Reopenable, what="caching SVDR vectors")
    finally:
        store.close()
    message = str(info.value)
    assert "caching SVDR vectors needs a store with the Reopenable capability" in message
    assert "rag_hier.store.store.HierStore" in message and str(tmp_path / "s") in message and "lacks reopen" in message
    assert isinstance(info.value, StoreError)


def test_a_member_set_to_none_is_absent() -> None:
    class Switches:
        @property
        def model_info(self) -> dict[str, Any]:
            return {}

        def encoder_for(self, model: Any, *, device: Any = None) -> Any: ...
        def check_switchable(self, what: str) -> dict[str, Any]:
            return {}

        def adopt_model(self, model: Any, **kwargs: Any) -> int:
            return 0

        rollback_model = None

    assert not supports(Switches(), ModelSwitching) and not isinstance(Switches(), ModelSwitching)
    with pytest.raises(
        CapabilityError, match=r"tests\.store\.test_capabilities\..*Switches store lacks rollback_model"
    ):
        require(Switches(), ModelSwitching, what="rag-hier tune --rollback")


def test_tuning_a_store_that_cannot_switch_models_is_refused() -> None:
    from rag_hier.tuning.workflow import _check_store

    class ReadsOnly:
        location = "a read-only mirror"

    with pytest.raises(CapabilityError, match="tuning needs a store with the ModelSwitching capability"):
        _check_store(ReadsOnly())
