"""Change sets of the passage index committed as rows of ``store.sqlite`` instead of a rewrite of ``dense.faiss``.

A commit that changes a few vectors of a large index would otherwise rewrite, fsync and hash the whole
index file. Instead the commit inserts one row into ``dense_segments`` (the ids it added with their
float32 vectors, the ids it removed, a SHA-256 over the three) in the same SQLite transaction as the rest
of the write, so the segment is durable exactly when the write is. Loading reads ``dense.faiss`` and
replays the segments in generation order; a reader that already holds the index replays only the segments
committed since it last looked. When the segments pass a fraction of the index (or on
``HierStore.optimize()``) the next commit writes ``dense.faiss`` whole and deletes them in the same
transaction.

The rows are untrusted input like every other part of a store: :func:`read_segments` checks every blob's
length against the row's counts and the store's dimension, and its checksum, before anything is replayed.

Extensions that opt in (:attr:`~rag_hier.store.contract.StoreExtension.DELTA_ARRAYS`) commit the same way:
one ``extension_segments`` row per extension and commit holds the extension's change as named numeric arrays
(a JSON layout of names, dtypes and shapes, one blob of their bytes, a SHA-256 over both), merged into the
extension's files under the same threshold (:func:`merge_room`). :func:`read_extension_segments` checks the
layout against the arrays the extension declares (names, dtypes, dimensions), the blob's length and the
checksum before the extension sees anything.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.errors import StoreCorruptedError

__all__ = [
    "DELTA_DTYPES",
    "Delta",
    "ExtensionSegment",
    "Segment",
    "insert_extension_segment",
    "insert_segment",
    "merge_room",
    "read_extension_segments",
    "read_segments",
    "segment_state",
]

DELTA_DTYPES = frozenset({"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"})
"""The dtypes an extension delta may hold (numeric, little-endian; never objects)."""


def merge_room(size: int, entries: int, minimum: int, ratio: float) -> int:
    """How many more entries segments may take before a file of ``size`` entries is written whole.

    The larger of ``ratio`` of the file and ``minimum`` entries, but never more than the file holds (a write
    that doubles it costs as much as a rewrite; an empty file is written whole by its first entries), less the
    ``entries`` its segments hold already.
    """
    return max(min(minimum, size), int(ratio * size)) - entries


@dataclass(frozen=True)
class Segment:
    """One committed change set: ``ids`` added with ``vectors`` (float32, one row each), ``removed`` ids."""

    generation: int
    ids: np.ndarray
    vectors: np.ndarray
    removed: np.ndarray

    @property
    def entries(self) -> int:
        """Vectors added plus ids removed."""
        return len(self.ids) + len(self.removed)


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def insert_segment(db: sqlite3.Connection, segment: Segment) -> None:
    """Insert ``segment`` into the open write transaction."""
    ids = np.ascontiguousarray(segment.ids, dtype="<i8").tobytes()
    vectors = np.ascontiguousarray(segment.vectors, dtype="<f4").tobytes()
    removed = np.ascontiguousarray(segment.removed, dtype="<i8").tobytes()
    db.execute(
        "INSERT INTO dense_segments(generation, added, removed, ids, vectors, removed_ids, sha256)"
        " VALUES (?,?,?,?,?,?,?)",
        (
            segment.generation,
            len(segment.ids),
            len(segment.removed),
            ids,
            vectors,
            removed,
            _digest(ids, vectors, removed),
        ),
    )


def segment_state(previous: dict[str, Any] | None, segment: Segment) -> dict[str, Any]:
    """The ``indexes.dense.segments`` entry of the state after ``segment`` is added to ``previous``."""
    prev = previous or {}
    return {
        "count": int(prev.get("count", 0)) + 1,
        "entries": int(prev.get("entries", 0)) + segment.entries,
        "last": segment.generation,
    }


def read_segments(
    db: sqlite3.Connection, db_path: Path, recorded: dict[str, Any] | None, dimension: int, *, after: int = 0
) -> list[Segment]:
    """The committed segments newer than generation ``after``, checked against the state's ``recorded`` entry.

    Raises:
        StoreCorruptedError: The rows disagree with the state (how many, the last generation), or a row's
            blobs have the wrong length for its counts and the dimension, or its checksum does not match.
            The message names the database, the table and the generation.

    """
    rows = _committed_rows(
        db,
        db_path,
        "dense_segments",
        "SELECT generation, added, removed, ids, vectors, removed_ids, sha256 FROM dense_segments"
        " WHERE generation > ? ORDER BY generation",
        "SELECT count(*) FROM dense_segments",
        (after,),
        (),
        recorded,
        after,
    )
    out = []
    for gen, added, removed, ids, vectors, removed_ids, sha in rows:
        where = f"{db_path}: dense_segments generation {gen}"
        if not all(isinstance(b, bytes) for b in (ids, vectors, removed_ids)) or not isinstance(sha, str):
            raise StoreCorruptedError(f"{where}: its columns have the wrong types")
        if not (isinstance(added, int) and isinstance(removed, int) and added >= 0 and removed >= 0):
            raise StoreCorruptedError(f"{where}: bad counts {added!r}, {removed!r}")
        if len(ids) != 8 * added or len(vectors) != 4 * added * dimension or len(removed_ids) != 8 * removed:
            raise StoreCorruptedError(
                f"{where}: blob sizes do not match {added} added and {removed} removed {dimension}-d vectors"
            )
        if _digest(ids, vectors, removed_ids) != sha:
            raise StoreCorruptedError(f"{where}: checksum does not match")
        vecs = np.frombuffer(vectors, dtype="<f4").reshape(added, dimension).astype(np.float32)
        if not np.isfinite(vecs).all():
            raise StoreCorruptedError(f"{where}: holds NaN or infinite values")
        out.append(
            Segment(
                int(gen),
                np.frombuffer(ids, dtype="<i8").astype(np.int64),
                vecs,
                np.frombuffer(removed_ids, dtype="<i8").astype(np.int64),
            )
        )
    return out


def _committed_rows(
    db: sqlite3.Connection,
    db_path: Path,
    table: str,
    select: str,
    count: str,
    select_params: tuple[Any, ...],
    count_params: tuple[Any, ...],
    recorded: dict[str, Any] | None,
    after: int,
) -> list[tuple[Any, ...]]:
    """The rows of ``select`` (generation first, ascending), checked against the state's ``recorded`` entry."""
    rec = recorded or {}
    last = int(rec.get("last", 0))
    try:
        rows = db.execute(select, select_params).fetchall()
        total = int(db.execute(count, count_params).fetchone()[0])
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        rows, total = [], 0  # a store written before the table existed
    if total != int(rec.get("count", 0)) or (rows and int(rows[-1][0]) != last) or (not rows and after < last):
        raise StoreCorruptedError(
            f"{db_path}: {table} holds {total} rows, the committed state records {rec.get('count', 0)} "
            f"(up to generation {last})"
        )
    return list(rows)


@dataclass(frozen=True)
class Delta:
    """An extension's change since its files were written: named numeric arrays and its size in entries."""

    arrays: dict[str, np.ndarray]
    entries: int


@dataclass(frozen=True)
class ExtensionSegment:
    """One committed change of one extension (checked against the arrays it declares)."""

    generation: int
    entries: int
    arrays: dict[str, np.ndarray]


def _layout_of(arrays: dict[str, np.ndarray]) -> tuple[str, bytes]:
    layout, blobs = [], []
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        code = np.dtype(dtype).str
        if code not in DELTA_DTYPES:
            raise ValueError(f"delta array {name!r} has dtype {a.dtype}; only numeric dtypes are stored")
        blobs.append(np.ascontiguousarray(a, dtype=code).tobytes())
        layout.append([name, code, [int(x) for x in a.shape]])
    return json.dumps(layout, separators=(",", ":")), b"".join(blobs)


def insert_extension_segment(db: sqlite3.Connection, extension: str, generation: int, delta: Delta) -> None:
    """Insert ``delta`` of ``extension`` as the segment of ``generation`` into the open write transaction."""
    layout, data = _layout_of(delta.arrays)
    db.execute(
        "INSERT INTO extension_segments(extension, generation, entries, layout, data, sha256) VALUES (?,?,?,?,?,?)",
        (extension, generation, int(delta.entries), layout, data, _digest(layout.encode("utf-8"), data)),
    )


def _unpack(where: str, layout_text: Any, data: Any, declared: Mapping[str, tuple[str, int]]) -> dict[str, np.ndarray]:
    if not isinstance(layout_text, str) or not isinstance(data, bytes):
        raise StoreCorruptedError(f"{where}: its columns have the wrong types")
    try:
        layout = json.loads(layout_text)
    except ValueError as exc:
        raise StoreCorruptedError(f"{where}: its layout is not valid JSON ({exc})") from exc
    if not isinstance(layout, list):
        raise StoreCorruptedError(f"{where}: its layout is not a list")
    out: dict[str, np.ndarray] = {}
    offset = 0
    for item in layout:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[2], list)):
            raise StoreCorruptedError(f"{where}: bad layout entry {item!r}")
        name, code, shape = item
        if name not in declared or name in out:
            raise StoreCorruptedError(f"{where}: unexpected array {name!r}")
        want, ndim = declared[name]
        if code != want or code not in DELTA_DTYPES:
            raise StoreCorruptedError(f"{where}: array {name!r} has dtype {code!r}, expected {want!r}")
        if len(shape) != ndim or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape):
            raise StoreCorruptedError(f"{where}: array {name!r} has shape {shape!r}, expected {ndim} dimension(s)")
        dtype = np.dtype(code)
        size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if offset + size > len(data):
            raise StoreCorruptedError(f"{where}: the blob is shorter than its layout")
        arr = np.frombuffer(data, dtype=dtype, count=size // dtype.itemsize, offset=offset).reshape(shape)
        offset += size
        if dtype.kind == "f" and not np.isfinite(arr).all():
            raise StoreCorruptedError(f"{where}: array {name!r} holds NaN or infinite values")
        out[name] = arr.astype(dtype.newbyteorder("="), copy=True)
    if offset != len(data):
        raise StoreCorruptedError(f"{where}: the blob is longer than its layout")
    missing = sorted(set(declared) - set(out))
    if missing:
        raise StoreCorruptedError(f"{where}: lacks the array(s) {', '.join(missing)}")
    return out


def read_extension_segments(
    db: sqlite3.Connection,
    db_path: Path,
    extension: str,
    recorded: dict[str, Any] | None,
    declared: Mapping[str, tuple[str, int]],
    *,
    after: int = 0,
) -> list[ExtensionSegment]:
    """The committed segments of ``extension`` newer than generation ``after``, every row checked first.

    Raises:
        StoreCorruptedError: The rows disagree with the state (how many, the last generation), or a row's
            layout names other arrays, dtypes or dimensions than the extension declares, its blob has another
            length, or its checksum does not match. The message names the database, the table, the extension
            and the generation.

    """
    rows = _committed_rows(
        db,
        db_path,
        f"extension_segments (extension {extension!r})",
        "SELECT generation, entries, layout, data, sha256 FROM extension_segments"
        " WHERE extension=? AND generation > ? ORDER BY generation",
        "SELECT count(*) FROM extension_segments WHERE extension=?",
        (extension, after),
        (extension,),
        recorded,
        after,
    )
    out = []
    for gen, entries, layout, data, sha in rows:
        where = f"{db_path}: extension_segments extension {extension!r} generation {gen}"
        if not isinstance(entries, int) or entries < 0 or not isinstance(sha, str):
            raise StoreCorruptedError(f"{where}: its columns have the wrong types")
        if not isinstance(layout, str) or not isinstance(data, bytes):
            raise StoreCorruptedError(f"{where}: its columns have the wrong types")
        if _digest(layout.encode("utf-8"), data) != sha:
            raise StoreCorruptedError(f"{where}: checksum does not match")
        out.append(ExtensionSegment(int(gen), entries, _unpack(where, layout, data, declared)))
    return out
