"""The ``ehi`` strategy through LlamaIndex's RagHierRetriever: the engine's ranking, and its errors named."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from llama_index.retrievers.rag_hier import RagHierRetriever
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier.index.ehi import EHIIndexer
from rag_hier.retrieval import build_retriever
from rag_hier.retrieval.base import Queries
from rag_hier.store.extensions.ehi import EHIExtension

TEXTS = [
    "The moon pulls the oceans and makes tides",
    "Spring tides are the strongest tides",
    "Honeybees live in colonies",
    "Worker bees turn nectar into honey in wax cells",
    "Magma rises from the mantle",
    "A volcano erupts lava and ash",
]


def test_ehi_through_llama_index(tmp_path, tiny_model_path: str) -> None:
    store = RagHierVectorStore(str(tmp_path / "store"), model=tiny_model_path)
    store.add([TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)])
    with pytest.raises(ValueError, match="ehi"):
        RagHierRetriever(store, "ehi", beam=2).retrieve("honey")  # no EHI index yet
    vectors = store.reader.vectors(store.reader.rowids_of())
    indexer = EHIIndexer(vectors.shape[1], 3, 1, seed=0)
    indexer.init_kmeans(vectors, seed=0, steps=10)
    store.client.add_extension(EHIExtension(indexer))
    query = "worker bees make honey"
    got = RagHierRetriever(store, "ehi", similarity_top_k=3, beam=2).retrieve(query)
    engine = build_retriever("ehi", store.reader, beam=2)
    hits = engine.run(Queries(texts=[query], vectors=store.query_vector(query)), 3)[0].hits
    assert got and [n.node.node_id for n in got] == [h.passage_id for h in hits]
    np.testing.assert_allclose([n.score for n in got], [h.score for h in hits], rtol=1e-6)
    with pytest.raises(ValueError, match="beam"):
        RagHierRetriever(store, "ehi", beam=0)
    store.close()
