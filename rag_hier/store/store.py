"""HierStore: one directory = one collection (manifest + SQLite + FAISS index files).

Layout::

    my-collection/
      manifest.json   format version, encoder, dimension, index configuration, counts, checksums
      store.sqlite    documents, passages (text, title path, metadata), the committed state
      dense.faiss     passage vectors (FAISS ids = SQLite passage rowids, never reused)

Consistency: SQLite is the commit point. A save writes changed index files to temporary names, then
commits one SQLite transaction (data + new state: generation, counts, index checksums), then renames the
index files into place, then rewrites ``manifest.json`` (a mirror of the state plus the SQLite checksum).
A crash before the SQLite commit leaves the previous state (SQLite rolls back; the temporaries are
ignored); a crash after it is rolled forward on the next open (the temporaries match the committed
checksums). Nothing is ever unpickled: FAISS, SQLite and JSON only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from rag_hier.corpus.model import Document, Passage, split_document
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import DimensionMismatchError, DuplicateIdError, StoreCorruptedError, StoreError
from rag_hier.index.dense import DenseIndex, IndexConfig
from rag_hier.store._files import atomic_write_json, fsync_dir, fsync_file, sha256_file
from rag_hier.store.extensions import StoreExtension, extension_class
from rag_hier.store.filters import Predicate, compile_filter

if TYPE_CHECKING:
    from rag_hier.retrieval.hit import Hit

logger = logging.getLogger(__name__)

__all__ = ["FORMAT_VERSION", "HierStore", "WritePolicy", "WriteSummary"]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATABASE = "store.sqlite"
WritePolicy = Literal["upsert", "skip", "fail"]
_POLICIES = ("upsert", "skip", "fail")
_INDEX_FILES = {"dense": "dense.faiss"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    rowid INTEGER PRIMARY KEY AUTOINCREMENT,
    doc_id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL DEFAULT '',
    meta TEXT NOT NULL DEFAULT '{}',
    toc TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    passage_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    section INTEGER NOT NULL DEFAULT 0,
    title_path TEXT NOT NULL DEFAULT '[]',
    text TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    content_hash TEXT NOT NULL,
    has_vector INTEGER NOT NULL DEFAULT 0,
    exact_embedding BLOB
);
CREATE INDEX IF NOT EXISTS passages_by_doc ON passages(doc_id, position);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_PASSAGE_COLUMNS = "id, passage_id, doc_id, position, section, title_path, text, meta, extra, has_vector"
_RECORD_CACHE_MAX = 500_000
"""Stores with at most this many passages keep their parsed records in memory for filtered reads."""


def _step(name: str) -> None:
    """A named point inside a save; tests replace this to simulate a crash there."""


@dataclass(frozen=True)
class WriteSummary:
    """What a write changed."""

    documents_added: int = 0
    documents_updated: int = 0
    documents_unchanged: int = 0
    documents_skipped: int = 0
    passages_added: int = 0
    passages_removed: int = 0
    passages_unchanged: int = 0
    encoded: int = 0

    @property
    def passages_written(self) -> int:
        """Passages inserted or replaced."""
        return self.passages_added


def _hash_text(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class HierStore:
    """A persistent collection of documents and passages with a FAISS vector index.

    Create one with :meth:`create` (or :meth:`open_or_create`), reopen it with :meth:`open`. Every write
    (:meth:`add_documents`, :meth:`add_passages`, deletes, metadata updates) is atomic and durable when
    it returns; group many writes into one commit with ``with store.batch(): ...``.

    Example:
        >>> store = HierStore.create("my-collection")  # doctest: +SKIP
        >>> store.add_documents(read_corpus("docs/"))  # doctest: +SKIP
        >>> store.search("how do tides work?", top_k=5)  # doctest: +SKIP

    """

    def __init__(
        self,
        path: Path,
        db: sqlite3.Connection,
        state: dict[str, Any],
        indexes: dict[str, DenseIndex],
        encoder: DenseEncoder | None,
        read_only: bool,
    ) -> None:
        self.path = path
        self._db = db
        self._state = state
        self._indexes = indexes
        self._encoder = encoder
        self.read_only = read_only
        self._depth = 0
        self._dirty: set[str] = set()
        self._encoder_checked = False
        self._extensions: dict[str, StoreExtension] = {}
        self._dirty_ext: set[str] = set()
        self._changed_docs: set[str] = set()

    # ------------------------------------------------------------------------------------------------
    # creation and loading
    # ------------------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        model: str | None = DEFAULT_MODEL,
        encoder: DenseEncoder | None = None,
        dimension: int | None = None,
        index: IndexConfig | str | Mapping[str, Any] = "flat",
        corpus: Mapping[str, Any] | None = None,
        exist_ok: bool = False,
    ) -> HierStore:
        """Create an empty store in directory ``path``.

        Args:
            path: Directory to create (it may exist if empty).
            model: Sentence-transformers model for passages and queries; ``None`` for a store that only
                receives vectors from outside (e.g. a framework's embedder).
            encoder: A ready :class:`DenseEncoder` (overrides ``model``; lets you choose device etc.).
            dimension: Vector dimension; inferred from the encoder, or from the first vectors written.
            index: ``"flat"``, ``"ivf"``, ``"hnsw"``, or an :class:`IndexConfig` (or its dict).
            corpus: Free facts about the corpus recorded in the manifest (format, passage length).
            exist_ok: Open the store instead of failing when ``path`` already holds one.

        """
        root = Path(path)
        if (root / MANIFEST).exists():
            if exist_ok:
                return cls.open(root, encoder=encoder)
            raise StoreError(f"{root} already holds a rag-hier store; open it with HierStore.open()")
        if (root / DATABASE).is_file():
            raise StoreCorruptedError(f"{root / MANIFEST} is missing but {DATABASE} is there: a damaged store")
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise StoreError(f"{root} exists and is not an empty directory; choose a new path for the store")
        config = cls._index_config(index)
        if encoder is None and model is not None:
            encoder = DenseEncoder(model)
        encoder_cfg: dict[str, Any] | None = None
        if encoder is not None:
            encoder_cfg = encoder.config()
            if dimension is not None and dimension != encoder_cfg["dimension"]:
                raise DimensionMismatchError(
                    f"dimension={dimension} but model {encoder.model_name!r} outputs {encoder_cfg['dimension']}"
                )
            dimension = encoder_cfg["dimension"]
        root.mkdir(parents=True, exist_ok=True)
        from rag_hier import __version__

        state: dict[str, Any] = {
            "format": "rag-hier-store",
            "format_version": FORMAT_VERSION,
            "created_with": f"rag-hier {__version__}",
            "generation": 0,
            "encoder": encoder_cfg,
            "dimension": dimension,
            "indexes": {"dense": {"file": _INDEX_FILES["dense"], "config": config.to_dict()}},
            "corpus": dict(corpus or {}),
            "counts": {"documents": 0, "passages": 0, "vectors": 0},
            "files": {},
        }
        db = cls._connect(root / DATABASE)
        db.executescript(_SCHEMA)
        db.execute("INSERT INTO state(key, value) VALUES ('manifest', ?)", (_dumps(state),))
        store = cls(root, db, state, {}, encoder, read_only=False)
        if dimension is not None:
            store._indexes["dense"] = DenseIndex(dimension, config)
            store._dirty.add("dense")
        with store.batch():
            pass
        return store

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        encoder: DenseEncoder | None = None,
        device: str | None = None,
        read_only: bool = False,
        verify_checksums: bool = True,
    ) -> HierStore:
        """Open an existing store, checking it (manifest, counts, checksums) and finishing an interrupted save.

        Args:
            path: The store directory.
            encoder: Use this encoder instead of the one recorded in the manifest.
            device: Device for the recorded encoder (``None``: CUDA when available).
            read_only: Refuse writes (and never touch the files).
            verify_checksums: Hash every file against the manifest (sizes and counts are always checked).

        """
        root = Path(path)
        manifest_path = root / MANIFEST
        if not manifest_path.is_file():
            if not root.exists():
                raise StoreError(f"store directory {root} does not exist")
            raise StoreError(f"{root} is not a rag-hier store (no {MANIFEST})")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreCorruptedError(f"{manifest_path}: not valid JSON ({exc})") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != "rag-hier-store":
            raise StoreCorruptedError(f"{manifest_path}: not a rag-hier manifest")
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise StoreError(
                f"{manifest_path}: store format version {version}; this rag-hier reads version {FORMAT_VERSION}"
            )
        db_path = root / DATABASE
        if not db_path.is_file():
            raise StoreCorruptedError(f"{db_path} is missing")
        db = cls._connect(db_path)
        try:
            state = cls._read_state(db, db_path)
            store = cls._load(root, db, manifest, state, encoder, device, read_only, verify_checksums)
        except BaseException:
            db.close()
            raise
        return store

    @classmethod
    def open_or_create(cls, path: str | Path, **create_kwargs: Any) -> HierStore:
        """:meth:`open` the store at ``path`` if there is one, else :meth:`create` it."""
        if (Path(path) / MANIFEST).exists():
            return cls.open(path, encoder=create_kwargs.get("encoder"))
        return cls.create(path, **create_kwargs)

    @staticmethod
    def _index_config(index: IndexConfig | str | Mapping[str, Any]) -> IndexConfig:
        if isinstance(index, IndexConfig):
            return index
        if isinstance(index, str):
            return IndexConfig(kind=index)  # type: ignore[arg-type]
        return IndexConfig.from_dict(dict(index))

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA synchronous=FULL")
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptedError(f"{path}: not a readable SQLite database ({exc})") from exc
        return db

    @staticmethod
    def _read_state(db: sqlite3.Connection, db_path: Path) -> dict[str, Any]:
        try:
            row = db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptedError(f"{db_path}: not a rag-hier database ({exc})") from exc
        if row is None:
            raise StoreCorruptedError(f"{db_path}: the store state is missing")
        state = json.loads(row[0])
        if not isinstance(state, dict):
            raise StoreCorruptedError(f"{db_path}: the store state is not a JSON object")
        return state

    @classmethod
    def _load(
        cls,
        root: Path,
        db: sqlite3.Connection,
        manifest: dict[str, Any],
        state: dict[str, Any],
        encoder: DenseEncoder | None,
        device: str | None,
        read_only: bool,
        verify: bool,
    ) -> HierStore:
        m_gen, s_gen = manifest.get("generation"), state.get("generation")
        if not isinstance(m_gen, int) or not isinstance(s_gen, int):
            raise StoreCorruptedError(f"{root / MANIFEST}: generation is missing or not an integer")
        rewrite_manifest = False
        if s_gen == m_gen:
            cls._check_file(root / DATABASE, manifest.get("files", {}).get(DATABASE), verify, root / MANIFEST)
            # At the same generation the manifest mirrors the committed state (files aside): an edited
            # manifest (counts, dimension, encoder, ...) is a mismatch, not something to ignore.
            for key, value in state.items():
                if key != "files" and manifest.get(key) != value:
                    raise StoreCorruptedError(
                        f"{root / MANIFEST}: {key!r} is {manifest.get(key)!r}, but {DATABASE} records {value!r}"
                    )
        elif s_gen > m_gen:
            logger.warning("%s: finishing a save that was interrupted (generation %d -> %d)", root, m_gen, s_gen)
            rewrite_manifest = True
        else:
            raise StoreCorruptedError(
                f"{root / DATABASE} is older (generation {s_gen}) than {MANIFEST} (generation {m_gen})"
            )
        indexes: dict[str, DenseIndex] = {}
        dimension = state.get("dimension")
        for name, info in state.get("indexes", {}).items():
            file_info = state.get("files", {}).get(info["file"])
            if file_info is None:
                continue
            path = cls._settle_index_file(root, info["file"], file_info, verify, read_only)
            config = IndexConfig.from_dict(info["config"])
            if dimension is None:
                raise StoreCorruptedError(f"{root / MANIFEST}: an index file is recorded but no dimension")
            indexes[name] = DenseIndex.read(path, int(dimension), config)
        if encoder is None and state.get("encoder"):
            enc = state["encoder"]
            encoder = DenseEncoder(
                enc["model"],
                device=device,
                normalize_embeddings=enc.get("normalize_embeddings"),
                query_prompt=enc.get("query_prompt"),
                document_prompt=enc.get("document_prompt"),
                max_seq_length=enc.get("max_seq_length"),
            )
        store = cls(root, db, state, indexes, encoder, read_only)
        store._verify_counts()
        for name in state.get("extensions", {}):
            store._extensions[name] = store._load_extension(name, verify=verify)
        if not read_only:
            store._remove_stray_files()
            if rewrite_manifest:
                store._write_manifest()
        return store

    @staticmethod
    def _check_file(path: Path, info: Mapping[str, Any] | None, verify: bool, manifest_path: Path) -> None:
        if info is None:
            raise StoreCorruptedError(f"{manifest_path}: no checksum recorded for {path.name}")
        if not path.is_file():
            raise StoreCorruptedError(f"{path} is missing")
        size = path.stat().st_size
        if size != info.get("bytes"):
            raise StoreCorruptedError(f"{path}: {size} bytes, {manifest_path.name} records {info.get('bytes')}")
        if verify and sha256_file(path) != info.get("sha256"):
            raise StoreCorruptedError(f"{path}: checksum does not match {manifest_path.name}")

    @staticmethod
    def _settle_index_file(root: Path, name: str, info: Mapping[str, Any], verify: bool, read_only: bool) -> Path:
        """Return the path holding the committed index file, rolling an interrupted rename forward."""
        path = root / name

        def matches(p: Path) -> bool:
            if not p.is_file() or p.stat().st_size != info.get("bytes"):
                return False
            return not verify or sha256_file(p) == info.get("sha256")

        if matches(path):
            return path
        pending = root / str(info.get("pending", ""))
        if info.get("pending") and matches(pending):
            if read_only:
                return pending
            pending.replace(path)
            fsync_dir(root)
            return path
        if not path.is_file():
            raise StoreCorruptedError(f"{path} is missing")
        raise StoreCorruptedError(f"{path}: size or checksum does not match the committed state")

    def _load_extension(self, name: str, *, verify: bool = True) -> StoreExtension:
        info = self._state["extensions"][name]
        ext = extension_class(name, self.path / MANIFEST).from_config(info.get("config", {}))
        paths = {}
        for fname in info.get("files", []):
            file_info = self._state.get("files", {}).get(fname)
            if file_info is None:
                raise StoreCorruptedError(f"{self.path / MANIFEST}: extension {name!r} file {fname} is not recorded")
            paths[fname] = self._settle_index_file(self.path, fname, file_info, verify, self.read_only)
        ext.load(self, paths)
        ext.verify(self)
        return ext

    def _verify_counts(self) -> None:
        counts = self._count_rows()
        recorded = self._state.get("counts", {})
        if counts != recorded:
            raise StoreCorruptedError(f"{self.path / DATABASE}: holds {counts}, the committed state records {recorded}")
        index = self._indexes.get("dense")
        if index is None:
            if counts["vectors"]:
                raise StoreCorruptedError(f"{self.path}: {counts['vectors']} passages have vectors but no index")
            return
        if index.config.kind == "hnsw":
            live = self._vector_rowids()
            held = index.ids()
            missing = np.setdiff1d(live, held)
            if missing.size:
                raise StoreCorruptedError(f"{self.path / 'dense.faiss'}: {missing.size} passage vectors are missing")
            index.mark_tombstones(np.setdiff1d(held, live))
        elif index.ntotal != counts["vectors"]:
            raise StoreCorruptedError(
                f"{self.path / 'dense.faiss'}: holds {index.ntotal} vectors, {DATABASE} has {counts['vectors']}"
            )

    def _remove_stray_files(self) -> None:
        for p in self.path.iterdir():
            if p.name.endswith(".tmp") or ".tmp-" in p.name:
                with contextlib.suppress(OSError):
                    p.unlink()

    # ------------------------------------------------------------------------------------------------
    # properties
    # ------------------------------------------------------------------------------------------------
    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the committed state (what ``manifest.json`` mirrors)."""
        return json.loads(_dumps(self._state))

    @property
    def dimension(self) -> int | None:
        """Vector dimension (``None`` until the first vector for a store without encoder)."""
        dim = self._state.get("dimension")
        return int(dim) if dim is not None else None

    @property
    def encoder(self) -> DenseEncoder | None:
        """The store's dense encoder (``None`` for stores fed with external vectors)."""
        return self._encoder

    @property
    def index(self) -> DenseIndex | None:
        """The passage-level dense index."""
        return self._indexes.get("dense")

    @property
    def index_config(self) -> IndexConfig:
        """Configuration of the passage-level index."""
        return IndexConfig.from_dict(self._state["indexes"]["dense"]["config"])

    @property
    def corpus_info(self) -> dict[str, Any]:
        """Facts recorded about the corpus (format, passage length, ...)."""
        return dict(self._state.get("corpus", {}))

    def update_corpus_info(self, **changes: Any) -> None:
        """Record facts about the corpus (format, passage length, ...) in the committed state."""
        with self.batch():
            self._state["corpus"] = {**self._state.get("corpus", {}), **changes}

    def info(self) -> dict[str, Any]:
        """A summary for ``rag-hier info``."""
        out = self.manifest
        out["path"] = str(self.path)
        index = self.index
        if index is not None:
            out["index_state"] = index.describe()
        return out

    # ------------------------------------------------------------------------------------------------
    # transactions
    # ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def batch(self) -> Iterator[HierStore]:
        """Group writes into one atomic commit; on an exception nothing of the batch is kept."""
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only")
        outer = self._depth == 0
        if outer:
            self._begin()
        self._depth += 1
        try:
            yield self
        except BaseException:
            self._depth -= 1
            if outer:
                self._rollback()
            raise
        self._depth -= 1
        if outer:
            try:
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def _begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        row = self._db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()
        on_disk = json.loads(row[0]).get("generation") if row else None
        if on_disk != self._state["generation"]:
            self._db.execute("ROLLBACK")
            raise StoreError(
                f"{self.path} was changed by another writer (generation {on_disk}, this handle has "
                f"{self._state['generation']}); reopen the store"
            )
        self._saved_state = json.loads(_dumps(self._state))

    def _rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        self._state = self._saved_state
        for name in self._dirty:
            info = self._state.get("files", {}).get(_INDEX_FILES[name])
            if info is None:
                dim = self.dimension
                if dim is None:
                    self._indexes.pop(name, None)
                else:
                    self._indexes[name] = DenseIndex(dim, self.index_config)
            else:
                self._indexes[name] = DenseIndex.read(
                    self.path / _INDEX_FILES[name], int(self.dimension or 0), self.index_config
                )
                if self._indexes[name].config.kind == "hnsw":
                    live = self._vector_rowids()
                    self._indexes[name].mark_tombstones(np.setdiff1d(self._indexes[name].ids(), live))
        self._dirty.clear()
        for name in self._dirty_ext | (set(self._extensions) - set(self._state.get("extensions", {}))):
            if name in self._state.get("extensions", {}):
                self._extensions[name] = self._load_extension(name, verify=False)
            else:
                self._extensions.pop(name, None)
        for name in set(self._state.get("extensions", {})) - set(self._extensions):
            self._extensions[name] = self._load_extension(name, verify=False)
        self._dirty_ext.clear()
        self._changed_docs.clear()

    def _count_rows(self) -> dict[str, int]:
        q = self._db.execute
        return {
            "documents": int(q("SELECT count(*) FROM documents").fetchone()[0]),
            "passages": int(q("SELECT count(*) FROM passages").fetchone()[0]),
            "vectors": int(q("SELECT count(*) FROM passages WHERE has_vector=1").fetchone()[0]),
        }

    def _commit(self) -> None:
        if self._changed_docs:
            changed, self._changed_docs = self._changed_docs, set()
            for name, ext in self._extensions.items():
                ext.on_documents_changed(self, changed)
                self._dirty_ext.add(name)
        gen = int(self._state["generation"]) + 1
        files = dict(self._state.get("files", {}))
        pending: list[tuple[Path, Path]] = []
        extensions_state = {
            name: {"config": ext.config(), "files": ext.files()} for name, ext in self._extensions.items()
        }
        owned = {f for info in extensions_state.values() for f in info["files"]}
        dropped = [
            f for info in self._state.get("extensions", {}).values() for f in info.get("files", []) if f not in owned
        ]
        for f in dropped:
            files.pop(f, None)
        for name in sorted(self._dirty_ext & set(self._extensions)):
            ext = self._extensions[name]
            tmps = {f: self.path / f"{f}.g{gen}.tmp" for f in ext.files()}
            ext.write(tmps)
            for f, tmp in tmps.items():
                if not tmp.is_file():
                    raise StoreError(f"extension {name!r} did not write {f}")
                fsync_file(tmp)
                files[f] = {"sha256": sha256_file(tmp), "bytes": tmp.stat().st_size, "pending": tmp.name}
                pending.append((tmp, self.path / f))
        for name in sorted(self._dirty):
            index = self._indexes.get(name)
            if index is None:
                continue
            final = self.path / _INDEX_FILES[name]
            tmp = self.path / f"{final.name}.g{gen}.tmp"
            index.write(tmp)
            fsync_file(tmp)
            files[final.name] = {"sha256": sha256_file(tmp), "bytes": tmp.stat().st_size, "pending": tmp.name}
            pending.append((tmp, final))
        _step("index_files_written")
        state = dict(self._state)
        state["generation"] = gen
        state["files"] = files
        state["counts"] = self._count_rows()
        if extensions_state or "extensions" in state:
            state["extensions"] = extensions_state
        self._db.execute("UPDATE state SET value=? WHERE key='manifest'", (_dumps(state),))
        _step("before_sqlite_commit")
        self._db.execute("COMMIT")
        self._state = state
        self._dirty.clear()
        self._dirty_ext.clear()
        _step("after_sqlite_commit")
        for tmp, final in pending:
            tmp.replace(final)
        for f in dropped:
            with contextlib.suppress(OSError):
                (self.path / f).unlink()
        if pending or dropped:
            fsync_dir(self.path)
        _step("after_index_rename")
        self._write_manifest()
        _step("after_manifest")

    def _write_manifest(self) -> None:
        manifest = json.loads(_dumps(self._state))
        db_path = self.path / DATABASE
        manifest["files"][DATABASE] = {"sha256": sha256_file(db_path), "bytes": db_path.stat().st_size}
        for info in manifest["files"].values():
            info.pop("pending", None)
        atomic_write_json(self.path / MANIFEST, manifest)

    def close(self) -> None:
        """Close the database connection (the store must not be used afterwards)."""
        self._db.close()

    def __enter__(self) -> HierStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.count_passages()

    def __repr__(self) -> str:
        return f"HierStore({str(self.path)!r}, passages={self._state['counts']['passages']})"

    # ------------------------------------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------------------------------------
    def _require_encoder(self, what: str) -> DenseEncoder:
        if self._encoder is None:
            raise StoreError(f"{what} needs an encoder, and the store at {self.path} has none; pass vectors")
        if not self._encoder_checked:
            dim = self._encoder.dimension
            if self.dimension is not None and dim != self.dimension:
                raise DimensionMismatchError(
                    f"model {self._encoder.model_name!r} outputs {dim}-d vectors; the store at {self.path} "
                    f"holds {self.dimension}-d vectors"
                )
            self._encoder_checked = True
        return self._encoder

    def _ensure_index(self, dimension: int) -> DenseIndex:
        if self.dimension is None:
            self._state["dimension"] = dimension
        elif dimension != self.dimension:
            raise DimensionMismatchError(
                f"got {dimension}-d vectors; the store at {self.path} holds {self.dimension}-d"
            )
        index = self._indexes.get("dense")
        if index is None:
            index = DenseIndex(dimension, self.index_config)
            self._indexes["dense"] = index
        return index

    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        max_passage_words: int | None = None,
        policy: WritePolicy = "upsert",
        show_progress_bar: bool = False,
        encode: bool = True,
    ) -> WriteSummary:
        """Split documents into passages, encode what changed, and store them.

        Re-adding a document (``policy="upsert"``) replaces its passages; passages whose text and title
        path are unchanged keep their vectors and are not re-encoded. ``"skip"`` leaves stored documents
        alone; ``"fail"`` raises :class:`DuplicateIdError` before writing anything. ``encode=False``
        stores passages without dense vectors (a store searched through an extension such as SVDR's
        token index; it needs no encoder).
        """
        if policy not in _POLICIES:
            raise ValueError(f"policy must be one of {', '.join(_POLICIES)}; got {policy!r}")
        docs = list(documents)
        seen: set[str] = set()
        for d in docs:
            if not isinstance(d, Document):
                raise TypeError(f"add_documents() takes Document objects, got {type(d).__name__}")
            if d.doc_id in seen:
                raise DuplicateIdError(f"document id {d.doc_id!r} appears twice in the input")
            seen.add(d.doc_id)
        if max_passage_words is None:
            max_passage_words = int(self._state.get("corpus", {}).get("max_passage_words", 100))
        with self.batch():
            existing = self._existing_doc_ids([d.doc_id for d in docs])
            if policy == "fail" and existing:
                raise DuplicateIdError(f"{len(existing)} document(s) already stored, e.g. {sorted(existing)[0]!r}")
            added = updated = unchanged = skipped = removed = kept = 0
            new_passages: list[Passage] = []
            for d in docs:
                if d.doc_id in existing and policy == "skip":
                    skipped += 1
                    continue
                passages = split_document(d, max_passage_words)
                before = self._db.execute(
                    "SELECT title, meta, toc FROM documents WHERE doc_id=?", (d.doc_id,)
                ).fetchone()
                if before != (d.title, _dumps(dict(d.metadata)), _dumps(d.table_of_contents())):
                    self._changed_docs.add(d.doc_id)
                self._db.execute(
                    "INSERT INTO documents(doc_id, title, meta, toc) VALUES (?,?,?,?) ON CONFLICT(doc_id) DO "
                    "UPDATE SET title=excluded.title, meta=excluded.meta, toc=excluded.toc",
                    (d.doc_id, d.title, _dumps(dict(d.metadata)), _dumps(d.table_of_contents())),
                )
                old = {
                    pid: (rowid, h)
                    for rowid, pid, h in self._db.execute(
                        "SELECT id, passage_id, content_hash FROM passages WHERE doc_id=?"
                        + (" AND has_vector=1" if encode else ""),
                        (d.doc_id,),
                    )
                }
                stale = set(self._passage_rowids_of_doc(d.doc_id))
                changed = False
                for p in passages:
                    prev = old.get(p.id)
                    if prev is not None and prev[1] == _hash_text(p.embedding_text):
                        stale.discard(prev[0])
                        self._update_passage_fields(prev[0], p)
                        kept += 1
                    else:
                        new_passages.append(p)
                        changed = True
                if stale:
                    changed = True
                    removed += self._delete_rowids(sorted(stale))
                if d.doc_id not in existing:
                    added += 1
                elif changed:
                    updated += 1
                else:
                    unchanged += 1
            vectors = None
            if new_passages and encode:
                encoder = self._require_encoder("add_documents()")
                vectors = encoder.encode_documents(
                    [p.embedding_text for p in new_passages], show_progress_bar=show_progress_bar
                )
            self._insert_passages(new_passages, vectors, exact=None)
        return WriteSummary(
            documents_added=added,
            documents_updated=updated,
            documents_unchanged=unchanged,
            documents_skipped=skipped,
            passages_added=len(new_passages),
            passages_removed=removed,
            passages_unchanged=kept,
            encoded=len(new_passages) if vectors is not None else 0,
        )

    def add_passages(
        self,
        passages: Sequence[Passage],
        embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None = None,
        *,
        policy: WritePolicy = "upsert",
        encode_missing: bool | None = None,
    ) -> WriteSummary:
        """Store passages as given (no splitting), with caller vectors or vectors from the store's encoder.

        Args:
            passages: Passages; documents named by their ``doc_id`` are created as needed.
            embeddings: ``(n, dim)`` array, or a list holding a vector or ``None`` per passage. Vectors
                that float32 cannot hold exactly are also kept exactly, so :meth:`get_embeddings` returns
                them as written.
            policy: ``"upsert"`` replaces stored passages with the same id, ``"skip"`` keeps them,
                ``"fail"`` raises :class:`DuplicateIdError` before writing anything. Within the input,
                the last occurrence of an id wins (the first under ``"skip"``).
            encode_missing: Encode passages that come without a vector (default: when the store has an
                encoder and no ``embeddings`` were given).

        """
        if policy not in _POLICIES:
            raise ValueError(f"policy must be one of {', '.join(_POLICIES)}; got {policy!r}")
        items = list(passages)
        for p in items:
            if not isinstance(p, Passage):
                raise TypeError(f"add_passages() takes Passage objects, got {type(p).__name__}")
        vecs = self._normalize_embedding_input(embeddings, len(items))
        if encode_missing is None:
            encode_missing = embeddings is None and self._encoder is not None
        # de-duplicate within the input
        order: dict[str, int] = {}
        for i, p in enumerate(items):
            if policy == "skip" and p.id in order:
                continue
            order[p.id] = i
        idx = sorted(order.values())
        items = [items[i] for i in idx]
        vecs = [vecs[i] for i in idx]
        with self.batch():
            stored = self._existing_passage_ids([p.id for p in items])
            if policy == "fail" and stored:
                raise DuplicateIdError(f"passage id {sorted(stored)[0]!r} is already stored")
            if policy == "skip":
                keep = [i for i, p in enumerate(items) if p.id not in stored]
                items, vecs = [items[i] for i in keep], [vecs[i] for i in keep]
                stored = set()
            if encode_missing:
                todo = [i for i, v in enumerate(vecs) if v is None]
                if todo:
                    encoder = self._require_encoder("encoding passages")
                    enc = encoder.encode_documents([items[i].embedding_text for i in todo])
                    for j, i in enumerate(todo):
                        vecs[i] = enc[j]
            removed = 0
            if stored:
                rowids = [
                    r
                    for (r,) in self._db.execute(
                        f"SELECT id FROM passages WHERE passage_id IN ({','.join('?' * len(stored))})",
                        sorted(stored),
                    )
                ]
                removed = self._delete_rowids(rowids, drop_empty_documents=False)
            for p in items:
                self._db.execute(
                    "INSERT INTO documents(doc_id, title) VALUES (?, ?) ON CONFLICT(doc_id) DO NOTHING",
                    (p.doc_id, p.title_path[0] if p.title_path else ""),
                )
            self._insert_passages(items, None, exact=vecs)
            self._drop_empty_documents()
        return WriteSummary(
            passages_added=len(items),
            passages_removed=removed,
            encoded=sum(1 for v in vecs if v is not None) if encode_missing else 0,
        )

    def _normalize_embedding_input(
        self, embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None, n: int
    ) -> list[np.ndarray | None]:
        if embeddings is None:
            return [None] * n
        if isinstance(embeddings, np.ndarray):
            if embeddings.ndim != 2 or embeddings.shape[0] != n:
                raise ValueError(f"embeddings has shape {embeddings.shape}; expected ({n}, dimension)")
            rows: list[np.ndarray | None] = list(embeddings)
        else:
            rows = [None if e is None else np.asarray(e) for e in embeddings]
            if len(rows) != n:
                raise ValueError(f"got {len(rows)} embeddings for {n} passages")
        dims = {int(r.shape[0]) for r in rows if r is not None}
        for i, r in enumerate(rows):
            if r is not None and (r.ndim != 1 or not np.issubdtype(r.dtype, np.number)):
                raise ValueError(f"embedding {i} is not a vector of numbers")
            if r is not None and not np.isfinite(r).all():
                raise ValueError(f"embedding {i} contains NaN or infinite values")
        if len(dims) > 1:
            raise DimensionMismatchError(f"embeddings of different dimensions in one write: {sorted(dims)}")
        if dims:
            (dim,) = dims
            if self.dimension is not None and dim != self.dimension:
                raise DimensionMismatchError(
                    f"got {dim}-d embeddings; the store at {self.path} holds {self.dimension}-d"
                )
        return rows

    def _insert_passages(
        self,
        passages: Sequence[Passage],
        vectors: np.ndarray | None,
        exact: Sequence[np.ndarray | None] | None,
    ) -> None:
        if not passages:
            return
        rows = []
        vec_list: list[np.ndarray | None] = (
            list(vectors) if vectors is not None else list(exact) if exact is not None else [None] * len(passages)
        )
        for p, v in zip(passages, vec_list, strict=True):
            blob = None
            if v is not None and v.dtype != np.float32:
                as64 = np.asarray(v, dtype=np.float64)
                if not np.array_equal(as64.astype(np.float32).astype(np.float64), as64):
                    blob = as64.astype("<f8").tobytes()
            rows.append(
                (
                    p.id,
                    p.doc_id,
                    int(p.position),
                    int(p.section),
                    _dumps(list(p.title_path)),
                    p.text,
                    _dumps(dict(p.meta)),
                    _dumps(dict(p.extra)),
                    _hash_text(p.embedding_text),
                    int(v is not None),
                    blob,
                )
            )
        first = self._next_rowid()
        self._db.executemany(
            "INSERT INTO passages(passage_id, doc_id, position, section, title_path, text, meta, extra,"
            " content_hash, has_vector, exact_embedding) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        rowids = np.arange(first, first + len(rows), dtype=np.int64)
        with_vec = [i for i, v in enumerate(vec_list) if v is not None]
        mat: np.ndarray | None = None
        if with_vec:
            mat = np.stack([np.asarray(vec_list[i], dtype=np.float32) for i in with_vec])
            index = self._ensure_index(int(mat.shape[1]))
            index.add(rowids[with_vec], mat)
            self._dirty.add("dense")
        self._changed_docs.update(p.doc_id for p in passages)
        for name, ext in self._extensions.items():
            ext.on_passages_added(self, rowids, passages, mat if len(with_vec) == len(passages) else None)
            self._dirty_ext.add(name)

    def _next_rowid(self) -> int:
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='passages'").fetchone()
        return (int(row[0]) if row else 0) + 1

    def _update_passage_fields(self, rowid: int, p: Passage) -> None:
        self._db.execute(
            "UPDATE passages SET position=?, section=?, title_path=?, text=?, meta=?, extra=? WHERE id=?",
            (
                p.position,
                p.section,
                _dumps(list(p.title_path)),
                p.text,
                _dumps(dict(p.meta)),
                _dumps(dict(p.extra)),
                rowid,
            ),
        )

    def _existing_doc_ids(self, doc_ids: Sequence[str]) -> set[str]:
        return self._existing("documents", "doc_id", doc_ids)

    def _existing_passage_ids(self, ids: Sequence[str]) -> set[str]:
        return self._existing("passages", "passage_id", ids)

    def _existing(self, table: str, column: str, values: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for i in range(0, len(values), 900):
            chunk = list(values[i : i + 900])
            out.update(
                r
                for (r,) in self._db.execute(
                    f"SELECT {column} FROM {table} WHERE {column} IN ({','.join('?' * len(chunk))})", chunk
                )
            )
        return out

    def _passage_rowids_of_doc(self, doc_id: str) -> list[int]:
        return [r for (r,) in self._db.execute("SELECT id FROM passages WHERE doc_id=?", (doc_id,))]

    def _delete_rowids(self, rowids: Sequence[int], *, drop_empty_documents: bool = True) -> int:
        if not rowids:
            return 0
        with_vec: list[int] = []
        for i in range(0, len(rowids), 900):
            chunk = list(rowids[i : i + 900])
            marks = ",".join("?" * len(chunk))
            self._changed_docs.update(
                d for (d,) in self._db.execute(f"SELECT DISTINCT doc_id FROM passages WHERE id IN ({marks})", chunk)
            )
            with_vec.extend(
                r for (r,) in self._db.execute(f"SELECT id FROM passages WHERE has_vector=1 AND id IN ({marks})", chunk)
            )
            self._db.execute(f"DELETE FROM passages WHERE id IN ({marks})", chunk)
        index = self._indexes.get("dense")
        if with_vec and index is not None:
            index.remove(np.asarray(with_vec, dtype=np.int64))
            self._dirty.add("dense")
        removed = np.asarray(rowids, dtype=np.int64)
        for name, ext in self._extensions.items():
            ext.on_passages_removed(self, removed)
            self._dirty_ext.add(name)
        if drop_empty_documents:
            self._drop_empty_documents()
        return len(rowids)

    def _drop_empty_documents(self) -> None:
        self._db.execute("DELETE FROM documents WHERE doc_id NOT IN (SELECT DISTINCT doc_id FROM passages)")

    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Delete passages by id (unknown ids are ignored); returns how many were deleted."""
        ids = list(dict.fromkeys(passage_ids))
        with self.batch():
            rowids: list[int] = []
            for i in range(0, len(ids), 900):
                chunk = ids[i : i + 900]
                rowids.extend(
                    r
                    for (r,) in self._db.execute(
                        f"SELECT id FROM passages WHERE passage_id IN ({','.join('?' * len(chunk))})", chunk
                    )
                )
            return self._delete_rowids(rowids)

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents and all their passages; returns how many passages were deleted."""
        ids = list(dict.fromkeys(doc_ids))
        with self.batch():
            rowids = [r for d in ids for r in self._passage_rowids_of_doc(d)]
            n = self._delete_rowids(rowids)
            self._drop_empty_documents()
            for i in range(0, len(ids), 900):
                chunk = ids[i : i + 900]
                self._db.execute(f"DELETE FROM documents WHERE doc_id IN ({','.join('?' * len(chunk))})", chunk)
            return n

    def delete_by_filter(self, filters: Mapping[str, Any] | Predicate) -> int:
        """Delete every passage matching ``filters``; returns how many."""
        predicate = compile_filter(filters)
        with self.batch():
            rowids = [r["_rowid"] for r in self._records() if predicate is None or predicate(r)]
            return self._delete_rowids(rowids)

    def delete_all(self) -> int:
        """Delete every passage and document (ids are still never reused)."""
        with self.batch():
            rowids = [r for (r,) in self._db.execute("SELECT id FROM passages")]
            n = self._delete_rowids(rowids)
            self._db.execute("DELETE FROM documents")
            return n

    def update_meta(self, passage_ids: Iterable[str], meta: Mapping[str, Any], *, merge: bool = True) -> int:
        """Merge (or replace, ``merge=False``) metadata of passages; returns how many were updated."""
        ids = list(dict.fromkeys(passage_ids))
        payload = dict(meta)
        n = 0
        with self.batch():
            for i in range(0, len(ids), 900):
                chunk = ids[i : i + 900]
                rows = self._db.execute(
                    f"SELECT id, meta FROM passages WHERE passage_id IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
                for rowid, old in rows:
                    new = {**json.loads(old), **payload} if merge else payload
                    self._db.execute("UPDATE passages SET meta=? WHERE id=?", (_dumps(new), rowid))
                    n += 1
        return n

    def update_by_filter(self, filters: Mapping[str, Any] | Predicate, meta: Mapping[str, Any]) -> int:
        """Merge ``meta`` into the metadata of every passage matching ``filters``; returns how many."""
        predicate = compile_filter(filters)
        with self.batch():
            ids = [r["id"] for r in self._records() if predicate is None or predicate(r)]
            return self.update_meta(ids, meta)

    # ------------------------------------------------------------------------------------------------
    # extensions
    # ------------------------------------------------------------------------------------------------
    @property
    def extensions(self) -> dict[str, StoreExtension]:
        """The store's extensions by name (document index, token index, tree, ...)."""
        return dict(self._extensions)

    def extension(self, name: str) -> StoreExtension | None:
        """The extension registered as ``name``, or ``None``."""
        return self._extensions.get(name)

    def add_extension(self, extension: StoreExtension, *, replace: bool = False) -> None:
        """Attach an extension, build it from the stored passages, and commit it with the store."""
        if not extension.name:
            raise StoreError(f"{type(extension).__name__} has no name")
        extension_class(extension.name)  # must be registered, or the store could not be reopened
        if extension.name in self._extensions and not replace:
            raise StoreError(f"{self.path} already has a {extension.name!r} extension (pass replace=True)")
        with self.batch():
            extension.build(self)
            self._extensions[extension.name] = extension
            self._dirty_ext.add(extension.name)

    def remove_extension(self, name: str) -> None:
        """Detach an extension and delete its files at the next commit."""
        with self.batch():
            if self._extensions.pop(name, None) is None:
                raise StoreError(f"{self.path} has no {name!r} extension")

    def mark_extension_dirty(self, name: str) -> None:
        """Tell the store an extension changed outside a hook, so it is written at the next commit."""
        if name not in self._extensions:
            raise StoreError(f"{self.path} has no {name!r} extension")
        self._dirty_ext.add(name)

    def doc_ids_for_rowids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Document id of each passage rowid (unknown rowids are left out)."""
        ids = sorted({int(r) for r in rowids if r >= 0})
        out: dict[int, str] = {}
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            out.update(
                self._db.execute(f"SELECT id, doc_id FROM passages WHERE id IN ({','.join('?' * len(chunk))})", chunk)
            )
        return out

    # ------------------------------------------------------------------------------------------------
    # reading
    # ------------------------------------------------------------------------------------------------
    @staticmethod
    def _row_to_record(row: Sequence[Any]) -> dict[str, Any]:
        rowid, pid, doc_id, position, section, title_path, text, meta, extra, has_vector = row
        return {
            "_rowid": rowid,
            "_has_vector": bool(has_vector),
            "id": pid,
            "doc_id": doc_id,
            "position": position,
            "section": section,
            # most rows have no title path, metadata or extras: skip decoding the empty JSON literals
            "title_path": () if title_path == "[]" else tuple(json.loads(title_path)),
            "content": text,
            "meta": {} if meta == "{}" else json.loads(meta),
            "extra": {} if extra == "{}" else json.loads(extra),
        }

    @staticmethod
    def _record_to_passage(rec: Mapping[str, Any]) -> Passage:
        return Passage(
            id=rec["id"],
            doc_id=rec["doc_id"],
            position=rec["position"],
            text=rec["content"],
            title_path=rec["title_path"],
            section=rec["section"],
            meta=dict(rec["meta"]),
            extra=dict(rec["extra"]),
        )

    def _records(self, where: str = "", params: Sequence[Any] = ()) -> Iterator[dict[str, Any]]:
        cur = self._db.execute(f"SELECT {_PASSAGE_COLUMNS} FROM passages {where} ORDER BY id", tuple(params))
        while rows := cur.fetchmany(2048):
            for row in rows:
                yield self._row_to_record(row)

    def _scan(self) -> list[dict[str, Any]]:
        """Every passage record, in insertion order, for filter evaluation.

        Outside a write, the parsed records of stores up to ``_RECORD_CACHE_MAX`` passages are kept and
        reused until the next commit, so repeated filtered searches do not re-parse every row.
        Callers must not modify the records.
        """
        generation = self._state["generation"]
        cached = getattr(self, "_record_cache", None)
        if self._depth == 0 and cached is not None and cached[0] == generation:
            return cached[1]
        records = list(self._records())
        if self._depth == 0 and len(records) <= _RECORD_CACHE_MAX:
            self._record_cache = (generation, records)
        return records

    @property
    def generation(self) -> int:
        """The committed generation: it changes with every commit (cheap to poll)."""
        return int(self._state["generation"])

    def iter_passages(self, filters: Mapping[str, Any] | Predicate | None = None) -> Iterator[Passage]:
        """Passages matching ``filters``, in insertion order."""
        predicate = compile_filter(filters)
        for rec in self._scan():
            if predicate is None or predicate(rec):
                yield self._record_to_passage(rec)

    def filter_passages(self, filters: Mapping[str, Any] | Predicate | None = None) -> list[Passage]:
        """:meth:`iter_passages` as a list."""
        return list(self.iter_passages(filters))

    def get_passages(self, passage_ids: Sequence[str]) -> list[Passage]:
        """Passages by id, in the order asked (unknown ids are left out)."""
        found: dict[str, Passage] = {}
        ids = list(passage_ids)
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            for rec in self._records(f"WHERE passage_id IN ({','.join('?' * len(chunk))})", chunk):
                found[rec["id"]] = self._record_to_passage(rec)
        return [found[i] for i in ids if i in found]

    def get_document(self, doc_id: str) -> dict[str, Any] | None:
        """A document's title, metadata, table of contents and passage ids (``None`` if unknown)."""
        row = self._db.execute("SELECT doc_id, title, meta, toc FROM documents WHERE doc_id=?", (doc_id,)).fetchone()
        if row is None:
            return None
        pids = [
            r
            for (r,) in self._db.execute(
                "SELECT passage_id FROM passages WHERE doc_id=? ORDER BY position, id", (doc_id,)
            )
        ]
        return {
            "doc_id": row[0],
            "title": row[1],
            "meta": json.loads(row[2]),
            "toc": json.loads(row[3]),
            "passage_ids": pids,
        }

    def get_embeddings(self, passage_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Vectors of passages as written (float64 when float32 could not hold them), ``None`` if absent."""
        ids = list(passage_ids)
        rows: dict[str, tuple[int, int, bytes | None]] = {}
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            for pid, rowid, has, blob in self._db.execute(
                "SELECT passage_id, id, has_vector, exact_embedding FROM passages WHERE passage_id IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            ):
                rows[pid] = (rowid, has, blob)
        need = [rows[p][0] for p in ids if p in rows and rows[p][1] and rows[p][2] is None]
        index = self._indexes.get("dense")
        recon = {}
        if need and index is not None:
            mat = index.reconstruct(np.asarray(need, dtype=np.int64))
            recon = dict(zip(need, mat, strict=True))
        out: list[np.ndarray | None] = []
        for p in ids:
            if p not in rows or not rows[p][1]:
                out.append(None)
            elif (blob := rows[p][2]) is not None:
                out.append(np.frombuffer(blob, dtype="<f8").copy())
            else:
                out.append(recon[rows[p][0]])
        return out

    def count_passages(self, filters: Mapping[str, Any] | Predicate | None = None) -> int:
        """Number of passages (matching ``filters``)."""
        predicate = compile_filter(filters)
        if predicate is None:
            return int(self._db.execute("SELECT count(*) FROM passages").fetchone()[0])
        return sum(1 for r in self._scan() if predicate(r))

    def document_ids(self) -> list[str]:
        """Ids of all stored documents, in insertion order."""
        return [r for (r,) in self._db.execute("SELECT doc_id FROM documents ORDER BY rowid")]

    def count_documents(self) -> int:
        """Number of documents."""
        return int(self._db.execute("SELECT count(*) FROM documents").fetchone()[0])

    def _vector_rowids(self) -> np.ndarray:
        return np.fromiter(
            (r for (r,) in self._db.execute("SELECT id FROM passages WHERE has_vector=1 ORDER BY id")),
            dtype=np.int64,
        )

    def passage_rowids(self) -> np.ndarray:
        """Rowids of every passage, with or without a dense vector, ascending (insertion order)."""
        return np.fromiter((r for (r,) in self._db.execute("SELECT id FROM passages ORDER BY id")), dtype=np.int64)

    def allowed_rowids(self, filters: Mapping[str, Any] | Predicate | None) -> np.ndarray | None:
        """FAISS ids of the passages with vectors that match ``filters`` (``None``: no filter)."""
        predicate = compile_filter(filters)
        if predicate is None:
            return None
        rows = [r["_rowid"] for r in self._scan() if r["_has_vector"] and predicate(r)]
        return np.asarray(rows, dtype=np.int64)

    def records_by_rowid(self, rowids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Passage records (``id``, ``doc_id``, ``content``, ``title_path``, ``meta``, ...) by FAISS id."""
        ids = sorted({int(r) for r in rowids if r >= 0})
        out: dict[int, dict[str, Any]] = {}
        to_record = self._row_to_record
        for i in range(0, len(ids), 900):
            chunk = ids[i : i + 900]
            rows = self._db.execute(
                f"SELECT {_PASSAGE_COLUMNS} FROM passages WHERE id IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
            for row in rows:
                out[row[0]] = to_record(row)
        return out

    def rowids_of(
        self, *, passage_ids: Iterable[str] | None = None, doc_ids: Iterable[str] | None = None
    ) -> np.ndarray:
        """FAISS ids of the passages with vectors among ``passage_ids`` and in documents ``doc_ids``.

        Looked up through the SQLite indexes (no scan); ``None`` leaves that side unrestricted, and both
        ``None`` gives every passage with a vector. Sorted ascending (insertion order).
        """
        sides: list[set[int]] = []
        for column, values in (("passage_id", passage_ids), ("doc_id", doc_ids)):
            if values is None:
                continue
            vals = list(dict.fromkeys(values))
            found: set[int] = set()
            for i in range(0, len(vals), 900):
                chunk = vals[i : i + 900]
                found.update(
                    r
                    for (r,) in self._db.execute(
                        f"SELECT id FROM passages WHERE has_vector=1 AND {column} IN ({','.join('?' * len(chunk))})",
                        chunk,
                    )
                )
            sides.append(found)
        if not sides:
            return self._vector_rowids()
        return np.asarray(sorted(set.intersection(*sides)), dtype=np.int64)

    # ------------------------------------------------------------------------------------------------
    # search (dense); richer strategies live in rag_hier.retrieval
    # ------------------------------------------------------------------------------------------------
    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Encode queries with the store's encoder (checking its dimension against the store)."""
        return self._require_encoder("text search").encode_queries(queries)

    @overload
    def search(  # type: ignore[overload-overlap]  # str is also a Sequence[str]; str wins
        self, query: str, top_k: int = 10, filters: Mapping[str, Any] | Predicate | None = None
    ) -> list[Hit]: ...
    @overload
    def search(
        self, query: Sequence[str], top_k: int = 10, filters: Mapping[str, Any] | Predicate | None = None
    ) -> list[list[Hit]]: ...
    def search(
        self,
        query: str | Sequence[str],
        top_k: int = 10,
        filters: Mapping[str, Any] | Predicate | None = None,
    ) -> list[Hit] | list[list[Hit]]:
        """Dense search: one query gives a ranked ``list[Hit]``, a list of queries a list of those."""
        from rag_hier.retrieval.dense import DenseRetriever

        return DenseRetriever(self).search(query, top_k=top_k, filters=filters)

    def refresh(self) -> HierStore:
        """Reopen this store from disk (e.g. after another process wrote to it)."""
        encoder = self._encoder
        self.close()
        fresh = type(self).open(self.path, encoder=encoder, read_only=self.read_only)
        self.__dict__.update(fresh.__dict__)
        return self
