"""Switching a Milvus collection's model in one commit (``adopt_model``, ``rollback_model``, ``model_info``), on
Milvus Lite or the server of ``$RAG_HIER_TEST_MILVUS_URI``: the new vectors are written beside the old ones and
switched at the commit point; a failure anywhere before it leaves the previous model searchable. Skips without
``pymilvus``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus")

from rag_hier import Document, HierStore
from rag_hier.errors import ModelChangedError, StoreError
from rag_hier.store.milvus import store as milvus_store_module
from rag_hier.testing import build_tiny_model
from tests.store.contract.base import unique_name

TEXTS = ["the moon pulls the tides", "bees make honey from nectar", "magma rises in a volcano", "tides follow the moon"]


@pytest.fixture(autouse=True)
def model_cache(tmp_path, monkeypatch) -> None:
    """Local copies of models stored in Milvus go to the test's own folder."""
    monkeypatch.setenv("RAG_HIER_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def other_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second tiny model (other random weights, same dimension)."""
    return str(build_tiny_model(tmp_path_factory.mktemp("other-model"), seed=7))


@pytest.fixture()
def store(milvus_db: str, tiny_model_path: str):
    s = HierStore.create(uri=f"{milvus_db}#{unique_name('switch')}", model=tiny_model_path)
    s.add_documents([Document(f"d{i}", f"T{i}", (t,)) for i, t in enumerate(TEXTS)], max_passage_words=0)
    s.ensure_extension("doc-index")  # built on the vectors: rebuilt by a switch
    yield s
    s.drop()
    s.close()


def _vectors(store) -> np.ndarray:
    return np.stack(store.get_embeddings([f"d{i}#0" for i in range(len(TEXTS))]))


def test_adopt_then_roll_back_switches_every_vector_in_one_commit(
    store, tiny_model_path, other_model, tmp_path
) -> None:
    before = _vectors(store)
    generation = store.generation
    reader = store.reopen(read_only=True)
    assert store.adopt_model(other_model, details={"why": "test"}) == generation + 1
    info = store.model_info
    assert info["current"]["stored"] and info["current"]["model"].startswith("models/g")  # kept in Milvus
    assert info["current"]["adopted"] == {"why": "test"}
    assert info["previous"]["model"] == info["original"]["model"] == tiny_model_path
    after = _vectors(store)
    assert not np.allclose(after, before)
    enc = store.encoder
    assert enc is not None and Path(enc.model_name).parent == tmp_path / "cache" / "milvus-models"
    passages = store.get_passages([f"d{i}#0" for i in range(len(TEXTS))])
    np.testing.assert_allclose(after, enc.encode_documents([p.embedding_text for p in passages]), atol=1e-5)
    assert store.count_passages() == len(TEXTS) and store.count_vectors() == len(TEXTS)
    # another handle follows at its next read: the new model with the new vectors
    np.testing.assert_allclose(_vectors(reader), after)
    assert reader.model_info["current"]["model"] == info["current"]["model"]
    assert reader.search("honey", top_k=1)[0].passage_id == store.search("honey", top_k=1)[0].passage_id
    reader.close()

    switch = store.rollback_model()
    assert switch.direction == "back" and switch.model == tiny_model_path
    np.testing.assert_allclose(_vectors(store), before, atol=1e-6)
    assert store.model_info["previous"]["model"] == info["current"]["model"]
    assert store.rollback_model().direction == "forward"  # a second rollback returns to the model the first left
    np.testing.assert_allclose(_vectors(store), after, atol=1e-6)
    assert store.rollback_model(to="original").direction == "original"
    np.testing.assert_allclose(_vectors(store), before, atol=1e-6)
    with pytest.raises(StoreError, match="built with already"):
        store.rollback_model(to="original")


@pytest.mark.parametrize("point", ["switch_encoded", "switch_before_commit", "before_commit"])
def test_a_failure_before_the_commit_point_leaves_the_previous_model_searchable(
    store, other_model, monkeypatch, point: str
) -> None:
    before, info, generation = _vectors(store), store.model_info, store.generation
    top = [h.passage_id for h in store.search("the moon", top_k=4)]

    def fail(name: str) -> None:
        if name == point:
            raise OSError(f"killed at {name}")

    monkeypatch.setattr(milvus_store_module, "_step", fail)
    with pytest.raises(OSError, match="killed"):
        store.adopt_model(other_model)
    monkeypatch.undo()
    for handle in (store, again := store.reopen()):
        assert handle.generation == generation and handle.model_info == info
        np.testing.assert_allclose(_vectors(handle), before)
        assert [h.passage_id for h in handle.search("the moon", top_k=4)] == top
        assert handle.count_passages() == len(TEXTS)
    again.close()


def test_passages_encoded_beforehand_are_used_and_those_written_since_encoded(store, other_model) -> None:
    from rag_hier.store.encoder_switch import encode_passages

    enc = store.encoder_for(other_model)
    encoded = encode_passages(store, enc)  # the listing comes from Milvus (no local SQLite)
    assert encoded.rowids.size == len(TEXTS)
    store.add_documents([Document("late", "Late", ("written after the encoding",))], max_passage_words=0)
    store.adopt_model(other_model, encoded=encoded)
    ids = [f"d{i}#0" for i in range(len(TEXTS))] + ["late#0"]
    want = enc.encode_documents([p.embedding_text for p in store.get_passages(ids)])
    np.testing.assert_allclose(np.stack(store.get_embeddings(ids)), want, atol=1e-5)


def test_a_switch_measured_against_another_model_is_refused(store, other_model) -> None:
    stale = dict(store.model_info["current"], model="elsewhere")
    with pytest.raises(ModelChangedError, match="nothing adopted"):
        store.adopt_model(other_model, expected=stale)
    assert store.model_info["previous"] is None
    reader = store.reopen(read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        reader.adopt_model(other_model)
    reader.close()


def test_an_adopted_model_lives_in_the_collection_not_where_it_came_from(store, other_model, tmp_path, monkeypatch):
    import shutil

    source = tmp_path / "tuned"
    shutil.copytree(other_model, source)
    store.adopt_model(source)
    vectors = _vectors(store)
    shutil.rmtree(source)  # (a tuning run's candidate folder is removed at its end)
    monkeypatch.setenv("RAG_HIER_CACHE", str(tmp_path / "elsewhere"))  # another client: an empty cache
    other = store.reopen(read_only=True)
    hit = other.search("honey", top_k=1)[0]
    assert hit.passage_id == store.search("honey", top_k=1)[0].passage_id
    assert (tmp_path / "elsewhere" / "milvus-models" / store.model_info["current"]["sha256"] / ".complete").is_file()
    np.testing.assert_allclose(_vectors(other), vectors)
    other.close()


def test_a_handle_that_has_not_read_since_the_switch_encodes_its_queries_with_the_new_model(store, other_model) -> None:
    reader = store.reopen(read_only=True)
    assert reader.search("honey", top_k=1)  # the reader has read, and loaded its encoder, before the switch
    store.adopt_model(other_model)
    want = store.search(["bees and honey", "the moon"], top_k=4)
    got = reader.search(["bees and honey", "the moon"], top_k=4)  # its first read since the switch
    for g, w in zip(got, want, strict=True):
        assert [h.passage_id for h in g] == [h.passage_id for h in w]
        np.testing.assert_allclose([h.score for h in g], [h.score for h in w], atol=1e-5)
    assert reader.encoder is not None and reader.encoder.model_name == store.encoder.model_name
    reader.close()


def test_a_handle_opened_with_an_encoder_takes_the_new_model_once_another_handle_switched(
    store, tiny_model_path, other_model, caplog
) -> None:
    from rag_hier.encoders import DenseEncoder
    from rag_hier.store.milvus import MilvusStore

    given = DenseEncoder(tiny_model_path, device="cpu")
    own = MilvusStore.open(store.uri, collection=store.name, encoder=given, read_only=True)
    assert own.encoder is given and own.search("honey", top_k=1)
    store.adopt_model(other_model)
    want = store.search("bees and honey", top_k=4)
    with caplog.at_level("WARNING", logger="rag_hier.store.models"):
        got = own.search("bees and honey", top_k=4)
    assert [h.passage_id for h in got] == [h.passage_id for h in want]
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
    assert own.encoder is not given and "is no longer used" in caplog.text
    own.close()
