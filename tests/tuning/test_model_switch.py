"""``rollback_model()`` returns a :class:`~rag_hier.ModelSwitch`: the generation, the models and the way it went."""

from __future__ import annotations

import dataclasses

import pytest

from rag_hier import HierStore, ModelSwitch


def test_rollback_says_what_it_switched_and_which_way(judged_store, tiny_model_path) -> None:
    path, _ = judged_store
    with HierStore.open(path) as store:
        base = store.model_info["current"]["model"]
        store.adopt_model(tiny_model_path)
        adopted = store.model_info["current"]["model"]
        assert adopted.startswith("models/g")

        back = store.rollback_model()
        assert isinstance(back, ModelSwitch)
        assert (back.model, back.previous, back.direction) == (base, adopted, "back")
        assert back.generation == store.generation
        assert str(back) == f"rolled back: the store encodes with {base} (was {adopted}); generation {back.generation}"
        with pytest.raises(dataclasses.FrozenInstanceError):
            back.generation = 0  # type: ignore[misc]

        forward = store.rollback_model()
        assert (forward.model, forward.previous, forward.direction) == (adopted, base, "forward")
        assert forward.generation == back.generation + 1
        assert str(forward).startswith("rolled forward: ")

        original = store.rollback_model(to="original")
        assert (original.model, original.previous, original.direction) == (base, adopted, "original")
        assert str(original).startswith("rolled back to the model the store was built with: ")


def test_the_framework_stores_return_the_switch(judged_store, tiny_model_path) -> None:
    pytest.importorskip("haystack")
    pytest.importorskip("llama_index.core")
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    path, _ = judged_store
    with HierStore.open(path) as store:
        base = store.model_info["current"]["model"]
        store.adopt_model(tiny_model_path)
    ds = RagHierDocumentStore(str(path))
    switch = ds.rollback_model()
    ds.close()
    assert isinstance(switch, ModelSwitch) and (switch.model, switch.direction) == (base, "back")
    vs = RagHierVectorStore(path)
    switch = vs.rollback_model()
    vs.close()
    assert isinstance(switch, ModelSwitch) and switch.direction == "forward" and switch.previous == base
