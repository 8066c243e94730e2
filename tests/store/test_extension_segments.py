"""Extension files that grow with the corpus commit small changes as ``extension_segments`` rows, not rewrites."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rag_hier.store.core as core_mod
from rag_hier import HierStore, Passage
from rag_hier.errors import StoreCorruptedError
from rag_hier.index.ehi import EHIIndexer
from rag_hier.index.sparse import SparseRowIndex
from rag_hier.store.contract import StoreExtension
from rag_hier.store.extensions.bm25 import BM25Extension
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.store.extensions.ehi import EHIExtension
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.store.extensions.tree import TreeExtension
from rag_hier.store.files import sha256_file

D = 8
EXTENSIONS = ["token-index", "doc-index", "tree", "ehi", "bm25"]


def _passages(prefix: str, n: int, docs: int = 40, start: int = 0) -> list[Passage]:
    return [
        Passage(f"{prefix}{i}", f"{prefix}d{i % docs}", i, f"{prefix} passage {i} on topic {i % 7} word{i % 11}")
        for i in range(start, start + n)
    ]


def _vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _extension(name: str, model: str) -> StoreExtension:
    if name == "token-index":
        return TokenIndexExtension(model=model)
    if name == "doc-index":
        return DocumentIndex()
    if name == "tree":
        return TreeExtension(branching=3)
    if name == "bm25":
        return BM25Extension()
    indexer = EHIIndexer(D, 4, 1, seed=0)
    indexer.init_kmeans(_vectors(80, 0), seed=0, steps=10)
    return EHIExtension(indexer)


def _store(path: Path, name: str, model: str) -> HierStore:
    store = HierStore.create(path, model=None, dimension=D)
    store.add_passages(_passages("p", 80), _vectors(80, 0))
    store.add_extension(_extension(name, model))
    return store


def _writes(store: HierStore) -> None:
    """Small writes: an add, an upsert of changed passages, a delete of passages, a delete of a document."""
    store.add_passages(_passages("n", 3, docs=1), _vectors(3, 1))
    store.add_passages(_passages("p", 2, start=10), _vectors(2, 2))  # upsert: new text and vectors
    store.delete_passages(["p1", "p2", "n0"])
    store.delete_documents(["pd4"])


def _ext_files(store: HierStore, name: str) -> dict[str, tuple[str, int]]:
    ext = store.extension(name)
    assert ext is not None
    return {f: (sha256_file(store.path / f), (store.path / f).stat().st_mtime_ns) for f in ext.files()}


def _rows(path: Path, name: str | None = None) -> list[tuple[str, int, int]]:
    db = sqlite3.connect(path / "store.sqlite")
    try:
        rows = db.execute("SELECT extension, generation, entries FROM extension_segments ORDER BY generation")
        return [r for r in rows.fetchall() if name is None or r[0] == name]
    finally:
        db.close()


def _content(store: HierStore, name: str, ext: StoreExtension | None = None) -> Any:
    """What the extension holds, by passage and document id (comparable across stores)."""
    ext = ext if ext is not None else store.extension(name)
    pid = {r: rec.passage_id for r, rec in store.records(store.passage_rowids().tolist()).items()}
    if isinstance(ext, TokenIndexExtension):
        rows = ext.index.rows
        ids = rows.ids()
        mat = rows.rows(ids).toarray()
        return {pid[int(r)]: tuple(np.flatnonzero(mat[i]).tolist()) for i, r in enumerate(ids.tolist())}
    if isinstance(ext, BM25Extension):
        ids, counts = ext.index.term_counts()
        b = counts.indptr
        return {
            pid[int(r)]: sorted(
                zip(counts.terms[b[i] : b[i + 1]].tolist(), counts.counts[b[i] : b[i + 1]].tolist(), strict=True)
            )
            for i, r in enumerate(ids.tolist())
        }
    if isinstance(ext, DocumentIndex):
        out = {}
        for d in ext.doc_ids():
            fid = ext._ids[d]
            vec = ext.scores(np.eye(D, dtype=np.float32), np.array([fid]))[:, 0]
            rows, _ = ext.passages_of([fid])
            out[d] = (np.round(vec, 5).tolist(), sorted(pid[int(r)] for r in rows))
        return out
    if isinstance(ext, TreeExtension):
        tree = ext.require_tree()
        return (
            sorted((pid[int(i)], int(leaf)) for i, leaf in zip(tree.item_ids, tree.item_leaf, strict=True)),
            tree.routed_since_build,
            tree.removed_since_build,
        )
    assert isinstance(ext, EHIExtension)
    return sorted((pid[int(r)], tuple(x)) for r, x in zip(ext.rowids.tolist(), ext._leaves.tolist(), strict=True))


@pytest.mark.parametrize("name", EXTENSIONS)
def test_small_writes_commit_segments_and_match_whole_writes(
    tmp_path: Path, tiny_model_path: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path / "seg", name, tiny_model_path)
    before = _ext_files(store, name)
    _writes(store)
    assert _ext_files(store, name) == before  # the extension's files were not rewritten
    rows = _rows(store.path, name)
    assert len(rows) == 4 and all(entries > 0 for _, _, entries in rows)
    assert store._core.state["extensions"][name]["segments"]["count"] == 4
    live = _content(store, name)
    store.close()

    reopened = HierStore.open(tmp_path / "seg")  # the files, then the segments replayed
    assert _content(reopened, name) == live

    # the same history with every commit writing the files whole
    monkeypatch.setattr(core_mod, "SEGMENT_MERGE_MIN", 0)
    monkeypatch.setattr(core_mod, "SEGMENT_MERGE_RATIO", 0.0)
    whole = _store(tmp_path / "whole", name, tiny_model_path)
    _writes(whole)
    assert _rows(whole.path) == []
    assert _content(whole, name) == live
    whole.close()
    monkeypatch.undo()

    # optimize() writes the files whole and drops the segments
    reopened.optimize()
    assert _rows(reopened.path, name) == []
    assert "segments" not in reopened._core.state["extensions"][name]
    assert _ext_files(reopened, name) != before
    reopened.close()
    again = HierStore.open(tmp_path / "seg")
    assert _content(again, name) == live
    again.close()


def test_one_go_build_matches_for_token_and_document_index(tmp_path: Path, tiny_model_path: str) -> None:
    store = _store(tmp_path / "seg", "token-index", tiny_model_path)
    store.add_extension(DocumentIndex())
    _writes(store)
    assert len(_rows(store.path)) == 8
    final = list(store.iter_passages())
    vecs = store.vectors(store.rowids_of(passage_ids=[p.id for p in final]))
    one = HierStore.create(tmp_path / "one", model=None, dimension=D)
    one.add_passages(final, vecs)
    one.add_extension(TokenIndexExtension(model=tiny_model_path))
    one.add_extension(DocumentIndex())
    for name in ("token-index", "doc-index"):
        got, want = _content(store, name), _content(one, name)
        if name == "doc-index":  # vectors are means of the same passage vectors: equal to rounding
            assert got.keys() == want.keys()
            for d in got:
                assert got[d][1] == want[d][1]
                np.testing.assert_allclose(got[d][0], want[d][0], atol=1e-4)
        else:
            assert got == want
    store.close()
    one.close()


def test_threshold_writes_the_files_whole(
    tmp_path: Path, tiny_model_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_mod, "SEGMENT_MERGE_MIN", 50)  # room: max(min(50, n), n / 10) = 50 entries
    store = _store(tmp_path / "s", "tree", tiny_model_path)
    before = _ext_files(store, "tree")
    store.add_passages(_passages("a", 30), _vectors(30, 10))
    assert _ext_files(store, "tree") == before and len(_rows(store.path, "tree")) == 1
    store.add_passages(_passages("b", 30), _vectors(30, 11))  # 60 entries > 50: written whole
    assert _ext_files(store, "tree") != before
    assert _rows(store.path, "tree") == []
    store.add_passages(_passages("c", 3), _vectors(3, 12))
    assert len(_rows(store.path, "tree")) == 1
    recorded = store._core.state["extensions"]["tree"].get("segments") or {"count": 0}
    assert recorded["count"] == len(_rows(store.path, "tree"))
    live = _content(store, "tree")
    store.close()
    assert _content(HierStore.open(tmp_path / "s"), "tree") == live


def test_a_reader_replays_only_new_segments(tmp_path: Path, tiny_model_path: str) -> None:
    store = _store(tmp_path / "s", "doc-index", tiny_model_path)
    store.add_extension(TreeExtension(branching=3))
    doc_ext, tree_ext = store.extension("doc-index"), store.extension("tree")
    child = textwrap.dedent(
        """
        import sys, numpy as np
        from rag_hier import HierStore, Passage
        store = HierStore.open(sys.argv[1])
        store.add_passages([Passage("x0", "xdoc", 0, "written by another process")], np.ones((1, 8), "float32"))
        store.delete_documents(["pd0"])
        store.close()
        """
    )
    proc = subprocess.run([sys.executable, "-c", child, str(store.path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(_rows(store.path)) == 4
    assert store.extension("doc-index") is doc_ext and store.extension("tree") is tree_ext  # replayed in place
    assert isinstance(doc_ext, DocumentIndex)
    assert "xdoc" in doc_ext.doc_ids() and "pd0" not in doc_ext.doc_ids()
    fresh = _content(store, "tree"), _content(store, "doc-index")
    store.close()
    again = HierStore.open(tmp_path / "s")
    assert (_content(again, "tree"), _content(again, "doc-index")) == fresh
    again.close()


def _corrupt(path: Path, sql: str) -> None:
    db = sqlite3.connect(path / "store.sqlite")
    try:
        db.execute(sql)
        db.commit()
    finally:
        db.close()


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("UPDATE extension_segments SET data = zeroblob(length(data))", "checksum does not match"),
        ("DELETE FROM extension_segments WHERE generation = (SELECT max(generation) FROM extension_segments)", "rows"),
    ],
)
def test_a_corrupted_segment_row_is_named(tmp_path: Path, tiny_model_path: str, sql: str, message: str) -> None:
    store = _store(tmp_path / "s", "tree", tiny_model_path)
    _writes(store)
    store.close()
    _corrupt(tmp_path / "s", sql)
    with pytest.raises(StoreCorruptedError, match="extension_segments") as info:
        HierStore.open(tmp_path / "s", verify_checksums=False)  # past the manifest's checksum of store.sqlite
    assert message in str(info.value) and "store.sqlite" in str(info.value)


def test_a_row_with_a_consistent_checksum_but_wrong_layout_is_refused(tmp_path: Path, tiny_model_path: str) -> None:
    from rag_hier.store.segments import _digest

    store = _store(tmp_path / "s", "ehi", tiny_model_path)
    _writes(store)
    store.close()
    db = sqlite3.connect(tmp_path / "s" / "store.sqlite")
    gen, layout, data = db.execute(
        "SELECT generation, layout, data FROM extension_segments ORDER BY generation LIMIT 1"
    ).fetchone()
    bad = json.loads(layout)
    for item in bad:
        if item[0] == "leaves":
            item[1] = "<f8"  # same size, another dtype
    text = json.dumps(bad)
    db.execute(
        "UPDATE extension_segments SET layout=?, sha256=? WHERE generation=?",
        (text, _digest(text.encode(), data), gen),
    )
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptedError, match=rf"extension_segments extension 'ehi' generation {gen}.*dtype"):
        HierStore.open(tmp_path / "s", verify_checksums=False)


def test_a_row_that_does_not_apply_is_named(tmp_path: Path, tiny_model_path: str) -> None:
    from rag_hier.store.segments import Delta, insert_extension_segment

    store = _store(tmp_path / "s", "tree", tiny_model_path)
    store.add_passages(_passages("n", 1), _vectors(1, 3))
    store.close()
    db = sqlite3.connect(tmp_path / "s" / "store.sqlite", isolation_level=None)
    (gen,) = db.execute("SELECT generation FROM extension_segments").fetchone()
    db.execute("DELETE FROM extension_segments")
    arrays = {
        "added": np.array([10**9], np.int64),
        "leaves": np.array([999], np.int64),  # no such leaf
        "removed": np.zeros(0, np.int64),
        "counters": np.array([1, 0], np.int64),
    }
    insert_extension_segment(db, "tree", gen, Delta(arrays, 1))
    db.close()
    with pytest.raises(StoreCorruptedError, match=rf"generation {gen} does not apply to tree.safetensors"):
        HierStore.open(tmp_path / "s", verify_checksums=False)


def test_an_older_incremental_store_gets_the_table(tmp_path: Path, tiny_model_path: str) -> None:
    """A store written before extension_segments existed (dense segments only) opens and gains it on write."""
    store = _store(tmp_path / "s", "tree", tiny_model_path)
    store.close()
    _corrupt(tmp_path / "s", "DROP TABLE extension_segments")
    # the manifest's checksum of store.sqlite no longer matches: open without verification
    old = HierStore.open(tmp_path / "s", verify_checksums=False)
    old.add_passages(_passages("n", 1), _vectors(1, 3))
    assert len(_rows(tmp_path / "s", "tree")) == 1
    old.close()
    HierStore.open(tmp_path / "s").close()


def test_a_rolled_back_write_leaves_no_segment(tmp_path: Path, tiny_model_path: str) -> None:
    store = _store(tmp_path / "s", "doc-index", tiny_model_path)
    live = _content(store, "doc-index")
    with pytest.raises(RuntimeError), store.batch():
        store.add_passages(_passages("n", 2), _vectors(2, 4))
        raise RuntimeError("abort")
    assert _rows(store.path) == [] and _content(store, "doc-index") == live
    store.add_passages(_passages("m", 1), _vectors(1, 5))
    assert len(_rows(store.path)) == 1
    store.close()


def test_svdr_vectors_cached_by_a_search_commit_as_segments(tmp_path: Path, tiny_model_path: str) -> None:
    """Vectors added outside the hooks (what β+rerank caches) are in the delta: the index's own journal sees them."""
    import scipy.sparse as sp

    from rag_hier.store.extensions.svdr_vectors import SparseVectorExtension

    def rows(n: int, seed: int) -> sp.csr_matrix:
        return sp.random(n, 50, density=0.2, format="csr", dtype=np.float32, random_state=seed)

    store = _store(tmp_path / "s", "tree", tiny_model_path)
    rowids = store.passage_rowids()
    ext = SparseVectorExtension(model="m", fingerprint="f", vocab_size=50)
    ext.index.add(rowids[:40], rows(40, 0))
    store.add_extension(ext)
    before = _ext_files(store, "svdr-vectors")
    with store.batch():  # what rag_hier.retrieval.svdr.save_vectors does
        ext.index.add(rowids[40:45], rows(5, 1))
        store.mark_extension_dirty("svdr-vectors")
    store.delete_passages(["p0", "p41"])
    assert _ext_files(store, "svdr-vectors") == before
    assert len(_rows(store.path, "svdr-vectors")) == 2
    ids = ext.index.ids()
    want = ext.index.rows(ids).toarray()
    store.close()
    again = HierStore.open(tmp_path / "s")
    got = again.extension("svdr-vectors")
    assert isinstance(got, SparseVectorExtension)
    assert np.array_equal(got.index.ids(), ids) and np.array_equal(got.index.rows(ids).toarray(), want)
    with again.batch():  # replacing the index object: no journal, written whole
        got.index = SparseRowIndex(50, binary=False)
        again.mark_extension_dirty("svdr-vectors")
    assert _rows(again.path, "svdr-vectors") == [] and _ext_files(again, "svdr-vectors") != before
    again.close()


def test_mark_dirty_writes_an_extension_without_full_journal_whole(tmp_path: Path, tiny_model_path: str) -> None:
    store = _store(tmp_path / "s", "tree", tiny_model_path)
    before = _ext_files(store, "tree")
    with store.batch():
        store.add_passages(_passages("n", 2), _vectors(2, 3))
        store.mark_extension_dirty("tree")  # a change the tree's delta may not describe
    assert _rows(store.path) == [] and _ext_files(store, "tree") != before
    store.close()


@pytest.mark.parametrize("name", ["tree", "doc-index", "bm25"])
def test_extension_files_hold_the_segments(tmp_path: Path, tiny_model_path: str, name: str) -> None:
    """What a copy to another backend takes: the files with the committed segments merged in."""
    store = _store(tmp_path / "s", name, tiny_model_path)
    on_disk = {f: (store.path / f).read_bytes() for f in _ext_files(store, name)}
    assert store.extension_files(name) == on_disk  # no segments yet: the committed files
    _writes(store)
    files = store.extension_files(name)
    assert files.keys() == on_disk.keys() and files != on_disk
    live = store.extension(name)
    assert live is not None
    ext = type(live).from_config(live.config())
    paths = {}
    for f, data in files.items():
        paths[f] = tmp_path / f
        paths[f].write_bytes(data)
    ext.load(store, paths)
    ext.verify(store)
    assert _content(store, name, ext) == _content(store, name)
    store.close()


def test_sparse_embeddings_commit_their_rows_as_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows go as original indices: a write that brings a new index (new column) replays to the same search."""
    from rag_hier.store.extensions.sparse_embeddings import SparseEmbeddingExtension

    def passages(prefix: str, n: int, seed: int) -> list[Passage]:
        rng = np.random.default_rng(seed)
        out = []
        for i in range(n):
            idx = sorted(set(rng.integers(0, 40 if prefix == "p" else 10**9, 5).tolist()))
            extra = {"sparse_embedding": {"indices": idx, "values": rng.random(len(idx)).round(3).tolist()}}
            out.append(Passage(f"{prefix}{i}", f"{prefix}d{i % 40}", i, f"{prefix} {i}", extra=extra))
        return out

    def results(store: HierStore) -> list[list[tuple[int, float]]]:
        ext = SparseEmbeddingExtension.of(store)
        assert ext is not None
        out = []
        for p in queries:
            data = p.extra["sparse_embedding"]
            scores, ids = ext.search(data["indices"], data["values"], top_k=10)
            out.append([(int(i), round(float(s), 4)) for s, i in zip(scores, ids, strict=True)])
        return out

    def history(path: Path) -> HierStore:
        store = HierStore.create(path, model=None, dimension=D)
        store.add_passages(passages("p", 80, 0), _vectors(80, 0))
        store.ensure_extension("sparse-embeddings")
        store.add_passages(passages("n", 3, 1), _vectors(3, 1))  # indices no passage used yet: new columns
        store.add_passages(passages("p", 2, 2), _vectors(2, 2))  # upsert
        store.delete_passages(["p5", "n1"])
        store.delete_documents(["pd7"])
        return store

    queries = passages("p", 5, 0) + passages("n", 3, 1)
    store = history(tmp_path / "seg")
    assert len(_rows(store.path, "sparse-embeddings")) == 4
    live = results(store)
    assert any(live)
    store.close()
    assert results(HierStore.open(tmp_path / "seg")) == live
    monkeypatch.setattr(core_mod, "SEGMENT_MERGE_MIN", 0)
    monkeypatch.setattr(core_mod, "SEGMENT_MERGE_RATIO", 0.0)
    whole = history(tmp_path / "whole")
    assert _rows(whole.path) == [] and results(whole) == live
    whole.close()


@pytest.mark.parametrize(
    ("segments", "message"),
    [({"count": -1, "entries": 0, "last": 0}, "segments.count must be >= 0"), ("x", "segments must be an object")],
)
def test_a_tampered_segment_state_is_named(tmp_path: Path, tiny_model_path: str, segments: Any, message: str) -> None:
    store = _store(tmp_path / "s", "tree", tiny_model_path)
    store.add_passages(_passages("n", 1), _vectors(1, 3))
    store.close()
    db = sqlite3.connect(tmp_path / "s" / "store.sqlite")
    state = json.loads(db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()[0])
    state["extensions"]["tree"]["segments"] = segments
    db.execute("UPDATE state SET value=? WHERE key='manifest'", (json.dumps(state),))
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptedError, match=rf"extensions\['tree'\]\.{message}"):
        HierStore.open(tmp_path / "s", verify_checksums=False)
