"""SparseRowIndex and the binary token index (alone and as the ``token-index`` store extension)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from rag_hier import Document, HierStore, Passage
from rag_hier.encoders.binarizer import TokenBinarizer
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.selection import top_k_rows
from rag_hier.index.sparse import SparseRowIndex
from rag_hier.index.token import TokenIndex
from rag_hier.store.extensions.token_index import TokenIndexExtension

from .conftest import TEXTS


def _oracle(queries: np.ndarray, rows: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = queries @ rows.T
    out_s, out_i = [], []
    for srow in scores:
        order = sorted(range(len(ids)), key=lambda j: (-srow[j], ids[j]))[:k]
        out_s.append(srow[order])
        out_i.append(ids[order])
    return np.array(out_s), np.array(out_i)


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("method", ["matmul", "inverted", "auto"])
def test_search_matches_brute_force(binary: bool, method: str) -> None:
    rng = np.random.default_rng(0)
    dense = (rng.random((60, 50)) < 0.15) * (1.0 if binary else rng.random((60, 50)) + 0.5)
    ids = rng.permutation(1000)[:60].astype(np.int64)
    index = SparseRowIndex(50, binary=binary)
    index.add(ids[:25], sp.csr_matrix(dense[:25]))
    index.add(ids[25:], sp.csr_matrix(dense[25:]))
    q = (rng.integers(1, 4, (7, 50)) * (rng.random((7, 50)) < 0.3)).astype(np.float32)  # exact sums: real ties
    scores, got = index.search(sp.csr_matrix(q), top_k=12, method=method)
    exp_s, exp_i = _oracle(q, dense.astype(np.float32), ids, 12)
    np.testing.assert_array_equal(got, exp_i)
    np.testing.assert_allclose(scores, exp_s, rtol=1e-5)
    allowed = ids[::3]
    _, got = index.search(sp.csr_matrix(q), top_k=5, allowed_ids=allowed, method=method)
    _, exp_i = _oracle(q, dense[::3].astype(np.float32), allowed, 5)
    np.testing.assert_array_equal(got, exp_i)


def test_add_replace_remove_compact_and_persist(tmp_path: Path) -> None:
    index = SparseRowIndex(10)
    index.add([5, 7, 9], sp.csr_matrix(np.eye(3, 10, dtype=np.float32) * [[1], [2], [3]]))
    index.add([7], sp.csr_matrix(np.full((1, 10), 0.5, dtype=np.float32)))  # replaces 7
    assert index.remove([9, 100]) == 1
    # rows not yet stacked are dropped at once (no stack of every row per removal); stacked rows are masked
    assert index.ids().tolist() == [5, 7] and len(index) == 2 and index.n_rows == 2
    np.testing.assert_array_equal(index.rows([7]).toarray(), np.full((1, 10), 0.5))
    s, i = index.search(np.ones((1, 10), dtype=np.float32), top_k=5)
    assert i.tolist() == [[7, 5, -1, -1, -1]] and s[0, 0] == 5.0 and np.isneginf(s[0, 2])
    index.save(tmp_path / "x.npz")
    assert index.n_rows == 2  # saving compacts
    again = SparseRowIndex.load(tmp_path / "x.npz")
    assert again.ids().tolist() == [5, 7] and (again.rows([5, 7]) != index.rows([5, 7])).nnz == 0
    with zipfile.ZipFile(tmp_path / "x.npz") as z:  # plain numeric .npy members only
        assert all(n.endswith(".npy") for n in z.namelist())
    with pytest.raises(KeyError):
        again.rows([9])
    with pytest.raises(ValueError, match="columns"):
        again.add([1], sp.csr_matrix((1, 11)))
    assert again.remove([5]) == 1 and again.n_rows == 2 and len(again) == 1  # masked until compacted
    again.add([5], sp.csr_matrix(np.ones((1, 10), dtype=np.float32)))  # an id masked, then added again
    assert again.ids().tolist() == [5, 7] and again.n_rows == 3
    np.testing.assert_array_equal(again.rows([5]).toarray(), np.ones((1, 10)))
    assert again.remove([5]) == 1 and again.ids().tolist() == [7]


def test_corrupt_and_hostile_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(StoreCorruptedError):
        SparseRowIndex.load(tmp_path / "junk.npz")
    with (tmp_path / "obj.npz").open("wb") as f:  # an object array would need unpickling
        np.savez(f, format=np.array(["x", None], dtype=object))
    with pytest.raises(StoreCorruptedError):
        SparseRowIndex.load(tmp_path / "obj.npz")
    good = SparseRowIndex(8, binary=True)
    good.add([1, 2], sp.csr_matrix(np.array([[1, 0, 1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0, 0, 0]])))
    arrays = good.to_arrays()
    arrays["col_delta_planes"] = arrays["col_delta_planes"][:, ::-1].copy()  # out of order
    with pytest.raises(StoreCorruptedError, match="out of order"):
        SparseRowIndex.from_arrays(arrays)


def test_top_k_rows_breaks_ties_by_id() -> None:
    s, i = top_k_rows(np.array([[1.0, 2.0, 2.0, -np.inf, 2.0]], dtype=np.float32), np.array([9, 8, 3, 1, 5]), 3)
    assert i.tolist() == [[3, 5, 8]] and s.tolist() == [[2.0, 2.0, 2.0]]


# ------------------------------------------------------------------------------------------------------
# the binary token index
# ------------------------------------------------------------------------------------------------------
def test_token_index_matches_a_set_overlap_oracle(tiny_model_path: str) -> None:
    binarizer = TokenBinarizer(tiny_model_path, max_length=64)
    index = TokenIndex(binarizer)
    ids = np.arange(100, 100 + len(TEXTS))
    index.add_texts(ids, TEXTS)
    tok = binarizer.tokenizer
    sets = [{t for t in tok(x, truncation=True, max_length=64)["input_ids"] if t >= 999} for x in TEXTS]
    queries = ["honey bees in the blossom", "rivers and glaciers carve valleys", "the"]
    qsets = [{t for t in tok(x)["input_ids"] if t >= 999} for x in queries]
    scores, got = index.search_text(queries, top_k=len(TEXTS), weighting="binary")
    for r, qs in enumerate(qsets):
        overlap = [len(qs & s) for s in sets]
        expected = sorted(range(len(TEXTS)), key=lambda j: (-overlap[j], ids[j]))
        assert got[r].tolist() == [int(ids[j]) for j in expected]
        assert scores[r].tolist() == [float(overlap[j]) for j in expected]
    # idf weighting: a token in every passage weighs less than a rare one
    idf = index.idf()
    the = tok.convert_tokens_to_ids("the")
    honey = tok.convert_tokens_to_ids("honey")
    assert idf[honey] > idf[the] >= 0


def test_extension_follows_add_delete_and_reopens(token_store: HierStore, tiny_model_path: str) -> None:
    def check(store: HierStore) -> None:
        ext = TokenIndexExtension.of(store)
        rowids = store.passage_rowids()
        assert ext.index.rows.ids().tolist() == rowids.tolist()
        records = store.records(rowids.tolist())
        expected = ext.index.binarizer.transform(
            [Passage(r["id"], r["doc_id"], 0, r["content"], r["title_path"]).embedding_text for r in records.values()]
        )
        assert (ext.index.rows.rows(list(records)) != expected).nnz == 0

    store = token_store
    check(store)
    with store.batch():
        store.add_documents([Document("new", "New", ("A fresh passage about lighthouses.",))], encode=False)
        store.delete_documents(["d1", "d3"])
        ext = TokenIndexExtension.of(store)
        assert ext.index.rows.n_rows == 9 and len(ext.index) == 7  # deleted rows are masked inside the batch
        check(store)
    # the commit stores the change as a segment row; the masked rows stay until the file is written whole
    assert ext.index.rows.n_rows == 9 and store.manifest["extensions"]["token-index"]["segments"]["count"] == 1
    check(store)
    store.optimize()
    assert ext.index.rows.n_rows == 7 and "segments" not in store.manifest["extensions"]["token-index"]
    check(store)
    (hits,) = ext.index.search_text(["lighthouses"], top_k=1)[1]
    assert store.records(hits.tolist())[int(hits[0])]["doc_id"] == "new"
    path = store.path
    store.close()
    again = HierStore.open(path)
    check(again)
    assert len(TokenIndexExtension.of(again).index) == 7
    assert again.manifest["extensions"]["token-index"]["config"]["model"] == tiny_model_path
    # a failed write rolls the index back with the store
    with pytest.raises(RuntimeError), again.batch():
        again.add_documents([Document("x", "X", ("rollback me",))], encode=False)
        raise RuntimeError("boom")
    check(again)
    again.close()


def test_re_adding_unchanged_documents_keeps_their_rows(token_store: HierStore, docs: list[Document]) -> None:
    before = token_store.passage_rowids().tolist()
    summary = token_store.add_documents(docs, max_passage_words=0, encode=False)
    assert summary.passages_unchanged == len(docs) and token_store.passage_rowids().tolist() == before


def test_extension_refuses_a_mismatched_file(token_store: HierStore) -> None:
    path = token_store.path
    token_store.close()
    index = SparseRowIndex(30522, binary=True)  # a valid file for other passages
    index.add([999], sp.csr_matrix((1, 30522), dtype=np.float32))
    index.save(path / "tokens.npz")
    with pytest.raises(StoreCorruptedError):
        HierStore.open(path, verify_checksums=False)


def test_of_explains_a_missing_index(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    with pytest.raises(StoreError, match="--token-index"):
        TokenIndexExtension.of(store)
    store.close()


@pytest.mark.data
def test_scifact_token_index_builds_by_tokenization(shared_data: Path, tiny_model_path: str) -> None:
    from rag_hier.corpus.model import split_document
    from rag_hier.corpus.readers import read_beir_corpus

    if not (shared_data / "scifact").is_dir():
        pytest.skip("no SciFact in the shared data")
    docs = read_beir_corpus(shared_data / "scifact")[:500]
    index = TokenIndex(tiny_model_path)
    index.add_texts(np.arange(len(docs)), [split_document(d, 0)[0].embedding_text for d in docs])
    assert len(index) == 500 and 50 < index.rows.nnz / 500 < 256
