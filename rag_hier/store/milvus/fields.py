"""Extensions whose data the Milvus backend keeps in Milvus fields, searched by Milvus, by the kind of their data.

Each registered extension says what its data is (:class:`rag_hier.index.methods.ExtensionSpec`, ``data``); this
backend dispatches on that kind, never on an extension's name:

- **``"sparse-rows"``** (today SVDR's token rows T(d) and vectors E(d), caller-supplied sparse embeddings). The
  rows live in the companion collection ``C__sparse`` — ``vid`` (primary key, one row version), ``tag``
  (``"<extension>@<generation it was built in>"``), ``rowid``, ``gen`` and ``vec`` (``SPARSE_FLOAT_VECTOR``, index
  ``SPARSE_INVERTED_INDEX``, metric IP) — versioned and retired exactly like passage rows, so a search is one
  Milvus sparse search (``tag == T and gen <= G``). The client keeps only the rows a write batch adds until its
  commit; it never loads the whole index.
- **``"leaf"`` / ``"leaves"``** (today the HCE cluster tree / the EHI indexer's leaf lists). The leaf (leaves) of
  every passage is a scalar field of the passage row itself, named by :func:`leaf_column` (``tree_leaf`` INT64 with
  an INVERTED index, ``ehi_leaves`` ARRAY of INT64), nullable, present in the passage collections this version
  creates for every registered leaf extension (older ones lack them and keep searching by a rowid list; Milvus
  Lite cannot add a field to an existing collection), so beam search ends in ONE dense search filtered by
  ``tree_leaf in [...]`` / ``array_contains_any(ehi_leaves, [...])``. The tree or indexer itself (centroids,
  classifiers) stays a file in ``C__files``: the beam over centroids runs in the client.
- **``"files"``**: the extension's files, in ``C__files``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from rag_hier.errors import StoreError
from rag_hier.index.methods import EngineData, extension_spec, extension_specs

__all__ = [
    "LEAF_KINDS",
    "MAX_ARRAY",
    "MAX_SPARSE_INDEX",
    "LeafRows",
    "SparseRows",
    "engine_data",
    "leaf_column",
    "leaf_extensions",
    "leaf_values",
    "sparse_dicts",
]

LEAF_KINDS: tuple[EngineData, ...] = ("leaf", "leaves")
"""The kinds of data kept as a passage field."""
MAX_ARRAY = 4096
"""Milvus' largest ARRAY capacity (an EHI extension filing a passage under more leaves keeps the rowid path)."""
MAX_SPARSE_INDEX = 2**32 - 2
"""Milvus sparse vectors take indices 0 .. 2³² - 2."""


class SparseRows(Protocol):
    """What a sparse extension offers the backend (token index, sparse embeddings, SVDR vectors)."""

    def sparse_rows(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows in memory: ``(rowids, rows over the stored indices)``."""

    def add_sparse_rows(self, rowids: np.ndarray, rows: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        """Add rows given as ``(indices, weights)``."""

    def clear_rows(self) -> None:
        """Forget the rows in memory."""


class LeafRows(Protocol):
    """What a leaf extension offers the backend (``TreeExtension``, ``EHIExtension``)."""

    def leaf_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, leaves (n, k))``, ``-1`` padded."""


def engine_data(name: str) -> EngineData:
    """The kind of data of extension ``name`` (``"files"`` for one no registered method names)."""
    spec = extension_spec(name)
    return spec.data if spec is not None else "files"


def leaf_column(name: str, data: EngineData) -> str:
    """The passage field holding the leaf (``data == "leaf"``: ``<name>_leaf``) or leaves (``<name>_leaves``)."""
    column = f"{name.replace('-', '_')}_{data}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,254}", column):
        raise StoreError(f"extension {name!r}: {column!r} cannot be a Milvus field name")
    return column


def leaf_extensions() -> dict[str, tuple[str, EngineData]]:
    """Every registered leaf extension → ``(its passage field, "leaf" or "leaves")``, in registration order."""
    return {n: (leaf_column(n, e.data), e.data) for n, e in extension_specs().items() if e.data in LEAF_KINDS}


def sparse_dicts(rows: sp.csr_matrix, where: str, rowids: np.ndarray | None = None) -> list[dict[int, float]]:
    """Milvus sparse vectors (``{index: weight}``) of CSR rows, zero weights left out (a row may end up empty).

    Raises:
        StoreError: A negative or non-finite weight, or an index Milvus cannot hold (naming the row).

    """
    mat = sp.csr_matrix(rows, dtype=np.float32)
    mat.sum_duplicates()
    out: list[dict[int, float]] = []
    for i in range(mat.shape[0]):
        a, b = int(mat.indptr[i]), int(mat.indptr[i + 1])
        idx, val = mat.indices[a:b], mat.data[a:b]
        what = f"{where} (rowid {int(rowids[i])})" if rowids is not None else where
        bad = val[~np.isfinite(val) | (val < 0)]
        if bad.size:
            raise StoreError(f"{what}: Milvus sparse vectors hold finite non-negative weights only, got {bad[0]}")
        if idx.size and int(idx.max()) > MAX_SPARSE_INDEX:
            raise StoreError(f"{what}: sparse index {int(idx.max())} is larger than Milvus' {MAX_SPARSE_INDEX}")
        keep = val > 0
        out.append(dict(zip(idx[keep].tolist(), val[keep].tolist(), strict=True)))
    return out


def leaf_values(data: EngineData, rowids: np.ndarray, leaves: np.ndarray) -> dict[int, Any]:
    """Rowid → the value of the passage field of a leaf extension whose data is ``data``.

    ``"leaf"``: the leaf; ``"leaves"``: the list of leaves, ``-1`` padding left out.
    """
    ids = np.asarray(rowids, np.int64).tolist()
    if data == "leaf":
        return {r: int(row[0]) for r, row in zip(ids, leaves, strict=True)}
    return {r: [int(x) for x in row if x >= 0] for r, row in zip(ids, leaves, strict=True)}
