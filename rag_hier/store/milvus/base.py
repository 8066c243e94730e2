"""What every part of a Milvus handle shares: its state, its one call path to Milvus, and the view reads see.

:class:`MilvusBase` is the bottom of :class:`~rag_hier.store.milvus.store.MilvusStore`: the other parts
(:mod:`.blobs`, :mod:`.field_sync`, :mod:`.generations`, :mod:`.reads`, :mod:`.search`, :mod:`.rows`) are mixins
over it, each one job, naming the collections they touch through ``self._collections``
(:class:`~rag_hier.store.milvus.schema.Collections`). Every Milvus call goes through :meth:`MilvusBase._call`.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.store.milvus.capabilities import TRUE, Capabilities
from rag_hier.store.milvus.client import Connection
from rag_hier.store.milvus.filters import ids_expr, str_list, translate
from rag_hier.store.milvus.schema import (
    IN_CHUNK,
    INSERT_ROWS,
    MAX_LIMIT,
    PASSAGE_FIELDS,
    Collections,
    create_sparse_collection,
    valid_name,
)
from rag_hier.store.records import PassageRecord

if TYPE_CHECKING:
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.index.dense import IndexConfig
    from rag_hier.index.methods import EngineData
    from rag_hier.store.contract import StoreExtension

__all__ = ["KINDS", "Batch", "MilvusBase", "View"]

KINDS = ("p", "d", "s")
"""The kinds of row versions (as ``C__retired`` stores them): passages, documents, sparse rows."""


@dataclass
class View:
    """What reads see: rows with ``floor < gen <= gen_max``, minus the excluded versions (by kind)."""

    gen_max: int
    floor: int
    excluded: dict[str, set[int]] = field(default_factory=dict)

    def expr(self, kind: str) -> str:
        """The Milvus condition selecting the visible rows of ``kind`` (``"p"``, ``"d"`` or ``"s"``)."""
        out = f"(gen > {self.floor} and gen <= {self.gen_max})"
        ex = self.excluded.get(kind)
        if ex:
            out += f" and not ({ids_expr('vid', sorted(ex))})"
        return out


@dataclass
class Batch:
    """An open write: the generation it writes, the versions it retires, what changed."""

    gen: int
    retired: dict[str, set[int]] = field(default_factory=lambda: {k: set() for k in KINDS})
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


class MilvusBase:
    """A handle's state and its calls to Milvus (the base of :class:`~rag_hier.store.milvus.MilvusStore`)."""

    read_only: bool

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
        self._encoders: dict[tuple[Any, ...], DenseEncoder] = {}  # (device, recorded model) -> its encoder
        self._encoder_checked = False
        self._override_key: tuple[Any, ...] | None = None  # encoder_key when encoder= was given (open, create)
        self._lock = threading.RLock()
        self._state: dict[str, Any] = {}  # the committed state (inside a batch: the one it will commit)
        self._extensions: dict[str, StoreExtension] = {}
        self._loaded_files: dict[str, Any] = {}  # "__gen__": the generation loaded; name -> what was loaded
        self._excluded: dict[str, set[int]] = {}  # retired versions of committed generations not yet deleted
        self._batch: Batch | None = None
        self._settled_gen = -1
        self._syncing = False
        self._pinned = 0
        self._hit_rows: tuple[int, dict[int, dict[str, Any]]] = (-1, {})  # (generation, rows) a search returned
        # ((generation, filter expression), rows) the last metadata aggregate fetched inside reading() (reads.py)
        self._meta_rows: tuple[tuple[int, str], list[dict[str, Any]]] | None = None
        self._closed = False
        self._has_sparse = False
        self._leaf_columns: tuple[str, ...] = ()
        self._df_cache: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, int]] = {}
        self._rowid_cache: dict[tuple[str, int], np.ndarray] = {}

    if TYPE_CHECKING:  # provided by the façade, MilvusStore

        @property
        def location(self) -> str: ...  # noqa: D102
        @property
        def dimension(self) -> int | None: ...  # noqa: D102
        @property
        def encoder(self) -> DenseEncoder | None: ...  # noqa: D102
        @property
        def index_config(self) -> IndexConfig: ...  # noqa: D102
        def _require_encoder(self, what: str) -> DenseEncoder: ...
        def _engine_data(self, name: str) -> EngineData: ...
        def _leaf_fields(self) -> dict[str, tuple[str, EngineData]]: ...
        def _at_step(self, name: str) -> None: ...

    # ------------------------------------------------------------------------------------------------
    # the call path
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

    @property
    def _caps(self) -> Capabilities:
        """What the server offers (read once per connection)."""
        return self._conn.capabilities

    def _translate(self, filters: Any) -> str | None:
        """The Milvus expression of a filter on this server (:func:`~rag_hier.store.milvus.filters.translate`)."""
        return translate(filters, json_null_check=self._caps.json_null_check)

    def _is_lite(self) -> bool:
        """Whether the server is Milvus Lite (a ``.db`` file, or its server process reached by URI)."""
        return self._caps.lite

    def _sparse_collection_present(self) -> bool:
        """Whether ``C__sparse`` exists (loaded when it does; another process may have created it since)."""
        sparse = self._collections.sparse
        if not self._has_sparse and self._call("listing collections", "has_collection", sparse):
            self._call("loading the collection", "load_collection", sparse)
            self._has_sparse = True
        return self._has_sparse

    def _create_sparse_collection(self) -> None:
        """``C__sparse``: the sparse extensions' rows (created when the first one is attached)."""
        if self._sparse_collection_present():
            return
        create_sparse_collection(self._call, self._conn.client, self._collections, self._caps)
        self._has_sparse = True

    # ------------------------------------------------------------------------------------------------
    # the view, the open batch, the state's counters
    # ------------------------------------------------------------------------------------------------
    def _view(self) -> View:
        if self._batch is not None:
            b = self._batch
            excluded = {k: set(self._excluded.get(k, set())) | b.retired.get(k, set()) for k in KINDS}
            floor = b.floor if b.floor is not None else int(self._state.get("floor", 0))
            return View(b.gen, floor, excluded)
        return View(int(self._state["generation"]), int(self._state.get("floor", 0)), self._excluded)

    def _require_batch(self) -> Batch:
        if self._batch is None:  # pragma: no cover - every write opens one
            raise StoreError("writes need a batch")
        return self._batch

    def _alloc(self, key: str, n: int) -> int:
        first = int(self._state[key])
        self._state[key] = first + n
        return first

    def _committed_count(self, key: str, collection: str, expr: str) -> int:
        """The count the last commit recorded in the state row (no round trip); counted in Milvus inside a batch."""
        counts = self._state.get("counts") if self._batch is None else None
        if isinstance(counts, Mapping) and isinstance(counts.get(key), int):
            return int(counts[key])
        return self._count(collection, expr)

    # ------------------------------------------------------------------------------------------------
    # rows every part reads
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

    def _passage_rows(self, expr: str, view: View, fields: list[str] | None = None) -> list[dict[str, Any]]:
        return self._query(self._collections.passages, f"({expr}) and {view.expr('p')}", fields or PASSAGE_FIELDS)

    def _is_sparse(self, name: str) -> bool:
        return "sparse" in (self._state.get("extensions", {}).get(name, {}).get("fields") or {})

    def _field(self, name: str, kind: str) -> str:
        value = (self._state.get("extensions", {}).get(name, {}).get("fields") or {}).get(kind)
        if value is None:
            raise StoreError(f"{self.location}: the {name!r} extension is not kept in a Milvus field")
        return str(value)

    def _sparse_rows(
        self, name: str, view: View, expr: str = TRUE, fields: list[str] | None = None
    ) -> list[dict[str, Any]]:
        tag = self._field(name, "sparse")
        if not self._sparse_collection_present():
            return []
        where = f"tag == {str_list([tag])[1:-1]} and ({expr}) and {view.expr('s')}"
        return self._query(self._collections.sparse, where, fields or ["rowid", "vec"], what=f"reading the {name} rows")
