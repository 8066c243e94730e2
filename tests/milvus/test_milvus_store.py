"""MilvusStore on Milvus Lite, what only Milvus has: escaping into expressions, index kinds, collections that are not
ours, a failure at the commit point, the server going away, pinned reads across handles, search round trips.

What every backend does (writes, updates, deletes, filters, search, generations, bad input) is the contract suite:
``tests/store/contract``, run on Milvus Lite by ``test_contract_milvus.py``. Skips without ``pymilvus`` and
``milvus-lite``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from rag_hier import Document, HierStore, Section
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import DimensionMismatchError, FilterError, StoreError
from rag_hier.index.dense import IndexConfig
from rag_hier.retrieval import Queries, build_retriever
from rag_hier.store.milvus import GPU_INDEXES, MilvusStore, MilvusUnavailableError, milvus_index_params, translate
from rag_hier.store.milvus import store as milvus_store_module

HOSTILE = 'x" or 1==1 or meta["k"] == "'


def _docs() -> list[Document]:
    return [
        Document("tides", "Tides", ("The moon pulls the oceans.",), metadata={"topic": "sea", "year": 2001}),
        Document(
            "bees",
            "Honeybees",
            ("Honeybees live in colonies.",),
            sections=(Section("Honey", ("Bees turn nectar into honey.",), (Section("Storage", ("Wax cells.",)),)),),
            metadata={"topic": "animals", "year": 2010, "tags": ["insect", "farm"]},
        ),
        Document(
            "volcano",
            "Volcanoes",
            ("Magma rises through the crust.", "Eruptions can be explosive."),
            metadata={"topic": "earth", "year": 1999, "note": HOSTILE, "path": "C:\\temp\\'q'"},
        ),
    ]


@pytest.fixture(scope="module")
def db(milvus_db: Path) -> Path:
    """The session's Milvus Lite file (tests/milvus/conftest.py; each test uses its own collection in it)."""
    return milvus_db


@pytest.fixture()
def both(request, tmp_path: Path, db: Path, encoder: DenseEncoder) -> Iterator[tuple[HierStore, MilvusStore]]:
    local = HierStore.create(tmp_path / "local", encoder=encoder)
    remote = HierStore.create(uri=f"{db}#{request.node.name.replace('[', '_').replace(']', '')[:60]}", encoder=encoder)
    for s in (local, remote):
        s.add_documents(_docs(), max_passage_words=0)
    yield local, remote
    remote.drop()
    local.close()


def _same(local: HierStore, remote: MilvusStore, filters=None) -> None:
    want = {p.id: p for p in local.filter_passages(filters)}
    got = {p.id: p for p in remote.filter_passages(filters)}
    assert got == want, filters
    assert remote.count_passages(filters) == local.count_passages(filters)


def test_a_failure_at_the_commit_point_keeps_nothing(both, monkeypatch) -> None:
    # (an exception inside a batch: CrashPointsContract in tests/store/contract)
    local, remote = both

    def fail(name: str) -> None:
        if name == "before_commit":
            raise OSError("disk gone at the commit point")

    monkeypatch.setattr(milvus_store_module, "_step", fail)
    with pytest.raises(OSError, match="commit point"):
        remote.delete_documents(["bees"])
    monkeypatch.undo()
    _same(local, remote)
    fresh = remote.reopen(read_only=True)
    try:
        _same(local, fresh)  # nothing of the failed commit is visible to another handle either
    finally:
        fresh.close()


def test_translation_escapes_values_and_checks_field_names() -> None:
    expr = translate({"field": "meta.note", "operator": "==", "value": HOSTILE})
    assert expr is not None and 'x\\" or 1==1 or meta[\\"k\\"] == \\"' in expr
    with pytest.raises(FilterError, match="a b"):
        translate({"field": "meta.a b", "operator": "==", "value": 1})
    with pytest.raises(FilterError):
        translate({"field": 'meta.x"]', "operator": "==", "value": 1})


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_index_kinds_find_stored_vectors(db: Path, encoder: DenseEncoder, kind: str) -> None:
    options = {"kind": kind} | ({"nlist": 4, "nprobe": 4} if kind == "ivf" else {})
    params = milvus_index_params(IndexConfig(**options))
    assert params["index_type"] == {"flat": "FLAT", "ivf": "IVF_FLAT", "hnsw": "HNSW"}[kind]
    assert GPU_INDEXES[kind].startswith("GPU_")
    store = HierStore.create(uri=f"{db}#kind_{kind}", encoder=encoder, index=options)
    try:
        rng = np.random.default_rng(0)
        docs = [
            Document(f"d{i}", "", (" ".join(rng.choice(["a", "b", "c", "d", "e"], 6)) + f" {i}",)) for i in range(40)
        ]
        store.add_documents(docs, max_passage_words=0)
        assert store.info()["indexes"]["dense"]["milvus"]["index_type"] == params["index_type"]
        vectors = np.stack(store.get_embeddings(["d3#0", "d17#0"]))
        hits = build_retriever("dense", store).run(Queries(vectors=vectors), top_k=3)
        assert [r.hits[0].passage_id for r in hits] == ["d3#0", "d17#0"]
    finally:
        store.drop()


def test_bad_input_is_a_clear_error(db: Path, encoder: DenseEncoder) -> None:
    from pymilvus import MilvusClient

    client = MilvusClient(str(db))
    client.create_collection("foreign", dimension=8)
    with pytest.raises(StoreError, match="not created by rag-hier"):
        MilvusStore.open(f"{db}#foreign")
    with pytest.raises(StoreError, match="no rag-hier collection 'absent'"):
        HierStore.open(uri=f"{db}#absent")
    with pytest.raises(StoreError, match="not a valid Milvus collection name"):
        HierStore.create(uri=f"{db}#bad-name", encoder=encoder)
    store = HierStore.create(uri=f"{db}#dim32", encoder=encoder)
    store.close()
    with pytest.raises(DimensionMismatchError):
        MilvusStore.create(f"{db}#dim32", model=None, dimension=16, exist_ok=True)
    with pytest.raises(StoreError), HierStore.create(uri=f"{db}#dim32", encoder=encoder):
        pass
    with pytest.raises(MilvusUnavailableError, match="unreachable"):
        MilvusStore.open("http://127.0.0.1:9#x", timeout=2)
    with pytest.raises(ValueError, match="not both"):
        HierStore.create(db, uri=str(db))


def test_server_gone_mid_write_leaves_the_last_commit(tmp_path: Path, encoder: DenseEncoder) -> None:
    """Milvus Lite stopped under a writer: a one-line error; reopened, the collection is as last committed."""
    from milvus_lite.server_manager import server_manager_instance

    uri = f"{tmp_path / 'gone.db'}#c"
    store = HierStore.create(uri=uri, encoder=encoder)
    store.add_documents(_docs(), max_passage_words=0)
    before = {p.id: p for p in store.filter_passages()}
    with pytest.raises(MilvusUnavailableError) as err, store.batch():
        store.delete_documents(["bees"])
        store.add_documents([Document("new", "New", ("Fresh text.",))], max_passage_words=0)
        server_manager_instance.release_server(str(tmp_path / "gone.db"))  # the server goes away
    message = str(err.value)
    assert "\n" not in message and "gone.db is unreachable" in message, message
    store.close()
    again = HierStore.open(uri=uri, encoder=encoder)  # a new server on the same file
    try:
        assert {p.id: p for p in again.filter_passages()} == before
        assert again.count_documents() == 3
        again.add_documents([Document("later", "Later", ("Written after the restart.",))], max_passage_words=0)
        assert again.count_passages() == len(before) + 1
    finally:
        again.close()


def test_reading_pins_one_committed_generation(both) -> None:
    _, remote = both
    reader = remote.reopen(read_only=True)
    try:
        before = reader.count_passages()
        with reader.reading():
            assert reader.count_passages() == before
            remote.add_documents([Document("new", "New", ("Written during the block.",))], max_passage_words=0)
            assert reader.count_passages() == before  # the block keeps its generation
            assert reader.get_passages(["new#0"]) == []
        assert reader.count_passages() == before + 1  # the next read sees the commit
        assert [p.id for p in reader.get_passages(["new#0"])] == ["new#0"]
    finally:
        reader.close()


def test_a_dense_search_is_two_round_trips_with_the_same_hits(both, monkeypatch) -> None:
    """One state read and one vector search bringing the hit fields: no count, no second query for the hits."""
    local, remote = both
    vectors = np.stack(local.get_embeddings(["tides#0", "volcano#1"]))
    want = [
        [(h.passage_id, h.text, h.meta, h.title_path) for h in r.hits]
        for r in build_retriever("dense", local).run(Queries(vectors=vectors), top_k=3)
    ]
    calls: list[str] = []
    real = MilvusStore._call

    def counting(self, what, method, *args, **kwargs):
        calls.append(method)
        return real(self, what, method, *args, **kwargs)

    monkeypatch.setattr(MilvusStore, "_call", counting)
    results = build_retriever("dense", remote).run(Queries(vectors=vectors), top_k=3)
    got = [[(h.passage_id, h.text, h.meta, h.title_path) for h in r.hits] for r in results]
    assert got == want
    assert calls.count("search") == 1 and len(calls) <= 2, calls
    # outside a search the records come from Milvus again, and a later commit is seen
    remote.update_meta(["tides#0"], {"topic": "ocean"})
    (rowid,) = remote.rowids_of(passage_ids=["tides#0"]).tolist()
    assert remote.records([rowid])[rowid].meta["topic"] == "ocean"


def test_open_store_and_create_store_serve_both_backends(tmp_path: Path, db: Path, encoder: DenseEncoder) -> None:
    from rag_hier import create_store, open_store

    local = create_store(tmp_path / "local", encoder=encoder)
    remote = create_store(uri=f"{db}#factory", encoder=encoder)
    try:
        assert isinstance(local, HierStore) and isinstance(remote, MilvusStore)
        for s in (local, remote):
            s.add_documents(_docs(), max_passage_words=0)
        local.close()
        again_local = open_store(tmp_path / "local", encoder=encoder)
        again_remote = open_store(uri=f"{db}#factory", encoder=encoder)
        want = [h.passage_id for h in again_local.search("honey", 3)]
        assert [h.passage_id for h in again_remote.search("honey", 3)] == want and want
        assert HierStore.open(uri=f"{db}#factory", encoder=encoder).count_passages() == 6  # the alias
        with pytest.raises(ValueError, match="either a directory path or uri="):
            open_store(tmp_path / "local", uri=f"{db}#factory")
        with pytest.raises(TypeError):
            open_store(tmp_path / "local", token="x")  # a Milvus option without uri=
        again_local.close()
    finally:
        remote.drop()


def test_closing_the_last_handle_closes_its_pymilvus_connection(tmp_path: Path, encoder: DenseEncoder) -> None:
    """Nothing of a closed collection's connection stays in pymilvus: a later Milvus Lite server on the same port
    (or another database on the same server) starts from a connection of its own, not a stale shared one."""
    from pymilvus.client.connection_manager import ConnectionManager

    manager = ConnectionManager.get_instance()

    def held() -> set[int]:
        return {id(m.handler) for m in [*manager._registry.values(), *manager._dedicated.values()]}

    before = held()
    first = HierStore.create(uri=f"{tmp_path / 'one.db'}#c", encoder=encoder)
    second = first.reopen(read_only=True)  # one connection for both handles
    opened = held() - before
    assert len(opened) == 1
    first.close()
    assert held() - before == opened  # the other handle still uses it
    second.close()
    assert held() - before == set()
