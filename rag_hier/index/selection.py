"""Top-k selection with one tie rule for every index and strategy: higher score first, then lower id.

Ids are store rowids, assigned in insertion order and never reused, so "ties by id" means "ties by
insertion order" everywhere in rag-hier: results are deterministic and the same whichever strategy or index
produced the scores.
"""

from __future__ import annotations

import numpy as np

__all__ = ["select_top_k", "top_k_rows"]


def select_top_k(scores: np.ndarray, ids: np.ndarray, k: int, *, secondary: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``k`` best entries, best first: by score, then ``secondary`` (both descending), then id.

    Only entries at or above the ``k``-th score are sorted, so the cost is linear in ``len(scores)`` plus a sort of
    about ``k`` entries. Non-finite scores (``-inf``) are never selected.

    Args:
        scores: ``(n,)`` scores.
        ids: ``(n,)`` int64 ids (the final tie-break).
        k: How many positions to return (fewer when fewer entries have a finite score).
        secondary: Optional ``(n,)`` second key (e.g. the passage score under a fused score).

    """
    s = np.asarray(scores)
    n = s.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, np.int64)
    if n <= k and (n == 1 or bool((s[:-1] > s[1:]).all())) and np.isfinite(s[-1]):
        return np.arange(n)  # already in order: strictly decreasing finite scores leave the other keys unused
    finite = np.isfinite(s)
    cand = np.arange(n) if finite.all() else np.flatnonzero(finite)
    if cand.size > k:
        kth = np.partition(s[cand], cand.size - k)[cand.size - k]
        cand = cand[s[cand] >= kth]  # everything tied with the k-th competes on the other keys
    keys: tuple[np.ndarray, ...] = (np.asarray(ids)[cand], -s[cand])
    if secondary is not None:
        keys = (np.asarray(ids)[cand], -np.asarray(secondary)[cand], -s[cand])
    return cand[np.lexsort(keys)[:k]].astype(np.int64, copy=False)


def top_k_rows(scores: np.ndarray, ids: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``top_k`` best columns of each score row, ties broken by ascending id.

    Args:
        scores: ``(nq, n)`` float32; ``-inf`` marks columns that must not be returned.
        ids: ``(n,)`` int64 ids of the columns.
        top_k: Results per row.

    Returns:
        ``(scores, ids)``, both ``(nq, top_k)``, padded with ``-inf`` / ``-1`` where fewer columns qualify.

    """
    nq = scores.shape[0]
    out_s = np.full((nq, top_k), -np.inf, dtype=np.float32)
    out_i = np.full((nq, top_k), -1, dtype=np.int64)
    for r in range(nq):
        sel = select_top_k(scores[r], ids, top_k)
        out_s[r, : sel.shape[0]] = scores[r, sel]
        out_i[r, : sel.shape[0]] = ids[sel]
    return out_s, out_i
