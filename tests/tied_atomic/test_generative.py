"""TiedAtomicHead ranks exactly as the store's dense search; DSI-atomic saves and loads without pickle."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rag_hier import Document, HierStore
from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import DimensionMismatchError, RagHierError
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.retrieval.generative import DSIAtomicModel, TiedAtomicHead, UnknownDocidError

QUERIES = ["apple river", "volcano glacier harbor", "music painting", "comet planet meadow"]


@pytest.fixture()
def store(tmp_path, tiny_t5_path, corpus):
    s = HierStore.create(tmp_path / "store", encoder=DenseEncoder(tiny_t5_path, device="cpu"))
    # three paragraphs (passages) per document
    docs = [Document(k, "", tuple(" ".join(v.split()[i : i + 7]) for i in (0, 7, 14))) for k, v in corpus.items()]
    s.add_documents(docs, max_passage_words=0)
    yield s
    s.close()


def test_head_ranks_as_dense_search(store):
    head = TiedAtomicHead(store)
    assert len(head) == store.count_passages() == 90
    q = store.encode_queries(QUERIES)
    np.testing.assert_allclose(head.logits(QUERIES), q @ head.weight.T, rtol=1e-6)
    for query, generated, scored in zip(QUERIES, head.generate(QUERIES, k=10), head.generate_scored(QUERIES, 10),
                                        strict=True):  # fmt: skip
        hits = store.search(query, top_k=10)
        assert generated == [h.passage_id for h in hits]
        np.testing.assert_allclose([s for _, s in scored], [h.score for h in hits], rtol=1e-5, atol=1e-6)
    p = head.probabilities(QUERIES)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)
    assert np.array_equal(p.argmax(axis=1), head.logits(QUERIES).argmax(axis=1))


def test_document_level_is_max_over_passages(store):
    head = TiedAtomicHead(store, level="document")
    assert len(head) == 30 and set(head.docids) == set(store.document_ids())
    retriever = DenseRetriever(store)
    for query in QUERIES:
        hits = retriever.search(query, top_k=5, aggregate="doc")
        assert head.generate(query, k=5) == [h.doc_id for h in hits]
    scores = head.score(QUERIES[:1], ["d3", "d7"])
    passage = TiedAtomicHead(store).score(QUERIES[:1], ["d3#0", "d3#1", "d3#2"])
    assert scores[0, 0] == pytest.approx(passage.max())


def test_new_documents_are_new_docids_without_training(store, corpus):
    head = TiedAtomicHead(store, level="document")
    before = len(head)
    store.add_documents([Document("fresh", "", ("volcano glacier harbor comet",))])
    assert len(head) == before + 1 and "fresh" in head.docids
    assert head.generate("volcano glacier harbor comet", k=1) == [
        store.search("volcano glacier harbor comet", 1)[0].doc_id
    ]


def test_bad_docids_and_models(store, tiny_model_path, tmp_path):
    head = TiedAtomicHead(store)
    with pytest.raises(UnknownDocidError, match=r"1 docid\(s\) not held by the store .*'nope'"):
        head.score(QUERIES, ["d1#0", "nope"])
    with pytest.raises(TypeError):
        head.score(QUERIES, "d1#0")
    with pytest.raises(ValueError, match="k must be"):
        head.generate("x", k=0)
    with pytest.raises(ValueError, match="level"):
        TiedAtomicHead(store, level="section")  # type: ignore[arg-type]
    other = DenseEncoder(tiny_model_path, device="cpu")  # a 32-d BERT: same dimension, another model
    with pytest.raises(RagHierError, match="was built with model"):
        TiedAtomicHead(store, encoder=other)
    from rag_hier.testing import build_tiny_t5

    wide = DenseEncoder(str(build_tiny_t5(tmp_path / "t5-48", dimension=48)), device="cpu")
    with pytest.raises(DimensionMismatchError, match="48-d"):
        TiedAtomicHead(store, encoder=wide)
    vectors_only = HierStore.create(tmp_path / "vectors", model=None, dimension=32)
    with pytest.raises(RagHierError, match="no encoder"):
        TiedAtomicHead(vectors_only)
    vectors_only.close()


def test_dsi_atomic_save_load_and_new_docids(tmp_path, tiny_t5_path):
    from rag_hier.encoders.encdec import encoder_decoder_sentence_transformer

    model = encoder_decoder_sentence_transformer(tiny_t5_path, device="cpu")
    dsi = DSIAtomicModel(model, ["a", "b", "c"], seed=3)
    logits = dsi.logits(QUERIES)
    assert logits.shape == (4, 3)
    path = dsi.save(tmp_path / "dsi")
    meta = json.loads((path / "dsi_atomic.json").read_text())
    assert meta["docids"] == ["a", "b", "c"] and meta["dimension"] == 32
    assert not any(p.suffix in (".bin", ".pkl", ".pt") for p in path.iterdir())
    again = DSIAtomicModel.load(path)
    np.testing.assert_allclose(again.logits(QUERIES), logits, rtol=1e-5, atol=1e-6)
    assert again.generate(QUERIES[0], k=2) == dsi.generate(QUERIES[0], k=2)
    again.add_docids(["d"])  # random row: an untrained new atomic token
    again.add_docids(["e"], init="tied", texts=[QUERIES[1]])  # row = h(text): scores like Tied-Atomic
    assert again.generate(QUERIES[1], k=1) == ["e"]
    assert again.score([QUERIES[1]], ["e"])[0, 0] == pytest.approx(
        float(np.sum(again.encode([QUERIES[1]]) ** 2)), rel=1e-4
    )
    with pytest.raises(UnknownDocidError):
        again.score(QUERIES, ["zz"])
    with pytest.raises(RagHierError, match="already present"):
        again.add_docids(["a"])
    with pytest.raises(RagHierError, match="appears twice"):
        DSIAtomicModel(model, ["a", "a"])
    with pytest.raises(DimensionMismatchError):
        DSIAtomicModel(model, ["a"], np.zeros((1, 5), np.float32))


def test_dsi_atomic_load_errors(tmp_path, tiny_t5_path):
    from rag_hier.encoders.encdec import encoder_decoder_sentence_transformer

    dsi = DSIAtomicModel(encoder_decoder_sentence_transformer(tiny_t5_path, device="cpu"), ["a", "b"])
    path = dsi.save(tmp_path / "dsi")
    meta_file = path / "dsi_atomic.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "docids": ["a", "b", "c"], "num_docids": 3}))
    with pytest.raises(RagHierError, match=r"weight has shape \(2, 32\)"):
        DSIAtomicModel.load(path)
    meta_file.write_text("{oops")
    with pytest.raises(RagHierError, match="not valid JSON"):
        DSIAtomicModel.load(path)
    meta_file.write_text(json.dumps(meta))
    (path / "dsi_atomic.safetensors").write_bytes(b"garbage")
    with pytest.raises(RagHierError, match="safetensors"):
        DSIAtomicModel.load(path)
    (path / "dsi_atomic.safetensors").unlink()
    with pytest.raises(RagHierError, match="is missing"):
        DSIAtomicModel.load(path)


def test_the_registry_dense_strategy_is_the_one_step_decoding(store):
    """No Tied-Atomic strategy exists: the registry's ``dense`` over the store ranks as ``generate``."""
    from rag_hier.retrieval import build_retriever, strategy_names

    assert not any("tied" in name or "atomic" in name for name in strategy_names())
    head = TiedAtomicHead(store, level="document")
    retriever = build_retriever("dense", store)
    for query, generated in zip(QUERIES, head.generate(QUERIES, k=5), strict=True):
        assert generated == [h.doc_id for h in retriever.search(query, top_k=5, aggregate="doc")]
