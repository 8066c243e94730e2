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

Passage rows also carry one nullable field per registered leaf extension (``tree_leaf``, ``ehi_leaves``): the
leaves the ``tree`` / ``ehi`` extensions assign, so beam search ends in one filtered dense search.

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

The class is assembled from one module per job: :mod:`.schema` (the collections, their schemas and indexes),
:mod:`.base` (the handle's state and its one call path), :mod:`.generations` (the state row, batches, commit,
rollback, recovery), :mod:`.blobs` (extension files as base64 chunks), :mod:`.field_sync` (sparse rows and leaf
fields written at a commit), :mod:`.reads`, :mod:`.search` and :mod:`.rows` (writes). This module is the front:
creating and opening, identity, the extensions, and the names tests replace (``_step``, ``FIELD_KINDS``: read
here at every use). Where an extension's data goes follows the kind its method registered
(:func:`rag_hier.store.milvus.fields.engine_data`), never its name.
"""

from __future__ import annotations

import copy
import importlib
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rag_hier._version import __version__
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import DimensionMismatchError, StoreError
from rag_hier.index.dense import IndexConfig
from rag_hier.index.methods import EngineData
from rag_hier.store.contract import SIMILARITIES, FilterPushdown, Similarity, StoreExtension
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.milvus.capabilities import Capabilities
from rag_hier.store.milvus.client import Connection
from rag_hier.store.milvus.fields import engine_data, leaf_extensions
from rag_hier.store.milvus.filters import str_list
from rag_hier.store.milvus.generations import FORMAT, FORMAT_VERSION
from rag_hier.store.milvus.schema import (
    GPU_INDEXES,
    check_passage_schema,
    create_collections,
    index_config,
    load,
    milvus_index_params,
    valid_name,
)
from rag_hier.store.milvus.search import MilvusRowids, Search
from rag_hier.store.milvus.switching import Switching
from rag_hier.store.models import check_given_encoder, recorded_encoder_key, still_given_encoder
from rag_hier.store.search_hook import DenseSearch

logger = logging.getLogger(__name__)

__all__ = ["FORMAT", "GPU_INDEXES", "MilvusRowids", "MilvusStore", "milvus_index_params"]


def _step(name: str) -> None:
    """A named point inside a commit; tests replace this to simulate a failure there."""


TUNER_MODULE = "rag_hier.tuning"
"""The tuning layer, looked up by name (the engine's stores do not import it)."""

FIELD_KINDS: frozenset[str] = frozenset({"sparse-rows", "leaf", "leaves"})
"""The kinds of extension data this version keeps in Milvus fields (an extension of another kind: files).

Tests and benchmarks empty it to reproduce the layout of earlier versions (every extension a file)."""


class MilvusStore(Switching, Search, DenseSearch):
    """A rag-hier collection in Milvus (Milvus Lite file or server) implementing the store contract.

    Create one with :meth:`create`, reopen it with :meth:`open` (or :meth:`HierStore.create(uri=...)
    <rag_hier.store.HierStore.create>` / ``HierStore.open(uri=...)``). Reads and writes behave as the local
    store's (see :class:`~rag_hier.store.HierStore`); the module docstring says how a commit is made atomic.
    """

    filter_pushdown: ClassVar[FilterPushdown] = FilterPushdown(numbers=False, max_members=1_000)
    """Filters become Milvus expressions: equality and lists up to 1,000 members; numbers are checked in Python."""
    can_forget_dimension: ClassVar[bool] = False
    """A collection's dimension is fixed at creation."""
    remote_vectors = True
    """Vectors live in Milvus: strategies restrict a search (``search_dense(allowed=...)``) rather than gather
    vectors into the client (see :func:`rag_hier.store.contract.remote_vectors`)."""

    def _field_kinds(self) -> frozenset[str]:
        """The kinds of extension data kept in Milvus fields on this server (the others: files).

        Sparse rows need ``sparse_vectors``, leaf fields ``nullable_fields`` (:mod:`.capabilities`).
        """
        caps = self._caps
        kinds = set(FIELD_KINDS)
        if not caps.sparse_vectors:
            kinds.discard("sparse-rows")
        if not caps.nullable_fields:
            kinds -= {"leaf", "leaves"}
        return frozenset(kinds)

    def _engine_data(self, name: str) -> EngineData:
        """Where extension ``name``'s data goes: its registered kind if kept in fields here, else files."""
        data = engine_data(name)
        return data if data in self._field_kinds() else "files"

    def _leaf_fields(self) -> dict[str, tuple[str, EngineData]]:
        """Each leaf extension kept in a passage field → ``(the field, "leaf" or "leaves")``."""
        kinds = self._field_kinds()
        return {n: f for n, f in leaf_extensions().items() if f[1] in kinds}

    @property
    def capabilities(self) -> Capabilities:
        """What the Milvus server offers, read from its version once per connection (:mod:`.capabilities`)."""
        return self._caps

    def _at_step(self, name: str) -> None:
        _step(name)

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
            names = store._collections
            if store._call("listing collections", "has_collection", names.state):
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
            if store._call("listing collections", "has_collection", names.passages):
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
            every_leaf_field = dict(leaf_extensions().values())
            create_collections(store._call, conn.client, names, dimension, config, store._caps, every_leaf_field)
            store._leaf_columns = tuple(column for column, _ in store._leaf_fields().values())
            store._put_state(state)
            store._state = state
            store._override_key = store.encoder_key
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
            names = store._collections
            present = set(store._call("listing collections", "list_collections"))  # one round trip for all
            if names.state not in present:
                if names.passages in present:
                    raise StoreError(
                        f"{store.location}: the Milvus collection {name!r} was not created by rag-hier "
                        "(no state collection); choose another name"
                    )
                raise StoreError(f"{store.location}: no rag-hier collection {name!r} there")
            load(
                store._call,
                [*names.always, *([names.sparse] if names.sparse in present else [])],
                parallel=not store._caps.lite,
            )
            store._has_sparse = names.sparse in present
            store._load_state()
            store._check_schema()
            check_given_encoder(
                encoder, store._state.get("encoder"), location=store.location, allow_other_model=allow_other_model
            )
            if not read_only:
                with store._lock:
                    store._recover()
                store._sync(force=True)
            else:  # nothing happened since the state was read: sync to it without reading it again
                store._sync(force=True, state=store._state)
            store._override_key = store.encoder_key
        except BaseException:
            store.close()
            raise
        return store

    def reopen(self, *, read_only: bool = False) -> MilvusStore:
        """Another handle on this collection, with the same connection options and encoder.

        A handle opened with ``encoder=`` passes it on; otherwise the new handle follows the collection's recorded
        model (starting with the encoder this handle has loaded for it).
        """
        other = type(self).open(
            self._conn.uri,
            collection=self.name,
            encoder=self._encoder_arg,
            device=self._device,
            read_only=read_only,
            allow_other_model=True,  # this handle's encoder, checked when it was opened
            **self._conn.options,
        )
        other._encoders.update(self._encoders)  # keyed by the recorded model's digest: valid for any handle
        return other

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

    def _check_schema(self) -> None:
        """The passage collection must have our fields and the recorded dimension (notes its leaf fields)."""
        self._leaf_columns = check_passage_schema(
            self._call,
            self._collections,
            location=self.location,
            dimension=self._state.get("dimension"),
            leaf_columns=[column for column, _ in self._leaf_fields().values()],
        )

    def _check_dimension(self, dimension: int) -> None:
        if self._state.get("dimension") != dimension:
            raise DimensionMismatchError(
                f"{self.location} holds {self._state.get('dimension')}-d vectors, not {dimension}-d"
            )

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
        enc = self._state.get("encoder")
        if self._encoder_arg is not None:
            self._encoder_arg = still_given_encoder(self._encoder_arg, self._override_key, enc, self.location)
            if self._encoder_arg is not None:
                return self._encoder_arg
        if not enc:
            return None
        tag = (self._device, enc.get("model"), enc.get("sha256"), enc.get("weights_sha256"))
        cached = self._encoders.get(tag)
        if cached is None:
            self._encoders.clear()  # one model at a time: the collection's current one
            cached = self._encoders[tag] = self._recorded(enc)  # a stored model: from its local copy
        return cached

    @property
    def encoder_key(self) -> tuple[Any, ...] | None:
        """Which recorded encoder this handle's state holds: changes whenever the collection's model is switched.

        A text search compares it before encoding its queries and after searching (which brings the handle to the
        committed generation): when another handle switched the model in between, the queries are encoded again
        with the new model and searched within one read block.
        """
        return recorded_encoder_key(self._state.get("encoder"))

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
                    tag, sparse = self._field(n, "sparse"), self._collections.sparse
                    where = f"tag == {str_list([tag])[1:-1]} and {self._view().expr('s')}"
                    held = self._count(sparse, where) if self._sparse_collection_present() else 0
                    out["extensions_state"][n] = {"milvus": {"collection": sparse, "tag": tag, "rows": held}}
            return out

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

    def snapshot(self, target: str | Path) -> Path:
        """Not offered in place: copy a collection out with ``rag-hier migrate`` (a verified local directory)."""
        raise StoreError(
            f"{self.location}: copy a Milvus collection to a directory with `rag-hier migrate --store {self.location} "
            f"--to {target}` (rag_hier.store.milvus.migrate.milvus_to_local)"
        )

    # ------------------------------------------------------------------------------------------------
    # tuning: the model switch is .switching's (adopt_model, rollback_model, model_info)
    # ------------------------------------------------------------------------------------------------
    def tune(self, queries: Any = None, qrels: Any = None, **options: Any) -> Any:
        """Fine-tune this collection's model on judged queries; adopt the result only when it measures better.

        As :meth:`HierStore.tune <rag_hier.store.HierStore.tune>` (same options and report); the adoption is
        :meth:`adopt_model`: one commit, the model kept inside the collection, undone by :meth:`rollback_model`.
        """
        tuner = getattr(importlib.import_module(TUNER_MODULE), "store_tune", None)  # a plugin lookup, by name
        if tuner is None:  # pragma: no cover - rag_hier.tuning defines it
            raise StoreError(f"tuning is not available: {TUNER_MODULE} has no store_tune")
        return tuner(self, queries, qrels, **options)

    # ------------------------------------------------------------------------------------------------
    # maintenance
    # ------------------------------------------------------------------------------------------------
    def optimize(self) -> None:
        """Compact the passage, document and sparse collections, and wait until Milvus is done.

        Milvus merges their small segments and drops the rows deleted since (replaced and deleted row versions).
        Reads and writes go on meanwhile and see the same rows; call it after a burst of writes.
        """
        if self.read_only:
            raise StoreError(f"{self.location} was opened read-only")
        names = self._collections
        targets = [names.passages, names.documents, *([names.sparse] if self._sparse_collection_present() else [])]
        jobs = [self._call("compacting a collection", "compact", name) for name in targets]
        deadline = time.monotonic() + max(60.0, 10 * (self._conn.timeout or 30.0))
        delay = 0.05
        for job in jobs:
            while str(self._call("compacting a collection", "get_compaction_state", job)) != "Completed":
                if time.monotonic() > deadline:
                    raise StoreError(f"{self.location}: Milvus did not finish compacting in time (job {job})")
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def index_meta_field(self, field: str) -> None:
        """Build the server's index on a top-level metadata key (``"category"`` or ``"meta.category"``).

        An INVERTED index on the JSON path ``meta["category"]``, typed by the values stored there (text, or
        numbers); filters on that key then use it, with the same answers. Needs a server with JSON path indexes
        (``capabilities.json_path_index``: Milvus 2.5.11); others raise
        :class:`~rag_hier.store.milvus.capabilities.MissingCapabilityError`. Indexing a key twice does nothing.

        Raises:
            StoreError: The key holds no value yet, or values of several kinds (one index has one type).

        """
        from rag_hier.store import meta_index, meta_stats

        key = meta_index.check_field(field)
        if self.read_only:
            raise StoreError(f"{self.location} was opened read-only")
        self._caps.require("json_path_index", f"indexing metadata field {key!r}", location=self.location)
        if key in self.meta_indexes:
            return
        kinds = {meta_stats.kind_of(m[key]) for m in self._column_of_matching(None, "meta") if m.get(key) is not None}
        if not kinds or len(kinds - {"int", "float"}) > 1 or (kinds & {"int", "float"} and kinds - {"int", "float"}):
            raise StoreError(
                f"{self.location}: cannot index metadata field {key!r}: a Milvus JSON path index has one type, and "
                f"the stored values are of {', '.join(sorted(kinds)) or 'no'} kind"
            )
        cast = "DOUBLE" if kinds <= {"int", "float"} else {"str": "VARCHAR", "bool": "BOOL"}.get(kinds.pop())
        if cast is None:
            raise StoreError(f"{self.location}: cannot index metadata field {key!r}: its values are lists or objects")
        ip = self._conn.client.prepare_index_params()
        ip.add_index(
            "meta",
            index_type="INVERTED",
            index_name=f"meta__{key.replace('-', '_')}",
            params={"json_path": f'meta["{key}"]', "json_cast_type": cast},
        )
        self._call(f"indexing metadata field {key!r}", "create_index", self._collections.passages, ip)

    @property
    def meta_indexes(self) -> list[str]:
        """The metadata keys the server indexes (:meth:`index_meta_field`)."""
        if not self._caps.json_path_index:
            return []
        out = []
        for name in self._call("listing indexes", "list_indexes", self._collections.passages, field_name="meta"):
            desc = self._call("describing an index", "describe_index", self._collections.passages, name)
            path = str((desc or {}).get("json_path", ""))
            if path.startswith('meta["') and path.endswith('"]'):
                out.append(path[6:-2])
        return sorted(out)

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
            if name in self._leaf_fields():  # a tree or EHI changed outside the hooks: every passage's leaf is checked
                b.rebuilt.add(name)

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
