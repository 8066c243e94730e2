"""The shared engine of one store directory in a process: loading, one consistent view, commit and recovery.

Every :class:`~rag_hier.store.HierStore` handle on a directory in a process shares one :class:`StoreCore`
(the SQLite connection, the FAISS indexes, the extensions), so a write through one handle is seen at once
by every other; the core's lock serializes threads. Across processes, SQLite is the commit point and the
arbiter of what each process sees:

- **Reads** run inside a SQLite read transaction (:meth:`StoreCore.reading`): its shared lock keeps any
  writer from committing while the read runs (the commit waits for it, however long: it never fails
  because of a reader; searches keep each read short, see ``Retriever.run_prepared``), and at its start
  the core compares SQLite's ``data_version`` with the one it last saw; if another process committed, the
  core reloads the indexes and extensions of the new generation first. A read therefore answers from
  exactly one committed generation and never sees a torn state.
- **Writes** (:meth:`StoreCore.writing`) take the writer lock (``store.lock``, an ``flock``), then
  ``BEGIN IMMEDIATE``; a core behind another process's commit reloads and applies the write on top of it.
  A commit writes changed index files to temporary names, commits one SQLite transaction (the data, the
  new generation and the files' checksums) — the commit point — then renames the files into place and
  rewrites ``manifest.json``, and only then releases the writer lock. A change to the passage index that
  is small next to it goes into the transaction itself as a segment row (:mod:`rag_hier.store.segments`)
  instead of a rewrite of ``dense.faiss``, so a write costs what it changes. A failure before the commit point
  rolls everything back and raises; a failure after it is logged, the write stands (it is durable), and
  the next writer finishes the renames.
- **Recovery** of a writer that died after its commit (renames and manifest left undone, temporary files
  left behind) runs only under the writer lock, so no process ever renames or deletes a file that a live
  writer owns. Readers never rename or delete anything.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.dense import DenseIndex, IndexConfig, Journal
from rag_hier.store.contract import StoreExtension
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.files import (
    WriterLock,
    atomic_write_json,
    copy_fd,
    fsync_dir,
    fsync_file,
    regular_file,
    sha256_fd,
    sha256_file,
)
from rag_hier.store.hit_table import HitTable, record_changes
from rag_hier.store.models import prune_unnamed_models, stored_model_dir
from rag_hier.store.records import PassageRecord, iter_records
from rag_hier.store.schema import check_schema, dumps, ensure_incremental_schema, has_incremental_schema
from rag_hier.store.segments import (
    ExtensionSegment,
    Segment,
    insert_extension_segment,
    insert_segment,
    merge_room,
    read_extension_segments,
    read_segments,
    segment_state,
)
from rag_hier.store.state import (
    DATABASE,
    DENSE_FILE,
    FORMAT_VERSION,
    MANIFEST,
    committed_path,
    finish_renames,
    remove_stray_files,
    retrying,
    validate_state,
)

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend

logger = logging.getLogger(__name__)

__all__ = ["StoreCore", "connect", "copy_committed"]

_RECORD_CACHE_MAX = 500_000
"""Stores with at most this many passages keep their parsed records in memory for filtered reads."""
_BUSY_TIMEOUT_S = 10.0
"""How long one SQLite lock attempt waits before :func:`_until_unlocked` logs that it still waits and tries again."""
SEGMENT_MERGE_MIN = 4096
"""Segments of the passage index (or of an extension) are merged into ``dense.faiss`` (its files) once they
hold more than this many entries (vectors added plus ids removed; or more than the index holds, if fewer)
and more than :data:`SEGMENT_MERGE_RATIO` of the index."""
SEGMENT_MERGE_RATIO = 0.1
DATABASE_HASH_MAX = 4 << 20
"""``manifest.json`` records the SHA-256 of ``store.sqlite`` up to this size; a larger database is checked
with SQLite's ``PRAGMA quick_check`` when a store is opened with verification (hashing it on every commit
would make each write cost the size of the store)."""

_CORES: dict[str, StoreCore] = {}
_CORES_LOCK = threading.RLock()
"""Guards :data:`_CORES`. Re-entrant: a handle dropped without ``close()`` releases its core from a finalizer,
which the garbage collector may run in the middle of :meth:`StoreCore.shared` loading another store on the
same thread (a plain lock deadlocked there)."""


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text


def _until_unlocked(root: Path, what: str, statement: Callable[[], object]) -> None:
    """Run ``statement`` until SQLite grants its lock: another process's read or commit is waited for, not an error.

    SQLite's busy handler waits :data:`_BUSY_TIMEOUT_S` per attempt; each further attempt is logged (a
    warning from the second one on), so a writer held up by a long read in another process says so and
    goes on once the read ends, and a reader waits the same way for a commit to finish.
    """
    waited = 0.0
    while True:
        try:
            statement()
            return
        except sqlite3.OperationalError as exc:
            if not _is_locked(exc):
                raise
        waited += _BUSY_TIMEOUT_S
        log = logger.warning if waited > _BUSY_TIMEOUT_S else logger.info
        log("%s: %s waits for another process's transaction (%.0f s so far)", root, what, waited)


def _step(name: str) -> None:
    """A named point inside a commit; tests replace this to simulate a crash there."""


def connect(path: Path) -> sqlite3.Connection:
    """Open ``store.sqlite`` (refusing a symlink) in rollback-journal mode with full syncs."""
    regular_file(path)
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT_S)
    except sqlite3.DatabaseError as exc:
        raise StoreCorruptedError(f"{path}: not a readable SQLite database ({exc})") from exc
    try:
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "delete":
            db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA trusted_schema=OFF")
    except sqlite3.OperationalError as exc:
        db.close()
        raise StoreError(f"{path}: cannot open the database ({exc})") from exc
    except sqlite3.DatabaseError as exc:
        db.close()
        raise StoreCorruptedError(f"{path}: not a readable SQLite database ({exc})") from exc
    return db


def read_state(db: sqlite3.Connection, db_path: Path) -> dict[str, Any]:
    """The committed state held in the database, validated."""
    try:
        row = db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreCorruptedError(f"{db_path}: not a rag-hier database ({exc})") from exc
    if row is None:
        raise StoreCorruptedError(f"{db_path}: the store state is missing")
    try:
        state = json.loads(row[0])
    except (TypeError, ValueError) as exc:
        raise StoreCorruptedError(f"{db_path}: the store state is not valid JSON ({exc})") from exc
    return validate_state(state, db_path)


def _begin_read(db: sqlite3.Connection) -> None:
    """``BEGIN`` and take the shared lock now (one cheap read), so a busy database is met here, not mid-read."""
    db.execute("BEGIN")
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchall()
    except BaseException:
        db.execute("ROLLBACK")
        raise


class _ReadBlock:
    """``StoreCore.reading``: one read transaction and a sync, or nothing inside an enclosing read or write.

    A class rather than a generator context manager: a search enters several nested read blocks per query,
    and the nested ones should cost a lock and a flag check.
    """

    __slots__ = ("_core", "_handle", "_outer")

    def __init__(self, core: StoreCore, handle: StoreBackend) -> None:
        self._core = core
        self._handle = handle
        self._outer = False

    def __enter__(self) -> None:
        core = self._core
        core.lock.acquire()
        try:
            db = core.db
            if db.in_transaction:  # inside a write batch, or an enclosing read
                return
            _until_unlocked(core.root, "a read", functools.partial(_begin_read, db))
            self._outer = True
            try:
                core.sync(self._handle)
            except BaseException:
                if db.in_transaction:
                    db.execute("COMMIT")
                raise
        except BaseException:
            self._outer = False
            core.lock.release()
            raise

    def __exit__(self, *exc_info: object) -> None:
        core = self._core
        try:
            if self._outer and core.db.in_transaction:
                core.db.execute("COMMIT")
        finally:
            self._outer = False
            core.lock.release()


class StoreCore:
    """One open store directory, shared by every handle on it in this process (see the module docstring)."""

    def __init__(self, root: Path, db: sqlite3.Connection, state: dict[str, Any]) -> None:
        self.root = root
        self.db = db
        self.state = state
        self.lock = threading.RLock()
        self.writer = WriterLock(root)
        self.indexes: dict[str, DenseIndex] = {}
        self.extensions: dict[str, StoreExtension] = {}
        self.encoders: dict[str | None, Any] = {}  # recorded encoder per device, shared by handles
        self.encoder_tags: dict[str | None, Any] = {}  # the encoder_key each of them was built for
        self.users = 0
        self.key = ""
        self.verify = True  # hash files when (re)loading them
        self.data_version = -1
        self._token: tuple[dict[str, Any], str] | None = None
        self.settled = False  # whether renames, manifest and strays of the committed state are done
        # one write batch at a time (the lock serializes threads)
        self.depth = 0
        self.dirty: set[str] = set()
        self.dirty_ext: set[str] = set()
        self.rewrite_ext: set[str] = set()  # extensions changed outside their hooks: written whole
        self.ext_room: dict[str, int] = {}  # entries each extension's segments may still take (batch start)
        self.changed_docs: set[str] = set()
        self.changed_rows: set[int] = set()  # passage rowids rewritten in place or deleted (the hit-row log)
        self.merge_requested = False  # HierStore.optimize(): write dense.faiss whole at the next commit
        self.saved_state: dict[str, Any] = {}
        self._records: tuple[int, list[PassageRecord]] | None = None
        self._loaded_files: dict[str, Any] = {}  # what the in-memory indexes were loaded from
        self._fd: int | None = None  # store.sqlite, read by rag-hier itself: kept open (see database_fd)
        self.hit_table: HitTable | None = None  # the hit rows in memory, while a handle opened with them is open
        self._header: bytes | None = None  # the database header when this core last synced (see unchanged())
        self._hit_table_users = 0

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def database_fd(self) -> int:
        """A descriptor of ``store.sqlite`` for hashing and copying it, open until the core closes.

        Closing any descriptor of a file releases every POSIX lock this process holds on it, SQLite's own
        included: a reader hashing the database with a fresh ``open``/``close`` would silently lose the
        shared lock of its read transaction and could then read half of the next commit. So the file is
        opened once and closed only after the connection.
        """
        if self._fd is None:
            self._fd = os.open(self.root / DATABASE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
        return self._fd

    # ------------------------------------------------------------------------------------------------
    # the process-wide registry: one core per directory
    # ------------------------------------------------------------------------------------------------
    @classmethod
    def shared(
        cls, root: Path, handle: StoreBackend, attach: Callable[[StoreCore], None], *, verify: bool
    ) -> StoreCore:
        """The core of ``root`` in this process, loaded on first use; ``attach`` binds ``handle`` to it."""
        key = os.path.realpath(root)
        with _CORES_LOCK:
            core = _CORES.get(key)
            if core is None:
                core = cls.load(root, handle, attach, verify=verify)
                core.key = key
                _CORES[key] = core
            else:
                attach(core)
            core.users += 1
        return core

    @classmethod
    def register(cls, core: StoreCore) -> StoreCore:
        """Make a freshly created core the shared one of its directory."""
        core.key = os.path.realpath(core.root)
        with _CORES_LOCK:
            if core.key in _CORES:  # pragma: no cover - create() refuses existing stores
                raise StoreError(f"{core.root} is already open in this process")
            _CORES[core.key] = core
            core.users += 1
        return core

    def use_hit_table(self) -> None:
        """A handle opened with ``hit_rows="memory"`` is attached: keep the hit rows in memory (built lazily)."""
        with self.lock:
            self._hit_table_users += 1
            if self.hit_table is None:
                self.hit_table = HitTable()

    def release(self, *, hit_table: bool = False) -> None:
        """Drop one handle (``hit_table``: one that kept the hit rows in memory); the last one closes the database."""
        if hit_table:
            with self.lock:
                self._hit_table_users -= 1
                if self._hit_table_users <= 0:
                    self._hit_table_users = 0
                    self.hit_table = None  # the memory goes with the last handle that asked for it
        with _CORES_LOCK:
            self.users -= 1
            if self.users > 0:
                return
            if _CORES.get(self.key) is self:
                del _CORES[self.key]
        with self.lock:
            self.writer.close()
            with contextlib.suppress(sqlite3.Error):
                self.db.close()
            self._close_fd()

    # ------------------------------------------------------------------------------------------------
    # loading
    # ------------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, root: Path, handle: StoreBackend, attach: Callable[[StoreCore], None], *, verify: bool) -> StoreCore:
        """Open a store directory: check the schema, the state against the manifest, sizes, checksums, counts."""
        manifest_path = root / MANIFEST
        if regular_file(manifest_path) is None:
            if not root.exists():
                raise StoreError(f"store directory {root} does not exist")
            raise StoreError(f"{root} is not a rag-hier store (no {MANIFEST})")
        db_path = root / DATABASE
        if regular_file(db_path) is None:
            raise StoreCorruptedError(f"{db_path} is missing")
        db = connect(db_path)
        core: StoreCore | None = None
        try:
            check_schema(db, db_path)
            core = cls(root, db, {})
            core.verify = verify
            attach(core)
            with core._read_transaction():
                state = read_state(db, db_path)
                core._check_manifest(state, verify=verify)
                core.state = state
                core._load_files(handle, verify=verify)
                core.data_version = core._data_version()
            core.settled = False
            return core
        except BaseException:
            db.close()
            if core is not None:
                core._close_fd()  # a handle bound to this core may still release it
            raise

    def _check_manifest(self, state: dict[str, Any], *, verify: bool) -> None:
        path = self.root / MANIFEST
        try:
            manifest = json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            raise StoreCorruptedError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != "rag-hier-store":
            raise StoreCorruptedError(f"{path}: not a rag-hier manifest")
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise StoreError(f"{path}: store format version {version}; this rag-hier reads version {FORMAT_VERSION}")
        m_gen, s_gen = manifest.get("generation"), state["generation"]
        if isinstance(m_gen, bool) or not isinstance(m_gen, int):
            raise StoreCorruptedError(f"{path}: generation is missing or not an integer")
        if s_gen < m_gen:
            raise StoreCorruptedError(f"{self.root / DATABASE} is older (generation {s_gen}) than {MANIFEST} ({m_gen})")
        if s_gen > m_gen:  # a commit whose manifest was not rewritten yet (in progress, or its writer died)
            return
        files = manifest.get("files")
        info = files.get(DATABASE) if isinstance(files, dict) else None
        if not isinstance(info, dict):
            raise StoreCorruptedError(f"{path}: no checksum recorded for {DATABASE}")
        db_path = self.root / DATABASE
        st = regular_file(db_path)
        if st is None:  # pragma: no cover - load() checked it
            raise StoreCorruptedError(f"{db_path} is missing")
        if st.st_size != info.get("bytes"):
            raise StoreCorruptedError(f"{db_path}: {st.st_size} bytes, {MANIFEST} records {info.get('bytes')}")
        recorded = info.get("sha256")
        if verify and recorded is None:
            row = self.db.execute("PRAGMA quick_check").fetchone()
            if row is None or row[0] != "ok":
                answer = row[0] if row else "no answer"
                raise StoreCorruptedError(f"{db_path}: SQLite integrity check failed ({answer})")
        elif verify and sha256_fd(self.database_fd()) != recorded:
            raise StoreCorruptedError(f"{db_path}: checksum does not match {MANIFEST}")
        # at the same generation the manifest mirrors the committed state (files aside): an edited manifest
        # (counts, dimension, encoder, ...) is a mismatch, not something to ignore
        for key, value in state.items():
            if key != "files" and manifest.get(key) != value:
                raise StoreCorruptedError(f"{path}: {key!r} is {manifest.get(key)!r}, but {DATABASE} records {value!r}")

    def _load_files(self, handle: StoreBackend, *, verify: bool, keep: bool = False) -> None:
        """Load the indexes and extensions of ``self.state`` (``keep``: reuse those whose files did not change).

        All or nothing: if any file fails to load, the indexes and extensions held before stay in place.
        """
        old_indexes, old_extensions = self.indexes, self.extensions
        try:
            self._load_files_of_state(handle, verify=verify, keep=keep)
        except BaseException:
            self.indexes, self.extensions = old_indexes, old_extensions
            raise

    def _load_files_of_state(self, handle: StoreBackend, *, verify: bool, keep: bool) -> None:
        state = self.state
        files: dict[str, Any] = state["files"]
        allowed = {DENSE_FILE}
        old_indexes, old_extensions = self.indexes, self.extensions
        previous = self._loaded_files
        indexes: dict[str, DenseIndex] = {}
        info = files.get(DENSE_FILE)
        if info is not None:
            if state.get("dimension") is None:
                raise StoreCorruptedError(f"{self.root / MANIFEST}: an index file is recorded but no dimension")
            config = self.index_config
            dimension = int(state["dimension"])
            recorded = state["indexes"]["dense"].get("segments")
            loaded = previous.get(DENSE_FILE)
            key = self._dense_key()
            if keep and "dense" in old_indexes and loaded is not None and loaded[:2] == key[:2]:
                # the same dense.faiss: replay only the segments committed since (checked before any is applied)
                index = old_indexes["dense"]
                self._replay(index, read_segments(self.db, self.root / DATABASE, recorded, dimension, after=loaded[2]))
                indexes["dense"] = index
            else:
                segments = read_segments(self.db, self.root / DATABASE, recorded, dimension)
                index = retrying(
                    lambda: DenseIndex.read(
                        committed_path(self.root, DENSE_FILE, info, verify=verify), dimension, config
                    )
                )
                self._replay(index, segments)
                indexes["dense"] = index
        self.indexes = indexes
        self._verify_counts(full=not keep)
        extensions: dict[str, StoreExtension] = {}
        for name, ext_info in state.get("extensions", {}).items():
            cls = extension_class(name, self.root / MANIFEST)
            names = list(ext_info.get("files", []))
            bad = [f for f in names if f not in cls.FILES]
            if bad:
                raise StoreCorruptedError(f"{self.root / MANIFEST}: extension {name!r} cannot own {bad[0]!r}")
            allowed.update(names)
            digests = [(files.get(f) or {}).get("sha256") for f in names]
            old = old_extensions.get(name)
            loaded_ext = previous.get(f"ext:{name}")
            if (
                keep
                and old is not None
                and loaded_ext is not None
                and loaded_ext[:2] == (ext_info.get("config"), digests)
            ):
                # the same files: replay only the segments committed since (all checked before any is applied)
                newer = self._extension_segments(name, cls, ext_info, after=loaded_ext[2])
                if newer:
                    self._replay_extension(name, old, newer, handle)
                extensions[name] = old
                continue
            extensions[name] = retrying(functools.partial(self._load_extension, name, ext_info, handle, verify=verify))
        unknown = set(files) - allowed
        if unknown:
            raise StoreCorruptedError(f"{self.root / MANIFEST}: files {sorted(unknown)} belong to no index")
        self.extensions = extensions
        self._remember_files()
        self._records = None

    def _replay(self, index: DenseIndex, segments: list[Segment]) -> None:
        """Apply committed segments to ``index`` in generation order."""
        for seg in segments:
            try:
                index.apply_segment(seg.ids, seg.vectors, seg.removed)
            except (ValueError, RuntimeError) as exc:
                raise StoreCorruptedError(
                    f"{self.root / DATABASE}: dense_segments generation {seg.generation} does not apply "
                    f"to {DENSE_FILE} ({exc})"
                ) from exc

    def _extension_segments(
        self, name: str, cls: type[StoreExtension], info: Mapping[str, Any], *, after: int = 0
    ) -> list[ExtensionSegment]:
        """The checked segments of extension ``name`` newer than ``after`` (none for extensions without deltas)."""
        recorded = info.get("segments")
        if not cls.DELTA_ARRAYS:
            if recorded:
                raise StoreCorruptedError(f"{self.root / MANIFEST}: extension {name!r} records segments it cannot have")
            return []
        return read_extension_segments(self.db, self.root / DATABASE, name, recorded, cls.DELTA_ARRAYS, after=after)

    def _replay_extension(
        self, name: str, ext: StoreExtension, segments: list[ExtensionSegment], handle: StoreBackend
    ) -> None:
        """Apply committed segments to a loaded extension in generation order."""
        for seg in segments:
            try:
                ext.apply_delta(handle, seg.arrays)
            except (ValueError, KeyError, IndexError, StoreCorruptedError) as exc:
                raise StoreCorruptedError(
                    f"{self.root / DATABASE}: extension_segments extension {name!r} generation {seg.generation} "
                    f"does not apply to {', '.join(ext.files())} ({exc})"
                ) from exc

    def _load_extension(
        self, name: str, info: Mapping[str, Any], handle: StoreBackend, *, verify: bool
    ) -> StoreExtension:
        cls = extension_class(name, self.root / MANIFEST)
        segments = self._extension_segments(name, cls, info)
        try:
            ext = cls.from_config(info.get("config", {}))
        except (TypeError, ValueError) as exc:
            raise StoreCorruptedError(
                f"{self.root / MANIFEST}: extension {name!r} has a bad configuration ({exc})"
            ) from exc
        paths = {}
        for fname in info.get("files", []):
            file_info = self.state["files"].get(fname)
            if file_info is None:
                raise StoreCorruptedError(f"{self.root / MANIFEST}: extension {name!r} file {fname} is not recorded")
            paths[fname] = committed_path(self.root, fname, file_info, verify=verify)
        ext.load(handle, paths)
        self._replay_extension(name, ext, segments, handle)
        ext.verify(handle)
        return ext

    def count_rows(self, *, exact: bool = False) -> dict[str, int]:
        """Documents, passages and passages with a vector, as the database holds them.

        From the trigger-kept ``row_counts`` table when the store has it, unless ``exact``: then counted.
        """
        q = self.db.execute
        if not exact and has_incremental_schema(self.db):
            counts = {str(k): int(v) for k, v in q("SELECT name, n FROM row_counts")}
            if set(counts) != {"documents", "passages", "vectors"}:
                raise StoreCorruptedError(f"{self.root / DATABASE}: row_counts holds {sorted(counts)}")
            return counts
        return {
            "documents": int(q("SELECT count(*) FROM documents").fetchone()[0]),
            "passages": int(q("SELECT count(*) FROM passages").fetchone()[0]),
            "vectors": int(q("SELECT count(*) FROM passages WHERE has_vector=1").fetchone()[0]),
        }

    def vector_rowids(self) -> np.ndarray:
        """Rowids of the passages with a dense vector, ascending.

        Read from the ``passages_with_vector`` index (:data:`~rag_hier.store.schema.VECTOR_ROWIDS_SCHEMA`) where the
        store has it, which SQLite's planner chooses for this statement: the table's pages are not read.
        """
        return np.fromiter(
            (r for (r,) in self.db.execute("SELECT id FROM passages WHERE has_vector=1 ORDER BY id")), dtype=np.int64
        )

    def _verify_counts(self, *, full: bool = True) -> None:
        """Row counts against the state; with ``full``, the index's ids against the passages with vectors."""
        counts = self.count_rows(exact=full)
        recorded = self.state.get("counts", {})
        if counts != recorded:
            raise StoreCorruptedError(f"{self.root / DATABASE}: holds {counts}, the committed state records {recorded}")
        if full and has_incremental_schema(self.db):
            kept = self.count_rows()
            if kept != counts:
                raise StoreCorruptedError(f"{self.root / DATABASE}: row_counts {kept} differ from {counts}")
        index = self.indexes.get("dense")
        if index is None:
            if counts["vectors"]:
                raise StoreCorruptedError(f"{self.root}: {counts['vectors']} passages have vectors but no index")
            return
        if not full:
            if len(index) != counts["vectors"]:
                raise StoreCorruptedError(
                    f"{self.root / DENSE_FILE}: holds {len(index)} vectors, {DATABASE} has {counts['vectors']}"
                )
            return
        live = self.vector_rowids()
        held = np.sort(index.ids())
        same = held.size == live.size and np.array_equal(held, live)  # the common case: no set arithmetic
        if index.config.kind in ("flat", "hnsw"):  # kinds that remove lazily (tombstones)
            if same:
                return
            missing = np.setdiff1d(live, held)
            if missing.size:
                raise StoreCorruptedError(f"{self.root / DENSE_FILE}: {missing.size} passage vectors are missing")
            index.mark_tombstones(np.setdiff1d(held, live))
        elif not same:
            raise StoreCorruptedError(
                f"{self.root / DENSE_FILE}: holds {held.size} vectors that do not match the {live.size} passage "
                f"vectors of {DATABASE}"
            )

    # ------------------------------------------------------------------------------------------------
    # one consistent view
    # ------------------------------------------------------------------------------------------------
    @property
    def index_config(self) -> IndexConfig:
        """Configuration of the passage index, from the committed state."""
        try:
            return IndexConfig.from_dict(dict(self.state["indexes"]["dense"]["config"]))
        except (TypeError, ValueError) as exc:
            raise StoreCorruptedError(f"{self.root / MANIFEST}: bad index configuration ({exc})") from exc

    @property
    def generation(self) -> int:
        """The committed generation this core holds."""
        return int(self.state["generation"])

    def state_token(self) -> str | None:
        """The committed state this core holds, as the database stores it (its JSON text), once remembered.

        A read outside a read transaction compares it with the stored text in its own statement: equal means
        the statement read the generation this core's indexes hold (every commit writes a new generation).
        ``None`` until :meth:`remember_token` ran for the state held now.
        """
        cached = self._token
        return cached[1] if cached is not None and cached[0] is self.state else None

    def remember_token(self) -> None:
        """Keep the stored state's text as the token of the state held now (inside a read transaction, synced)."""
        row = self.db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()
        if row is not None:
            self._token = (self.state, row[0])

    def _data_version(self) -> int:
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    def _read_header(self) -> bytes:
        """Bytes 18-27 of the database header: the file format versions (1, 1: rollback journal) .. change counter."""
        return os.pread(self.database_fd(), 10, 18)

    def unchanged(self) -> bool:
        """Whether the database file is as it was when this core last synced (no commit since, by anyone).

        For a search that answers from memory only (the index and the hit rows this core holds), outside any
        transaction, the lock held. One ``pread`` of the database header, on the descriptor this core keeps open
        (no lock taken, none released): in rollback-journal mode SQLite increments the header's change counter with
        every commit, before the commit point (the journal's deletion). So a commit that has completed is always
        seen; one in progress may be, and then the caller reads within a read transaction, which waits for it.
        False also when the header names another journal mode (a WAL database does not count commits there), and
        until a read transaction has recorded the header after this core's own last commit or rollback.
        """
        header = self._header
        return header is not None and header[:2] == b"\x01\x01" and self._read_header() == header

    @contextlib.contextmanager
    def _read_transaction(self) -> Iterator[None]:
        _until_unlocked(self.root, "a read", functools.partial(_begin_read, self.db))
        try:
            yield
        finally:
            if self.db.in_transaction:
                self.db.execute("COMMIT")

    def sync(self, handle: StoreBackend) -> None:
        """Reload what another process committed since this core last looked (inside a transaction)."""
        version = self._data_version()
        if version == self.data_version:
            self._header = self._read_header()
            return
        state = read_state(self.db, self.root / DATABASE)
        if state["generation"] < self.generation:
            raise StoreCorruptedError(
                f"{self.root / DATABASE} went back from generation {self.generation} to {state['generation']}"
            )
        if state["generation"] > self.generation:
            logger.debug(
                "%s: generation %d -> %d (another process wrote)", self.root, self.generation, state["generation"]
            )
            previous = self.state
            self.state = state
            try:
                self._load_files(handle, verify=self.verify, keep=True)
            except BaseException:  # the next read tries again; until then this core keeps the generation it had
                self.state = previous
                raise
            self.settled = False
        self.data_version = version
        self._header = self._read_header()  # only once synced: unchanged() then means "this generation is current"

    def reading(self, handle: StoreBackend) -> _ReadBlock:
        """Run a read against one committed generation (see the module docstring)."""
        return _ReadBlock(self, handle)

    def records(self, *, cache: bool = True) -> list[PassageRecord]:
        """Every stored record in insertion order (kept between commits for stores up to 500k passages)."""
        generation = self.generation
        if cache and self.depth == 0 and self._records is not None and self._records[0] == generation:
            return self._records[1]
        records = list(iter_records(self.db))
        if cache and self.depth == 0 and len(records) <= _RECORD_CACHE_MAX:
            self._records = (generation, records)
        return records

    # ------------------------------------------------------------------------------------------------
    # writing: one batch at a time, committed atomically
    # ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self, handle: StoreBackend) -> Iterator[None]:
        """A write batch: nested batches join the outermost, which commits (or rolls back on an exception)."""
        with self.lock:
            outer = self.depth == 0
            if outer and self.db.in_transaction:
                raise StoreError(f"{self.root}: cannot write inside store.reading() (a read of one generation)")
            if outer:
                self._begin(handle)
            self.depth += 1
            try:
                yield
            except BaseException:
                self.depth -= 1
                if outer:
                    self._rollback(handle)
                raise
            self.depth -= 1
            if outer:
                self._commit(handle)

    def _begin(self, handle: StoreBackend) -> None:
        self.writer.acquire()
        try:
            _until_unlocked(self.root, "a write", functools.partial(self.db.execute, "BEGIN IMMEDIATE"))
            self.sync(handle)
            if not self.settled:
                self.recover()
            ensure_incremental_schema(self.db)
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self.writer.release()
            raise
        self.saved_state = copy.deepcopy(self.state)
        self.changed_rows = set()
        self._header = None  # this batch changes the file: the next read records the header anew
        index = self.indexes.get("dense")
        if index is not None:
            index.journal = Journal(limit=self._segment_room(index))
        self.ext_room = {}
        for name, ext in self.extensions.items():
            if ext.DELTA_ARRAYS:
                self.ext_room[name] = self._extension_room(name, ext)
                ext.begin_delta(self.ext_room[name])

    def _segment_room(self, index: DenseIndex) -> int:
        """How many more entries segments may take before ``dense.faiss`` is written whole."""
        entries = int((self.state["indexes"]["dense"].get("segments") or {}).get("entries", 0))
        return merge_room(index.ntotal, entries, SEGMENT_MERGE_MIN, SEGMENT_MERGE_RATIO)

    def _extension_room(self, name: str, ext: StoreExtension) -> int:
        """How many more entries the segments of extension ``name`` may take before its files are written whole."""
        info = self.state.get("extensions", {}).get(name) or {}
        entries = int((info.get("segments") or {}).get("entries", 0))
        return merge_room(ext.delta_size(), entries, SEGMENT_MERGE_MIN, SEGMENT_MERGE_RATIO)

    def _end_journal(self) -> None:
        for index in self.indexes.values():
            index.journal = None
        for ext in self.extensions.values():
            ext.end_delta()

    def recover(self) -> None:
        """Finish the renames and manifest of the committed state and remove temporary files (writer lock held)."""
        if not self.writer.held:  # pragma: no cover - callers hold it
            raise StoreError("recovery needs the writer lock")
        renamed = finish_renames(self.root, self.state["files"])
        if renamed:
            logger.warning("%s: finished %d renames of an interrupted commit", self.root, renamed)
        remove_stray_files(self.root, keep=set())
        prune_unnamed_models(self.root, self.state)
        try:
            manifest = json.loads((self.root / MANIFEST).read_bytes())
            stale = not isinstance(manifest, dict) or manifest.get("generation") != self.generation
        except (OSError, ValueError):
            stale = True
        if stale:
            self.write_manifest()
        self.settled = True

    def try_recover(self, handle: StoreBackend) -> bool:
        """Recover now if no other process is writing (a non-blocking try of the writer lock)."""
        with self.lock:
            if self.settled or self.depth:
                return self.settled
            try:
                if not self.writer.acquire(blocking=False):
                    return False  # a live writer will finish its own commit
            except StoreError as exc:  # e.g. a read-only directory: nothing can be finished from here
                logger.debug("%s: no recovery (%s)", self.root, exc)
                return False
            try:
                with self._read_transaction():
                    self.sync(handle)
                    self.recover()
            finally:
                self.writer.release()
            return True

    def _rollback(self, handle: StoreBackend) -> None:
        try:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self.state = self.saved_state
            self._end_journal()
            # what the batch changed in memory is read back from the committed files
            if "dense" in self.dirty:
                self._loaded_files.pop(DENSE_FILE, None)
            for name in self.dirty_ext:
                self._loaded_files.pop(f"ext:{name}", None)
            with self._read_transaction():
                self._load_files(handle, verify=False, keep=True)
                self.data_version = self._data_version()
        finally:
            self.dirty.clear()
            self.dirty_ext.clear()
            self.rewrite_ext.clear()
            self.changed_docs.clear()
            self.changed_rows = set()
            self.merge_requested = False
            self._records = None
            self.writer.release()

    def _commit(self, handle: StoreBackend) -> None:
        try:
            pending, dropped = self._prepare_commit(handle)
            _step("before_sqlite_commit")
            # readers in other processes hold shared locks: the commit waits for them to end (never fails)
            _until_unlocked(self.root, "a commit", functools.partial(self.db.execute, "COMMIT"))
        except BaseException:
            self._rollback(handle)
            raise
        # the commit point: from here on the write is durable, and failures are reported as warnings
        self._end_journal()
        self.merge_requested = False
        self.dirty.clear()
        self.dirty_ext.clear()
        self.rewrite_ext.clear()
        self._records = None
        self._loaded_files = {}
        try:
            _step("after_sqlite_commit")
            for tmp, final in pending:
                tmp.replace(final)
            for name in dropped:
                path = self.root / name
                if regular_file(path) is not None:
                    path.unlink()
            if pending or dropped:
                fsync_dir(self.root)
            _step("after_index_rename")
            self.write_manifest()
            _step("after_manifest")
            self.settled = True
        except Exception as exc:
            self.settled = False
            logger.warning(
                "%s: the write is committed (generation %d), but finishing its files failed (%s); the next "
                "write completes it",
                self.root,
                self.generation,
                exc,
                exc_info=logger.isEnabledFor(logging.DEBUG),
            )
        finally:
            self._remember_files()
            self.writer.release()

    def _dense_key(self) -> tuple[Any, Any, int]:
        """``(dense.faiss checksum, generation it was written whole, last segment's generation)`` of the state."""
        dense = self.state["indexes"]["dense"]
        return (
            (self.state["files"].get(DENSE_FILE) or {}).get("sha256"),
            dense.get("written"),
            int((dense.get("segments") or {}).get("last", 0)),
        )

    def _remember_files(self) -> None:
        files = self.state["files"]
        self._loaded_files = {DENSE_FILE: self._dense_key()} | {
            f"ext:{n}": (
                i.get("config"),
                [(files.get(f) or {}).get("sha256") for f in i.get("files", [])],
                int((i.get("segments") or {}).get("last", 0)),
            )
            for n, i in self.state.get("extensions", {}).items()
        }

    def _prepare_commit(self, handle: StoreBackend) -> tuple[list[tuple[Path, Path]], list[str]]:
        """Write changed files to temporary names and the new state into the open transaction."""
        if self.changed_docs:
            changed, self.changed_docs = self.changed_docs, set()
            for name, ext in self.extensions.items():
                ext.on_documents_changed(handle, changed)
                self.dirty_ext.add(name)
        gen = self.generation + 1
        files = {k: {kk: vv for kk, vv in v.items() if kk != "pending"} for k, v in self.state["files"].items()}
        pending: list[tuple[Path, Path]] = []
        previous_ext: dict[str, Any] = self.state.get("extensions", {})
        extensions_state: dict[str, dict[str, Any]] = {}
        for name, ext in self.extensions.items():
            entry: dict[str, Any] = {"config": ext.config(), "files": ext.files()}
            before = previous_ext.get(name) or {}
            if before.get("segments") and name not in self.dirty_ext:
                entry["segments"] = before["segments"]
            extensions_state[name] = entry
        for name in previous_ext:
            if name not in self.extensions:  # removed: so are its segments
                self.db.execute("DELETE FROM extension_segments WHERE extension=?", (name,))
        owned = {f for info in extensions_state.values() for f in info["files"]}
        dropped = [f for info in previous_ext.values() for f in info.get("files", []) if f not in owned]
        for f in dropped:
            files.pop(f, None)
        for name in sorted(self.dirty_ext & set(self.extensions)):
            ext = self.extensions[name]
            if self._commit_delta(name, ext, gen, extensions_state[name], files):
                continue
            self.db.execute("DELETE FROM extension_segments WHERE extension=?", (name,))
            tmps = {f: self.root / f"{f}.g{gen}.tmp" for f in ext.files()}
            ext.write(tmps)
            for f, tmp in tmps.items():
                if regular_file(tmp) is None:
                    raise StoreError(f"extension {name!r} did not write {f}")
                fsync_file(tmp)
                files[f] = {"sha256": sha256_file(tmp), "bytes": tmp.stat().st_size, "pending": tmp.name}
                pending.append((tmp, self.root / f))
        index = self.indexes.get("dense")
        dense_state = dict(self.state["indexes"]["dense"])
        if index is None and DENSE_FILE in files:  # the index was dropped (its dimension forgotten)
            del files[DENSE_FILE]
            dropped.append(DENSE_FILE)
            self.db.execute("DELETE FROM dense_segments")
            dense_state.pop("segments", None)
            dense_state.pop("written", None)
        if "dense" in self.dirty and index is not None:
            journal = index.journal
            if journal is not None and journal.complete and DENSE_FILE in files and not self.merge_requested:
                ids, vectors, removed = journal.arrays(index.dimension)
                if len(ids) or len(removed):
                    segment = Segment(gen, ids, vectors, removed)
                    insert_segment(self.db, segment)
                    dense_state["segments"] = segment_state(dense_state.get("segments"), segment)
            else:
                tmp = self.root / f"{DENSE_FILE}.g{gen}.tmp"
                index.write(tmp)
                fsync_file(tmp)
                files[DENSE_FILE] = {"sha256": sha256_file(tmp), "bytes": tmp.stat().st_size, "pending": tmp.name}
                pending.append((tmp, self.root / DENSE_FILE))
                self.db.execute("DELETE FROM dense_segments")
                dense_state.pop("segments", None)
                dense_state["written"] = gen
        _step("index_files_written")
        state = dict(self.state)
        state["indexes"] = {**self.state["indexes"], "dense": dense_state}
        state["generation"] = gen
        state["files"] = files
        state["counts"] = self.count_rows()
        if extensions_state or "extensions" in state:
            state["extensions"] = extensions_state
        record_changes(self.db, gen, self.changed_rows)  # what a table of hit rows re-reads (rag_hier.store.hit_table)
        self.changed_rows = set()
        self.db.execute("UPDATE state SET value=? WHERE key='manifest'", (dumps(state),))
        self.state = state
        return pending, dropped

    def _commit_delta(
        self, name: str, ext: StoreExtension, gen: int, entry: dict[str, Any], files: Mapping[str, Any]
    ) -> bool:
        """Commit the batch's change of ``ext`` as a segment row if it can be; False: write its files whole."""
        if not ext.DELTA_ARRAYS or self.merge_requested or name in self.rewrite_ext:
            return False
        before = self.state.get("extensions", {}).get(name)
        if (
            before is None
            or before.get("config") != entry["config"]
            or before.get("files") != entry["files"]
            or any(f not in files for f in entry["files"])
        ):
            return False  # new, reconfigured, or owning other files: nothing to apply a delta to
        delta = ext.delta()
        if delta is None:
            return False
        recorded = before.get("segments") or {}
        if name not in self.ext_room or delta.entries > self.ext_room[name]:
            return False
        if delta.entries:
            insert_extension_segment(self.db, name, gen, delta)
            entry["segments"] = {
                "count": int(recorded.get("count", 0)) + 1,
                "entries": int(recorded.get("entries", 0)) + int(delta.entries),
                "last": gen,
            }
        elif recorded:
            entry["segments"] = dict(recorded)
        return True

    def write_manifest(self) -> None:
        """Rewrite ``manifest.json`` from the committed state (plus the database's size and checksum)."""
        manifest = json.loads(dumps(self.state))
        fd = self.database_fd()
        size = os.fstat(fd).st_size
        digest = sha256_fd(fd) if size <= DATABASE_HASH_MAX else None
        manifest["files"][DATABASE] = {"sha256": digest, "bytes": size}
        for info in manifest["files"].values():
            info.pop("pending", None)
        atomic_write_json(self.root / MANIFEST, manifest)


def copy_committed(core: StoreCore, handle: StoreBackend, staging: Path) -> None:
    """Copy one committed generation of ``core``'s store into the empty directory ``staging``, with its manifest."""
    import shutil

    with core.reading(handle):
        state = copy.deepcopy(core.state)
        for name, info in state["files"].items():
            shutil.copyfile(committed_path(core.root, name, info, verify=False), staging / name)
            info.pop("pending", None)
        copy_fd(core.database_fd(), staging / DATABASE)  # never open/close the file under the read lock
        for key in ("encoder", "encoder_previous", "encoder_original"):  # models kept inside the store travel with it
            enc = state.get(key)
            if isinstance(enc, dict) and enc.get("stored") and not (staging / enc["model"]).exists():
                source = stored_model_dir(core.root, enc, verify=False)
                shutil.copytree(source, staging / enc["model"], symlinks=True)
    db_copy = staging / DATABASE
    db = connect(db_copy)
    try:  # the copy's committed state names no temporary files
        db.execute("UPDATE state SET value=? WHERE key='manifest'", (dumps(state),))
    finally:
        db.close()
    manifest = json.loads(dumps(state))
    manifest["files"][DATABASE] = {"sha256": sha256_file(db_copy), "bytes": db_copy.stat().st_size}
    atomic_write_json(staging / MANIFEST, manifest)
