"""SparseEmbeddingExtension: caller-supplied sparse passage vectors, searched against a brute-force oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.errors import InvalidInputError, StoreCorruptedError, StoreError
from rag_hier.store.extensions.sparse_embeddings import SparseEmbeddingExtension

KEY = ("app", "sparse")


def _passage(i: int, sparse: dict | None, group: str = "a") -> Passage:
    extra = {} if sparse is None else {"app": {"sparse": sparse}}
    return Passage(f"p{i}", f"d{i}", 0, f"text {i}", meta={"group": group}, extra=extra)


def _random_sparse(rng: np.random.Generator) -> dict:
    # small ids (a vocabulary) mixed with huge hashed ids: columns are remapped, not allocated up to the max
    pool = np.concatenate([np.arange(20), 2**40 + np.arange(5)])
    idx = rng.choice(pool, size=int(rng.integers(1, 6)), replace=False)
    return {"indices": [int(i) for i in idx], "values": rng.uniform(0.1, 2.0, size=idx.size).round(3).tolist()}


def _oracle(passages: dict[int, dict], q: dict, k: int, allowed: set[int] | None = None) -> list[tuple[int, float]]:
    weights: dict[int, float] = {}
    for i, v in zip(q["indices"], q["values"], strict=True):
        weights[i] = weights.get(i, 0.0) + v
    scored = []
    for rowid, sp in passages.items():
        if allowed is not None and rowid not in allowed:
            continue
        s = sum(weights.get(i, 0.0) * v for i, v in zip(sp["indices"], sp["values"], strict=True))
        if s != 0:
            scored.append((rowid, s))
    scored.sort(key=lambda t: (-t[1], t[0]))
    return scored[:k]


@pytest.fixture()
def store(tmp_path: Path) -> HierStore:
    s = HierStore.create(tmp_path / "s", model=None)
    s.add_extension(SparseEmbeddingExtension(key=KEY))
    yield s
    s.close()


def test_search_matches_brute_force_through_writes_deletes_and_reopen(store: HierStore, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    sparse = {i: _random_sparse(rng) for i in range(30)}
    passages = [_passage(i, sparse[i], "a" if i % 3 else "b") for i in range(30)] + [_passage(99, None)]
    store.add_passages(passages)
    rowid = {r["id"]: rid for rid, r in store.records(store.passage_rowids().tolist()).items()}
    stored = {rowid[f"p{i}"]: sparse[i] for i in range(30)}

    def check(s: HierStore) -> None:
        ext = SparseEmbeddingExtension.of(s)
        assert ext is not None
        for _ in range(10):
            q = _random_sparse(rng)
            scores, ids = ext.search(q["indices"], q["values"], top_k=7)
            expected = _oracle(stored, q, 7)
            assert ids.tolist() == [r for r, _ in expected]
            np.testing.assert_allclose(scores, [s for _, s in expected], rtol=1e-5)
            allowed = np.asarray(sorted(stored)[::2], dtype=np.int64)
            scores, ids = ext.search(q["indices"], q["values"], top_k=7, allowed_ids=allowed)
            assert ids.tolist() == [r for r, _ in _oracle(stored, q, 7, set(allowed.tolist()))]

    check(store)
    store.delete_passages(["p1", "p2", "p3"])
    for i in (1, 2, 3):
        del stored[rowid[f"p{i}"]]
    store.add_passages([_passage(1, {"indices": [7, 2**40 + 9], "values": [5.0, 1.0]})], policy="upsert")
    rowid["p1"] = int(store.passage_rowids()[-1])
    stored[rowid["p1"]] = {"indices": [7, 2**40 + 9], "values": [5.0, 1.0]}
    check(store)
    path = store.path
    store.close()
    reopened = HierStore.open(path)
    check(reopened)
    ext = SparseEmbeddingExtension.of(reopened)
    assert ext is not None and ext.key == KEY
    # columns no passage uses any more were dropped when the file was written
    used = {i for sp in stored.values() for i in sp["indices"]}
    assert set(ext.columns.tolist()) == used
    reopened.close()


def test_unknown_query_indices_and_zero_scores_return_nothing(store: HierStore) -> None:
    store.add_passages([_passage(0, {"indices": [1], "values": [1.0]}), _passage(1, {"indices": [2], "values": [1.0]})])
    ext = SparseEmbeddingExtension.of(store)
    assert ext is not None
    scores, ids = ext.search([12345], [1.0], top_k=5)
    assert ids.size == 0 and scores.size == 0
    scores, ids = ext.search([1, 1], [0.5, 0.25], top_k=5)  # duplicate query indices are summed
    assert ids.tolist() == [int(store.passage_rowids()[0])] and scores.tolist() == [0.75]
    with pytest.raises(ValueError):
        ext.search([1], [1.0], top_k=0)


def test_build_reads_what_is_already_stored(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    store.add_passages([_passage(0, {"indices": [3], "values": [2.0]}), _passage(1, None)])
    store.add_extension(SparseEmbeddingExtension(key=KEY))
    ext = SparseEmbeddingExtension.of(store)
    assert ext is not None and len(ext.index) == 1
    assert ext.search([3], [1.0])[1].tolist() == [int(store.passage_rowids()[0])]
    store.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"indices": [-1], "values": [1.0]},
        {"indices": [1, 2], "values": [1.0]},
        {"indices": [1], "values": [float("nan")]},
        {"indices": [True], "values": [1.0]},
        {"indices": [1.5], "values": [1.0]},
        [1, 2],
    ],
)
def test_bad_payloads_abort_the_whole_write(store: HierStore, bad) -> None:
    store.add_passages([_passage(0, {"indices": [1], "values": [1.0]})])
    # a NaN is refused when the Passage is built (InvalidInputError), the others by the write (StoreError)
    with pytest.raises((StoreError, InvalidInputError), match="p2"):
        store.add_passages([_passage(1, {"indices": [1], "values": [1.0]}), _passage(2, bad)])
    assert store.count_passages() == 1
    ext = SparseEmbeddingExtension.of(store)
    assert ext is not None and len(ext.index) == 1  # rolled back with the store


def test_a_damaged_file_is_refused(store: HierStore) -> None:
    store.add_passages([_passage(0, {"indices": [1], "values": [1.0]})])
    path = store.path
    store.close()
    np.savez(path / SparseEmbeddingExtension.FILE, columns=np.array([1, 1]))
    with pytest.raises(StoreCorruptedError):
        HierStore.open(path, verify_checksums=False)


def test_key_must_name_a_path() -> None:
    for bad in ("sparse", (), ("a", "")):
        with pytest.raises(ValueError):
            SparseEmbeddingExtension(key=bad)  # type: ignore[arg-type]
