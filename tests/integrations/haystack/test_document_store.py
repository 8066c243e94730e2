"""RagHierDocumentStore against every shared document-store test class of Haystack, plus its own behaviour."""

from __future__ import annotations

import inspect
import random
from datetime import datetime, timezone

import numpy as np
import pytest
from haystack import Document
from haystack.dataclasses import ByteStream, SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError, DuplicateDocumentError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError
from haystack.testing import document_store as haystack_tests
from haystack.testing.document_store import (
    CountDocumentsByFilterTest,
    CountDocumentsTest,
    CountUniqueMetadataByFilterTest,
    DeleteAllTest,
    DeleteByFilterTest,
    DeleteDocumentsTest,
    FilterDocumentsTest,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldUniqueValuesTest,
    UpdateByFilterTest,
    WriteDocumentsTest,
    create_filterable_docs,
)
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier import HierStore
from rag_hier.corpus import Document as CorpusDocument

SYNC_MIXINS = (
    CountDocumentsTest,
    WriteDocumentsTest,
    DeleteDocumentsTest,
    FilterDocumentsTest,
    DeleteAllTest,
    DeleteByFilterTest,
    UpdateByFilterTest,
    CountDocumentsByFilterTest,
    CountUniqueMetadataByFilterTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldUniqueValuesTest,
)


def shared_test_classes(module) -> set[type]:
    """Every class of ``module`` that defines tests itself (bundles such as DocumentStoreBaseTests only inherit)."""
    return {
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if obj.__module__ == module.__name__ and any(name.startswith("test_") for name in vars(obj))
    }


def test_every_shared_sync_test_class_is_used():
    assert shared_test_classes(haystack_tests) == set(SYNC_MIXINS)


class TestRagHierDocumentStoreConformance(*SYNC_MIXINS):
    """Haystack's shared sync document-store tests, all of them, on a directory and on Milvus Lite."""

    @pytest.fixture
    def document_store(self, store_location):
        store = RagHierDocumentStore(**store_location)
        yield store
        store.close()

    def test_write_documents(self, document_store):
        doc = Document(content="test doc")
        assert document_store.write_documents([doc]) == 1
        with pytest.raises(DuplicateDocumentError):
            document_store.write_documents([doc])
        self.assert_documents_are_equal(document_store.filter_documents(), [doc])


# ------------------------------------------------------------------------------------------------------
# rag-hier specific behaviour
# ------------------------------------------------------------------------------------------------------
@pytest.fixture
def store(store_path):
    s = RagHierDocumentStore(path=store_path)
    yield s
    s.close()


def test_init_is_lazy_and_serializes_only_configuration(tmp_path):
    path = tmp_path / "lazy"
    store = RagHierDocumentStore(path=str(path), index="hnsw", device="cpu")
    assert not path.exists()
    data = store.to_dict()
    assert data == {
        "type": "haystack_integrations.document_stores.rag_hier.document_store.RagHierDocumentStore",
        "init_parameters": {
            "path": str(path),
            "index": "hnsw",
            "model": None,
            "device": "cpu",
            "strict_datetime_comparison": False,
        },
    }
    again = RagHierDocumentStore.from_dict(data)
    assert again.to_dict() == data
    assert store.count_documents() == 0
    assert (path / "manifest.json").is_file()
    assert store.hier_store.index_config.kind == "hnsw"


def test_bad_init_parameters(tmp_path):
    with pytest.raises(ValueError):
        RagHierDocumentStore(path="")
    with pytest.raises(ValueError):
        RagHierDocumentStore(path=str(tmp_path), index="nope")


def test_persists_across_instances(tmp_path):
    docs = create_filterable_docs()
    first = RagHierDocumentStore(path=str(tmp_path / "s"))
    first.write_documents(docs)
    first.close()
    second = RagHierDocumentStore(path=str(tmp_path / "s"))
    assert second.filter_documents() == docs
    second.close()


def test_embeddings_come_back_bit_exact(store):
    rng = np.random.default_rng(0)
    as64 = rng.standard_normal(16).tolist()
    as32 = rng.standard_normal(16).astype(np.float32).tolist()
    docs = [Document(content="a", embedding=as64), Document(content="b", embedding=as32), Document(content="c")]
    store.write_documents(docs)
    out = store.filter_documents()
    assert [d.embedding for d in out] == [as64, as32, None]
    assert out == docs


def test_blob_sparse_embedding_and_none_content_round_trip(store):
    docs = [
        Document(blob=ByteStream(b"\x00\xffbinary", meta={"k": (1, 2)}, mime_type="application/octet-stream")),
        Document(content="", sparse_embedding=SparseEmbedding(indices=[3, 7], values=[0.25, 1e-30])),
        Document(content=None, meta={"x": 1}),
    ]
    store.write_documents(docs)
    assert store.filter_documents() == docs
    assert store.filter_documents()[2].content is None
    assert store.filter_documents({"field": "blob", "operator": "!=", "value": None}) == docs[:1]


def test_meta_round_trips_exactly(store):
    meta = {
        "tuple": (1, "a", (2.5, None)),
        "nested": {"int_keys": {1: "one", 2: [True]}, "list": [1, 2.0, "3"]},
        "when": datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc),
        "_split_overlap": [{"doc_id": "x", "range": (23, 53)}],
        "np": np.int64(7),
    }
    doc = Document(content="meta", meta=meta)
    store.write_documents([doc])
    (out,) = store.filter_documents()
    assert out.meta == meta
    assert isinstance(out.meta["tuple"], tuple)
    assert out.meta["when"] == meta["when"]
    assert store.filter_documents({"field": "meta.when", "operator": ">", "value": "2024-01-01T00:00:00+00:00"})


def test_meta_the_store_cannot_keep_is_rejected(store):
    with pytest.raises(DocumentStoreError, match="meta"):
        store.write_documents([Document(content="x", meta={"obj": object()})])
    assert store.count_documents() == 0


def test_update_by_filter_keeps_exact_values_of_other_keys(store):
    store.write_documents([Document(id="1", content="x", meta={"pair": (1, 2), "n": 1})])
    assert store.update_by_filter({"field": "meta.n", "operator": "==", "value": 1}, {"n": 2}) == 1
    (out,) = store.filter_documents()
    assert out.meta == {"pair": (1, 2), "n": 2}
    with pytest.raises(FilterError):
        store.update_by_filter({}, {"n": 3})
    with pytest.raises(FilterError):
        store.delete_by_filter({})


def test_parent_id_convention(store):
    docs = [
        Document(id="root", content="root", meta={"__parent_id": None}),
        Document(id="leaf", content="leaf", meta={"__parent_id": "root", "source_id": "root", "split_id": 3}),
        Document(id="chunk", content="chunk", meta={"source_id": "orig", "split_id": 0}),
        Document(id="alone", content="alone"),
    ]
    store.write_documents(docs)
    hier = store.hier_store
    assert [(p.id, p.doc_id, p.position) for p in hier.filter_passages()] == [
        ("root", "root", 0),
        ("leaf", "root", 3),
        ("chunk", "orig", 0),
        ("alone", "alone", 0),
    ]
    assert hier.get_document("root")["passage_ids"] == ["root", "leaf"]


def test_write_policies_match_in_memory_store(store_path):
    """Order and counts under every policy, compared with Haystack's InMemoryDocumentStore."""
    rng = random.Random(0)
    ours = RagHierDocumentStore(path=store_path)
    reference = InMemoryDocumentStore(shared=False)
    for step in range(40):
        batch = [
            Document(id=str(rng.randrange(12)), content=f"step {step} doc {i}", meta={"step": step})
            for i in range(rng.randrange(1, 5))
        ]
        policy = rng.choice([DuplicatePolicy.SKIP, DuplicatePolicy.OVERWRITE])
        assert ours.write_documents(batch, policy) == reference.write_documents(batch, policy)
        if step % 7 == 0:
            victims = [str(rng.randrange(12)) for _ in range(2)]
            ours.delete_documents(victims)
            reference.delete_documents(victims)
        assert ours.filter_documents() == reference.filter_documents()
    ours.close()


def test_fail_policy_is_atomic(store):
    store.write_documents([Document(id="a", content="a")])
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([Document(id="b", content="b"), Document(id="a", content="a2")], DuplicatePolicy.FAIL)
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([Document(id="c", content="c"), Document(id="c", content="c2")])
    assert [d.id for d in store.filter_documents()] == ["a"]


FILTERS = [
    {"field": "meta.number", "operator": ">=", "value": -2},
    {"field": "meta.date", "operator": "<", "value": "1980-01-01T00:00:00"},
    {"field": "meta.name", "operator": "in", "value": ["name_0", "zeros_doc"]},
    {"field": "meta.chapter", "operator": "not in", "value": ["intro"]},
    {"field": "content", "operator": "==", "value": "A Foo Document 1"},
    {"field": "embedding", "operator": "==", "value": None},
    {"field": "meta.no_embedding", "operator": "!=", "value": True},
    {"field": "number", "operator": "==", "value": 2},
    {"field": "meta.date", "operator": "==", "value": "1969-07-21T20:17:40.000"},
    {
        "operator": "NOT",
        "conditions": [
            {"field": "meta.number", "operator": "<", "value": 0},
            {"operator": "OR", "conditions": [{"field": "meta.page", "operator": "==", "value": "123"}]},
        ],
    },
]


@pytest.mark.parametrize("filters", FILTERS)
def test_filters_match_haystack_reference(store, filters):
    docs = create_filterable_docs()
    reference = InMemoryDocumentStore(shared=False)
    reference.write_documents(docs)
    store.write_documents(docs)
    expected = reference.filter_documents(filters)
    assert store.filter_documents(filters) == expected
    assert store.count_documents_by_filter(filters) == len(expected)


def test_malformed_filters_fail_even_on_an_empty_store(store):
    for bad in (
        {"field": "meta.x", "operator": "in", "value": "not a list"},
        {"field": "meta.x", "operator": "~", "value": 1},
        {"operator": "XOR", "conditions": []},
        {"conditions": []},
        "meta.x == 1",
    ):
        with pytest.raises(FilterError):
            store.filter_documents(bad)


def test_embedding_retrieval_prefilters_exactly(store):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    docs = [
        Document(id=f"d{i}", content=f"doc {i}", meta={"group": i % 10}, embedding=vectors[i].tolist())
        for i in range(300)
    ]
    store.write_documents(docs)
    query = rng.standard_normal(8).astype(np.float32)
    filters = {"field": "meta.group", "operator": "==", "value": 3}
    got = store.embedding_retrieval(query.tolist(), filters=filters, top_k=7)
    allowed = [i for i in range(300) if i % 10 == 3]
    scores = vectors[allowed] @ query
    expected = [f"d{allowed[j]}" for j in np.argsort(-scores)[:7]]
    assert [d.id for d in got] == expected
    assert all(d.embedding is None for d in got)
    np.testing.assert_allclose([d.score for d in got], np.sort(scores)[::-1][:7], rtol=1e-5)
    assert store.embedding_retrieval(query.tolist(), top_k=0) == []
    with_embedding = store.embedding_retrieval(query.tolist(), top_k=2, return_embedding=True)
    assert with_embedding[0].embedding == vectors[int(with_embedding[0].id[1:])].tolist()
    scaled = store.embedding_retrieval(query.tolist(), top_k=2, scale_score=True)
    assert all(0 < d.score < 1 for d in scaled)
    assert scaled[0].score == pytest.approx(1 / (1 + np.exp(-with_embedding[0].score / 100)))


def test_embedding_retrieval_errors(store):
    assert store.embedding_retrieval([0.1, 0.2]) == []  # nothing indexed yet
    store.write_documents([Document(content="x", embedding=[0.1, 0.2, 0.3])])
    with pytest.raises(ValueError):
        store.embedding_retrieval([])
    with pytest.raises(DocumentStoreError, match="dimensions"):
        store.embedding_retrieval([0.1, 0.2])
    with pytest.raises(DocumentStoreError, match="model"):
        store.text_retrieval("query")
    with pytest.raises(DocumentStoreError):
        store.write_documents([Document(content="y", embedding=[0.1, 0.2])])


def test_recreate_index_forgets_the_dimension(store):
    store.write_documents([Document(content="x", embedding=[0.1, 0.2, 0.3])])
    store.delete_all_documents(recreate_index=True)
    store.write_documents([Document(content="y", embedding=[0.1, 0.2])])
    assert store.count_documents() == 1
    assert store.hier_store.dimension == 2


def test_model_store_encodes_documents_and_queries(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path, device="cpu")
    docs = [Document(content="the moon pulls the tides"), Document(content="bees make honey"), Document(content=None)]
    assert store.write_documents(docs) == 3
    got = store.text_retrieval("bees make honey", top_k=5, scale_score=True)
    assert [d.id for d in got][:1] == [docs[1].id]
    assert len(got) == 2  # the document without content has no vector
    assert got[0].score == pytest.approx(1.0, abs=1e-5)  # cosine (normalizing model), scaled
    with pytest.raises(ValueError):
        store.text_retrieval("")
    store.close()


def test_engine_built_store_reads_as_documents_with_window_meta(tmp_path, tiny_model_path):
    doc = CorpusDocument("tides", "Tides", ("The moon pulls the oceans.", "Twice a day."), metadata={"topic": "sea"})
    hier = HierStore.create(tmp_path / "s", model=tiny_model_path)
    hier.add_documents([doc], max_passage_words=0)
    hier.close()
    store = RagHierDocumentStore(path=str(tmp_path / "s"))
    out = store.filter_documents({"field": "meta.source_id", "operator": "==", "value": "tides"})
    assert [(d.id, d.meta) for d in out] == [
        ("tides#0", {"topic": "sea", "source_id": "tides", "split_id": 0, "title_path": ["Tides"]}),
        ("tides#1", {"topic": "sea", "source_id": "tides", "split_id": 1, "title_path": ["Tides"]}),
    ]
    assert all(d.embedding is not None for d in out)
    store.close()


def test_instances_on_one_directory_share_the_open_store(store_path):
    reader = RagHierDocumentStore(path=store_path)
    assert reader.count_documents() == 0  # opened before the writer writes
    writer = RagHierDocumentStore.from_dict(reader.to_dict())
    writer.write_documents([Document(content="x", embedding=[1.0, 0.0])])
    assert [d.content for d in reader.embedding_retrieval([1.0, 0.0])] == ["x"]
    writer.close()
    assert reader.count_documents() == 1  # the reader still holds the store
    reader.close()
    assert RagHierDocumentStore(path=store_path).count_documents() == 1


def test_write_corpus_uses_the_engine_splitter_and_model(store_path, tiny_model_path):
    corpus = [
        CorpusDocument("tides", "Tides", ("The moon pulls the oceans.",), metadata={"topic": "sea"}),
        CorpusDocument("bees", "Honeybees", ("Bees dance.", "Bees make honey.")),
    ]
    without_model = RagHierDocumentStore(path=store_path)
    with pytest.raises(DocumentStoreError, match="encoder"):
        without_model.write_corpus(corpus)
    without_model.delete_all_documents(recreate_index=True)
    without_model.close()

    store = RagHierDocumentStore(path=store_path + "-model", model=tiny_model_path, device="cpu")
    summary = store.write_corpus(corpus, max_passage_words=0)
    assert (summary.documents_added, summary.passages_added) == (2, 3)
    assert store.write_corpus(corpus, max_passage_words=0).passages_unchanged == 3
    with pytest.raises(DuplicateDocumentError):
        store.write_corpus(corpus, policy=DuplicatePolicy.FAIL)
    docs = store.filter_documents({"field": "meta.source_id", "operator": "==", "value": "bees"})
    assert [(d.id, d.content, d.meta["title_path"]) for d in docs] == [
        ("bees#0", "Bees dance.", ["Honeybees"]),
        ("bees#1", "Bees make honey.", ["Honeybees"]),
    ]
    assert store.text_retrieval("Honeybees, Bees make honey.", top_k=1)[0].id == "bees#1"  # title path + text
    store.close()


def test_a_store_saved_with_a_gpu_device_opens_on_a_cpu_machine(store_path, tiny_model_path, monkeypatch, caplog):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    store = RagHierDocumentStore.from_dict(
        RagHierDocumentStore(path=store_path, model=tiny_model_path, device="cuda:0").to_dict()
    )
    with caplog.at_level("WARNING"):
        store.write_documents([Document(content="moon and tides")])
    assert "not available" in caplog.text
    assert store.hier_store.encoder.device == "cpu"
    assert store.text_retrieval("moon and tides", top_k=1)[0].content == "moon and tides"
    store.close()
