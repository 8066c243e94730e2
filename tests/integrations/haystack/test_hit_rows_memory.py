"""RagHierDocumentStore(hit_rows="memory"): the same Documents as the default, through writes, deletes and updates."""

from __future__ import annotations

import numpy as np
import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.retrievers.rag_hier import RagHierEmbeddingRetriever
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

DIM = 8


def _documents(start: int, stop: int) -> list[Document]:
    rng = np.random.default_rng(start)
    return [
        Document(
            id=f"d{i}",
            content=f"passage {i} " * 20,
            meta={"i": i, "group": "even" if i % 2 == 0 else "odd", "tags": [str(i)]},
            embedding=rng.standard_normal(DIM).astype(np.float32).tolist(),
        )
        for i in range(start, stop)
    ]


def _results(store: RagHierDocumentStore, queries: list[list[float]]) -> list[list[tuple]]:
    retriever = RagHierEmbeddingRetriever(document_store=store, top_k=7)
    return [
        [(d.id, d.score, d.content, d.meta) for d in retriever.run(query_embedding=q)["documents"]] for q in queries
    ]


def test_memory_hit_rows_return_what_sqlite_returns(tmp_path):
    sqlite = RagHierDocumentStore(path=str(tmp_path / "sqlite"))
    memory = RagHierDocumentStore(path=str(tmp_path / "memory"), hit_rows="memory")
    queries = np.random.default_rng(99).standard_normal((5, DIM)).astype(np.float32).tolist()
    steps = [
        lambda s: s.write_documents(_documents(0, 30)),
        lambda s: s.write_documents(_documents(30, 45)),
        lambda s: s.delete_documents(["d3", "d17", "d31"]),
        lambda s: s.update_by_filter({"field": "meta.group", "operator": "==", "value": "odd"}, {"tag": "new"}),
        lambda s: s.write_documents(
            [Document(id="d5", content="rewritten", meta={"i": 5}, embedding=[1.0] * DIM)],
            policy=DuplicatePolicy.OVERWRITE,
        ),
    ]
    for step in steps:
        step(sqlite)
        step(memory)
        assert _results(memory, queries) == _results(sqlite, queries)
    sqlite.close()
    memory.close()


def test_another_instance_s_writes_are_seen(tmp_path):
    path = str(tmp_path / "shared")
    writer = RagHierDocumentStore(path=path)
    writer.write_documents(_documents(0, 10))
    memory = RagHierDocumentStore(path=path, hit_rows="memory")
    sqlite = RagHierDocumentStore(path=path)
    query = _documents(0, 10)[4].embedding
    assert _results(memory, [query]) == _results(sqlite, [query])
    writer.write_documents([Document(id="new", content="new", meta={}, embedding=[4 * x for x in query])])
    writer.delete_documents(["d4"])
    found = _results(memory, [query])
    assert found == _results(sqlite, [query])
    assert found[0][0][0] == "new" and "d4" not in {d[0] for d in found[0]}
    for s in (writer, memory, sqlite):
        s.close()


def test_hit_rows_serializes_only_when_not_the_default(tmp_path):
    default = RagHierDocumentStore(path=str(tmp_path / "a"))
    assert "hit_rows" not in default.to_dict()["init_parameters"]
    memory = RagHierDocumentStore(path=str(tmp_path / "b"), hit_rows="memory")
    data = memory.to_dict()
    assert data["init_parameters"]["hit_rows"] == "memory"
    assert RagHierDocumentStore.from_dict(data).hit_rows == "memory"


@pytest.mark.parametrize("kwargs", [{"path": "x", "hit_rows": "disk"}, {"uri": "./c.db", "hit_rows": "memory"}])
def test_bad_hit_rows_are_refused(kwargs):
    with pytest.raises(ValueError, match="hit_rows"):
        RagHierDocumentStore(**kwargs)
