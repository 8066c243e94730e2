"""MilvusStore: the store contract (:class:`~rag_hier.store.contract.StoreBackend`) on Milvus.

One rag-hier collection named ``C`` is five Milvus collections:

============  ===================================================================================
``C``         passages: ``vid`` (primary key: a row version), ``rowid`` (the passage's stable id,
              never reused), ``gen`` (the generation that wrote the row), ``passage_id``, ``doc_id``,
              ``position``, ``section``, ``title_path``, ``text``, ``meta`` (JSON, filtered in Milvus),
              ``extra`` (JSON), ``content_hash``, ``has_vector``, ``exact`` and ``vector``
              (``FLOAT_VECTOR``, metric IP, index FLAT / IVF_FLAT / HNSW)
``C__docs``   documents: ``vid``, ``gen``, ``doc_id``, ``seq`` (insertion order), ``title``, ``meta``, ``toc``
``C__state``  one row: the committed state (generation, encoder, dimension, index, extensions, counters)
``C__files``  extension files (document index, token index, tree, ...) in base64 chunks, by generation
``C__retired``  row versions a commit replaced or deleted, until they are physically deleted
``C__sparse``  rows of the sparse extensions (SVDR token index T(d), sparse embeddings, SVDR E(d) vectors) as a
              sparse vector field,
              versioned like passages (created when the first one is attached; see :mod:`.fields`)
============  ===================================================================================

Passage rows also carry ``tree_leaf`` and ``ehi_leaves`` (nullable): the leaves the ``tree`` / ``ehi``
extensions assign, so beam search ends in one filtered dense search.

**Commit.** Milvus has no multi-row transaction, so a write is made atomic the way a log-structured store
does it: new row versions are inserted with ``gen = G + 1`` (invisible: every read filters ``gen <= G``),
the versions they replace are listed in ``C__retired`` (also under ``G + 1``), the extensions' changed files
are written under ``G + 1``, and then the one state row is upserted with ``generation = G + 1`` — the
commit point (a single-row upsert is atomic). Afterwards the retired versions and old file chunks are
deleted. A writer that dies (or a server that goes away) before the commit point leaves only rows that no
read sees; the next writer deletes them. One that dies after it leaves retired versions that reads exclude
until the next writer deletes them. Every call uses consistency level ``Strong``, so a write that returned
is visible to every client; Milvus makes an insert durable (in its write-ahead log) before it returns.

One writer at a time per collection: Milvus has no compare-and-swap to arbitrate two writers (the local
store's ``flock`` has no equivalent), so run writes from one process.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
import logging
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import scipy.sparse as sp

from rag_hier._version import __version__
from rag_hier.corpus.model import Document, Passage, split_document
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import DimensionMismatchError, DuplicateIdError, FilterError, StoreCorruptedError, StoreError
from rag_hier.index.dense import IndexConfig
from rag_hier.index.selection import select_top_k
from rag_hier.store.contract import SIMILARITIES, FilterPushdown, Filters, Similarity, StoreExtension
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.filters import Refined, compile_filter
from rag_hier.store.milvus.client import Connection
from rag_hier.store.milvus.fields import (
    LEAF_COLUMNS,
    MAX_ARRAY,
    SPARSE_EXTENSIONS,
    LeafRows,
    SparseRows,
    leaf_values,
    sparse_dicts,
)
from rag_hier.store.milvus.filters import ids_expr, str_list, translate
from rag_hier.store.milvus.schema import (
    DUMMY_DIM,
    GPU_INDEXES,
    IN_CHUNK,
    INSERT_ROWS,
    MAX_LIMIT,
    PASSAGE_FIELDS,
    VARCHAR,
    Collections,
    check_passage_schema,
    create_collections,
    create_sparse_collection,
    index_config,
    milvus_index_params,
    search_params,
    valid_name,
)
from rag_hier.store.models import check_given_encoder
from rag_hier.store.records import POLICIES, PassageRecord, WritePolicy, WriteSummary
from rag_hier.store.schema import dumps, hash_text
from rag_hier.store.search_hook import DenseSearch
from rag_hier.store.writes import _check_id, _check_json, check_ids, check_passage_owners, normalize_embeddings

logger = logging.getLogger(__name__)

__all__ = ["FORMAT", "GPU_INDEXES", "MilvusRowids", "MilvusStore", "milvus_index_params"]

FORMAT = "rag-hier-milvus"
FORMAT_VERSION = 1
_BLOB_CHUNK = 48_000  # bytes per file chunk (64,000 characters of base64, under VARCHAR's 65,535)
HIT_ROWS_MAX = 256
"""A search inside ``reading()`` fetching at most this many rows per query returns the hit fields with them."""


def _step(name: str) -> None:
    """A named point inside a commit; tests replace this to simulate a failure there."""


class _MissingVector(StoreError, RuntimeError):
    """A rowid has no stored vector (``RuntimeError`` too, like FAISS' reconstruct of an unknown id)."""


class MilvusRowids(np.ndarray):
    """Rowids matching a filter, carrying the Milvus expression that selects them (``expr``).

    :meth:`MilvusStore.search_dense` given this very array filters inside Milvus by ``expr`` instead of
    sending the rowids; any array derived from it (a slice, a mask) is a plain rowid set again.
    """

    expr: str | None

    def __new__(cls, rowids: np.ndarray, expr: str | None) -> MilvusRowids:  # noqa: D102
        obj = np.asarray(rowids, dtype=np.int64).view(cls)
        obj.expr = expr
        return obj

    def __array_finalize__(self, obj: Any) -> None:
        self.expr = None


def _fill_top_k(scores: np.ndarray, ids_out: np.ndarray, results: Iterable[tuple[int, Any]], k: int) -> None:
    """Write each ``(row, hits)`` of a Milvus search into ``scores`` / ``ids_out``: top ``k``, ties by rowid."""
    for i, hits in results:
        if not hits:
            continue
        rows = np.fromiter((int(h["entity"]["rowid"]) for h in hits), np.int64, count=len(hits))
        dist = np.fromiter((float(h["distance"]) for h in hits), np.float32, count=len(hits))
        order = select_top_k(dist, rows, k)
        scores[i, : order.size] = dist[order]
        ids_out[i, : order.size] = rows[order]


@dataclass
class _View:
    """What reads see: rows with ``floor < gen <= gen_max``, minus the excluded versions."""

    gen_max: int
    floor: int
    excluded: dict[str, set[int]] = field(default_factory=dict)

    def expr(self, kind: str) -> str:
        out = f"(gen > {self.floor} and gen <= {self.gen_max})"
        ex = self.excluded.get(kind)
        if ex:
            out += f" and not ({ids_expr('vid', sorted(ex))})"
        return out


@dataclass
class _Batch:
    """An open write: the generation it writes, the versions it retires, what changed."""

    gen: int
    retired: dict[str, set[int]] = field(default_factory=lambda: {"p": set(), "d": set(), "s": set()})
    changed_docs: set[str] = field(default_factory=set)
    dirty_ext: set[str] = field(default_factory=set)
    added: set[int] = field(default_factory=set)
    """Rowids of passages inserted with extension hooks (their sparse rows and leaves are written at the commit)."""
    removed: set[int] = field(default_factory=set)
    """Rowids of passages retired (their sparse rows are retired at the commit)."""
    rebuilt: set[str] = field(default_factory=set)
    """Extensions that hold their whole state in memory (attached, imported, changed outside the hooks)."""
    floor: int | None = None
    saved_state: dict[str, Any] = field(default_factory=dict)
    depth: int = 0


class MilvusStore(DenseSearch):
    """A rag-hier collection in Milvus (Milvus Lite file or server) implementing the store contract.

    Create one with :meth:`create`, reopen it with :meth:`open` (or :meth:`HierStore.create(uri=...)
    <rag_hier.store.HierStore.create>` / ``HierStore.open(uri=...)``). Reads and writes behave as the local
    store's (see :class:`~rag_hier.store.HierStore`); the module docstring says how a commit is made atomic.
    """

    read_only: bool
    filter_pushdown: ClassVar[FilterPushdown] = FilterPushdown(numbers=False, max_members=1_000)
    """Filters become Milvus expressions: equality and lists up to 1,000 members; numbers are checked in Python."""
    can_forget_dimension: ClassVar[bool] = False
    """A collection's dimension is fixed at creation."""
    remote_vectors = True
    """Vectors live in Milvus: strategies restrict a search (``search_dense(allowed=...)``) rather than gather
    vectors into the client (see :func:`rag_hier.store.contract.remote_vectors`)."""

    def __init__(
        self,
        conn: Connection,
        name: str,
        *,
        encoder: DenseEncoder | None = None,
        read_only: bool = False,
        device: str | None = None,
    ) -> None:
        self._conn = conn
        self.name = valid_name(name)
        self._collections = Collections.named(self.name)
        self.read_only = read_only
        self._encoder_arg = encoder
        self._device = device
        self._encoders: dict[str | None, DenseEncoder] = {}
        self._encoder_checked = False
        self._lock = threading.RLock()
        self._state: dict[str, Any] = {}
        self._extensions: dict[str, StoreExtension] = {}
        self._loaded_files: dict[str, Any] = {}
        self._excluded: dict[str, set[int]] = {}
        self._batch: _Batch | None = None
        self._settled_gen = -1
        self._syncing = False
        self._pinned = 0
        self._hit_rows: tuple[int, dict[int, dict[str, Any]]] = (-1, {})  # (generation, rows) a search returned
        self._closed = False
        self._has_sparse = False
        self._lite: bool | None = None
        self._leaf_columns: tuple[str, ...] = ()
        self._df_cache: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, int]] = {}
        self._rowid_cache: dict[tuple[str, int], np.ndarray] = {}

    # ------------------------------------------------------------------------------------------------
    # names and low-level calls
    # ------------------------------------------------------------------------------------------------
    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise StoreError(f"the store {self.location} is closed")
        fn = getattr(self._conn.client, method)
        if method in ("search", "query", "insert", "upsert", "delete", "get"):
            kwargs.setdefault("timeout", self._conn.timeout)
        return self._conn.call(what, fn, *args, **kwargs)

    def _query(self, collection: str, expr: str, fields: list[str], *, what: str = "a query") -> list[dict[str, Any]]:
        """Every row matching ``expr``: one query, paged by the query iterator only past Milvus' 16,384-row limit."""
        if self._closed:
            raise StoreError(f"the store {self.location} is closed")
        first = self._call(
            what, "query", collection, filter=expr, output_fields=fields, limit=MAX_LIMIT, consistency_level="Strong"
        )
        if len(first) < MAX_LIMIT:  # all of them: one round trip (an iterator costs three at least)
            return [dict(r) for r in first]
        out: list[dict[str, Any]] = []
        it = self._call(
            what, "query_iterator", collection, batch_size=MAX_LIMIT // 4, filter=expr, output_fields=fields
        )
        try:
            while True:
                part = self._conn.call(what, it.next)
                if not part:
                    break
                out.extend(dict(r) for r in part)
        finally:
            with contextlib.suppress(Exception):
                it.close()
        return out

    def _query_in(
        self, collection: str, field_name: str, ids: Sequence[Any], expr: str, fields: list[str]
    ) -> list[dict[str, Any]]:
        """Rows whose ``field_name`` is among ``ids`` (chunked) and matching ``expr``."""
        out: list[dict[str, Any]] = []
        ids = list(ids)
        for i in range(0, len(ids), IN_CHUNK):
            part = ids[i : i + IN_CHUNK]
            cond = (
                str_list(part) if part and isinstance(part[0], str) else "[" + ",".join(str(int(x)) for x in part) + "]"
            )
            where = f"{field_name} in {cond} and {expr}"
            rows = self._call(
                "a query",
                "query",
                collection,
                filter=where,
                output_fields=fields,
                limit=MAX_LIMIT,
                consistency_level="Strong",
            )
            out.extend(rows if len(rows) < MAX_LIMIT else self._query(collection, where, fields))
        return out

    def _count(self, collection: str, expr: str) -> int:
        rows = self._call(
            "counting", "query", collection, filter=expr, output_fields=["count(*)"], consistency_level="Strong"
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def _insert(self, collection: str, rows: list[dict[str, Any]]) -> None:
        for i in range(0, len(rows), INSERT_ROWS):
            self._call("an insert", "insert", collection, rows[i : i + INSERT_ROWS])

    def _delete(self, collection: str, expr: str) -> None:
        self._call("a delete", "delete", collection, filter=expr)

    # ------------------------------------------------------------------------------------------------
    # creation and opening
    # ------------------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        uri: str,
        *,
        collection: str | None = None,
        model: str | None = DEFAULT_MODEL,
        encoder: DenseEncoder | None = None,
        dimension: int | None = None,
        index: IndexConfig | str | Mapping[str, Any] = "flat",
        corpus: Mapping[str, Any] | None = None,
        similarity: Similarity | None = None,
        exist_ok: bool = False,
        token: str = "",
        db_name: str = "",
        timeout: float | None = 30.0,
        client_options: Mapping[str, Any] | None = None,
    ) -> MilvusStore:
        """Create an empty collection in Milvus.

        Args:
            uri: A Milvus Lite file (``./x.db``; ``./x.db#name`` names the collection) or a server URI
                (``http://host:19530``).
            collection: The collection name (default: the URI's ``#fragment``, else ``"rag_hier"``).
            model, encoder, dimension, index, corpus, similarity, exist_ok: As :meth:`HierStore.create`; a
                Milvus collection's dimension is fixed at creation, so it must be known (a model, or
                ``dimension=``).
            token: ``"user:password"`` or an API key (servers).
            db_name: The Milvus database (servers).
            timeout: Seconds per Milvus call.
            client_options: Passed to ``pymilvus.MilvusClient`` (TLS options and the like).

        """
        from rag_hier.store.milvus.client import split_uri

        uri, name = split_uri(uri, collection)
        if similarity is not None and similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {', '.join(SIMILARITIES)}; got {similarity!r}")
        if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1):
            raise ValueError(f"dimension must be a positive integer, got {dimension!r}")
        config = index_config(index)
        if encoder is None and model is not None:
            encoder = DenseEncoder(model)
        encoder_cfg = None
        if encoder is not None:
            encoder_cfg = encoder.config()
            if dimension is not None and dimension != encoder_cfg["dimension"]:
                raise DimensionMismatchError(
                    f"dimension={dimension} but model {encoder.model_name!r} outputs {encoder_cfg['dimension']}"
                )
            dimension = int(encoder_cfg["dimension"])
            if similarity is None:
                similarity = "cosine" if encoder_cfg["normalize_embeddings"] else "dot_product"
        if dimension is None:
            raise StoreError(
                f"a Milvus collection needs its vector dimension at creation: pass dimension= or a model ({uri})"
            )
        conn = Connection(uri, token=token, db_name=db_name, timeout=timeout, client_options=dict(client_options or {}))
        store = cls(conn, name, encoder=encoder)
        try:
            if store._call("listing collections", "has_collection", store._collections.state):
                if exist_ok:
                    store.close()
                    store = cls.open(
                        uri,
                        collection=name,
                        encoder=encoder,
                        token=token,
                        db_name=db_name,
                        timeout=timeout,
                        client_options=client_options,
                    )
                    store._check_dimension(dimension)
                    return store
                raise StoreError(f"{store.location} already holds a rag-hier collection; open it with open()")
            if store._call("listing collections", "has_collection", store._collections.passages):
                raise StoreError(
                    f"{store.location}: a Milvus collection {name!r} exists and is not a rag-hier collection; "
                    "choose another name"
                )
            state = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "created_with": f"rag-hier {__version__}",
                "generation": 0,
                "floor": 0,
                "encoder": encoder_cfg,
                "dimension": dimension,
                "similarity": similarity or "dot_product",
                "indexes": {"dense": {"config": config.to_dict(), "milvus": milvus_index_params(config)}},
                "corpus": dict(corpus or {}),
                "counts": {"documents": 0, "passages": 0, "vectors": 0},
                "extensions": {},
                "next_rowid": 1,
                "next_vid": 1,
                "next_seq": 1,
            }
            create_collections(store._call, conn.client, store._collections, dimension, config)
            store._leaf_columns = tuple(LEAF_COLUMNS.values())
            store._put_state(state)
            store._state = state
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open(
        cls,
        uri: str,
        *,
        collection: str | None = None,
        encoder: DenseEncoder | None = None,
        device: str | None = None,
        read_only: bool = False,
        token: str = "",
        db_name: str = "",
        timeout: float | None = 30.0,
        client_options: Mapping[str, Any] | None = None,
        allow_other_model: bool = False,
    ) -> MilvusStore:
        """Open an existing collection (its schema and state are checked; a read-write handle recovers).

        ``encoder`` must load the model the collection was built with unless ``allow_other_model`` is true
        (see :meth:`HierStore.open <rag_hier.store.store.HierStore.open>`).
        """
        from rag_hier.store.milvus.client import split_uri

        uri, name = split_uri(uri, collection)
        conn = Connection(uri, token=token, db_name=db_name, timeout=timeout, client_options=dict(client_options or {}))
        store = cls(conn, name, encoder=encoder, read_only=read_only, device=device)
        try:
            if not store._call("listing collections", "has_collection", store._collections.state):
                if store._call("listing collections", "has_collection", store._collections.passages):
                    raise StoreError(
                        f"{store.location}: the Milvus collection {name!r} was not created by rag-hier "
                        "(no state collection); choose another name"
                    )
                raise StoreError(f"{store.location}: no rag-hier collection {name!r} there")
            for coll in store._collections.always:
                store._call("loading the collection", "load_collection", coll)
            store._sparse_collection_present()
            store._load_state()
            store._check_schema()
            check_given_encoder(
                encoder, store._state.get("encoder"), location=store.location, allow_other_model=allow_other_model
            )
            if not read_only:
                with store._lock:
                    store._recover()
            store._sync(force=True)
        except BaseException:
            store.close()
            raise
        return store

    def reopen(self, *, read_only: bool = False) -> MilvusStore:
        """Another handle on this collection, with the same connection options and encoder."""
        return type(self).open(
            self._conn.uri,
            collection=self.name,
            encoder=self.encoder,
            device=self._device,
            read_only=read_only,
            allow_other_model=True,  # this handle's encoder, checked when it was opened
            **self._conn.options,
        )

    @classmethod
    def exists(
        cls,
        uri: str,
        *,
        collection: str | None = None,
        token: str = "",
        db_name: str = "",
        timeout: float | None = 30.0,
        client_options: Mapping[str, Any] | None = None,
    ) -> bool:
        """Whether ``uri`` (``URI#collection``) holds a rag-hier collection (a missing Milvus Lite file: no)."""
        from rag_hier.store.milvus.client import split_uri

        uri, name = split_uri(uri, collection)
        local = not uri.startswith(("http://", "https://", "tcp://", "grpc://", "unix:"))
        if local and not Path(uri).exists():  # a Milvus Lite file that is not there yet
            return False
        conn = Connection(uri, token=token, db_name=db_name, timeout=timeout, client_options=dict(client_options or {}))
        try:
            return bool(conn.call("listing collections", conn.client.has_collection, f"{valid_name(name)}__state"))
        finally:
            conn.close()

    @classmethod
    def open_or_create(cls, uri: str, **kwargs: Any) -> MilvusStore:
        """:meth:`open` the collection if it exists, else :meth:`create` it."""
        return cls.create(uri, exist_ok=True, **kwargs)

    def _sparse_collection_present(self) -> bool:
        """Whether ``C__sparse`` exists (loaded when it does; another process may have created it since)."""
        if not self._has_sparse and self._call("listing collections", "has_collection", self._collections.sparse):
            self._call("loading the collection", "load_collection", self._collections.sparse)
            self._has_sparse = True
        return self._has_sparse

    def _create_sparse_collection(self) -> None:
        """``C__sparse``: the sparse extensions' rows (created when the first one is attached)."""
        if self._sparse_collection_present():
            return
        create_sparse_collection(self._call, self._conn.client, self._collections)
        self._has_sparse = True

    def _check_schema(self) -> None:
        """The passage collection must have our fields and the recorded dimension (notes its leaf fields)."""
        self._leaf_columns = check_passage_schema(
            self._call,
            self._collections,
            location=self.location,
            dimension=self._state.get("dimension"),
            leaf_columns=LEAF_COLUMNS.values(),
        )

    def _check_dimension(self, dimension: int) -> None:
        if self._state.get("dimension") != dimension:
            raise DimensionMismatchError(
                f"{self.location} holds {self._state.get('dimension')}-d vectors, not {dimension}-d"
            )

    # ------------------------------------------------------------------------------------------------
    # state, view, extensions
    # ------------------------------------------------------------------------------------------------
    def _put_state(self, state: Mapping[str, Any]) -> None:
        value = dumps(dict(state))
        if len(value.encode("utf-8")) > VARCHAR:
            raise StoreError(f"{self.location}: the collection state outgrew one Milvus row ({len(value)} bytes)")
        self._call(
            "writing the collection state",
            "upsert",
            self._collections.state,
            [{"key": "state", "value": value, "dummy": [0.0] * DUMMY_DIM}],
        )

    def _get_state(self) -> dict[str, Any]:
        rows = self._call(
            "reading the collection state",
            "query",
            self._collections.state,
            filter='key == "state"',
            output_fields=["value"],
            consistency_level="Strong",
        )
        if not rows:
            raise StoreCorruptedError(f"{self.location}: the state row is missing")
        try:
            state = json.loads(rows[0]["value"])
        except ValueError as exc:
            raise StoreCorruptedError(f"{self.location}: the state row is not JSON ({exc})") from exc
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise StoreCorruptedError(f"{self.location}: the state row is not a rag-hier Milvus state")
        if state.get("format_version") != FORMAT_VERSION:
            raise StoreError(
                f"{self.location}: format version {state.get('format_version')}; this rag-hier reads {FORMAT_VERSION}"
            )
        return state

    def _load_state(self) -> None:
        self._state = self._get_state()

    def _retired_rows(self, expr: str) -> list[dict[str, Any]]:
        return self._query(
            self._collections.retired, expr, ["key", "kind", "target", "gen"], what="reading retired versions"
        )

    def _sync(self, *, force: bool = False) -> None:
        """Bring the handle to the committed generation (reload extensions whose files changed)."""
        if self._batch is not None or self._syncing or self._pinned:
            return
        state = self._get_state()
        gen = int(state["generation"])
        if not force and self._loaded_files.get("__gen__") == gen:
            return
        self._state = state
        excluded: dict[str, set[int]] = {"p": set(), "d": set(), "s": set()}
        for r in self._retired_rows(f"gen <= {gen}"):
            excluded.setdefault(r["kind"], set()).add(int(r["target"]))
        self._excluded = excluded
        self._syncing = True  # extensions read the store while loading: from this state
        try:
            self._load_extensions()
        finally:
            self._syncing = False

    def _load_extensions(self) -> None:
        state = self._state
        loaded: dict[str, Any] = {"__gen__": state.get("generation")}
        extensions: dict[str, StoreExtension] = {}
        for name, info in state.get("extensions", {}).items():
            key = dumps([info.get("config"), info.get("files"), info.get("fields")])
            old = self._extensions.get(name)
            if old is not None and self._loaded_files.get(name) == key:
                extensions[name] = old
                loaded[name] = key
                continue
            extensions[name] = self._load_extension(name, info)
            loaded[name] = key
        self._extensions = extensions
        self._loaded_files = loaded

    def _load_extension(self, name: str, info: Mapping[str, Any]) -> StoreExtension:
        cls = extension_class(name, self.location)
        files = dict(info.get("files", {}))
        bad = [f for f in files if f not in cls.FILES]
        if bad:
            raise StoreCorruptedError(f"{self.location}: extension {name!r} cannot own {bad[0]!r}")
        try:
            ext = cls.from_config(info.get("config", {}))
        except (TypeError, ValueError) as exc:
            raise StoreCorruptedError(f"{self.location}: extension {name!r} has a bad configuration ({exc})") from exc
        if "sparse" in (info.get("fields") or {}):
            if name not in SPARSE_EXTENSIONS or files:
                raise StoreCorruptedError(f"{self.location}: extension {name!r} cannot be a sparse field")
            return ext  # its rows stay in Milvus (C__sparse); the client holds only a write batch's new rows
        with tempfile.TemporaryDirectory(prefix="rag-hier-milvus-") as tmp:
            paths = {}
            for fname, finfo in files.items():
                path = Path(tmp) / fname
                path.write_bytes(self._read_file(fname, finfo))
                paths[fname] = path
            ext.load(self, paths)
        ext.verify(self)
        return ext

    def _read_file(self, fname: str, info: Mapping[str, Any]) -> bytes:
        gen, chunks = int(info["gen"]), int(info["chunks"])
        rows = self._query(
            self._collections.files,
            f'file == "{fname}" and gen == {gen}',
            ["chunk", "data"],
            what=f"reading the file {fname}",
        )
        by_chunk = {int(r["chunk"]): r["data"] for r in rows}
        if sorted(by_chunk) != list(range(chunks)):
            raise StoreCorruptedError(
                f"{self.location}: file {fname} of generation {gen} has chunks {sorted(by_chunk)}, expected {chunks}"
            )
        data = b"".join(base64.b64decode(by_chunk[i]) for i in range(chunks))
        if hashlib.sha256(data).hexdigest() != info.get("sha256"):
            raise StoreCorruptedError(f"{self.location}: file {fname} of generation {gen} fails its checksum")
        return data

    def _write_file(self, fname: str, data: bytes, gen: int) -> dict[str, Any]:
        chunks = [data[i : i + _BLOB_CHUNK] for i in range(0, len(data), _BLOB_CHUNK)] or [b""]
        rows = [
            {
                "key": f"{fname}:{gen}:{i}",
                "file": fname,
                "gen": gen,
                "chunk": i,
                "data": base64.b64encode(c).decode("ascii"),
                "dummy": [0.0] * DUMMY_DIM,
            }
            for i, c in enumerate(chunks)
        ]
        self._delete(self._collections.files, f'file == "{fname}" and gen == {gen}')
        for i in range(0, len(rows), 16):
            self._call(f"writing the file {fname}", "insert", self._collections.files, rows[i : i + 16])
        return {"gen": gen, "chunks": len(chunks), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def _view(self) -> _View:
        if self._batch is not None:
            b = self._batch
            excluded = {k: set(self._excluded.get(k, set())) | b.retired.get(k, set()) for k in ("p", "d", "s")}
            floor = b.floor if b.floor is not None else int(self._state.get("floor", 0))
            return _View(b.gen, floor, excluded)
        return _View(int(self._state["generation"]), int(self._state.get("floor", 0)), self._excluded)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[_View]:
        with self._lock:
            self._sync()
            yield self._view()

    @contextlib.contextmanager
    def reading(self) -> Iterator[MilvusStore]:
        """Run several reads against one committed generation: ``with store.reading(): ...``.

        Every read inside the block answers from the generation current when it starts (the handle does not
        look for a newer commit until the block ends, which also saves a round trip per read); other threads
        of this process wait on this handle until it ends. Writers in other processes are not held up (Milvus
        has no lock to hold them): their new row versions are invisible to this generation, but a writer
        deletes the versions its commit replaced right after committing, so a block that outlives another
        process' commit may miss those rows. Keep the block short.
        """
        with self._lock:
            self._sync()
            self._pinned += 1
            try:
                yield self
            finally:
                self._pinned -= 1
                if not self._pinned:
                    self._hit_rows = (-1, {})

    # ------------------------------------------------------------------------------------------------
    # identity
    # ------------------------------------------------------------------------------------------------
    @property
    def location(self) -> str:
        """``URI#collection``."""
        return f"{self._conn.uri}#{self.name}"

    @property
    def uri(self) -> str:
        """The Milvus URI."""
        return self._conn.uri

    @property
    def path(self) -> None:
        """A Milvus collection has no local directory: ``None``."""
        return None

    @property
    def connection_options(self) -> dict[str, Any]:
        """The connection's options (token, database, timeout, client options) that reopen this collection."""
        return copy.deepcopy(self._conn.options)

    @property
    def generation(self) -> int:
        """The committed generation."""
        with self._reading():
            return int(self._state["generation"])

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the committed state."""
        with self._reading():
            return copy.deepcopy(self._state)

    @property
    def dimension(self) -> int | None:
        """The vector dimension (fixed at creation)."""
        dim = self._state.get("dimension")
        return int(dim) if dim is not None else None

    @property
    def similarity(self) -> Similarity:
        """``"cosine"`` (unit vectors) or ``"dot_product"``."""
        s = self._state.get("similarity")
        return s if s in SIMILARITIES else "dot_product"

    @property
    def index_config(self) -> IndexConfig:
        """The passage index configuration."""
        return IndexConfig.from_dict(dict(self._state["indexes"]["dense"]["config"]))

    @property
    def encoder(self) -> DenseEncoder | None:
        """The collection's dense encoder (``None`` for collections fed with external vectors)."""
        if self._encoder_arg is not None:
            return self._encoder_arg
        enc = self._state.get("encoder")
        if not enc:
            return None
        cached = self._encoders.get(self._device)
        if cached is None or cached.model_name != enc["model"]:
            cached = self._encoders[self._device] = DenseEncoder(
                enc["model"],
                device=self._device,
                normalize_embeddings=enc.get("normalize_embeddings"),
                query_prompt=enc.get("query_prompt"),
                document_prompt=enc.get("document_prompt"),
                max_seq_length=enc.get("max_seq_length"),
                weights_sha256=enc.get("weights_sha256"),
            )
            cached.weights_owner = f"the collection {self.location}"
        return cached

    @property
    def corpus_info(self) -> dict[str, Any]:
        """Facts recorded about the corpus."""
        with self._reading():
            return dict(self._state.get("corpus", {}))

    def update_corpus_info(self, **changes: Any) -> None:
        """Record facts about the corpus in the committed state."""
        with self.batch():
            self._state["corpus"] = {**self._state.get("corpus", {}), **changes}

    def info(self) -> dict[str, Any]:
        """A summary for ``rag-hier info``."""
        with self._reading():
            out = copy.deepcopy(self._state)
            out["path"] = self.location
            out["backend"] = "milvus"
            out["counts"] = {
                "documents": self.count_documents(),
                "passages": self.count_passages(),
                "vectors": self.count_vectors(),
            }
            out["extensions_state"] = {n: e.describe() for n, e in self._extensions.items() if not self._is_sparse(n)}
            for n in self._extensions:
                if self._is_sparse(n):
                    tag = self._field(n, "sparse")
                    where = f"tag == {str_list([tag])[1:-1]} and {self._view().expr('s')}"
                    held = self._count(self._collections.sparse, where) if self._sparse_collection_present() else 0
                    out["extensions_state"][n] = {
                        "milvus": {"collection": self._collections.sparse, "tag": tag, "rows": held}
                    }
            return out

    def _is_sparse(self, name: str) -> bool:
        return "sparse" in (self._state.get("extensions", {}).get(name, {}).get("fields") or {})

    def encode_queries(self, queries: Sequence[str]) -> np.ndarray:
        """Query vectors from the collection's encoder."""
        return self._require_encoder("text search").encode_queries(queries)

    def _require_encoder(self, what: str) -> DenseEncoder:
        encoder = self.encoder
        if encoder is None:
            raise StoreError(
                f"{what} needs an encoder, and the collection {self.location} has none: pass vectors, or open it "
                "with encoder=DenseEncoder(model)"
            )
        if not self._encoder_checked:
            if self.dimension is not None and encoder.dimension != self.dimension:
                raise DimensionMismatchError(
                    f"model {encoder.model_name!r} outputs {encoder.dimension}-d vectors; {self.location} holds "
                    f"{self.dimension}-d vectors"
                )
            self._encoder_checked = True
        return encoder

    def close(self) -> None:
        """Release this handle."""
        if not self._closed:
            self._closed = True
            self._conn.close()

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.count_passages()

    def __repr__(self) -> str:
        return f"MilvusStore({self.location!r})"

    def refresh(self) -> MilvusStore:
        """Bring this handle up to date (reads do this by themselves)."""
        with self._reading():
            pass
        return self

    # ------------------------------------------------------------------------------------------------
    # reading
    # ------------------------------------------------------------------------------------------------
    @staticmethod
    def _record(row: Mapping[str, Any]) -> PassageRecord:
        tp = row["title_path"]
        return PassageRecord(
            int(row["rowid"]),
            row["passage_id"],
            row["doc_id"],
            int(row["position"]),
            int(row["section"]),
            () if tp == "[]" else tuple(json.loads(tp)),
            row["text"],
            row["meta"] or {},
            row["extra"] or {},
            bool(row["has_vector"]),
        )

    def _passage_rows(self, expr: str, view: _View, fields: list[str] | None = None) -> list[dict[str, Any]]:
        return self._query(self._collections.passages, f"({expr}) and {view.expr('p')}", fields or PASSAGE_FIELDS)

    def records(self, rowids: Iterable[int]) -> dict[int, PassageRecord]:
        """Stored passages by rowid (unknown rowids left out)."""
        ids = sorted({int(r) for r in rowids if r >= 0})
        with self._reading() as view:
            gen, cached = self._hit_rows
            if self._pinned and self._batch is None and gen == view.gen_max and all(i in cached for i in ids):
                return {i: self._record(cached[i]) for i in ids}  # fetched by the search of this reading() block
            rows = self._query_in(self._collections.passages, "rowid", ids, view.expr("p"), PASSAGE_FIELDS)
        return {int(r["rowid"]): self._record(r) for r in rows}

    def iter_records(self) -> Iterator[PassageRecord]:
        """Every record in insertion order."""
        with self._reading() as view:
            rows = self._passage_rows("true", view)
        return iter(sorted((self._record(r) for r in rows), key=lambda r: r.rowid))

    def _coarse_expr(self, filters: Refined) -> str | None:
        """The Milvus expression of a :class:`Refined` filter's coarse part (``None``: run the predicate on all)."""
        try:
            return translate(filters.coarse)
        except FilterError:  # a field name Milvus cannot address: the coarse part is only an optimization
            return None

    def _filtered_records(self, filters: Filters, view: _View) -> list[PassageRecord]:
        if isinstance(filters, Refined):
            coarse = self._coarse_expr(filters)
            if coarse is not None:  # the predicate runs on the rows the coarse expression selects in Milvus
                recs = sorted(map(self._record, self._passage_rows(coarse, view)), key=lambda r: r.rowid)
                return recs if filters.equivalent else [r for r in recs if filters.exact(r)]
        expr = translate(filters)
        if expr is not None:
            rows = self._passage_rows(expr, view)
            return sorted((self._record(r) for r in rows), key=lambda r: r.rowid)
        predicate = compile_filter(filters)  # evaluated client-side (see filters.translate)
        rows = self._passage_rows("true", view)
        recs = sorted((self._record(r) for r in rows), key=lambda r: r.rowid)
        return [r for r in recs if predicate is None or predicate(r)]

    def filter_passages(self, filters: Filters = None) -> list[Passage]:
        """Passages matching ``filters``, in insertion order."""
        with self._reading() as view:
            return [r.to_passage() for r in self._filtered_records(filters, view)]

    def iter_passages(self, filters: Filters = None) -> Iterator[Passage]:
        """Passages matching ``filters``, in insertion order."""
        return iter(self.filter_passages(filters))

    def get_passages(self, passage_ids: Sequence[str]) -> list[Passage]:
        """Passages by id, in the order asked."""
        ids = check_ids(passage_ids, "passage_ids")
        with self._reading() as view:
            rows = self._query_in(self._collections.passages, "passage_id", ids, view.expr("p"), PASSAGE_FIELDS)
        found = {r["passage_id"]: self._record(r).to_passage() for r in rows}
        return [found[i] for i in ids if i in found]

    def get_document(self, doc_id: str) -> dict[str, Any] | None:
        """A document's title, metadata, table of contents and passage ids."""
        with self._reading() as view:
            docs = self._query_in(
                self._collections.documents, "doc_id", [doc_id], view.expr("d"), ["doc_id", "title", "meta", "toc"]
            )
            if not docs:
                return None
            rows = self._query_in(
                self._collections.passages, "doc_id", [doc_id], view.expr("p"), ["passage_id", "position", "rowid"]
            )
        d = docs[0]
        rows.sort(key=lambda r: (int(r["position"]), int(r["rowid"])))
        return {
            "doc_id": d["doc_id"],
            "title": d["title"],
            "meta": json.loads(d["meta"]),
            "toc": json.loads(d["toc"]),
            "passage_ids": [r["passage_id"] for r in rows],
        }

    def get_embeddings(self, passage_ids: Sequence[str]) -> list[np.ndarray | None]:
        """Vectors as written (float64 when float32 could not hold them), ``None`` when absent."""
        ids = list(passage_ids)
        with self._reading() as view:
            rows = self._query_in(
                self._collections.passages,
                "passage_id",
                list(dict.fromkeys(ids)),
                view.expr("p"),
                ["passage_id", "has_vector", "exact", "vector"],
            )
        by_id = {r["passage_id"]: r for r in rows}
        out: list[np.ndarray | None] = []
        for p in ids:
            r = by_id.get(p)
            if r is None or not r["has_vector"]:
                out.append(None)
            elif r["exact"]:
                out.append(np.frombuffer(base64.b64decode(r["exact"]), dtype="<f8").copy())
            else:
                out.append(np.asarray(r["vector"], dtype=np.float32))
        return out

    def count_passages(self, filters: Filters = None) -> int:
        """Number of passages (matching ``filters``)."""
        with self._reading() as view:
            if filters is None:
                return self._committed_count("passages", self._collections.passages, view.expr("p"))
            expr = translate(filters)
            if isinstance(filters, Refined) and filters.equivalent:
                expr = self._coarse_expr(filters)
            if expr is None:
                return len(self._filtered_records(filters, view))
            return self._count(self._collections.passages, f"({expr}) and {view.expr('p')}")

    def count_vectors(self) -> int:
        """Number of passages with a dense vector."""
        with self._reading() as view:
            return self._committed_count(
                "vectors", self._collections.passages, f"has_vector == true and {view.expr('p')}"
            )

    def count_documents(self) -> int:
        """Number of documents."""
        with self._reading() as view:
            return self._committed_count("documents", self._collections.documents, view.expr("d"))

    def _committed_count(self, key: str, collection: str, expr: str) -> int:
        """The count the last commit recorded in the state row (no round trip); counted in Milvus inside a batch."""
        counts = self._state.get("counts") if self._batch is None else None
        if isinstance(counts, Mapping) and isinstance(counts.get(key), int):
            return int(counts[key])
        return self._count(collection, expr)

    def document_ids(self) -> list[str]:
        """Document ids in insertion order."""
        with self._reading() as view:
            rows = self._query(self._collections.documents, view.expr("d"), ["doc_id", "seq"])
        return [r["doc_id"] for r in sorted(rows, key=lambda r: int(r["seq"]))]

    def passage_rowids(self) -> np.ndarray:
        """Rowids of every passage, ascending."""
        with self._reading() as view:
            rows = self._passage_rows("true", view, ["rowid"])
        return np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows)))

    def rowids_of(
        self, *, passage_ids: Iterable[str] | None = None, doc_ids: Iterable[str] | None = None
    ) -> np.ndarray:
        """Rowids of the passages with dense vectors among these ids / documents (ascending)."""
        with self._reading() as view:
            base = f"has_vector == true and {view.expr('p')}"
            sides: list[set[int]] = []
            for column, values in (("passage_id", passage_ids), ("doc_id", doc_ids)):
                if values is not None:
                    rows = self._query_in(
                        self._collections.passages, column, list(dict.fromkeys(values)), base, ["rowid"]
                    )
                    sides.append({int(r["rowid"]) for r in rows})
            if not sides:
                rows = self._passage_rows("has_vector == true", view, ["rowid"])
                sides.append({int(r["rowid"]) for r in rows})
        return np.asarray(sorted(set.intersection(*sides)), dtype=np.int64)

    def doc_ids_for_rowids(self, rowids: Iterable[int]) -> dict[int, str]:
        """Document id of each rowid."""
        ids = sorted({int(r) for r in rowids if r >= 0})
        with self._reading() as view:
            rows = self._query_in(self._collections.passages, "rowid", ids, view.expr("p"), ["rowid", "doc_id"])
        return {int(r["rowid"]): r["doc_id"] for r in rows}

    def matching_rowids(self, filters: Filters, *, with_vector: bool = True) -> np.ndarray | None:
        """Rowids matching ``filters`` (a :class:`MilvusRowids` carrying the Milvus expression); ``None``: no filter."""
        if compile_filter(filters) is None:
            return None
        with self._reading() as view:
            if isinstance(filters, Refined) and (coarse := self._coarse_expr(filters)) is not None:
                cond = f"({coarse}) and has_vector == true" if with_vector else coarse
                if filters.equivalent:
                    rows = self._passage_rows(cond, view, ["rowid"])
                    return MilvusRowids(np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64)), cond)
                recs = [self._record(r) for r in self._passage_rows(cond, view)]
                kept = np.sort(np.fromiter((r.rowid for r in recs if filters.exact(r)), np.int64))
                # every row the expression selects passes the predicate: search can filter by the expression
                return MilvusRowids(kept, cond) if kept.size == len(recs) else kept
            expr = translate(filters)
            if expr is not None:
                cond = f"({expr}) and has_vector == true" if with_vector else expr
                rows = self._passage_rows(cond, view, ["rowid"])
                ids = np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows)))
                return MilvusRowids(ids, cond)
            recs = self._filtered_records(filters, view)
        return np.asarray([r.rowid for r in recs if r.has_vector or not with_vector], dtype=np.int64)

    # ------------------------------------------------------------------------------------------------
    # dense vectors and search
    # ------------------------------------------------------------------------------------------------
    @staticmethod
    def _allowed_expr(allowed: np.ndarray | None) -> str | None:
        """The passage condition of ``allowed`` (``None``: nothing allowed)."""
        if allowed is None:
            return "has_vector == true"
        if isinstance(allowed, MilvusRowids) and allowed.expr is not None:
            return allowed.expr
        ids = np.unique(np.asarray(allowed, dtype=np.int64))
        if ids.size == 0:
            return None
        return f"has_vector == true and {ids_expr('rowid', ids.tolist())}"

    def search_dense(
        self, queries: np.ndarray, top_k: int, allowed: np.ndarray | None = None, *, where: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products over the passage vectors, searched inside Milvus: ``(scores, rowids)``, ``-1``-padded.

        ``allowed`` from :meth:`matching_rowids` is applied as its Milvus expression; any other rowid set as
        ``rowid in [...]``; ``where`` (a Milvus expression on the passage fields, internal) narrows further.
        ``top_k`` is capped at Milvus' limit of 16,384.
        """
        q = np.ascontiguousarray(np.asarray(queries, dtype=np.float32))
        if q.ndim == 1:
            q = q[None, :]
        n = q.shape[0]
        with self._reading() as view:
            live = self._committed_count(
                "vectors", self._collections.passages, f"has_vector == true and {view.expr('p')}"
            )
            k = min(int(top_k), live, MAX_LIMIT)
            if k <= 0 or n == 0:
                return np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64)
            cond = self._allowed_expr(allowed)
            if cond is None:
                return np.full((n, k), -np.inf, np.float32), np.full((n, k), -1, np.int64)
            if where is not None:
                cond = f"({cond}) and ({where})"
            fetch = min(k + min(k, 16), MAX_LIMIT)  # a few more, so ties at the cut are broken by rowid
            # Inside reading() (a retriever's search), a short result brings the hit fields along: the hits are
            # then built without a second round trip (records() answers from them until the block ends).
            with_rows = bool(self._pinned) and self._batch is None and fetch <= HIT_ROWS_MAX
            res = self._call(
                "a vector search",
                "search",
                self._collections.passages,
                data=q.tolist(),
                anns_field="vector",
                limit=fetch,
                filter=f"({cond}) and {view.expr('p')}",
                output_fields=PASSAGE_FIELDS if with_rows else ["rowid"],
                search_params=search_params(self.index_config, fetch),
                consistency_level="Strong",
            )
            if with_rows:
                self._hit_rows = (view.gen_max, {int(h["entity"]["rowid"]): h["entity"] for hits in res for h in hits})
        scores = np.full((n, k), -np.inf, np.float32)
        ids_out = np.full((n, k), -1, np.int64)
        _fill_top_k(scores, ids_out, enumerate(res), k)
        return scores, ids_out

    # ------------------------------------------------------------------------------------------------
    # extensions kept in Milvus fields (see rag_hier.store.milvus.fields)
    # ------------------------------------------------------------------------------------------------
    def extension_in_engine(self, name: str) -> bool:
        """Whether extension ``name`` is searched inside Milvus.

        True when its rows are a sparse field (``token-index``, ``sparse-embeddings``, ``svdr-vectors``) or its
        leaves a passage field (``tree``, ``ehi``); else the strategies search it in the client (extensions
        attached before this existed, collections whose schema lacks the leaf fields).
        """
        with self._reading():
            fields = self._state.get("extensions", {}).get(name, {}).get("fields") or {}
            return "sparse" in fields or "leaf" in fields

    def _field(self, name: str, kind: str) -> str:
        value = (self._state.get("extensions", {}).get(name, {}).get("fields") or {}).get(kind)
        if value is None:
            raise StoreError(f"{self.location}: the {name!r} extension is not kept in a Milvus field")
        return str(value)

    def search_sparse(
        self, name: str, queries: Any, top_k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top inner products of sparse queries with extension ``name``'s rows, searched inside Milvus.

        Args:
            name: ``"token-index"``, ``"sparse-embeddings"`` or ``"svdr-vectors"`` (kept in a sparse field).
            queries: ``(n, columns)`` sparse rows whose column numbers are the stored indices (token ids,
                the caller's sparse indices); weights must be non-negative (Milvus' rule).
            top_k: Results per query (capped at 16,384).
            allowed: Only these passages (rowids) may be returned.

        Returns:
            ``(scores, rowids)``, ``(n, top_k)``, padded with ``-inf`` / ``-1``; ties by ascending rowid. Rows
            sharing no index with the query are never returned (Milvus' sparse search leaves them out).

        """
        q = sp.csr_matrix(queries, dtype=np.float32)
        n, k = q.shape[0], min(int(top_k), MAX_LIMIT)
        scores = np.full((n, k), -np.inf, np.float32)
        ids_out = np.full((n, k), -1, np.int64)
        if k <= 0 or n == 0:
            return scores, ids_out
        data = sparse_dicts(q, f"{self.location}: a {name} query")
        with self._reading() as view:
            tag = self._field(name, "sparse")
            if not self._sparse_collection_present():
                return scores, ids_out
            cond = f"tag == {str_list([tag])[1:-1]}"
            if allowed is not None:
                ids = np.unique(np.asarray(allowed, dtype=np.int64))
                if ids.size == 0:
                    return scores, ids_out
                cond += f" and {ids_expr('rowid', ids.tolist())}"
            todo = [i for i, d in enumerate(data) if d]
            if not todo:
                return scores, ids_out
            fetch = min(k + min(k, 16), MAX_LIMIT)  # a few more, so ties at the cut are broken by rowid
            res = self._call(
                "a sparse search",
                "search",
                self._collections.sparse,
                data=[data[i] for i in todo],
                anns_field="vec",
                limit=fetch,
                filter=f"{cond} and {view.expr('s')}",
                output_fields=["rowid"],
                search_params={"metric_type": "IP", "params": {}},
                consistency_level="Strong",
            )
        _fill_top_k(scores, ids_out, zip(todo, res, strict=True), k)
        return scores, ids_out

    def _sparse_rows(
        self, name: str, view: _View, expr: str = "true", fields: list[str] | None = None
    ) -> list[dict[str, Any]]:
        tag = self._field(name, "sparse")
        if not self._sparse_collection_present():
            return []
        where = f"tag == {str_list([tag])[1:-1]} and ({expr}) and {view.expr('s')}"
        return self._query(self._collections.sparse, where, fields or ["rowid", "vec"], what=f"reading the {name} rows")

    def sparse_rows_of(self, name: str, rowids: np.ndarray, columns: int) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows extension ``name`` holds in Milvus for ``rowids`` (a query by rowid, never the whole field).

        Returns ``(rowids found ascending, their rows as a (found, columns) CSR matrix)``; rowids without a row
        are left out (a row with no positive weight is not stored either).
        """
        ids = np.unique(np.asarray(rowids, np.int64))
        with self._reading() as view:
            tag = self._field(name, "sparse")
            rows: list[dict[str, Any]] = []
            if ids.size and self._sparse_collection_present():
                cond = f"tag == {str_list([tag])[1:-1]} and {view.expr('s')}"
                rows = self._query_in(self._collections.sparse, "rowid", ids.tolist(), cond, ["rowid", "vec"])
        rows.sort(key=lambda r: int(r["rowid"]))
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(r["vec"]) for r in rows], out=indptr[1:])
        cols = np.fromiter((int(j) for r in rows for j in r["vec"]), np.int64, count=int(indptr[-1]))
        vals = np.fromiter((float(v) for r in rows for v in r["vec"].values()), np.float32, count=int(indptr[-1]))
        if cols.size and int(cols.max()) >= columns:
            raise StoreCorruptedError(f"{self.location}: a {name} row has index {int(cols.max())} >= {columns}")
        found = np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows))
        return found, sp.csr_matrix((vals, cols, indptr), shape=(len(rows), columns))

    def sparse_rowids(self, name: str) -> np.ndarray:
        """Rowids (ascending) that hold a row of extension ``name`` in Milvus; read once per committed generation."""
        with self._reading() as view:
            key = (self._field(name, "sparse"), view.gen_max)
            if key not in self._rowid_cache:
                rows = self._sparse_rows(name, view, fields=["rowid"])
                ids = np.sort(np.fromiter((int(r["rowid"]) for r in rows), np.int64, count=len(rows)))
                self._rowid_cache = {k: v for k, v in self._rowid_cache.items() if k[1] == view.gen_max} | {key: ids}
            return self._rowid_cache[key]

    def sparse_document_frequency(self, name: str) -> tuple[np.ndarray, np.ndarray, int]:
        """``(indices, document frequencies, rows)`` of extension ``name``'s sparse rows (for idf weights).

        Milvus has no aggregate for this, so the rows are read once per committed generation (streamed; only the
        counts are kept) — the client-side step of SVDR's lexical mode on Milvus.
        """
        with self._reading() as view:
            key = (self._field(name, "sparse"), view.gen_max)
            if key not in self._df_cache:
                counts: dict[int, int] = {}
                rows = self._sparse_rows(name, view)
                for r in rows:
                    for j in r["vec"]:
                        counts[int(j)] = counts.get(int(j), 0) + 1
                idx = np.fromiter(counts.keys(), np.int64, count=len(counts))
                df = np.fromiter(counts.values(), np.int64, count=len(counts))
                self._df_cache = {key: (idx, df, len(rows))}
            return self._df_cache[key]

    def search_in_leaves(
        self, name: str, queries: np.ndarray, top_k: int, leaves: np.ndarray, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One dense search inside Milvus over the passages filed under ``leaves`` by extension ``name``.

        ``name`` is ``"tree"`` (filter ``tree_leaf in [...]``) or ``"ehi"`` (``array_contains_any(ehi_leaves,
        [...])``); ``allowed`` restricts further, as in :meth:`search_dense`.
        """
        with self._reading():
            column = self._field(name, "leaf")
        values = "[" + ",".join(str(int(x)) for x in np.unique(np.asarray(leaves, np.int64))) + "]"
        where = f"{column} in {values}" if column == "tree_leaf" else f"array_contains_any({column}, {values})"
        return self.search_dense(queries, top_k, allowed, where=where)

    def _is_lite(self) -> bool:
        """Whether the server is Milvus Lite (a ``.db`` file, or its server process reached by URI)."""
        if self._lite is None:
            try:
                version = str(self._call("asking the server version", "get_server_version"))
            except StoreError:
                version = ""
            self._lite = self._conn.uri.endswith(".db") or "lite" in version.lower()
        return self._lite

    def _sync_sparse(self, ext: StoreExtension, tag: str, *, full: bool) -> int:
        """Write a sparse extension's new rows under this batch's generation, retiring the versions they replace.

        Returns the rows written.
        """
        b = self._require_batch()
        ids, rows = cast(SparseRows, ext).sparse_rows()
        ids = np.asarray(ids, np.int64)
        if not full:
            gone = sorted(b.removed | set(ids.tolist()))
            if gone and self._sparse_collection_present():
                cond = f"tag == {str_list([tag])[1:-1]} and {self._view().expr('s')}"
                old = self._query_in(self._collections.sparse, "rowid", gone, cond, ["vid"])
                b.retired["s"].update(int(r["vid"]) for r in old)
        if ids.size == 0:
            if full:
                self._create_sparse_collection()
            return 0
        self._create_sparse_collection()
        mat = sp.csr_matrix(rows)
        row_of = np.repeat(np.arange(mat.shape[0]), np.diff(mat.indptr))
        bad = np.unique(row_of[~np.isfinite(mat.data) | (mat.data < 0)])
        for i in bad[:1]:  # name the passage (Milvus takes non-negative weights only)
            rec = self.records([int(ids[i])]).get(int(ids[i]))
            where = f"passage {rec.passage_id!r}" if rec is not None else f"rowid {int(ids[i])}"
            sparse_dicts(mat[int(i)], f"{self.location}: extension {ext.name!r}, {where}")
        dicts = sparse_dicts(mat, f"{self.location}: extension {ext.name!r}", ids)
        keep = [j for j, d in enumerate(dicts) if d]  # a row with no positive weight can never score
        vid0 = self._alloc("next_vid", len(keep))
        out = [
            {"vid": vid0 + n, "tag": tag, "rowid": int(ids[j]), "gen": b.gen, "vec": dicts[j]}
            for n, j in enumerate(keep)
        ]
        for i in range(0, len(out), INSERT_ROWS):
            self._call("writing sparse rows", "insert", self._collections.sparse, out[i : i + INSERT_ROWS])
        return len(out)

    def _sync_leaves(self, plans: Mapping[str, tuple[StoreExtension, bool]]) -> None:
        """Set the leaf fields of the passages whose leaves changed (all of them for a new or rebuilt extension).

        A row written by this batch is replaced in place (it is invisible until the commit); an older row gets a
        new version under this batch's generation and the old one is retired, as for any passage change.
        """
        b = self._require_batch()
        wanted = {column: leaf_values(column, *cast(LeafRows, ext).leaf_rows()) for column, (ext, _) in plans.items()}
        view = self._view()
        fields = [*PASSAGE_FIELDS, "vector", *self._leaf_columns]
        if any(full for _, full in plans.values()):
            rows = self._passage_rows("true", view, fields)
        elif b.added:
            rows = self._query_in(self._collections.passages, "rowid", sorted(b.added), view.expr("p"), fields)
        else:
            return
        in_place: list[dict[str, Any]] = []
        versions: list[dict[str, Any]] = []
        for r in rows:
            changed = False
            for column, values in wanted.items():
                want = values.get(int(r["rowid"]))
                have = r.get(column)
                if (list(have) if isinstance(have, list | tuple) else have) != want:
                    r[column] = want
                    changed = True
            if not changed:
                continue
            row = {f: v for f, v in r.items() if v is not None}
            if int(r["gen"]) == b.gen:
                in_place.append(row)
            else:
                b.retired["p"].add(int(r["vid"]))
                row["vid"], row["gen"] = self._alloc("next_vid", 1), b.gen
                versions.append(row)
        for i in range(0, len(in_place), INSERT_ROWS):
            self._call("writing leaves", "upsert", self._collections.passages, in_place[i : i + INSERT_ROWS])
        self._insert(self._collections.passages, versions)

    def _sparse_extension_files(self, name: str, info: Mapping[str, Any]) -> dict[str, bytes]:
        """The files extension ``name`` would write, rebuilt from its rows in Milvus (for ``migrate``)."""
        cls = extension_class(name, self.location)
        ext = cls.from_config(info.get("config", {}))
        rows = self._sparse_rows(name, self._view())
        rows.sort(key=lambda r: int(r["rowid"]))
        pairs = [
            (np.fromiter((int(j) for j in r["vec"]), np.int64), np.fromiter(r["vec"].values(), np.float64))
            for r in rows
        ]
        cast(SparseRows, ext).add_sparse_rows(np.asarray([int(r["rowid"]) for r in rows], np.int64), pairs)
        with tempfile.TemporaryDirectory(prefix="rag-hier-milvus-") as tmp:
            paths = {f: Path(tmp) / f for f in ext.files()}
            ext.write(paths)
            return {f: p.read_bytes() for f, p in paths.items()}

    def vectors(self, rowids: np.ndarray) -> np.ndarray:
        """The stored float32 vectors of ``rowids`` (each must have one)."""
        ids = np.asarray(rowids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            return np.zeros((0, self.dimension or 0), np.float32)
        with self._reading() as view:
            rows = self._query_in(
                self._collections.passages,
                "rowid",
                np.unique(ids).tolist(),
                f"has_vector == true and {view.expr('p')}",
                ["rowid", "vector"],
            )
        by = {int(r["rowid"]): r["vector"] for r in rows}
        missing = [int(r) for r in ids if int(r) not in by]
        if missing:
            raise _MissingVector(f"{self.location}: no vector for rowid {missing[0]}")
        return np.asarray([by[int(r)] for r in ids], dtype=np.float32)

    # ------------------------------------------------------------------------------------------------
    # writing
    # ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def batch(self) -> Iterator[MilvusStore]:
        """Group writes into one atomic commit (see the module docstring); on an exception nothing is kept."""
        if self.read_only:
            raise StoreError(f"{self.location} was opened read-only")
        with self._lock:
            if self._batch is not None:
                self._batch.depth += 1
                try:
                    yield self
                finally:
                    self._batch.depth -= 1
                return
            self._sync()
            if self._settled_gen != int(self._state["generation"]):
                self._recover()
            self._batch = _Batch(gen=int(self._state["generation"]) + 1, saved_state=copy.deepcopy(self._state))
            try:
                yield self
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def _recover(self) -> None:
        """Delete what no committed generation owns; finish the deletions of committed ones."""
        gen, floor = int(self._state["generation"]), int(self._state.get("floor", 0))
        self._delete(self._collections.passages, f"gen > {gen}")
        self._delete(self._collections.documents, f"gen > {gen}")
        self._delete(self._collections.retired, f"gen > {gen}")
        self._delete(self._collections.files, f"gen > {gen}")
        if floor > 0:
            self._delete(self._collections.passages, f"gen <= {floor}")
            self._delete(self._collections.documents, f"gen <= {floor}")
        sparse = self._sparse_collection_present()
        if sparse:
            self._delete(self._collections.sparse, f"gen > {gen}")
            if floor > 0:
                self._delete(self._collections.sparse, f"gen <= {floor}")
            tags = [
                i["fields"]["sparse"]
                for i in self._state.get("extensions", {}).values()
                if "sparse" in (i.get("fields") or {})
            ]
            self._delete(self._collections.sparse, f"not (tag in {str_list(tags)})" if tags else "vid >= 0")
        retired = self._retired_rows(f"gen <= {gen}")
        if retired:
            for kind, coll in (
                ("p", self._collections.passages),
                ("d", self._collections.documents),
                ("s", self._collections.sparse),
            ):
                if kind == "s" and not sparse:
                    continue
                targets = [int(r["target"]) for r in retired if r["kind"] == kind]
                for i in range(0, len(targets), IN_CHUNK):
                    self._delete(coll, ids_expr("vid", targets[i : i + IN_CHUNK]))
            keys = [r["key"] for r in retired]
            for i in range(0, len(keys), IN_CHUNK):
                self._delete(self._collections.retired, f"key in {str_list(keys[i : i + IN_CHUNK])}")
            self._excluded = {"p": set(), "d": set(), "s": set()}
        current = {f: int(i["gen"]) for e in self._state.get("extensions", {}).values() for f, i in e["files"].items()}
        stale = self._query(self._collections.files, "gen >= 0", ["key", "file", "gen"], what="listing files")
        drop = [r["key"] for r in stale if current.get(r["file"]) != int(r["gen"])]
        for i in range(0, len(drop), IN_CHUNK):
            self._delete(self._collections.files, f"key in {str_list(drop[i : i + IN_CHUNK])}")
        self._settled_gen = gen

    def _commit(self) -> None:
        b = self._batch
        assert b is not None
        if b.changed_docs:
            changed, b.changed_docs = b.changed_docs, set()
            for name, ext in self._extensions.items():
                ext.on_documents_changed(self, changed)
                b.dirty_ext.add(name)
        extensions_state: dict[str, Any] = {}
        old_ext = self._state.get("extensions", {})
        synced: list[str] = []
        wrote_sparse = False
        leaf_plans: dict[str, tuple[StoreExtension, bool]] = {}
        for name, ext in self._extensions.items():
            old_fields = old_ext.get(name, {}).get("fields") or {}
            if name in SPARSE_EXTENSIONS and (name not in old_ext or name in b.rebuilt or "sparse" in old_fields):
                full = name not in old_ext or name in b.rebuilt
                tag = f"{name}@{b.gen}" if full else str(old_fields["sparse"])
                if self._sync_sparse(ext, tag, full=full):
                    wrote_sparse = True
                synced.append(name)
                extensions_state[name] = {"config": ext.config(), "files": {}, "fields": {"sparse": tag}}
                continue
            fields: dict[str, Any] = {}
            column = LEAF_COLUMNS.get(name)
            if column in self._leaf_columns and getattr(ext, "leaves_per_passage", 1) <= MAX_ARRAY:
                assert column is not None
                leaf_plans[column] = (ext, name not in old_ext or name in b.rebuilt or "leaf" not in old_fields)
                fields = {"leaf": column}
            files = dict(old_ext.get(name, {}).get("files", {}))
            if name in b.dirty_ext or name not in old_ext:
                files = {}
                with tempfile.TemporaryDirectory(prefix="rag-hier-milvus-") as tmp:
                    paths = {f: Path(tmp) / f for f in ext.files()}
                    ext.write(paths)
                    for f, path in paths.items():
                        if not path.is_file():
                            raise StoreError(f"extension {name!r} did not write {f}")
                        files[f] = self._write_file(f, path.read_bytes(), b.gen)
            extensions_state[name] = {"config": ext.config(), "files": files, **({"fields": fields} if fields else {})}
        if leaf_plans:
            self._sync_leaves(leaf_plans)
        _step("files_written")
        markers = [
            {"key": f"{kind}:{vid}", "kind": kind, "target": int(vid), "gen": b.gen, "dummy": [0.0] * DUMMY_DIM}
            for kind, vids in b.retired.items()
            for vid in sorted(vids)
        ]
        self._insert(self._collections.retired, markers)
        _step("before_commit")
        state = dict(self._state)
        state["generation"] = b.gen
        if b.floor is not None:
            state["floor"] = b.floor
        state["extensions"] = extensions_state
        view = self._view()
        state["counts"] = {
            "documents": self._count(self._collections.documents, view.expr("d")),
            "passages": self._count(self._collections.passages, view.expr("p")),
            "vectors": self._count(self._collections.passages, f"has_vector == true and {view.expr('p')}"),
        }
        self._put_state(state)  # the commit point
        self._state = state
        self._batch = None
        self._excluded = {k: set(self._excluded.get(k, set())) | b.retired.get(k, set()) for k in ("p", "d", "s")}
        self._loaded_files = {"__gen__": b.gen} | {
            n: dumps([i.get("config"), i.get("files"), i.get("fields")]) for n, i in extensions_state.items()
        }
        for name in synced:  # committed to C__sparse: the client forgets them
            cast(SparseRows, self._extensions[name]).clear_rows()
        if wrote_sparse and self._is_lite():
            # Milvus Lite scores sparse vectors in Python and re-indexes its unflushed rows on every search;
            # sealing them once here lets it build a segment's index once and cache it (a β query on 1,000
            # passages: 400-800 ms -> about 12 ms). A server indexes growing segments itself: no flush there.
            try:
                self._call("sealing the sparse rows", "flush", self._collections.sparse)
            except StoreError as exc:
                logger.warning(
                    "%s: could not flush %s (%s); searches stay correct, only slower",
                    self.location,
                    self._collections.sparse,
                    exc,
                )
        try:
            _step("after_commit")
            self._recover()
        except Exception as exc:
            logger.warning(
                "%s: the write is committed (generation %d), but removing the versions it replaced failed (%s); "
                "the next write finishes it",
                self.location,
                b.gen,
                exc,
            )

    def _rollback(self) -> None:
        b = self._batch
        self._batch = None
        self._settled_gen = -1
        if b is None:
            return
        self._state = b.saved_state
        self._loaded_files = {}
        try:
            self._recover()  # removes the batch's rows (gen > committed)
            self._sync(force=True)
        except StoreError as exc:
            logger.warning("%s: rolled back in memory; the server could not be cleaned now (%s)", self.location, exc)
            self._extensions = {}  # reloaded from the committed files at the next read

    def _require_batch(self) -> _Batch:
        if self._batch is None:  # pragma: no cover - every write opens one
            raise StoreError("writes need a batch")
        return self._batch

    def _alloc(self, key: str, n: int) -> int:
        first = int(self._state[key])
        self._state[key] = first + n
        return first

    def _passage_row(
        self,
        rowid: int,
        vid: int,
        gen: int,
        p: Passage,
        vector: np.ndarray | None,
        exact: str = "",
        carry: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A passage row; ``carry``: the stored row it replaces (its leaf fields are kept)."""
        row = self._new_passage_row(rowid, vid, gen, p, vector, exact)
        for column in self._leaf_columns if carry else ():
            if carry.get(column) is not None:  # type: ignore[union-attr]
                row[column] = carry[column]  # type: ignore[index]
        return row

    def _new_passage_row(
        self, rowid: int, vid: int, gen: int, p: Passage, vector: np.ndarray | None, exact: str
    ) -> dict[str, Any]:
        dim = int(self._state["dimension"])
        text = p.text
        for what, value in (("text", text), ("passage id", p.id), ("document id", p.doc_id)):
            if len(value.encode("utf-8")) > VARCHAR:
                raise StoreError(f"the {what} of passage {p.id[:80]!r} is longer than Milvus' 65,535 bytes")
        return {
            "vid": vid,
            "rowid": rowid,
            "gen": gen,
            "passage_id": p.id,
            "doc_id": p.doc_id,
            "position": int(p.position),
            "section": int(p.section),
            "title_path": dumps(list(p.title_path)),
            "text": text,
            "meta": dict(p.meta),
            "extra": dict(p.extra),
            "content_hash": hash_text(p.embedding_text),
            "has_vector": vector is not None,
            "exact": exact,
            "vector": (np.asarray(vector, np.float32) if vector is not None else np.zeros(dim, np.float32)).tolist(),
        }

    def _insert_passages(
        self,
        passages: Sequence[Passage],
        vectors: Sequence[np.ndarray | None],
        *,
        rowids: Sequence[int] | None = None,
        hooks: bool = True,
    ) -> np.ndarray:
        """Insert new passages (new rowids unless given), telling the extensions; returns their rowids."""
        b = self._require_batch()
        if not passages:
            return np.zeros(0, np.int64)
        dim = int(self._state["dimension"])
        vec_list = list(vectors)
        for v in vec_list:
            if v is not None and v.shape[0] != dim:
                raise DimensionMismatchError(f"got {v.shape[0]}-d vectors; {self.location} holds {dim}-d")
        if rowids is None:
            first = self._alloc("next_rowid", len(passages))
            ids = np.arange(first, first + len(passages), dtype=np.int64)
        else:
            ids = np.asarray(rowids, dtype=np.int64)
            self._state["next_rowid"] = max(int(self._state["next_rowid"]), int(ids.max()) + 1)
        vid0 = self._alloc("next_vid", len(passages))
        rows = []
        for j, (p, v, r) in enumerate(zip(passages, vec_list, ids.tolist(), strict=True)):
            exact = ""
            if v is not None and v.dtype != np.float32:
                as64 = np.asarray(v, dtype=np.float64)
                if not np.array_equal(as64.astype(np.float32).astype(np.float64), as64):
                    exact = base64.b64encode(as64.astype("<f8").tobytes()).decode("ascii")
            rows.append(self._passage_row(r, vid0 + j, b.gen, p, v, exact))
        self._insert(self._collections.passages, rows)
        b.changed_docs.update(p.doc_id for p in passages)
        if hooks:
            b.added.update(ids.tolist())
            with_vec = [i for i, v in enumerate(vec_list) if v is not None]
            mat = np.stack([np.asarray(vec_list[i], np.float32) for i in with_vec]) if with_vec else None
            for name, ext in self._extensions.items():
                ext.on_passages_added(self, ids, passages, mat if len(with_vec) == len(passages) else None)
                b.dirty_ext.add(name)
        return ids

    def _retire_rows(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Delete passages (their current versions), telling the extensions; returns how many."""
        b = self._require_batch()
        if not rows:
            return 0
        b.changed_docs.update(r["doc_id"] for r in rows)
        b.retired["p"].update(int(r["vid"]) for r in rows)
        removed = np.asarray(sorted(int(r["rowid"]) for r in rows), dtype=np.int64)
        b.removed.update(removed.tolist())
        for name, ext in self._extensions.items():
            ext.on_passages_removed(self, removed)
            b.dirty_ext.add(name)
        return len(rows)

    def _doc_rows(self, doc_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        view = self._view()
        rows = self._query_in(
            self._collections.documents,
            "doc_id",
            list(doc_ids),
            view.expr("d"),
            ["vid", "doc_id", "seq", "title", "meta", "toc"],
        )
        return {r["doc_id"]: r for r in rows}

    def _put_doc(self, doc_id: str, title: str, meta: str, toc: str, old: Mapping[str, Any] | None) -> None:
        b = self._require_batch()
        if old is not None:
            if (old["title"], old["meta"], old["toc"]) == (title, meta, toc):
                return
            b.retired["d"].add(int(old["vid"]))
            seq = int(old["seq"])
        else:
            seq = self._alloc("next_seq", 1)
        for what, value in (("title", title), ("metadata", meta), ("table of contents", toc)):
            if len(value.encode("utf-8")) > VARCHAR:
                raise StoreError(f"the {what} of document {doc_id[:80]!r} is longer than Milvus' 65,535 bytes")
        row = {
            "vid": self._alloc("next_vid", 1),
            "gen": b.gen,
            "doc_id": doc_id,
            "seq": seq,
            "title": title,
            "meta": meta,
            "toc": toc,
            "dummy": [0.0] * DUMMY_DIM,
        }
        self._insert(self._collections.documents, [row])

    def _drop_empty_documents(self, doc_ids: Iterable[str]) -> None:
        b = self._require_batch()
        ids = sorted(set(doc_ids))
        if not ids:
            return
        view = self._view()
        live = {
            r["doc_id"] for r in self._query_in(self._collections.passages, "doc_id", ids, view.expr("p"), ["doc_id"])
        }
        for d, row in self._doc_rows([d for d in ids if d not in live]).items():
            b.retired["d"].add(int(row["vid"]))
            b.changed_docs.add(d)

    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        max_passage_words: int | None = None,
        policy: WritePolicy = "upsert",
        show_progress_bar: bool = False,
        encode: bool = True,
    ) -> WriteSummary:
        """Split, encode what changed and store documents (as :meth:`HierStore.add_documents`)."""
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        if isinstance(documents, Document):
            raise TypeError("add_documents() takes a list of Documents, not a single Document")
        docs = list(documents)
        seen: set[str] = set()
        for d in docs:
            if not isinstance(d, Document):
                raise TypeError(f"add_documents() takes Document objects, got {type(d).__name__}")
            _check_id(d.doc_id, "document id")
            if d.doc_id in seen:
                raise DuplicateIdError(f"document id {d.doc_id!r} appears twice in the input")
            seen.add(d.doc_id)
        with self.batch():
            b = self._require_batch()
            if max_passage_words is None:
                max_passage_words = int(self._state.get("corpus", {}).get("max_passage_words", 100))
            existing = self._doc_rows([d.doc_id for d in docs])
            if policy == "fail" and existing:
                raise DuplicateIdError(f"{len(existing)} document(s) already stored, e.g. {sorted(existing)[0]!r}")
            view = self._view()
            stored_rows: dict[str, list[dict[str, Any]]] = {}
            for r in self._query_in(
                self._collections.passages,
                "doc_id",
                [d.doc_id for d in docs],
                view.expr("p"),
                [*PASSAGE_FIELDS, "vector", *self._leaf_columns],
            ):
                stored_rows.setdefault(r["doc_id"], []).append(r)
            added = updated = unchanged = skipped = empty = removed = kept = 0
            new_passages: list[Passage] = []
            rewrite: list[tuple[dict[str, Any], Passage]] = []
            for d in docs:
                if d.doc_id in existing and policy == "skip":
                    skipped += 1
                    continue
                _check_json(d.metadata, f"metadata of document {d.doc_id!r}")
                passages = split_document(d, max_passage_words)
                if not passages:
                    empty += 1
                self._check_collisions(d.doc_id, passages)
                fields = (d.title, dumps(dict(d.metadata)), dumps(d.table_of_contents()))
                old_doc = existing.get(d.doc_id)
                if old_doc is None or (old_doc["title"], old_doc["meta"], old_doc["toc"]) != fields:
                    b.changed_docs.add(d.doc_id)
                self._put_doc(d.doc_id, *fields, old_doc)
                rows = stored_rows.get(d.doc_id, [])
                old = {r["passage_id"]: r for r in rows if r["has_vector"] or not encode}
                stale = {int(r["vid"]): r for r in rows}
                changed = False
                for p in passages:
                    prev = old.get(p.id)
                    if prev is not None and prev["content_hash"] == hash_text(p.embedding_text):
                        stale.pop(int(prev["vid"]), None)
                        rewrite.append((prev, p))
                        kept += 1
                    else:
                        new_passages.append(p)
                        changed = True
                if stale:
                    changed = True
                    removed += self._retire_rows(list(stale.values()))
                if d.doc_id not in existing:
                    added += 1
                elif changed:
                    updated += 1
                else:
                    unchanged += 1
            self._rewrite_fields(rewrite)
            vectors = None
            if new_passages and encode:
                vectors = self._require_encoder("add_documents()").encode_documents(
                    [p.embedding_text for p in new_passages], show_progress_bar=show_progress_bar
                )
            self._insert_passages(new_passages, list(vectors) if vectors is not None else [None] * len(new_passages))
        return WriteSummary(
            documents_added=added,
            documents_updated=updated,
            documents_unchanged=unchanged,
            documents_skipped=skipped,
            documents_empty=empty,
            passages_added=len(new_passages),
            passages_removed=removed,
            passages_unchanged=kept,
            encoded=len(new_passages) if vectors is not None else 0,
        )

    def _rewrite_fields(self, pairs: Sequence[tuple[Mapping[str, Any], Passage]]) -> None:
        """Kept passages whose stored fields (position, text, metadata, ...) changed get a new version."""
        b = self._require_batch()
        rows = []
        for old, p in pairs:
            same = (
                int(old["position"]) == p.position
                and int(old["section"]) == p.section
                and old["title_path"] == dumps(list(p.title_path))
                and old["text"] == p.text
                and (old["meta"] or {}) == dict(p.meta)
                and (old["extra"] or {}) == dict(p.extra)
            )
            if same:
                continue
            b.retired["p"].add(int(old["vid"]))
            vec = np.asarray(old["vector"], np.float32) if old["has_vector"] else None
            rows.append(
                self._passage_row(int(old["rowid"]), self._alloc("next_vid", 1), b.gen, p, vec, old["exact"], carry=old)
            )
        self._insert(self._collections.passages, rows)

    def _check_collisions(self, doc_id: str, passages: Sequence[Passage]) -> None:
        if not passages:
            return
        view = self._view()
        taken = self._query_in(
            self._collections.passages,
            "passage_id",
            [p.id for p in passages],
            f"doc_id != {str_list([doc_id])[1:-1]} and {view.expr('p')}",
            ["passage_id", "doc_id"],
        )
        if taken:
            raise DuplicateIdError(
                f"passage id {taken[0]['passage_id']!r} of document {doc_id!r} is already stored as a passage of "
                f"document {taken[0]['doc_id']!r}"
            )

    def add_passages(
        self,
        passages: Sequence[Passage],
        embeddings: np.ndarray | Sequence[Sequence[float] | np.ndarray | None] | None = None,
        *,
        policy: WritePolicy = "upsert",
        encode_missing: bool | None = None,
        allow_moves: bool = False,
    ) -> WriteSummary:
        """Store passages as given (as :meth:`HierStore.add_passages`)."""
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        if isinstance(passages, Passage):
            raise TypeError("add_passages() takes a list of Passages, not a single Passage")
        items = list(passages)
        for p in items:
            if not isinstance(p, Passage):
                raise TypeError(f"add_passages() takes Passage objects, got {type(p).__name__}")
            _check_id(p.id, "passage id")
            _check_id(p.doc_id, f"document id of passage {p.id!r}")
            _check_json(p.meta, f"metadata of passage {p.id!r}")
            _check_json(p.extra, f"extra of passage {p.id!r}")
        vecs = normalize_embeddings(embeddings, len(items), self._state.get("dimension"), self.location)
        if encode_missing is None:
            encode_missing = embeddings is None and self.encoder is not None
        order: dict[str, int] = {}
        for i, p in enumerate(items):
            if policy == "skip" and p.id in order:
                continue
            order[p.id] = i
        idx = sorted(order.values())
        items = [items[i] for i in idx]
        vecs = [vecs[i] for i in idx]
        with self.batch():
            view = self._view()
            stored = self._query_in(
                self._collections.passages,
                "passage_id",
                [p.id for p in items],
                view.expr("p"),
                ["vid", "rowid", "passage_id", "doc_id"],
            )
            if policy == "upsert" and not allow_moves:
                check_passage_owners(items, {r["passage_id"]: r["doc_id"] for r in stored})
            if policy == "fail" and stored:
                raise DuplicateIdError(f"passage id {sorted(r['passage_id'] for r in stored)[0]!r} is already stored")
            if policy == "skip":
                have = {r["passage_id"] for r in stored}
                keep = [i for i, p in enumerate(items) if p.id not in have]
                items, vecs = [items[i] for i in keep], [vecs[i] for i in keep]
                stored = []
            if encode_missing:
                todo = [i for i, v in enumerate(vecs) if v is None]
                if todo:
                    enc = self._require_encoder("encoding passages").encode_documents(
                        [items[i].embedding_text for i in todo]
                    )
                    for j, i in enumerate(todo):
                        vecs[i] = enc[j]
            removed = self._retire_rows(stored)
            docs = self._doc_rows(sorted({p.doc_id for p in items}))
            for p in items:
                if p.doc_id not in docs:
                    self._put_doc(p.doc_id, p.title_path[0] if p.title_path else "", "{}", "[]", None)
                    docs[p.doc_id] = {}
            self._insert_passages(items, vecs)
            self._drop_empty_documents(r["doc_id"] for r in stored)
        return WriteSummary(
            passages_added=len(items),
            passages_removed=removed,
            encoded=sum(1 for v in vecs if v is not None) if encode_missing else 0,
        )

    def _rows_where(self, expr: str) -> list[dict[str, Any]]:
        return self._passage_rows(expr, self._view(), ["vid", "rowid", "doc_id"])

    def delete_passages(self, passage_ids: Iterable[str]) -> int:
        """Delete passages by id; returns how many."""
        ids = check_ids(passage_ids, "passage_ids")
        with self.batch():
            rows = self._query_in(
                self._collections.passages, "passage_id", ids, self._view().expr("p"), ["vid", "rowid", "doc_id"]
            )
            n = self._retire_rows(rows)
            self._drop_empty_documents(r["doc_id"] for r in rows)
            return n

    def delete_documents(self, doc_ids: Iterable[str]) -> int:
        """Delete documents and their passages; returns how many passages."""
        ids = check_ids(doc_ids, "doc_ids")
        with self.batch():
            b = self._require_batch()
            rows = self._query_in(
                self._collections.passages, "doc_id", ids, self._view().expr("p"), ["vid", "rowid", "doc_id"]
            )
            n = self._retire_rows(rows)
            for row in self._doc_rows(ids).values():
                b.retired["d"].add(int(row["vid"]))
            b.changed_docs.update(ids)
            return n

    def delete_by_filter(self, filters: Filters) -> int:
        """Delete every passage matching ``filters``; returns how many."""
        with self.batch():
            expr = translate(filters)
            coarse = self._coarse_expr(filters) if isinstance(filters, Refined) else None
            if expr is not None:
                rows = self._rows_where(expr)
            elif coarse is not None and cast(Refined, filters).equivalent:
                rows = self._rows_where(coarse)
            else:
                keep = {r.rowid for r in self._filtered_records(filters, self._view())}
                rows = [r for r in self._rows_where(coarse or "true") if int(r["rowid"]) in keep]
            n = self._retire_rows(rows)
            self._drop_empty_documents(r["doc_id"] for r in rows)
            return n

    def delete_all(self, *, forget_dimension: bool = False) -> int:
        """Delete every passage and document (one commit; rowids are still never reused)."""
        if forget_dimension:
            raise StoreError(
                f"{self.location}: a Milvus collection's dimension is fixed at creation; create a new collection "
                "for vectors of another size"
            )
        with self.batch():
            b = self._require_batch()
            rows = self._rows_where("true")
            removed = np.asarray(sorted(int(r["rowid"]) for r in rows), dtype=np.int64)
            b.changed_docs.update(r["doc_id"] for r in rows)
            b.changed_docs.update(self.document_ids())
            # every row written so far becomes invisible at once: the floor rises to this generation
            self._delete(self._collections.passages, f"gen == {b.gen}")
            self._delete(self._collections.documents, f"gen == {b.gen}")
            b.floor = b.gen
            b.gen += 1
            b.added.clear()
            if removed.size:
                for name, ext in self._extensions.items():
                    ext.on_passages_removed(self, removed)
                    b.dirty_ext.add(name)
            return int(removed.size)

    def update_meta(self, passage_ids: Iterable[str], meta: Mapping[str, Any], *, merge: bool = True) -> int:
        """Merge (or replace) passage metadata; returns how many passages were updated."""
        ids = check_ids(passage_ids, "passage_ids")
        if not isinstance(meta, Mapping):
            raise TypeError(f"meta must be a mapping, got {type(meta).__name__}")
        payload = dict(meta)
        _check_json(payload, "meta")
        with self.batch():
            rows = self._query_in(
                self._collections.passages,
                "passage_id",
                ids,
                self._view().expr("p"),
                [*PASSAGE_FIELDS, "vector", *self._leaf_columns],
            )
            self._update_rows(rows, payload, merge=merge)
            return len(rows)

    def _update_rows(self, rows: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], *, merge: bool) -> None:
        b = self._require_batch()
        new_rows = []
        for r in rows:
            p = self._record(r).to_passage()
            meta = {**dict(r["meta"] or {}), **payload} if merge else dict(payload)
            p = Passage(p.id, p.doc_id, p.position, p.text, p.title_path, p.section, meta, dict(p.extra))
            vec = np.asarray(r["vector"], np.float32) if r["has_vector"] else None
            b.retired["p"].add(int(r["vid"]))
            new_rows.append(
                self._passage_row(int(r["rowid"]), self._alloc("next_vid", 1), b.gen, p, vec, r["exact"], carry=r)
            )
        self._insert(self._collections.passages, new_rows)

    def update_by_filter(self, filters: Filters, meta: Mapping[str, Any]) -> int:
        """Merge ``meta`` into every matching passage; returns how many."""
        with self.batch():
            recs = self._filtered_records(filters, self._view())
            return self.update_meta([r.passage_id for r in recs], meta)

    def snapshot(self, target: str | Path) -> Path:
        """Not offered in place: copy a collection out with ``rag-hier migrate`` (a verified local directory)."""
        raise StoreError(
            f"{self.location}: copy a Milvus collection to a directory with `rag-hier migrate --store {self.location} "
            f"--to {target}` (rag_hier.store.milvus.migrate.milvus_to_local)"
        )

    # ------------------------------------------------------------------------------------------------
    # extensions
    # ------------------------------------------------------------------------------------------------
    @property
    def extensions(self) -> dict[str, StoreExtension]:
        """The extensions by name."""
        with self._reading():
            return dict(self._extensions)

    def extension(self, name: str) -> StoreExtension | None:
        """The extension registered as ``name``, or ``None``."""
        with self._reading():
            return self._extensions.get(name)

    def add_extension(self, extension: StoreExtension, *, replace: bool = False) -> None:
        """Attach an extension, build it from the stored passages, and commit it."""
        if not extension.name:
            raise StoreError(f"{type(extension).__name__} has no name")
        extension_class(extension.name)
        with self.batch():
            b = self._require_batch()
            if extension.name in self._extensions and not replace:
                raise StoreError(f"{self.location} already has a {extension.name!r} extension (pass replace=True)")
            if self._extensions.get(extension.name) is extension and self.extension_in_engine(extension.name):
                return  # re-attaching the attached object: its rows are Milvus' (the object holds none to rebuild from)
            extension.build(self)
            self._extensions[extension.name] = extension
            b.dirty_ext.add(extension.name)
            b.rebuilt.add(extension.name)

    def ensure_extension(self, name: str, *, create: bool = True, **config: Any) -> StoreExtension:
        """The extension ``name``, built with ``config`` when missing and ``create`` is true."""
        existing = self.extension(name)
        if existing is not None:
            return existing
        if not create:
            raise StoreError(f"{self.location} has no {name!r} extension")
        if self.read_only:
            raise StoreError(f"{self.location} has no {name!r} extension and was opened read-only")
        ext = extension_class(name).from_config(config)
        with self.batch():
            if name in self._extensions:
                return self._extensions[name]
            self.add_extension(ext)
        return ext

    def remove_extension(self, name: str) -> None:
        """Detach an extension (its files are deleted after the commit)."""
        with self.batch():
            if self._extensions.pop(name, None) is None:
                raise StoreError(f"{self.location} has no {name!r} extension")

    def mark_extension_dirty(self, name: str) -> None:
        """An extension changed outside a hook: write it at the next commit."""
        if name not in self._extensions:
            raise StoreError(f"{self.location} has no {name!r} extension")
        with self.batch():
            b = self._require_batch()
            b.dirty_ext.add(name)
            if name in LEAF_COLUMNS:  # a tree or EHI changed outside the hooks: every passage's leaf is checked
                b.rebuilt.add(name)

    # ------------------------------------------------------------------------------------------------
    # migration support (rag_hier.store.milvus.migrate)
    # ------------------------------------------------------------------------------------------------
    def import_passages(
        self, records: Sequence[PassageRecord], vectors: Sequence[np.ndarray | None], exact: Sequence[str]
    ) -> None:
        """Insert stored records keeping their rowids (inside a batch; no extension hook runs)."""
        b = self._require_batch()
        dim = int(self._state["dimension"])
        rows = []
        vid0 = self._alloc("next_vid", len(records))
        for j, (rec, v, ex) in enumerate(zip(records, vectors, exact, strict=True)):
            if v is not None and v.shape[0] != dim:
                raise DimensionMismatchError(f"got {v.shape[0]}-d vectors; {self.location} holds {dim}-d")
            rows.append(self._passage_row(rec.rowid, vid0 + j, b.gen, rec.to_passage(), v, ex))
        if records:
            self._state["next_rowid"] = max(int(self._state["next_rowid"]), max(r.rowid for r in records) + 1)
        self._insert(self._collections.passages, rows)

    def import_document(self, doc_id: str, title: str, meta: Any, toc: Any) -> None:
        """Insert a document row (inside a batch)."""
        self._put_doc(doc_id, title, dumps(meta), dumps(toc), None)

    def import_extension(self, name: str, config: Mapping[str, Any], files: Mapping[str, bytes]) -> None:
        """Attach an extension from its files as another store wrote them (inside a batch; no rebuild)."""
        b = self._require_batch()
        cls = extension_class(name)
        ext = cls.from_config(dict(config))
        with tempfile.TemporaryDirectory(prefix="rag-hier-milvus-") as tmp:
            paths = {}
            for f, data in files.items():
                if f not in cls.FILES:
                    raise StoreError(f"extension {name!r} cannot own {f!r}")
                paths[f] = Path(tmp) / f
                paths[f].write_bytes(data)
            ext.load(self, paths)
        ext.verify(self)
        self._extensions[name] = ext
        b.dirty_ext.add(name)
        b.rebuilt.add(name)

    def raw_rows(self, chunk: int = 4096) -> Iterator[tuple[PassageRecord, np.ndarray | None, str]]:
        """Every committed passage with its vector and exact float64 copy (base64, or ``""``), by rowid.

        Read in rowid ranges of ``chunk`` (memory stays bounded), all from the generation current at the call.
        """
        with self._reading() as view:
            top = int(self._state["next_rowid"])
        for start in range(0, top, chunk):
            rows = self._passage_rows(
                f"rowid >= {start} and rowid < {start + chunk}",
                _View(view.gen_max, view.floor, view.excluded),
                [*PASSAGE_FIELDS, "vector"],
            )
            for r in sorted(rows, key=lambda r: int(r["rowid"])):
                yield self._record(r), (np.asarray(r["vector"], np.float32) if r["has_vector"] else None), r["exact"]

    def raw_documents(self) -> list[dict[str, Any]]:
        """Every committed document row (``doc_id``, ``title``, ``meta``, ``toc``), in insertion order."""
        with self._reading() as view:
            rows = self._query(self._collections.documents, view.expr("d"), ["doc_id", "seq", "title", "meta", "toc"])
        return [
            {"doc_id": r["doc_id"], "title": r["title"], "meta": json.loads(r["meta"]), "toc": json.loads(r["toc"])}
            for r in sorted(rows, key=lambda r: int(r["seq"]))
        ]

    def extension_files(self, name: str) -> dict[str, bytes]:
        """The committed files of extension ``name``."""
        with self._reading():
            info = self._state.get("extensions", {}).get(name)
            if info is None:
                raise StoreError(f"{self.location} has no {name!r} extension")
            if "sparse" in (info.get("fields") or {}):
                return self._sparse_extension_files(name, info)
            return {f: self._read_file(f, i) for f, i in info["files"].items()}

    def drop(self) -> None:
        """Drop every Milvus collection of this rag-hier collection (irreversible)."""
        if self.read_only:
            raise StoreError(f"{self.location} was opened read-only")
        for coll in self._collections.every:
            if self._call("listing collections", "has_collection", coll):
                self._call("dropping a collection", "drop_collection", coll)
