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
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.errors import StoreCorruptedError

__all__ = ["Segment", "insert_segment", "read_segments", "segment_state"]


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


def _digest(ids: bytes, vectors: bytes, removed: bytes) -> str:
    h = hashlib.sha256()
    for part in (ids, vectors, removed):
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
    rec = recorded or {}
    last = int(rec.get("last", 0))
    try:
        rows = db.execute(
            "SELECT generation, added, removed, ids, vectors, removed_ids, sha256 FROM dense_segments"
            " WHERE generation > ? ORDER BY generation",
            (after,),
        ).fetchall()
        total = int(db.execute("SELECT count(*) FROM dense_segments").fetchone()[0])
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        rows, total = [], 0  # a store written before segments existed
    if total != int(rec.get("count", 0)) or (rows and int(rows[-1][0]) != last) or (not rows and after < last):
        raise StoreCorruptedError(
            f"{db_path}: dense_segments holds {total} rows, the committed state records {rec.get('count', 0)} "
            f"(up to generation {last})"
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
