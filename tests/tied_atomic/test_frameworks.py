"""The Haystack and LlamaIndex embedders load a Tied-Atomic model as they load any model (no adapter code)."""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier.encoders.dense import DenseEncoder


def test_haystack_text_embedder(tiny_t5_path):
    pytest.importorskip("haystack")
    from haystack.utils import ComponentDevice
    from haystack_integrations.components.embedders.rag_hier import RagHierTextEmbedder

    embedder = RagHierTextEmbedder(model=tiny_t5_path, device=ComponentDevice.from_str("cpu"))
    embedder.warm_up()
    got = embedder.run(text="volcano glacier")["embedding"]
    ref = DenseEncoder(tiny_t5_path, device="cpu").encode_queries(["volcano glacier"])[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_llama_index_embedding(tiny_t5_path):
    pytest.importorskip("llama_index.core")
    from llama_index.embeddings.rag_hier import RagHierEmbedding

    got = RagHierEmbedding(model_name=tiny_t5_path, device="cpu").get_query_embedding("volcano glacier")
    ref = DenseEncoder(tiny_t5_path, device="cpu").encode_queries(["volcano glacier"])[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
