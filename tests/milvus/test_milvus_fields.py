"""Extensions kept in Milvus fields: the token index, sparse embeddings and SVDR E(d) vectors as a
sparse vector field (``C__sparse``), the tree / EHI leaves as passage fields — exact through every kind of write,
atomic at the commit point, searched in Milvus with the local store's results, and collections whose extensions are
still files keep working.

One local store and one Milvus Lite collection receive the same writes; after each, the sparse rows and leaves
Milvus holds must equal what the extensions hold, and the searches must return the local top 10.
Skips without ``pymilvus`` and ``milvus-lite``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from rag_hier import Document, HierStore
from rag_hier.encoders import DenseEncoder
from rag_hier.retrieval import Queries, strategy
from rag_hier.store.extensions.ehi import EHIExtension
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.store.extensions.tree import TreeExtension
from rag_hier.store.milvus import MilvusStore
from rag_hier.store.milvus import store as milvus_store_module

WORDS = ["river", "glacier", "magma", "honey", "moon", "comet", "delta", "nectar", "crust", "valley", "tide", "orbit"]
TEXTS = ["river delta", "honey nectar bees", "moon tide orbit"]
ENGINE = ("token-index", "sparse-embeddings", "svdr-vectors", "tree", "ehi")
SPARSE = ("token-index", "sparse-embeddings", "svdr-vectors")
STRATEGIES = {
    "svdr-full": {},
    "svdr-alpha": {},
    "svdr-beta": {},
    "svdr-beta-rerank": {"rerank_m": 5},
    "svdr-lexical": {},
    "sparse-embedding": {},
    "tree": {"beam": 2},
    "ehi": {"beam": 1},
}


def _docs(first: int, n: int, seed: int = 5) -> list[Document]:
    rng = np.random.default_rng(seed + first)
    return [
        Document(
            f"doc{d}",
            f"Title {d}",
            tuple(" ".join(rng.choice(WORDS, size=5)) for _ in range(3)),
            metadata={"n": d, "parity": d % 2},
        )
        for d in range(first, first + n)
    ]


def _with_sparse(store, passage_ids: list[str] | None = None, bump: float = 0.0) -> None:
    """Give passages a sparse embedding (word index → 1 + count + bump) through an upsert."""
    with store.batch():
        for p in store.get_passages(passage_ids) if passage_ids is not None else store.filter_passages():
            words = p.text.split()
            ids = sorted({WORDS.index(w) for w in words})
            values = [1.0 + words.count(WORDS[i]) + bump for i in ids]
            extra = {"sparse_embedding": {"indices": ids, "values": values}}
            store.add_passages([dataclasses.replace(p, extra=extra)], store.get_embeddings([p.id]))


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("milvus-fields") / "m.db"


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, db: Path, encoder: DenseEncoder, tiny_model_path: str, vocab
) -> Iterator[tuple[HierStore, MilvusStore]]:
    """The same writes on a local store and on a Milvus Lite collection, with the five extensions attached."""
    from rag_hier.retrieval.svdr import encode_missing_vectors
    from rag_hier.testing import kmeans_ehi_extension

    local = HierStore.create(tmp_path_factory.mktemp("fields") / "local", encoder=encoder)
    remote = HierStore.create(uri=f"{db}#fields", encoder=encoder)
    indexer = None
    for s in (local, remote):
        s.add_documents(_docs(0, 8), max_passage_words=0)
        _with_sparse(s)
        s.add_extension(TokenIndexExtension(model=tiny_model_path))
        s.ensure_extension("sparse-embeddings")
        s.add_extension(TreeExtension(branching=3))
        if indexer is None:
            indexer = kmeans_ehi_extension(s, leaves=4).indexer
        s.add_extension(EHIExtension(indexer))
        encode_missing_vectors(s, vocab)
    yield local, remote
    remote.close()
    local.close()


def _by_passage(store, rowids) -> dict[int, str]:
    return {r: rec.passage_id for r, rec in store.records([int(x) for x in rowids]).items()}


def _local_sparse(store, name: str) -> dict[str, dict[int, float]]:
    ids, rows = store.extension(name).sparse_rows()
    names = _by_passage(store, ids)
    out = {}
    for i, r in enumerate(ids.tolist()):
        row = rows[i]
        out[names[r]] = dict(zip(row.indices.tolist(), np.round(row.data.astype(np.float64), 5).tolist(), strict=True))
    return out


def _milvus_sparse(store: MilvusStore, name: str) -> dict[str, dict[int, float]]:
    with store.reading():
        rows = store._sparse_rows(name, store._view())
    names = _by_passage(store, [r["rowid"] for r in rows])
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        assert names[int(r["rowid"])] not in out, "two visible versions of one passage's sparse row"
        out[names[int(r["rowid"])]] = {int(k): round(float(v), 5) for k, v in r["vec"].items()}
    return out


def _milvus_leaves(store: MilvusStore) -> dict[str, tuple[int | None, list[int] | None]]:
    with store.reading():
        rows = store._passage_rows("true", store._view(), ["rowid", "passage_id", "tree_leaf", "ehi_leaves"])
    return {r["passage_id"]: (r.get("tree_leaf"), list(r["ehi_leaves"]) if r.get("ehi_leaves") else None) for r in rows}


def _queries(store) -> Queries:
    sparse = [sorted({WORDS.index(w) for w in t.split() if w in WORDS}) for t in TEXTS]
    return Queries(
        texts=TEXTS,
        vectors=store.encode_queries(TEXTS),
        sparse=[(ids, [1.0 + i / 10 for i in ids]) for ids in sparse],
    )


def _check(local: HierStore, remote: MilvusStore, vocab, *, encode: bool = True) -> None:
    """Milvus holds exactly the extensions' rows and leaves; every search returns the local top 10.

    The E(d) rows are compared as the write left them, then (``encode``) after encoding the missing ones on both.
    """
    from rag_hier.index.sparse import SparseRowIndex
    from rag_hier.retrieval.svdr import encode_missing_vectors

    assert {p.id: p for p in remote.filter_passages()} == {p.id: p for p in local.filter_passages()}
    for name in ENGINE:
        assert remote.extension_in_engine(name), name
    names = list(SPARSE)
    if encode:
        _same_sparse(local, remote, "svdr-vectors")
        generation = local.generation
        assert encode_missing_vectors(local, vocab) == encode_missing_vectors(remote, vocab)
        if local.generation == generation:
            names.remove("svdr-vectors")  # nothing was missing: compared above
    for name in names:
        assert remote.manifest["extensions"][name]["files"] == {}  # no file: the rows are the sparse field
        assert remote.extension(name).sparse_rows()[0].size == 0  # and the client holds none of them
        got = _milvus_sparse(remote, name)
        want = {k: v for k, v in _local_sparse(local, name).items() if v}
        if name == "token-index":
            assert set(got) == {p.id for p in local.filter_passages()}
            want = {k: {c: 1.0 for c in v} for k, v in want.items()}
        if name == "svdr-vectors" and encode:
            assert set(got) == {p.id for p in local.filter_passages()}  # every E(d), after encode_missing_vectors
        assert got == want, name
    # the leaf fields are the extensions' own assignments (tree: one leaf; EHI: its leaves)
    leaves = _milvus_leaves(remote)
    tree_ids, tree_leaf = remote.extension("tree").leaf_rows()
    names = _by_passage(remote, tree_ids)
    assert {names[r]: int(leaf[0]) for r, leaf in zip(tree_ids.tolist(), tree_leaf, strict=True)} == {
        p: t for p, (t, _) in leaves.items() if t is not None
    }
    ehi_ids, ehi_leaves = remote.extension("ehi").leaf_rows()
    names = _by_passage(remote, ehi_ids)
    assert {names[r]: [int(x) for x in row if x >= 0] for r, row in zip(ehi_ids.tolist(), ehi_leaves, strict=True)} == {
        p: e for p, (_, e) in leaves.items() if e is not None
    }
    assert len(leaves) == len(tree_ids) == len(ehi_ids)
    for name, params in STRATEGIES.items():
        info = strategy(name)
        kwargs = {"encoder": vocab} if info.retriever.__name__ == "SvdrRetriever" else {}
        want = info.retriever(local, params=info.parse(params), **kwargs).run(_queries(local), top_k=10)
        generation = remote.generation
        with mock.patch.object(SparseRowIndex, "search", _client_search):  # E(d) / T(d) searched in Milvus only
            got = info.retriever(remote, params=info.parse(params), **kwargs).run(_queries(remote), top_k=10)
        assert remote.generation == generation, name  # a search never writes on Milvus
        for w, g in zip(want, got, strict=True):
            assert [h.passage_id for h in g.hits] == [h.passage_id for h in w.hits], name
            assert [h.score for h in g.hits] == pytest.approx([h.score for h in w.hits], rel=1e-4, abs=1e-5), name
            if name in ("tree", "ehi"):
                assert g.stats == w.stats, name


def _client_search(*args, **kwargs):
    raise AssertionError("a sparse index was searched in the client")


def _same_sparse(local: HierStore, remote: MilvusStore, name: str) -> None:
    assert remote.extension(name).sparse_rows()[0].size == 0
    assert _milvus_sparse(remote, name) == {k: v for k, v in _local_sparse(local, name).items() if v}, name


def test_writes_keep_the_sparse_rows_and_leaves_exact(pair, vocab) -> None:
    local, remote = pair
    _check(local, remote, vocab)
    for s in (local, remote):  # add
        s.add_documents(_docs(8, 2), max_passage_words=0)
    _check(local, remote, vocab)
    changed = _docs(0, 1, seed=99)  # upsert: doc0's passages change text (new rowids)
    for s in (local, remote):
        s.add_documents(changed, max_passage_words=0)
        _with_sparse(s, ["doc0#0", "doc9#1"], bump=0.5)  # upsert of passages with new sparse embeddings
    _check(local, remote, vocab)
    for s in (local, remote):  # metadata rewrites keep the leaves
        assert s.update_meta(["doc1#0", "doc2#1"], {"seen": True}) == 2
        s.update_by_filter({"field": "meta.parity", "operator": "==", "value": 1}, {"odd": True})
    _check(local, remote, vocab)
    for s in (local, remote):  # delete by id, by document, by filter, in one batch and alone
        assert s.delete_passages(["doc1#1"]) == 1
        with s.batch():
            assert s.delete_documents(["doc2"]) == 3
            assert s.delete_by_filter({"field": "meta.n", "operator": "==", "value": 3}) == 3
            s.add_documents(_docs(10, 1), max_passage_words=0)
    _check(local, remote, vocab)
    fresh = remote.reopen(read_only=True)
    try:
        _check(local, fresh, vocab)  # another handle reads the same from Milvus
    finally:
        fresh.close()


@pytest.mark.parametrize("step", ["files_written", "before_commit"])
def test_a_failure_before_the_commit_point_leaves_the_previous_state(pair, vocab, monkeypatch, step: str) -> None:
    local, remote = pair
    generation = remote.generation

    def fail(name: str) -> None:
        if name == step:
            raise OSError(f"gone at {name}")

    monkeypatch.setattr(milvus_store_module, "_step", fail)
    from rag_hier.retrieval.svdr import save_vectors

    ids = remote.rowids_of(passage_ids=["doc5#1", "doc6#0"])
    rows = vocab.encode_documents(["glacier magma", "comet"])
    with pytest.raises(OSError, match="gone at"), remote.batch():
        remote.add_documents(_docs(20, 2), max_passage_words=0)
        remote.delete_documents(["doc4"])
        _with_sparse(remote, ["doc5#0"], bump=3.0)
        assert save_vectors(remote, vocab, ids, rows) == 2  # E(d) rows replaced in the failing batch
    monkeypatch.undo()
    assert remote.generation == generation
    _check(local, remote, vocab, encode=False)
    fresh = remote.reopen()
    try:
        _check(local, fresh, vocab)
    finally:
        fresh.close()


def test_negative_sparse_weights_are_refused_and_nothing_is_kept(pair, vocab) -> None:
    """Milvus sparse vectors hold non-negative weights: such an embedding is a clear error, the write is undone."""
    from rag_hier.errors import StoreError

    local, remote = pair
    generation = remote.generation
    (p,) = remote.get_passages(["doc5#1"])
    bad = dataclasses.replace(p, extra={"sparse_embedding": {"indices": [1, 2], "values": [0.5, -1.0]}})
    with pytest.raises(StoreError, match=r"passage .doc5#1.*non-negative weights.*-1"):
        remote.add_passages([bad], remote.get_embeddings([p.id]))
    assert remote.generation == generation
    with pytest.raises(StoreError, match="non-negative"):
        remote.search_sparse("sparse-embeddings", np.array([[0.0, -1.0]]), 5)
    _check(local, remote, vocab)


def test_vectors_computed_by_a_search_stay_in_memory_on_milvus(pair, vocab) -> None:
    """β+rerank and full search on passages without E(d): the local store caches them (a commit per search),
    Milvus keeps them in the retriever's memory for the generation (no write) with the same top 10, and
    ``take_unsaved`` + ``save_vectors`` persists them as exact rows."""
    from rag_hier.retrieval.svdr import save_vectors

    local, remote = pair
    for first, name in ((30, "svdr-beta-rerank"), (40, "svdr-full")):
        for s in (local, remote):
            s.add_documents(_docs(first, 3, seed=7), max_passage_words=0)  # nine passages without E(d)
        _same_sparse(local, remote, "svdr-vectors")
        generation = remote.generation
        info = strategy(name)
        params = info.parse({"rerank_m": 30} if name == "svdr-beta-rerank" else {})
        want = info.retriever(local, params=params, encoder=vocab).run(_queries(local), top_k=10)
        retriever = info.retriever(remote, params=params, encoder=vocab)
        got = retriever.run(_queries(remote), top_k=10)
        again = retriever.run(_queries(remote), top_k=10)  # from memory this time
        for w, g, a in zip(want, got, again, strict=True):
            assert [h.passage_id for h in g.hits] == [h.passage_id for h in w.hits] == [h.passage_id for h in a.hits]
            assert [h.score for h in g.hits] == pytest.approx([h.score for h in w.hits], rel=1e-4, abs=1e-5)
        assert remote.generation == generation, name
        pending = retriever.take_unsaved()
        assert pending is not None and pending[0].size > 0, name
        assert save_vectors(remote, vocab, *pending) == pending[0].size
        _same_sparse(local, remote, "svdr-vectors")  # the rows computed in memory, stored: the local cache's
    _check(local, remote, vocab)


def test_migrate_back_rebuilds_the_files_from_milvus(pair, tmp_path: Path) -> None:
    from rag_hier.store.milvus.migrate import milvus_to_local

    local, remote = pair
    back = milvus_to_local(remote, tmp_path / "back")  # rowids with gaps (deletes): kept, so the files match
    try:
        np.testing.assert_array_equal(back.passage_rowids(), remote.passage_rowids())
        for name in SPARSE:
            assert _local_sparse(back, name) == _local_sparse(local, name)
        assert sorted(back.extensions) == sorted(local.extensions)
    finally:
        back.close()


def test_extensions_attached_as_files_keep_working(
    db: Path, encoder: DenseEncoder, tiny_model_path: str, vocab, monkeypatch, tmp_path: Path
) -> None:
    """A collection whose passage schema has no leaf fields and whose token index and E(d) vectors are files (as
    before this change) is searched in the client as before (β+rerank still caches into the file); re-attaching
    the token index / the vectors moves them into the sparse field."""
    from rag_hier.retrieval.svdr import encode_missing_vectors

    local = HierStore.create(tmp_path / "local", encoder=encoder)
    monkeypatch.setattr(milvus_store_module, "FIELD_KINDS", frozenset())  # every extension a file
    remote = HierStore.create(uri=f"{db}#files", encoder=encoder)
    remote._leaf_columns = ()
    for s in (local, remote):
        s.add_documents(_docs(0, 6), max_passage_words=0)
        s.add_extension(TokenIndexExtension(model=tiny_model_path))
        s.add_extension(TreeExtension(branching=3))
        encode_missing_vectors(s, vocab)
    remote.close()
    monkeypatch.undo()
    monkeypatch.setattr(milvus_store_module, "FIELD_KINDS", frozenset({"sparse-rows"}))  # the old schema: no leaves
    remote = MilvusStore.open(f"{db}#files", encoder=encoder)
    try:
        for name in ("token-index", "tree", "svdr-vectors"):
            assert not remote.extension_in_engine(name), name
        for s in (local, remote):
            s.add_documents(_docs(6, 2), max_passage_words=0)  # writes keep the file
        assert "tokens.npz" in remote.manifest["extensions"]["token-index"]["files"]

        def same(name: str, params: dict) -> None:
            info = strategy(name)
            kwargs = {"encoder": vocab} if info.retriever.__name__ == "SvdrRetriever" else {}
            q = Queries(texts=TEXTS, vectors=local.encode_queries(TEXTS))
            want = info.retriever(local, params=info.parse(params), **kwargs).run(q, top_k=10)
            got = info.retriever(remote, params=info.parse(params), **kwargs).run(q, top_k=10)
            for w, g in zip(want, got, strict=True):
                assert [h.passage_id for h in g.hits] == [h.passage_id for h in w.hits], name

        same("svdr-beta", {})
        same("tree", {"beam": 2})
        generation = remote.generation
        same("svdr-beta-rerank", {"rerank_m": 20})  # the new passages' E(d): cached into the file, as before
        assert remote.generation > generation
        assert "svdr_vectors.npz" in remote.manifest["extensions"]["svdr-vectors"]["files"]
        same("svdr-full", {})
        remote.add_extension(TokenIndexExtension(model=tiny_model_path), replace=True)
        assert remote.extension_in_engine("token-index")
        assert remote.manifest["extensions"]["token-index"]["files"] == {}
        same("svdr-beta", {})
        remote.add_extension(remote.extension("svdr-vectors"), replace=True)  # the file's rows into the field
        assert remote.extension_in_engine("svdr-vectors")
        assert remote.manifest["extensions"]["svdr-vectors"]["files"] == {}
        _same_sparse(local, remote, "svdr-vectors")
        same("svdr-full", {})
        same("svdr-beta-rerank", {"rerank_m": 20})
    finally:
        remote.drop()
        remote.close()
        local.close()


def test_migrate_a_local_store_whose_extensions_have_segments(
    db: Path, encoder: DenseEncoder, tiny_model_path: str, tmp_path: Path
) -> None:
    """Small writes leave the token index and tree files stale on disk (their changes are segments in
    store.sqlite); migrating copies the extensions with the segments merged in, not the stale files."""
    from rag_hier.store.milvus.migrate import local_to_milvus

    local = HierStore.create(tmp_path / "local", encoder=encoder)
    local.add_documents(_docs(0, 30), max_passage_words=0)
    local.add_extension(TokenIndexExtension(model=tiny_model_path))
    local.add_extension(TreeExtension(branching=3))
    local.add_documents(_docs(30, 1), max_passage_words=0)  # committed as extension segments
    local.delete_documents([local.document_ids()[0]])
    assert local.manifest["extensions"]["token-index"].get("segments")
    remote = local_to_milvus(local, f"{db}#migrate_segments")
    try:
        assert _milvus_sparse(remote, "token-index") == _local_sparse(local, "token-index")
        np.testing.assert_array_equal(remote.passage_rowids(), local.passage_rowids())
    finally:
        remote.drop()
        local.close()


def test_re_attaching_a_field_kept_extension_keeps_its_rows(pair) -> None:
    """The handle's object of a field-kept extension holds no rows: re-attaching it must not empty Milvus' rows."""
    _, remote = pair
    for name in ("svdr-vectors", "token-index"):
        assert remote.extension_in_engine(name)
        before = _milvus_sparse(remote, name)
        assert before
        remote.add_extension(remote.extension(name), replace=True)
        assert _milvus_sparse(remote, name) == before
