"""The hit rows of a store's vectors kept in memory (``hit_rows="memory"``), one committed generation at a time.

A dense search returns rowids; a :class:`~rag_hier.store.records.Hit` needs the row of each (the columns of
:data:`~rag_hier.store.records.HIT_COLUMNS`). By default the search reads them from SQLite, one statement per
search. A handle opened with ``hit_rows="memory"`` keeps them instead in a :class:`HitTable` on its core (the
engine every handle on the directory in the process shares, so all of them read from it while one such handle is
open; the last one to close frees it): the rows of every passage that has a vector, built
by the first search, then brought up to each new generation by reading only what changed:

- **New rows.** Passage rowids are ``AUTOINCREMENT``: a row committed after the table's generation has a rowid
  above the highest one ever committed at that generation (``sqlite_sequence``), so they are one range read.
  A vector is written with its passage only (``has_vector`` never changes), so these are all the new vectors.
- **Rows rewritten or deleted.** Every commit records the rowids it rewrote in place (an upsert keeping a
  passage, a metadata update) or deleted, in the ``state`` table's row ``hit_rows_log`` (:func:`record_changes`,
  in the commit's own transaction): the union over a run of generations, up to :data:`LOG_MAX` rowids. A table at
  generation ``g`` catching up to ``G`` re-reads those rowids (a deleted one is dropped) when the log runs up to
  ``G`` and covers every commit after ``g``; otherwise (a larger change, a commit by a rag-hier that keeps no
  log, a damaged log) it reads every row again. Its size is then checked against the committed count of vectors.

The table answers only for the generation it holds: a search compares that generation with the core's, and the
database header (its change counter, one ``pread``: no lock, no table read) with the one recorded when the core
last synced (``StoreCore.unchanged``); when either differs, the search runs inside a read transaction, which
loads the new generation's index first, and the table catches up within the same transaction. The index and
the rows a search returns are therefore of one generation, and a deleted row is never returned (the index of
that generation no longer holds it, and the table drops it). The table is a cache: nothing in it is written to
disk, and a crash loses nothing. (The header check assumes what rag-hier's own connections guarantee: a
rollback-journal database, written by SQLite in its normal locking mode.)
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from rag_hier.errors import StoreCorruptedError
from rag_hier.store.schema import dumps, rows_in

logger = logging.getLogger(__name__)

__all__ = ["HIT_ROWS_MODES", "LOG_KEY", "LOG_MAX", "HitRowsMode", "HitTable", "check_hit_rows", "record_changes"]

HitRowsMode = Literal["sqlite", "memory"]
"""Where a handle's dense searches read their hit rows: SQLite (default) or a table kept in memory."""
HIT_ROWS_MODES: tuple[str, ...] = ("sqlite", "memory")

LOG_KEY = "hit_rows_log"
"""The ``state`` table row that records the rowids recent commits rewrote in place or deleted."""
LOG_MAX = 4096
"""Rowids the log holds at most: a table further behind, or a larger change, reads every row again."""

_COLUMNS = "id, passage_id, doc_id, text, title_path, meta, position, extra"  # records.HIT_COLUMNS
_EMPTY_LIST = "[]"
_EMPTY_OBJECT = "{}"


def check_hit_rows(hit_rows: object) -> HitRowsMode:
    """``hit_rows`` checked: ``"sqlite"`` or ``"memory"``.

    Raises:
        ValueError: Any other value (the message names the parameter and what is allowed).

    """
    if not isinstance(hit_rows, str) or hit_rows not in HIT_ROWS_MODES:
        raise ValueError(f"hit_rows must be 'sqlite' or 'memory', got {hit_rows!r}")
    return hit_rows  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------------
# the log: written by every commit, read by tables catching up
# ----------------------------------------------------------------------------------------------------
def _read_log(db: sqlite3.Connection) -> tuple[int, int, list[int]] | None:
    """``(since, generation, rowids)`` of the log, or ``None`` when there is none or it is malformed."""
    row = db.execute("SELECT value FROM state WHERE key=?", (LOG_KEY,)).fetchone()
    if row is None:
        return None
    try:
        log = json.loads(row[0])
        since, generation, rowids = log["since"], log["generation"], log["rowids"]
    except (TypeError, ValueError, KeyError):
        return None
    if not (_is_int(since) and _is_int(generation) and isinstance(rowids, list) and since <= generation):
        return None
    if len(rowids) > LOG_MAX or not all(_is_int(r) for r in rowids):
        return None
    return since, generation, rowids


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def record_changes(db: sqlite3.Connection, generation: int, changed: Iterable[int]) -> None:
    """Record, in the open write transaction, the rowids that the commit of ``generation`` rewrote or deleted.

    The log keeps the union over consecutive generations ``since < g <= generation`` while it stays within
    :data:`LOG_MAX` rowids; it restarts at this commit when the previous generation did not write it or the union
    would be larger, and it records no rowid at all (``since`` = ``generation``) for a commit that changed more.
    """
    ids = {int(r) for r in changed}
    log = _read_log(db)
    if log is not None and log[1] == generation - 1 and len(ids.union(log[2])) <= LOG_MAX:
        since = log[0]
        ids.update(log[2])
    elif len(ids) <= LOG_MAX:
        since = generation - 1
    else:
        since, ids = generation, set()
    value = dumps({"since": since, "generation": generation, "rowids": sorted(ids)})
    db.execute("INSERT OR REPLACE INTO state(key, value) VALUES (?, ?)", (LOG_KEY, value))


# ----------------------------------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------------------------------
class HitTable:
    """The hit rows of every passage with a vector, at one committed generation (see the module docstring).

    Not thread-safe by itself: the core's lock guards every call.
    """

    __slots__ = ("_docs", "_slots", "generation", "last_rowid", "rebuilds", "rows", "updates")

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Any, ...]] = {}
        # the same rows by position = rowid (None in the gaps), when rowids are dense enough: a search's lookups
        # then touch fewer cache lines than the dict's (hash slot, entry, key object, row)
        self._slots: list[tuple[Any, ...] | None] | None = None
        self.generation: int | None = None  # None: not built yet
        self.last_rowid = 0  # the highest passage rowid ever committed at self.generation
        self._docs: dict[str, str] = {}  # one string per document id, shared by its rows
        self.rebuilds = 0
        self.updates = 0

    def __len__(self) -> int:
        return len(self.rows)

    def current(self, generation: int) -> bool:
        """Whether the table holds the rows of ``generation``."""
        return self.generation == generation

    def get_many(self, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """The rows of ``rowids`` held (a new dict: the caller may keep it while the table moves on)."""
        slots = self._slots
        if slots is not None:  # the search path: every rowid the index returned is held
            try:
                out = {r: slots[r] for r in rowids if r >= 0}
            except IndexError:
                pass
            else:
                if None not in out.values():
                    return out  # type: ignore[return-value]  # no None among them
        rows = self.rows
        return {r: rows[r] for r in rowids if r in rows}

    def _put(self, rowid: int, row: tuple[Any, ...]) -> None:
        self.rows[rowid] = row
        slots = self._slots
        if slots is not None:
            if rowid >= len(slots):
                slots.extend([None] * (rowid + 1 - len(slots)))
            slots[rowid] = row

    def _drop(self, rowid: int) -> None:
        if self.rows.pop(rowid, None) is not None and self._slots is not None:
            self._slots[rowid] = None

    def _index_slots(self) -> None:
        """The list by rowid, when it costs at most ~4 pointers per row held (else lookups use the dict)."""
        rows = self.rows
        top = max(rows, default=0)
        if top > 4 * len(rows) + 65536:
            self._slots = None
            return
        slots: list[tuple[Any, ...] | None] = [None] * (top + 1)
        for rowid, row in rows.items():
            slots[rowid] = row
        self._slots = slots

    def catch_up(self, db: sqlite3.Connection, generation: int, vectors: int) -> None:
        """Bring the table to ``generation`` (inside a read transaction of it; ``vectors``: its committed count)."""
        if self.generation == generation:
            return
        held, self.generation = self.generation, None  # until caught up: a failure below means read everything
        if held is not None and self._update(db, held, generation) and len(self.rows) == vectors:
            self.generation = generation
            self.updates += 1
            return
        self._rebuild(db)
        if len(self.rows) != vectors:  # pragma: no cover - the core checked the counts when it loaded them
            found, self.rows, self._slots = len(self.rows), {}, None
            raise StoreCorruptedError(f"hit rows: {found} passages with vectors, the committed state records {vectors}")
        self.generation = generation
        self.rebuilds += 1

    def _sequence(self, db: sqlite3.Connection) -> int:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name='passages'").fetchone()
        return int(row[0]) if row is not None else 0

    def _compact(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """The row with its empty JSON literals and document id shared with other rows (memory, not speed)."""
        rowid, pid, doc_id, text, title_path, meta, position, extra = row
        doc = self._docs.setdefault(doc_id, doc_id)
        return (
            rowid,
            pid,
            doc,
            text,
            _EMPTY_LIST if title_path == _EMPTY_LIST else title_path,
            _EMPTY_OBJECT if meta == _EMPTY_OBJECT else meta,
            position,
            _EMPTY_OBJECT if extra == _EMPTY_OBJECT else extra,
        )

    def _rebuild(self, db: sqlite3.Connection) -> None:
        self._docs = {}
        compact = self._compact
        last = self._sequence(db)
        cur = db.execute(f"SELECT {_COLUMNS} FROM passages WHERE has_vector=1")
        rows: dict[int, tuple[Any, ...]] = {}
        while batch := cur.fetchmany(4096):
            for row in batch:
                rows[row[0]] = compact(row)
        self.rows = rows
        self._index_slots()
        self.last_rowid = last
        logger.debug("hit rows: read %d rows", len(rows))

    def _update(self, db: sqlite3.Connection, held: int, generation: int) -> bool:
        """Apply the changes from ``held`` to ``generation``; False: the log does not cover them (read everything)."""
        log = _read_log(db)
        if log is None or log[1] != generation or log[0] > held:
            return False
        changed = [r for r in log[2] if r <= self.last_rowid]
        last = self._sequence(db)
        put, compact = self._put, self._compact
        found: set[int] = set()
        for row in rows_in(db, f"SELECT {_COLUMNS} FROM passages WHERE has_vector=1 AND id IN ({{marks}})", changed):
            put(row[0], compact(row))
            found.add(row[0])
        for r in changed:
            if r not in found:
                self._drop(r)
        if last > self.last_rowid:
            cur = db.execute(f"SELECT {_COLUMNS} FROM passages WHERE id > ? AND has_vector=1", (self.last_rowid,))
            while batch := cur.fetchmany(4096):
                for row in batch:
                    put(row[0], compact(row))
        self.last_rowid = last
        return True
