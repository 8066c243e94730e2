"""RagHierDocumentEmbedder and RagHierTextEmbedder: embeddings, device serialization, warm-up."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from haystack import Document, Pipeline
from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.rag_hier import RagHierDocumentEmbedder, RagHierTextEmbedder

from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder

EMBEDDERS = (RagHierDocumentEmbedder, RagHierTextEmbedder)


def test_document_embedder_embeds_content_and_meta(tiny_model_path):
    embedder = RagHierDocumentEmbedder(
        model=tiny_model_path, meta_fields_to_embed=["title", "missing"], prefix="passage: ", progress_bar=False
    )
    docs = [Document(content="Bees make honey.", meta={"title": "Bees"}), Document(content=None, meta={"x": 1})]
    out = embedder.run(docs)["documents"]
    assert [d.id for d in out] == [d.id for d in docs]
    assert all(d.embedding is None for d in docs)  # inputs are not modified
    encoder = DenseEncoder(tiny_model_path, device="cpu")
    expected = encoder.encode_documents(["passage: Bees\nBees make honey.", "passage: "])
    np.testing.assert_allclose(np.array([d.embedding for d in out]), expected, atol=1e-6)
    assert embedder.run([]) == {"documents": []}
    with pytest.raises(TypeError):
        embedder.run("not documents")


def test_text_embedder(tiny_model_path):
    embedder = RagHierTextEmbedder(model=tiny_model_path, prefix="query: ", progress_bar=False)
    out = embedder.run("how do bees talk?")["embedding"]
    assert isinstance(out, list) and len(out) == 32 and all(isinstance(x, float) for x in out)
    expected = DenseEncoder(tiny_model_path, device="cpu").encode_queries(["query: how do bees talk?"])[0]
    np.testing.assert_allclose(out, expected, atol=1e-6)
    with pytest.raises(TypeError):
        embedder.run(["a list"])


@pytest.mark.parametrize("cls", EMBEDDERS)
def test_default_model_and_device_serialize_portably(cls):
    data = cls().to_dict()
    assert data["type"] == f"{cls.__module__}.{cls.__name__}"
    assert data["init_parameters"]["model"] == DEFAULT_MODEL
    assert data["init_parameters"]["device"] is None  # not the device resolved on this machine
    again = cls.from_dict(data)
    assert again.device is None
    assert again.to_dict() == data


@pytest.mark.parametrize("cls", EMBEDDERS)
def test_a_gpu_pipeline_loads_and_runs_on_a_cpu_machine(cls, tiny_model_path, monkeypatch, caplog):
    saved = cls(model=tiny_model_path, device=ComponentDevice.from_str("cuda:0"), progress_bar=False).to_dict()
    assert saved["init_parameters"]["device"] == {"type": "single", "device": "cuda:0"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    loaded = cls.from_dict(saved)
    assert loaded.device == ComponentDevice.from_str("cuda:0")
    with caplog.at_level(logging.WARNING):
        loaded.warm_up()
    assert "not available" in caplog.text
    assert loaded._backend.encoder.device == "cpu"
    if cls is RagHierTextEmbedder:
        assert len(loaded.run("hello")["embedding"]) == 32
    else:
        assert len(loaded.run([Document(content="hello")])["documents"][0].embedding) == 32


def test_warm_up_is_idempotent_and_cheap(tiny_model_path, monkeypatch):
    loads = []
    original = DenseEncoder._load

    def counting_load(self):
        loads.append(self.model_name)
        return original(self)

    monkeypatch.setattr(DenseEncoder, "_load", counting_load)
    embedder = RagHierTextEmbedder(model=tiny_model_path, device=ComponentDevice.from_str("cpu"), progress_bar=False)
    assert loads == []  # nothing is loaded at construction
    embedder.warm_up()
    model = embedder._backend.encoder.model
    embedder.warm_up()
    pipeline = Pipeline()
    pipeline.add_component("embedder", embedder)
    for _ in range(3):
        pipeline.run({"embedder": {"text": "hello"}})  # Pipeline.run calls warm_up() every time
    assert loads == [tiny_model_path]
    assert embedder._backend.encoder.model is model


def test_run_without_warm_up_loads_lazily(tiny_model_path):
    embedder = RagHierDocumentEmbedder(model=tiny_model_path, progress_bar=False)
    assert embedder.run([Document(content="x")])["documents"][0].embedding is not None


def test_bad_parameters():
    with pytest.raises(ValueError):
        RagHierTextEmbedder(batch_size=0)
    with pytest.raises(ValueError):
        RagHierDocumentEmbedder(precision="int3")


@pytest.mark.real_model
def test_real_model_embeddings_are_unit_vectors():
    embedder = RagHierTextEmbedder(device=ComponentDevice.from_str("cpu"), progress_bar=False)
    vector = np.array(embedder.run("How do tides work?")["embedding"])
    assert vector.shape == (384,)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
