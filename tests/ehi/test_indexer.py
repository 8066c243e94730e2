"""EHIIndexer: path embedding by hand, beam search against brute force, leaf lists, search, files, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rag_hier.errors import DimensionMismatchError, ParameterError, StoreCorruptedError
from rag_hier.index.ehi import INDEXER_FILES, EHIIndexer, LeafAssignment, ehi_search


def _vectors(n: int = 200, d: int = 12, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def _by_hand(indexer: EHIIndexer, u: np.ndarray) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Eq. 1 / Alg. 2 in plain numpy: (T(u), the argmax path, p-hat of every leaf)."""
    b, h_max = indexer.branching, indexer.height
    w = [indexer.classifier[h].detach().numpy().astype(np.float64) for h in range(h_max)]
    us = [indexer.residual[h].detach().numpy().astype(np.float64) for h in range(h_max)]

    def p_hat(level: int, prefix: list[int]) -> np.ndarray:
        onehots = []
        for i in reversed(prefix):  # [o(i^{h-1}); …; o(i^1); u]
            o = np.zeros(b)
            o[i] = 1.0
            onehots.append(o)
        x = np.concatenate([*onehots, u.astype(np.float64)])
        f = x + np.maximum(us[level - 1] @ x, 0.0)  # U stored as (out, in), like nn.Linear
        return _softmax(w[level - 1] @ f)

    parts, path, scale = [], [], 1.0
    for level in range(1, h_max + 1):
        p = p_hat(level, path)
        parts.append(p * scale)
        i = int(np.argmax(p))
        scale *= p[i]
        path.append(i)
    leaf_probs = np.zeros(b**h_max)
    for leaf in range(b**h_max):
        digits = [(leaf // b ** (h_max - 1 - k)) % b for k in range(h_max)]
        prob = 1.0
        for level in range(1, h_max + 1):
            prob *= p_hat(level, digits[: level - 1])[digits[level - 1]]
        leaf_probs[leaf] = prob
    return np.concatenate(parts), path, leaf_probs


@pytest.mark.parametrize(("branching", "height"), [(5, 1), (3, 2), (2, 3)])
def test_path_embedding_and_leaf_probabilities_match_a_hand_computation(branching: int, height: int) -> None:
    indexer = EHIIndexer(12, branching, height, seed=3)
    with torch.no_grad():  # larger weights than the default init, so the paths are not all the same
        for p in indexer.parameters():
            p.mul_(4.0)
    x = _vectors(6)
    got_t = indexer.path_embedding(torch.from_numpy(x)).detach().numpy()
    got_leaf = indexer.leaf_log_probs(torch.from_numpy(x)).exp().detach().numpy()
    greedy = indexer.greedy_path(torch.from_numpy(x)).numpy()
    for row in range(len(x)):
        t, path, leaf_probs = _by_hand(indexer, x[row])
        np.testing.assert_allclose(got_t[row], t, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got_leaf[row], leaf_probs, rtol=1e-4, atol=1e-7)
        assert greedy[row].tolist() == path
    assert got_t.shape == (6, branching * height)
    np.testing.assert_allclose(got_leaf.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(got_t[:, :branching].sum(axis=1), 1.0, rtol=1e-5)  # p^1 = p-hat^1


def test_path_embedding_is_differentiable() -> None:
    indexer = EHIIndexer(12, 3, 2, seed=0)
    u = torch.from_numpy(_vectors(4)).requires_grad_(True)
    indexer.path_embedding(u).sum().backward()
    assert u.grad is not None and torch.isfinite(u.grad).all()
    assert all(p.grad is not None for p in indexer.parameters())


@pytest.mark.parametrize(("branching", "height"), [(6, 1), (3, 2), (2, 3)])
def test_full_beam_equals_brute_force_over_all_leaves(branching: int, height: int) -> None:
    indexer = EHIIndexer(12, branching, height, seed=1)
    with torch.no_grad():
        for p in indexer.parameters():
            p.mul_(3.0)
    x = torch.from_numpy(_vectors(20))
    with torch.no_grad():
        all_logp = indexer.leaf_log_probs(x)
        leaves, logp = indexer.beam_search(x, indexer.n_leaves)
    assert leaves.shape == (20, indexer.n_leaves)
    for row in range(20):
        assert sorted(leaves[row].tolist()) == list(range(indexer.n_leaves))
        torch.testing.assert_close(logp[row], all_logp[row][leaves[row]])
        assert (logp[row][:-1] >= logp[row][1:] - 1e-6).all()
    # beam 1 is the greedy (argmax) path, the one training follows
    greedy = indexer.leaf_of_path(indexer.greedy_path(x))
    one, _ = indexer.beam_search(x, 1)
    assert torch.equal(one[:, 0], greedy)
    # height 1: every beam width returns exactly the top leaves
    if height == 1:
        top3, _ = indexer.beam_search(x, 3)
        assert torch.equal(top3, all_logp.argsort(dim=1, descending=True, stable=True)[:, :3])


def test_leaf_path_round_trip() -> None:
    indexer = EHIIndexer(4, 3, 3)
    leaves = torch.arange(27)
    assert torch.equal(indexer.leaf_of_path(indexer.path_of_leaf(leaves)), leaves)
    assert indexer.path_of_leaf(torch.tensor([5])).tolist() == [[0, 1, 2]]


def test_search_with_full_beam_equals_exhaustive_search() -> None:
    x = _vectors(300)
    q = _vectors(15, seed=9)
    indexer = EHIIndexer(12, 4, 2, seed=0)
    leaves = indexer.assign(x)
    ids = np.arange(1000, 1300, dtype=np.int64)
    res = ehi_search(indexer, q, x, leaves, beam=16, top_k=10, item_ids=ids)
    exact = np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :10]
    assert np.array_equal(res.ids, ids[exact])
    assert (res.scored == 300).all() and np.allclose(res.fraction_scored, 1.0)
    np.testing.assert_allclose(res.scores, np.take_along_axis(q @ x.T, exact, axis=1), rtol=1e-5)


def test_search_scores_only_the_visited_leaves() -> None:
    x = _vectors(300)
    q = _vectors(10, seed=5)
    indexer = EHIIndexer(12, 8, 1, seed=0)
    assignment = LeafAssignment(indexer.assign(x), indexer.n_leaves)
    res = ehi_search(indexer, q, x, assignment, beam=2, top_k=5)
    routed, _ = indexer.route(q, 2)
    sizes = assignment.sizes()
    for i in range(len(q)):
        members = set(np.flatnonzero(np.isin(assignment.leaves[:, 0], routed[i])).tolist())
        assert res.scored[i] == sizes[routed[i]].sum() == len(members)
        assert set(res.ids[i][res.ids[i] >= 0].tolist()) <= members
        want = sorted(members, key=lambda j: (-float(x[j] @ q[i]), j))[:5]
        assert res.ids[i][: len(want)].tolist() == want
    # a callable gives the same result, and a filter restricts what is scored
    same = ehi_search(indexer, q, lambda pos: x[pos], assignment, beam=2, top_k=5)
    assert np.array_equal(same.ids, res.ids)
    allowed = np.arange(0, 300, 2)
    filtered = ehi_search(indexer, q, x, assignment, beam=2, top_k=5, allowed_ids=allowed)
    assert np.isin(filtered.ids[filtered.ids >= 0], allowed).all()
    assert (filtered.scored <= res.scored).all()


def test_multi_leaf_assignment_counts_each_item_once() -> None:
    x = _vectors(100)
    indexer = EHIIndexer(12, 5, 1, seed=0)
    two = indexer.assign(x, top_k=2)
    assert two.shape == (100, 2) and (two[:, 0] != two[:, 1]).all()
    assignment = LeafAssignment(two, 5)
    assert assignment.sizes().sum() == 200
    res = ehi_search(indexer, x[:3], x, assignment, beam=5, top_k=3)
    assert (res.scored == 100).all()  # every item once, though each is in two visited leaves
    assert len(set(res.ids[0].tolist())) == 3
    info = assignment.describe()
    assert info["leaves_per_item"] == 2 and info["items"] == 100


def test_leaf_assignment_describe_and_padding() -> None:
    a = LeafAssignment(np.array([[0, 1], [0, -1], [2, -1]]), 3)
    assert a.sizes().tolist() == [2, 1, 1]
    assert a.members(np.array([0, 1])).tolist() == [0, 1]
    d = a.describe()
    assert d["leaf_size_max"] == 2 and d["leaves_nonempty"] == 3


def test_save_load_round_trip(tmp_path: Path) -> None:
    indexer = EHIIndexer(12, 3, 2, seed=4)
    indexer.save_pretrained(tmp_path, info={"trained": "test"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(INDEXER_FILES)
    loaded = EHIIndexer.from_pretrained(tmp_path)
    assert (loaded.dimension, loaded.branching, loaded.height) == (12, 3, 2)
    assert loaded.info == {"trained": "test"}
    x = torch.from_numpy(_vectors(10))
    torch.testing.assert_close(loaded.path_embedding(x), indexer.path_embedding(x))
    meta = json.loads((tmp_path / INDEXER_FILES[1]).read_text())
    assert meta["format"] == "rag-hier-ehi-indexer" and meta["n_leaves"] == 9


def test_kmeans_initialisation_follows_the_clusters() -> None:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((4, 12)).astype(np.float32) * 3
    x = np.concatenate([c + 0.2 * rng.standard_normal((50, 12)).astype(np.float32) for c in centres])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    indexer = EHIIndexer(12, 4, 1, seed=0)
    paths = indexer.init_kmeans(x, seed=0, steps=0)  # height 1, no fitting: the closed form = nearest centroid
    assert np.array_equal(indexer.assign(x)[:, 0], paths[:, 0])
    fitted = EHIIndexer(12, 4, 1, seed=0)
    paths = fitted.init_kmeans(x, seed=0, steps=50)
    assert (fitted.assign(x)[:, 0] == paths[:, 0]).mean() > 0.85
    two_level = EHIIndexer(12, 2, 2, seed=0)
    paths2 = two_level.init_kmeans(x, seed=0, steps=200, lr=0.02)
    agree = (two_level.assign(x)[:, 0] == paths2[:, 0] * 2 + paths2[:, 1]).mean()
    assert agree > 0.8


# -- bad input --------------------------------------------------------------------------------------
def test_bad_shapes_and_parameters() -> None:
    with pytest.raises(ParameterError, match="branching"):
        EHIIndexer(12, 1, 1)
    with pytest.raises(ParameterError, match="height"):
        EHIIndexer(12, 4, 0)
    with pytest.raises(ParameterError, match="leaves"):
        EHIIndexer(12, 100, 5)
    indexer = EHIIndexer(12, 4, 2, seed=0)
    x = _vectors(50)
    leaves = indexer.assign(x)
    for beam in (0, 17, -1):
        with pytest.raises(ParameterError, match=r"beam must be an integer in 1\.\.16"):
            ehi_search(indexer, x[:2], x, leaves, beam=beam, top_k=3)
    with pytest.raises(ParameterError, match="top_k"):
        ehi_search(indexer, x[:2], x, leaves, beam=2, top_k=0)
    with pytest.raises(DimensionMismatchError, match="8-d; the EHI indexer was built for 12-d"):
        ehi_search(indexer, np.zeros((2, 8), np.float32), x, leaves, beam=2, top_k=3)
    with pytest.raises(DimensionMismatchError, match="item vectors"):
        ehi_search(indexer, x[:2], np.zeros((50, 8), np.float32), leaves, beam=2, top_k=3)
    with pytest.raises(ParameterError, match="49 item vectors"):
        ehi_search(indexer, x[:2], x[:49], leaves, beam=2, top_k=3)
    with pytest.raises(ParameterError, match=r"leaves are 0\.\.15"):
        ehi_search(indexer, x[:2], x, np.full(50, 16), beam=2, top_k=3)
    with pytest.raises(ParameterError, match="4 leaves; the indexer has 16"):
        ehi_search(indexer, x[:2], x, LeafAssignment(np.zeros(50, np.int64), 4), beam=2, top_k=3)
    with pytest.raises(ParameterError, match="NaN"):
        indexer.assign(np.full((2, 12), np.nan, np.float32))
    with pytest.raises(ParameterError, match="top_k"):
        indexer.assign(x, top_k=17)


def test_corrupted_files_are_reported(tmp_path: Path) -> None:
    indexer = EHIIndexer(12, 3, 2, seed=0)
    indexer.save_pretrained(tmp_path)
    tensors, meta = tmp_path / INDEXER_FILES[0], tmp_path / INDEXER_FILES[1]
    good_json = meta.read_text()
    good_tensors = tensors.read_bytes()

    def expect(match: str) -> None:
        with pytest.raises(StoreCorruptedError, match=match):
            EHIIndexer.from_pretrained(tmp_path)
        meta.write_text(good_json)
        tensors.write_bytes(good_tensors)

    meta.write_text("{not json")
    expect("not a readable EHI indexer description")
    meta.write_text(json.dumps({"format": "something-else"}))
    expect("not a rag-hier-ehi-indexer file")
    meta.write_text(good_json.replace('"format_version": 1', '"format_version": 99'))
    expect("newer than this rag-hier reads")
    meta.write_text(good_json.replace('"branching": 3', '"branching": 4'))
    expect("do not match")
    meta.write_text(good_json.replace('"height": 2', '"height": 1'))
    expect("do not match")
    # a description declaring a huge indexer is refused before its parameters are allocated (160 GB here)
    meta.write_text(good_json.replace('"dimension": 12', '"dimension": 200000'))
    expect("do not match")
    meta.write_text(good_json.replace('"branching": 3', '"branching": 1'))
    expect("invalid indexer shape")
    tensors.write_bytes(good_tensors[: len(good_tensors) // 2])
    expect("not a readable safetensors file")
    tensors.unlink()
    expect("not a readable safetensors file")
    from safetensors.torch import save_file

    bad = indexer.tensors()
    bad["level.1.classifier"][0, 0] = float("nan")
    save_file(bad, str(tensors))
    expect("NaN")


def test_vectors_are_routed_as_trained_unit_normalised() -> None:
    # the indexer learns on unit vectors (EHILoss normalises); a dot-product model's longer or shorter vectors
    # must reach the leaves their direction reaches, at search time and when items are assigned
    indexer = EHIIndexer(dimension=8, branching=3, height=2, seed=1)
    x = np.random.default_rng(2).normal(size=(200, 8)).astype(np.float32)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    scale = np.random.default_rng(3).uniform(0.05, 20.0, size=(200, 1)).astype(np.float32)
    assert np.array_equal(indexer.assign(x * scale), indexer.assign(unit))
    leaves, logps = indexer.route(x * scale, beam=4)
    want_leaves, want_logps = indexer.route(unit, beam=4)
    assert np.array_equal(leaves, want_leaves) and np.allclose(logps, want_logps, atol=1e-5)
    assert indexer.assign(np.zeros((1, 8), np.float32)).shape == (1, 1)  # a zero vector stays routable
