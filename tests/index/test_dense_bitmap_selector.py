"""Regression: the id-selector path of DenseIndex.search never returns ids outside ``allowed_ids``.

FAISS's IDSelectorBitmap takes the bitmap size in bytes; passing the number of bits made it read past the
bitmap for ids above the largest allowed one (found by the DHR tests, which send pools larger than
``exact_filter_max`` through this path).
"""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier.index.dense import DenseIndex, IndexConfig


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_selector_path_respects_allowed_ids(kind: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    index = DenseIndex(8, IndexConfig(kind=kind, exact_filter_max=2))  # type: ignore[arg-type]
    index.add(np.arange(1, 301), x)
    for allowed in (np.arange(3, 15), np.array([1, 2, 50, 51, 52]), np.arange(100, 140)):
        _, ids = index.search(x[:5], 10, allowed_ids=allowed)
        got = ids[ids >= 0]
        assert np.isin(got, allowed).all()
        assert (ids >= 0).sum(axis=1).tolist() == [min(10, allowed.size)] * 5
        exact = allowed[np.argsort(-(x[allowed - 1] @ x[0]), kind="stable")][:10]
        if kind == "flat":
            assert ids[0][: exact.size].tolist() == exact.tolist()
