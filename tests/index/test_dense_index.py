"""DenseIndex against a brute-force oracle, for every kind."""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier.errors import DimensionMismatchError
from rag_hier.index import DenseIndex, IndexConfig

KINDS = ["flat", "ivf", "hnsw"]
DIM = 16


def _data(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(100, 100 + n, dtype=np.int64)
    return x, ids


def _oracle(x: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    scores = q @ x.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return ids[order]


def _config(kind: str) -> IndexConfig:
    # nprobe = nlist makes IVF exhaustive, so results must equal the oracle exactly.
    return IndexConfig(kind=kind, nlist=16, nprobe=16, train_min=1000, ef_search=256)


@pytest.mark.parametrize("kind", KINDS)
def test_search_matches_bruteforce(kind: str) -> None:
    x, ids = _data()
    index = DenseIndex(DIM, _config(kind))
    index.add(ids, x)
    q = x[:20] + 0.01
    _, got = index.search(q, 10)
    expected = _oracle(x, ids, q, 10)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, expected, strict=True)])
    assert overlap >= (1.0 if kind != "hnsw" else 0.95)
    if kind == "ivf":
        assert index.is_ivf_trained


def test_ivf_stays_exact_until_enough_vectors() -> None:
    x, ids = _data(500)
    index = DenseIndex(DIM, IndexConfig(kind="ivf", nlist=16, train_min=1000))
    index.add(ids, x)
    assert not index.is_ivf_trained
    _, got = index.search(x[:5], 5)
    np.testing.assert_array_equal(got, _oracle(x, ids, x[:5], 5))
    x2, ids2 = _data(600, seed=1)
    index.add(ids2 + 10_000, x2)
    assert index.is_ivf_trained
    assert index.ntotal == 1100


@pytest.mark.parametrize("kind", KINDS)
def test_remove_and_ids_never_come_back(kind: str) -> None:
    x, ids = _data()
    index = DenseIndex(DIM, _config(kind))
    index.add(ids, x)
    gone = ids[:50]
    assert index.remove(gone) == 50
    assert index.remove(gone) == 0  # already removed
    assert len(index) == len(ids) - 50
    _, got = index.search(x[:50], 5)
    assert not np.isin(got, gone).any()


def test_hnsw_delete_uses_tombstones_then_compacts() -> None:
    x, ids = _data(1000)
    index = DenseIndex(DIM, IndexConfig(kind="hnsw", hnsw_compact_ratio=0.2))
    index.add(ids, x)
    index.remove(ids[:100])
    assert len(index.tombstones) == 100 and index.ntotal == 1000
    index.remove(ids[100:300])  # 300/1000 > 0.2: graph rebuilt from live vectors
    assert index.tombstones == frozenset() and index.ntotal == 700
    _, got = index.search(x[300:310], 1)
    np.testing.assert_array_equal(got[:, 0], ids[300:310])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_allowed", [1, 3, 40, 1500])
def test_filtered_search_returns_exactly_top_k(kind: str, n_allowed: int) -> None:
    x, ids = _data()
    config = IndexConfig(kind=kind, nlist=16, nprobe=1, train_min=1000, ef_search=16, exact_filter_max=100)
    index = DenseIndex(DIM, config)
    index.add(ids, x)
    rng = np.random.default_rng(3)
    allowed = rng.choice(ids, size=n_allowed, replace=False)
    q = x[:8]
    _scores, got = index.search(q, 10, allowed_ids=allowed)
    expected_n = min(10, n_allowed)
    assert ((got >= 0).sum(axis=1) == expected_n).all()
    assert np.isin(got[got >= 0], allowed).all()
    if n_allowed <= 100:  # exact path: equals the oracle restricted to allowed ids
        mask = np.isin(ids, allowed)
        np.testing.assert_array_equal(got[:, :expected_n], _oracle(x[mask], ids[mask], q, expected_n))


def test_empty_filter_and_empty_index() -> None:
    index = DenseIndex(DIM)
    scores, got = index.search(np.zeros((2, DIM), np.float32), 3)
    assert (got == -1).all() and np.isneginf(scores).all()
    x, ids = _data(10)
    index.add(ids, x)
    _, got = index.search(x[:1], 3, allowed_ids=np.array([], dtype=np.int64))
    assert (got == -1).all()


def test_fewer_vectors_than_top_k_pads() -> None:
    x, ids = _data(3)
    index = DenseIndex(DIM)
    index.add(ids, x)
    _, got = index.search(x[:1], 10)
    assert (got[0, :3] >= 0).all() and (got[0, 3:] == -1).all()


def test_bad_vectors_rejected() -> None:
    index = DenseIndex(DIM)
    with pytest.raises(DimensionMismatchError, match="16-d"):
        index.add(np.arange(2), np.zeros((2, 8), np.float32))
    bad = np.zeros((1, DIM), np.float32)
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        index.add(np.arange(1), bad)
    with pytest.raises(ValueError, match="kind"):
        IndexConfig(kind="pq")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_write_read_roundtrip(tmp_path, kind: str) -> None:
    x, ids = _data()
    index = DenseIndex(DIM, _config(kind))
    index.add(ids, x)
    path = tmp_path / "i.faiss"
    index.write(path)
    again = DenseIndex.read(path, DIM, index.config)
    np.testing.assert_array_equal(again.reconstruct(ids[:5]), x[:5])
    np.testing.assert_array_equal(again.search(x[:5], 5)[1], index.search(x[:5], 5)[1])
    with pytest.raises(DimensionMismatchError):
        DenseIndex.read(path, DIM + 1, index.config)


def test_allowed_ids_in_any_order_or_repeated_select_the_same_hits() -> None:
    # a filter's ids usually arrive sorted and distinct (taken as they are); any other order, or repeats, are
    # deduplicated and sorted first: the hits are the same
    from rag_hier.index.dense import _sorted_unique

    rng = np.random.default_rng(3)
    for ids in (np.arange(5), np.array([4, 1, 1, 3]), np.array([], np.int64), np.array([2, 2]), np.array([7])):
        assert np.array_equal(_sorted_unique(ids.astype(np.int64)), np.unique(ids))
    vecs = rng.standard_normal((300, 8)).astype(np.float32)
    allowed = rng.choice(300, size=120, replace=False)
    q = rng.standard_normal((3, 8)).astype(np.float32)
    for exact_filter_max in (4096, 10):  # the exact path over the allowed vectors, and FAISS's selector
        index = DenseIndex(8, IndexConfig(kind="flat", exact_filter_max=exact_filter_max))
        index.add(np.arange(300, dtype=np.int64), vecs)
        plain = index.search(q, 10, allowed_ids=np.sort(allowed))
        assert set(plain[1].ravel()) <= set(allowed.tolist())
        for variant in (allowed, np.concatenate([allowed, allowed[:30]])):
            got = index.search(q, 10, allowed_ids=variant)
            assert np.array_equal(got[1], plain[1])
