"""The Milvus collections of one rag-hier collection: their names, schemas and indexes, and the check on open.

One rag-hier collection named ``C`` is five Milvus collections (:class:`Collections`), plus ``C__sparse`` once a
sparse extension is attached; :mod:`rag_hier.store.milvus.store` says what each holds. Everything here is
stateless: the functions take the client, the call path (``call(what, method, *args, **kwargs)``, the handle's
one way to Milvus) and the collection names explicitly.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rag_hier.errors import DimensionMismatchError, StoreError
from rag_hier.index.dense import IndexConfig
from rag_hier.store.milvus.capabilities import Capabilities
from rag_hier.store.milvus.fields import MAX_ARRAY

__all__ = [
    "DUMMY_DIM",
    "GPU_INDEXES",
    "INSERT_ROWS",
    "IN_CHUNK",
    "MAX_LIMIT",
    "PASSAGE_FIELDS",
    "VARCHAR",
    "Collections",
    "check_passage_schema",
    "create_collections",
    "create_sparse_collection",
    "index_config",
    "load",
    "milvus_index_params",
    "search_params",
    "valid_name",
]

Call = Callable[..., Any]
"""The handle's call path: ``call(what, method, *args, **kwargs)`` runs ``client.<method>`` with one-line errors."""

MAX_LIMIT = 16_384
"""Milvus' largest ``limit`` of one search or query."""
IN_CHUNK = 4_096
"""Ids per ``field in [...]`` expression."""
INSERT_ROWS = 512
"""Rows per insert call."""
VARCHAR = 65_535
"""Milvus' longest VARCHAR, in bytes."""
DUMMY_DIM = 2
"""Milvus needs a vector field in every collection: the bookkeeping collections carry a 2-d one."""

PASSAGE_FIELDS = [
    "vid",
    "rowid",
    "gen",
    "passage_id",
    "doc_id",
    "position",
    "section",
    "title_path",
    "text",
    "meta",
    "extra",
    "content_hash",
    "has_vector",
    "exact",
]
"""The passage fields a record is read from (``vector`` and the leaf fields are asked for by name)."""
GPU_INDEXES = {"flat": "GPU_BRUTE_FORCE", "ivf": "GPU_IVF_FLAT", "hnsw": "GPU_CAGRA"}
"""The Milvus index used for each kind when ``IndexConfig.use_gpu`` is true (servers built with GPU support)."""


@dataclass(frozen=True)
class Collections:
    """The names of the Milvus collections that make up the rag-hier collection ``passages``."""

    passages: str
    """``C``: one row per passage version, with its vector."""
    documents: str
    """``C__docs``: one row per document version."""
    state: str
    """``C__state``: the one row holding the committed state (its existence marks a rag-hier collection)."""
    files: str
    """``C__files``: extension files in base64 chunks, by generation."""
    retired: str
    """``C__retired``: row versions a commit replaced or deleted, until they are physically deleted."""
    sparse: str
    """``C__sparse``: the sparse extensions' rows (created when the first one is attached)."""

    @classmethod
    def named(cls, name: str) -> Collections:
        """The collections of the rag-hier collection ``name``."""
        return cls(name, f"{name}__docs", f"{name}__state", f"{name}__files", f"{name}__retired", f"{name}__sparse")

    @property
    def always(self) -> tuple[str, ...]:
        """The collections every rag-hier collection has (loaded on open), the state first."""
        return (self.state, self.passages, self.documents, self.files, self.retired)

    @property
    def every(self) -> tuple[str, ...]:
        """Every collection this one may own (the state first)."""
        return (*self.always, self.sparse)


def valid_name(name: str) -> str:
    """``name`` if it can name a Milvus collection.

    Raises:
        StoreError: It cannot (letters, digits and ``_``, 1-200 long, not starting with a digit).

    """
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$", name):
        raise StoreError(f"{name!r} is not a valid Milvus collection name (letters, digits and '_', 1-200 long)")
    return name


def index_config(index: IndexConfig | str | Mapping[str, Any]) -> IndexConfig:
    """The :class:`IndexConfig` of ``index`` (a kind name, a dict of options, or one already built)."""
    if isinstance(index, IndexConfig):
        return index
    if isinstance(index, str):
        return IndexConfig(kind=index)  # type: ignore[arg-type]
    if isinstance(index, Mapping):
        return IndexConfig.from_dict(dict(index))
    raise ValueError(f"index must be 'flat', 'ivf', 'hnsw', an IndexConfig or a dict of options, got {index!r}")


def milvus_index_params(config: IndexConfig, *, count: int | None = None) -> dict[str, Any]:
    """The Milvus index of a rag-hier :class:`IndexConfig` (``index_type``, ``metric_type``, ``params``)."""
    kind = config.kind
    index_type = GPU_INDEXES[kind] if config.use_gpu else {"flat": "FLAT", "ivf": "IVF_FLAT", "hnsw": "HNSW"}[kind]
    params: dict[str, Any] = {}
    if kind == "ivf":
        nlist = config.nlist or (max(1, min(int(4 * math.sqrt(count)), count // 39)) if count else 1024)
        params["nlist"] = int(nlist)
    elif kind == "hnsw":
        params = {"M": config.hnsw_m, "efConstruction": config.ef_construction}
    return {"index_type": index_type, "metric_type": "IP", "params": params}


def search_params(config: IndexConfig, k: int) -> dict[str, Any]:
    """The search parameters of a dense search fetching ``k`` rows (``nprobe`` / ``ef`` from the configuration)."""
    if config.kind == "ivf":
        return {"metric_type": "IP", "params": {"nprobe": config.nprobe}}
    if config.kind == "hnsw":
        return {"metric_type": "IP", "params": {"ef": max(config.ef_search, k)}}
    return {"metric_type": "IP", "params": {}}


def _create(call: Call, what: str, name: str, schema: Any, index_params: Any) -> None:
    """Create collection ``name`` and its indexes without waiting for them or loading it (see :func:`load`).

    A server builds the (empty) indexes in the background; pymilvus' own wait polls every 0.5 s per index.
    """
    call(f"creating the {what} collection", "create_collection", name, schema=schema, consistency_level="Strong")
    call(f"indexing the {what} collection", "create_index", name, index_params, sync=False)


def load(call: Call, names: Iterable[str], *, parallel: bool = True, timeout: float | None = 60.0) -> None:
    """Load ``names`` and wait until every one is loaded.

    ``parallel``: ask for every load at once, then poll their states (a server loads them in parallel); else one
    load call each, which returns when it is loaded (Milvus Lite: the polls would only add round trips).
    """
    from pymilvus.client.types import LoadState

    names = list(names)
    if not parallel:
        for name in names:
            call("loading the collection", "load_collection", name)
        return
    for name in names:
        call("loading the collection", "load_collection", name, _async=True)
    deadline = time.monotonic() + (timeout or 600.0)
    pending = set(names)
    delay = 0.02
    while pending:
        for name in sorted(pending):
            state = call("loading the collection", "get_load_state", name).get("state")
            if state == LoadState.Loaded:
                pending.discard(name)
            elif state == LoadState.NotExist:
                raise StoreError(f"the Milvus collection {name!r} disappeared while it was being loaded")
        if pending:
            if time.monotonic() > deadline:
                raise StoreError(f"the Milvus collections {', '.join(sorted(pending))} did not load in time")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def create_collections(
    call: Call,
    client: Any,
    names: Collections,
    dimension: int,
    config: IndexConfig,
    caps: Capabilities,
    leaf_fields: Mapping[str, str] | None = None,
) -> None:
    """Create the passage, document, file, retired and state collections (the state last: it marks them complete).

    ``leaf_fields``: the passage field of each leaf extension → its kind of data, ``"leaf"`` (a nullable INT64 with a
    scalar index) or ``"leaves"`` (a nullable ARRAY of INT64); see :mod:`rag_hier.store.milvus.fields`. Only a
    server with ``caps.nullable_fields`` gets them. Scalar indexes are ``caps.scalar_index`` (INVERTED, or
    STL_SORT / Trie where the server has no INVERTED index).
    """
    from pymilvus import DataType

    def dummy_schema() -> Any:
        return client.create_schema(auto_id=False, enable_dynamic_field=False)

    def dummy_index() -> Any:
        ip = client.prepare_index_params()
        ip.add_index("dummy", index_type="FLAT", metric_type="IP")
        return ip

    def dummy_collection(what: str, name: str, /, **fields: dict[str, Any]) -> None:
        """Create collection ``name``: ``fields`` (name → ``add_field`` options) in order, then the dummy vector."""
        s = dummy_schema()
        for field, options in fields.items():
            s.add_field(field, **options)
        s.add_field("dummy", DataType.FLOAT_VECTOR, dim=DUMMY_DIM)
        _create(call, what, name, s, dummy_index())

    # passages
    s = client.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("vid", DataType.INT64, is_primary=True)
    s.add_field("rowid", DataType.INT64)
    s.add_field("gen", DataType.INT64)
    s.add_field("passage_id", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("doc_id", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("position", DataType.INT64)
    s.add_field("section", DataType.INT64)
    s.add_field("title_path", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("text", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("meta", DataType.JSON)
    s.add_field("extra", DataType.JSON)
    s.add_field("content_hash", DataType.VARCHAR, max_length=64)
    s.add_field("has_vector", DataType.BOOL)
    s.add_field("exact", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("vector", DataType.FLOAT_VECTOR, dim=dimension)
    indexed = {"rowid": True, "gen": True, "passage_id": False, "doc_id": False}  # field -> numeric
    for column, data in (leaf_fields or {}).items() if caps.nullable_fields else ():
        if data == "leaf":  # one per leaf extension (rag_hier.store.milvus.fields)
            s.add_field(column, DataType.INT64, nullable=True)
            indexed[column] = True
        else:  # "leaves"
            s.add_field(column, DataType.ARRAY, element_type=DataType.INT64, max_capacity=MAX_ARRAY, nullable=True)
    ip = client.prepare_index_params()
    params = milvus_index_params(config)
    ip.add_index("vector", index_type=params["index_type"], metric_type="IP", params=params["params"])
    for f, numeric in indexed.items():
        ip.add_index(f, index_type=caps.scalar_index(numeric))  # (Milvus Lite has no scalar index on ARRAY fields)
    _create(call, "passage", names.passages, s, ip)
    # documents
    s = dummy_schema()
    s.add_field("vid", DataType.INT64, is_primary=True)
    s.add_field("gen", DataType.INT64)
    s.add_field("doc_id", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("seq", DataType.INT64)
    s.add_field("title", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("meta", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("toc", DataType.VARCHAR, max_length=VARCHAR)
    s.add_field("dummy", DataType.FLOAT_VECTOR, dim=DUMMY_DIM)
    ip = dummy_index()
    ip.add_index("doc_id", index_type=caps.scalar_index(False))
    _create(call, "document", names.documents, s, ip)
    # extension files
    dummy_collection(
        "file",
        names.files,
        key={"datatype": DataType.VARCHAR, "is_primary": True, "max_length": 512},
        file={"datatype": DataType.VARCHAR, "max_length": 256},
        gen={"datatype": DataType.INT64},
        chunk={"datatype": DataType.INT64},
        data={"datatype": DataType.VARCHAR, "max_length": VARCHAR},
    )
    # retired row versions
    dummy_collection(
        "retired",
        names.retired,
        key={"datatype": DataType.VARCHAR, "is_primary": True, "max_length": 64},
        kind={"datatype": DataType.VARCHAR, "max_length": 4},
        target={"datatype": DataType.INT64},
        gen={"datatype": DataType.INT64},
    )
    # the state, created last: its existence marks a complete rag-hier collection (opening loads them all)
    dummy_collection(
        "state",
        names.state,
        key={"datatype": DataType.VARCHAR, "is_primary": True, "max_length": 64},
        value={"datatype": DataType.VARCHAR, "max_length": VARCHAR},
    )
    load(call, names.always, parallel=not caps.lite)


def create_sparse_collection(call: Call, client: Any, names: Collections, caps: Capabilities) -> None:
    """Create ``C__sparse``: the sparse extensions' rows (see :mod:`rag_hier.store.milvus.fields`).

    Raises:
        MissingCapabilityError: The server has no sparse vectors (the backend keeps such extensions as files).

    """
    from pymilvus import DataType

    caps.require("sparse_vectors", "a sparse-row collection", location=names.sparse)
    s = client.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("vid", DataType.INT64, is_primary=True)
    s.add_field("tag", DataType.VARCHAR, max_length=256)
    s.add_field("rowid", DataType.INT64)
    s.add_field("gen", DataType.INT64)
    s.add_field("vec", DataType.SPARSE_FLOAT_VECTOR)
    ip = client.prepare_index_params()
    ip.add_index("vec", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
    for f, numeric in (("tag", False), ("rowid", True), ("gen", True)):
        ip.add_index(f, index_type=caps.scalar_index(numeric))
    _create(call, "sparse", names.sparse, s, ip)
    load(call, (names.sparse,), parallel=not caps.lite)


def check_passage_schema(
    call: Call, names: Collections, *, location: str, dimension: Any, leaf_columns: Iterable[str]
) -> tuple[str, ...]:
    """Check that the passage collection has our fields and ``dimension``; returns the ``leaf_columns`` it has.

    Raises:
        StoreError: A field is missing (the collection was not created by this rag-hier).
        DimensionMismatchError: The vector field's dimension is not ``dimension``.

    """
    desc = call("describing the passage collection", "describe_collection", names.passages)
    fields = {f["name"]: f for f in desc.get("fields", [])}
    missing = [f for f in ["vector", *PASSAGE_FIELDS] if f not in fields]
    if missing:
        raise StoreError(
            f"{location}: the Milvus collection {names.passages!r} has another schema (no field "
            f"{', '.join(missing)}); it was not created by this rag-hier"
        )
    present = tuple(c for c in leaf_columns if c in fields)
    dim = int((fields["vector"].get("params") or {}).get("dim", -1))
    if dim != dimension:
        raise DimensionMismatchError(
            f"{location}: the Milvus collection holds {dim}-d vectors, its state says {dimension}-d"
        )
    return present
