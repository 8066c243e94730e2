"""Retriever.warm_up() loads what a strategy searches with; parameter dataclasses validate themselves."""

from __future__ import annotations

import pytest

from rag_hier import HierStore, Passage
from rag_hier.retrieval import ParameterError, build_retriever
from rag_hier.retrieval.fusion import FusionParams
from rag_hier.retrieval.registry import strategy
from rag_hier.store.extensions.token_index import TokenIndexExtension


@pytest.fixture
def store(tmp_path, tiny_model_path):
    s = HierStore.create(tmp_path / "s", model=tiny_model_path)
    s.add_extension(TokenIndexExtension(model=tiny_model_path))
    s.add_passages([Passage("p0", "d0", 0, "the moon pulls the tides"), Passage("p1", "d1", 0, "bees make honey")])
    yield s
    s.close()


def test_dense_warm_up_loads_the_store_model(tmp_path, tiny_model_path):
    HierStore.create(tmp_path / "s", model=tiny_model_path).close()
    store = HierStore.open(tmp_path / "s", read_only=True)
    assert store.encoder is not None and store.encoder._model is None
    retriever = build_retriever("dense", store)
    retriever.warm_up()
    assert store.encoder._model is not None
    retriever.warm_up()  # idempotent
    store.close()


def test_svdr_warm_up_loads_what_its_mode_uses(store, tiny_model_path):
    lexical = build_retriever("svdr-lexical", store)
    token = TokenIndexExtension.of(store)
    token.index._binarizer = None
    lexical.warm_up()
    assert token.index._binarizer is not None
    assert lexical._encoder is None  # lexical search needs no model
    beta = build_retriever("svdr-beta", store, vocab_model=tiny_model_path)
    beta.warm_up()
    assert beta._encoder is not None and beta._encoder._module is not None


def test_fusion_parameters_validate_themselves():
    entry = strategy("fusion")
    with pytest.raises(ParameterError, match="method"):
        entry.parse({"method": "average"})
    with pytest.raises(ParameterError, match="cannot contain 'fusion'"):
        FusionParams(strategies=("dense", "fusion"))
    with pytest.raises(ParameterError, match="unknown strategy 'nope'"):
        FusionParams(strategies=("dense", "nope"))
    assert entry.parse({"strategies": ["dense", "tree"]}).strategies == ("dense", "tree")
