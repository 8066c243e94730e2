"""The delta of a :class:`~rag_hier.index.sparse.SparseRowIndex`, shared by the extensions that keep one.

The token index (``tokens.npz``) and SVDR's learned vectors (``svdr_vectors.npz``) record their changes in
the index's own :class:`~rag_hier.index.sparse.RowJournal`, so every change made through the index (in a hook
or not) is in the delta; replacing the index object drops the journal, and the file is written whole.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rag_hier.index.sparse import SparseRowIndex
from rag_hier.store.segments import Delta

__all__ = ["SPARSE_DELTA_ARRAYS", "apply_sparse_delta", "sparse_delta"]

SPARSE_DELTA_ARRAYS: dict[str, tuple[str, int]] = {
    "ids": ("<i8", 1),
    "indptr": ("<i8", 1),
    "indices": ("<i4", 1),
    "data": ("<f4", 1),
    "removed": ("<i8", 1),
}
"""The delta of a :class:`SparseRowIndex`: rows added (CSR; ``data`` empty when binary) and ids removed."""


def sparse_delta(rows: SparseRowIndex | None) -> Delta | None:
    """The change recorded by ``rows.journal`` as a delta (``None`` when there is none to describe it)."""
    journal = rows.journal if rows is not None else None
    if rows is None or journal is None or not journal.complete:
        return None
    ids, mat, removed = journal.arrays(rows.vocab_size)
    arrays = {
        "ids": ids.astype(np.int64),
        "indptr": mat.indptr.astype(np.int64),
        "indices": mat.indices.astype(np.int32),
        "data": np.zeros(0, np.float32) if rows.binary else mat.data.astype(np.float32),
        "removed": removed.astype(np.int64),
    }
    return Delta(arrays, int(ids.shape[0] + removed.shape[0]))


def apply_sparse_delta(rows: SparseRowIndex, arrays: Mapping[str, np.ndarray]) -> None:
    """Replay a :func:`sparse_delta` on ``rows``."""
    rows.apply_delta(arrays["ids"], arrays["indptr"], arrays["indices"], arrays["data"], arrays["removed"])
