"""select_top_k: best score first, then the secondary key, then the lower id; sorted input takes a short cut."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_hier.index.selection import select_top_k


def _reference(scores: np.ndarray, ids: np.ndarray, k: int, secondary: np.ndarray | None) -> list[int]:
    keep = [i for i in range(len(scores)) if np.isfinite(scores[i])]
    sec = secondary if secondary is not None else np.zeros(len(scores))
    return sorted(keep, key=lambda i: (-scores[i], -sec[i], ids[i]))[:k]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([-np.inf, 0.0, 0.5, 1.0, 2.0, 3.0]), min_size=1, max_size=12),
    st.integers(1, 14),
    st.booleans(),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_matches_a_full_sort(values: list[float], k: int, presorted: bool, with_secondary: bool, rnd) -> None:
    scores = np.asarray(sorted(values, reverse=True) if presorted else values, dtype=np.float32)
    ids = np.asarray(rnd.sample(range(100), len(values)), dtype=np.int64)
    secondary = np.asarray([rnd.random() for _ in values]) if with_secondary else None
    got = select_top_k(scores, ids, k, secondary=secondary).tolist()
    assert got == _reference(scores, ids, k, secondary)


def test_strictly_decreasing_rows_keep_their_order() -> None:
    scores = np.asarray([3.0, 2.0, 1.0], np.float32)
    ids = np.asarray([9, 1, 5], np.int64)
    assert select_top_k(scores, ids, 3).tolist() == [0, 1, 2]
    assert select_top_k(np.asarray([3.0, 3.0, 1.0], np.float32), ids, 3).tolist() == [1, 0, 2]  # a tie: by id
    assert select_top_k(np.asarray([3.0, 2.0, -np.inf], np.float32), ids, 3).tolist() == [0, 1]
