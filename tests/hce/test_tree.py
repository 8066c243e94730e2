"""ClusterTree: bottom-up shape, paths, determinism, spherical centroids, persistence, routing, beam search."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rag_hier.errors import StoreCorruptedError
from rag_hier.index.tree import ClusterTree, TreeBuildConfig, auto_branching


def test_auto_branching_follows_the_paper() -> None:
    assert auto_branching(5183) == 32  # 5183^(1/3) = 17.3 -> 32
    assert auto_branching(1_000_000) == 128
    assert auto_branching(8) == 2
    assert auto_branching(1) == 2


@pytest.mark.parametrize(("n", "b"), [(300, 4), (300, 8), (300, 17), (7, 8), (64, 4)])
def test_bottom_up_shape_and_fixed_length_paths(unit_vectors: np.ndarray, n: int, b: int) -> None:
    tree = ClusterTree.build(unit_vectors[:n], branching=b)
    sizes, k = [], n
    while math.ceil(k / b) > 1:  # K = ceil(N/b), then ceil(K/b), ... until one root
        k = math.ceil(k / b)
        sizes.append(k)
    assert tree.level_sizes == sizes[::-1]
    assert tree.path_length == max(1, math.ceil(math.log(n, b) - 1e-9))
    paths = tree.paths()
    assert paths.shape == (n, tree.path_length)
    assert np.array_equal(paths[:, -1], np.arange(n))
    # each path is consistent with the parent pointers, and the semantic ids are unique
    for t in range(2, tree.depth + 1):
        assert np.array_equal(tree.parents[t - 1][paths[:, t - 1]], paths[:, t - 2])
    assert len({tuple(r) for r in tree.semantic_ids().tolist()}) == n
    # every item lies in the leaf whose centroid is nearest (spherical assignment)
    if tree.depth:
        assert np.array_equal(tree.item_leaf, np.argmax(unit_vectors[:n] @ tree.centroids[-1].T, axis=1))


def test_centroids_are_unit_norm(unit_vectors: np.ndarray) -> None:
    tree = ClusterTree.build(unit_vectors * 3.0, branching=6)  # inputs are normalised first
    for c in tree.centroids:
        np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1.0, atol=1e-5)


def test_same_seed_same_tree_other_seed_other_tree(unit_vectors: np.ndarray) -> None:
    a = ClusterTree.build(unit_vectors, config=TreeBuildConfig(branching=5, seed=7))
    b = ClusterTree.build(unit_vectors, config=TreeBuildConfig(branching=5, seed=7))
    c = ClusterTree.build(unit_vectors, config=TreeBuildConfig(branching=5, seed=8))
    assert np.array_equal(a.paths(), b.paths())
    for x, y in zip(a.centroids, b.centroids, strict=True):
        assert np.array_equal(x, y)
    assert not np.array_equal(a.paths(), c.paths())


def test_save_load_round_trip_and_corruption(tmp_path, unit_vectors: np.ndarray) -> None:
    tree = ClusterTree.build(unit_vectors, np.arange(300) * 10 + 5, branching=6)
    tree.save(tmp_path / "t.safetensors", tmp_path / "t.json")
    again = ClusterTree.load(tmp_path / "t.safetensors", tmp_path / "t.json")
    assert again.level_sizes == tree.level_sizes
    assert np.array_equal(again.item_ids, tree.item_ids) and np.array_equal(again.paths(), tree.paths())
    (tmp_path / "t.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(StoreCorruptedError, match="safetensors"):
        ClusterTree.load(tmp_path / "t.safetensors", tmp_path / "t.json")


def test_beam_search_covering_everything_is_exhaustive(unit_vectors: np.ndarray) -> None:
    tree = ClusterTree.build(unit_vectors, branching=4)
    queries = unit_vectors[:20] + 0.3 * unit_vectors[20:40]
    full = tree.search(queries, beam=max(tree.level_sizes), top_k=10, vectors_of=lambda p: unit_vectors[p])
    exact = np.argsort(-(queries @ unit_vectors.T), axis=1)[:, :10]
    assert np.array_equal(full.ids, exact)
    assert (full.scored == 300).all()
    narrow = tree.search(queries, beam=1, top_k=10, vectors_of=lambda p: unit_vectors[p])
    assert (narrow.scored < 300).all() and (narrow.leaves_visited == 1).all()
    np.testing.assert_allclose(narrow.fraction_scored, narrow.scored / 300)


def test_add_routes_to_nearest_leaf_and_remove_drops(unit_vectors: np.ndarray) -> None:
    tree = ClusterTree.build(unit_vectors[:200], branching=6)
    before = [c.copy() for c in tree.centroids]
    leaves = tree.add(np.arange(200, 300), unit_vectors[200:])
    assert np.array_equal(leaves, np.argmax(unit_vectors[200:] @ tree.centroids[-1].T, axis=1))
    assert len(tree) == 300 and tree.describe()["routed_since_build"] == 100
    assert all(np.array_equal(x, y) for x, y in zip(before, tree.centroids, strict=True))  # no rebuild
    assert tree.remove(np.array([0, 1, 2, 999])) == 3
    assert len(tree) == 297 and not np.isin([0, 1, 2], tree.item_ids).any()
    with pytest.raises(ValueError, match="new and unique"):
        tree.add(np.array([5]), unit_vectors[:1])
    res = tree.search(unit_vectors[250:251], beam=100, top_k=1, vectors_of=lambda p: unit_vectors[tree.item_ids[p]])
    assert res.ids[0, 0] == 250


def test_bad_input_is_a_clear_error(unit_vectors: np.ndarray) -> None:
    with pytest.raises(ValueError, match="branching"):
        TreeBuildConfig(branching=1)
    with pytest.raises(ValueError, match="NaN"):
        ClusterTree.build(np.full((4, 3), np.nan))
    tree = ClusterTree.build(unit_vectors[:50], branching=4)
    with pytest.raises(ValueError, match="beam"):
        tree.search(unit_vectors[:1], beam=0, top_k=1, vectors_of=lambda p: unit_vectors[p])


def _clustered(n_centres: int, per: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((n_centres, dim)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    x = np.repeat(c, per, axis=0) + 0.3 * rng.standard_normal((n_centres * per, dim)).astype(np.float32) / np.sqrt(dim)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("refine", [0, 3])
def test_two_level_rounds_keep_the_tree_shape_and_seed_determinism(refine: int) -> None:
    x = _clustered(60, 40)  # 2,400 items, b = 8: round 1 makes 300 clusters, forced two-level
    cfg = TreeBuildConfig(branching=8, two_level_min_clusters=100, refine_iterations=refine, seed=3)
    tree = ClusterTree.build(x, config=cfg)
    assert tree.level_sizes == [5, 38, 300]  # ceil(2400/8) = 300, then 38, then 5: same shape as flat rounds
    assert tree.build_config["two_level_min_clusters"] == 100
    for c in tree.centroids:
        np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1.0, atol=1e-5)
    assert tree.leaf_sizes().sum() == len(x)
    again = ClusterTree.build(x, config=cfg)
    assert np.array_equal(tree.paths(), again.paths())
    assert all(np.array_equal(a, b) for a, b in zip(tree.centroids, again.centroids, strict=True))
    # beam search with a full beam is still exhaustive search
    res = tree.search(x[:5], beam=10_000, top_k=3, vectors_of=lambda p: x[p])
    assert np.array_equal(res.ids[:, 0], np.arange(5))
    assert (res.scored == len(x)).all()


def test_two_level_clusters_nearly_as_well_as_flat_kmeans() -> None:
    x = _clustered(60, 40)
    flat = ClusterTree.build(x, config=TreeBuildConfig(branching=8, two_level_min_clusters=0, seed=3))
    two = ClusterTree.build(x, config=TreeBuildConfig(branching=8, two_level_min_clusters=100, seed=3))

    def mean_cos(tree: ClusterTree) -> float:
        return float(np.einsum("ij,ij->i", x, tree.centroids[-1][tree.item_leaf]).mean())

    # 60 true clusters of 40: both must recover them (every item closer to its leaf than to noise)
    assert mean_cos(two) > 0.97 * mean_cos(flat)
    # refined points sit in the nearest leaf of their probed cells: almost always the globally nearest one
    nearest = np.argmax(x @ two.centroids[-1].T, axis=1)
    assert (nearest == two.item_leaf).mean() > 0.95


def test_allocation_of_sub_clusters_is_proportional_and_exact() -> None:
    from rag_hier.index.tree import _allocate

    sizes = np.array([100, 1, 0, 7, 50])
    alloc = _allocate(sizes, 20)
    assert alloc.sum() == 20
    assert (alloc <= sizes).all()
    assert (alloc[sizes > 0] >= 1).all()
    assert alloc[2] == 0
    assert alloc[0] > alloc[4] > alloc[3]
    assert np.array_equal(_allocate(sizes, 158), sizes)  # as many clusters as points: one per point
    with pytest.raises(ValueError, match="two_level_min_clusters"):
        TreeBuildConfig(two_level_min_clusters=-1)
    with pytest.raises(ValueError, match="refine_nprobe"):
        TreeBuildConfig(refine_nprobe=0)
