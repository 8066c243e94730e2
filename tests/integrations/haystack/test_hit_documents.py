"""Documents built from search hits: the same as Haystack's constructor builds, without re-checking stored values."""

from __future__ import annotations

import dataclasses
import datetime as dt
import warnings

import pytest
from haystack import Document
from haystack.dataclasses import ByteStream, SparseEmbedding
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore, _convert

DOCS = [
    Document(id="plain", content="alpha beta", meta={"n": 1, "tag": "x"}, embedding=[1.0, 0.0, 0.0]),
    Document(id="none", content=None, meta={}, embedding=[0.9, 0.1, 0.0]),
    Document(
        id="rich",
        content="gamma",
        meta={"when": dt.datetime(2024, 5, 1, 12, 0), "pair": (1, 2), "nested": {"a": [1, 2]}},
        blob=ByteStream(data=b"\x00\x01bytes", mime_type="application/octet-stream", meta={"k": (3, 4)}),
        sparse_embedding=SparseEmbedding(indices=[3, 7], values=[0.5, 0.25]),
        embedding=[0.8, 0.2, 0.0],
    ),
]


@pytest.fixture
def store(store_path):
    s = RagHierDocumentStore(path=store_path)
    s.write_documents(DOCS)
    return s


def _by_id(documents):
    return {d.id: d for d in documents}


def test_retrieved_documents_equal_what_the_constructor_builds(store):
    found = _by_id(store.retrieve("dense", query_embedding=[1.0, 0.0, 0.0], top_k=3, return_embedding=True))
    assert set(found) == {"plain", "none", "rich"}
    for original in DOCS:
        got = found[original.id]
        assert type(got) is Document
        rebuilt = Document(**{f.name: getattr(got, f.name) for f in dataclasses.fields(Document)})
        assert got == rebuilt
        assert got.to_dict() == rebuilt.to_dict()
        assert got.content == original.content
        assert got.meta == original.meta
        assert got.blob == original.blob
        assert got.sparse_embedding == original.sparse_embedding
        assert got.embedding == pytest.approx(original.embedding)
        assert isinstance(got.score, float)


def test_retrieved_documents_behave_as_haystack_documents(store):
    got = _by_id(store.retrieve("dense", query_embedding=[1.0, 0.0, 0.0], top_k=3))["plain"]
    # Haystack warns on in-place mutation of a finished Document; a Document built from a hit is finished too
    with pytest.warns(Warning, match="Mutating attribute 'score'"):
        got.score = 2.0
    replaced = dataclasses.replace(got, score=0.5)
    assert replaced.score == 0.5 and replaced.meta == got.meta
    assert "plain" in repr(got)


def test_filter_documents_equal_with_and_without_the_fast_build(store, monkeypatch):
    fast = _by_id(store.filter_documents())
    monkeypatch.setattr(_convert, "_FAST_DOCUMENTS", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the constructor path builds without a mutation warning
        slow = _by_id(store.filter_documents())
    assert fast == slow
    assert [fast[k].to_dict() for k in sorted(fast)] == [slow[k].to_dict() for k in sorted(slow)]


def test_the_fast_build_is_used_only_for_the_fields_it_knows(monkeypatch):
    assert _convert._fast_documents_possible()  # the installed Haystack's Document: the seven known fields
    monkeypatch.setattr(_convert, "_DOCUMENT_FIELDS", (*_convert._DOCUMENT_FIELDS, "new_field"))
    assert not _convert._fast_documents_possible()


def test_an_empty_payload_is_recognised_without_decoding_it() -> None:
    from rag_hier.store.records import new_hit

    row = (7, "p7", "d1", "some text", "[]", '{"n":1}', 3, '{"haystack":{}}')
    hit = new_hit(row, 0.5, 1)
    document = _convert.hit_to_document(hit)
    assert hit.json_text("extra") == '{"haystack":{}}'  # still undecoded: the Document did not need it
    assert document.meta == {"n": 1} and document.content == "some text" and document.score == 0.5
    decoded = new_hit(row, 0.5, 1)
    assert decoded.extra == {"haystack": {}} and decoded.json_text("extra") is None
    assert _convert.hit_to_document(decoded) == document  # the decoding path gives the same Document
    engine_written = new_hit((8, "p8", "d1", "x", "[]", '{"n":1}', 3, "{}"), 0.5, 1)  # no Haystack payload
    assert _convert.hit_to_document(engine_written).meta == {"n": 1, "source_id": "d1", "split_id": 3}
    with pytest.raises(ValueError, match="json_text names"):
        hit.json_text("text")
