"""One collection's handles, as a framework adapter holds them: lazy create-or-open, read and write handles paired.

An adapter (Haystack's document store, LlamaIndex's vector store) names a collection (a directory ``path`` or a
Milvus ``uri``) and says how to build it; the :class:`StoreSession` owns what happens next, on the store contract
only (:class:`~rag_hier.store.contract.StoreBackend`, through :func:`~rag_hier.store.factory.open_store` and
:func:`~rag_hier.store.factory.create_store`):

- **Lazy create-or-open.** Nothing is opened until a handle is asked for. A collection that does not exist yet is
  created by the first handle asked for (creating is a write: that handle is the read-write one).
- **Handle pairing.** Reads go through a read-only handle (opening one never renames or deletes a file), opened
  when first asked for; the read-write handle is opened on the first write. With ``reads_use_writer`` (Haystack),
  reads go through the read-write handle once there is one; without (LlamaIndex), always through the read-only
  one. Handles share the backend's engine, so each sees the other's writes. A caller's own handle
  (``handle=``) serves both and is never closed here.
- **The dimension rule.** A Milvus collection (``uri=``) fixes its vector dimension when it is created: without a
  ``dimension`` and without a model, the size of the embeddings about to be written (``dimension_hint``) is used,
  and without those either, creating raises :class:`DimensionRequiredError`, which says what to pass.
- **Extensions.** How the adapter builds each extension (:class:`ExtensionSpec`: its configuration, and a check of
  an extension found in place) is given once; :meth:`StoreSession.ensure_extension` builds a missing one through
  the read-write handle, and the ``configured`` ones are ensured on every read-write handle the session opens
  (unless already ensured in this session: :meth:`StoreSession.ensure_configured`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rag_hier.errors import StoreError
from rag_hier.store.factory import create_store, open_store
from rag_hier.store.hit_table import HitRowsMode, check_hit_rows
from rag_hier.store.state import MANIFEST

if TYPE_CHECKING:
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.index.dense import IndexConfig
    from rag_hier.store.contract import StoreBackend, StoreExtension

__all__ = ["CreateOptions", "DimensionRequiredError", "ExtensionSpec", "StoreSession", "token_index_options"]

_OPEN_LOCK = threading.Lock()
"""Serializes creating and opening collections in this process (two sessions may race on a new location)."""


TOKEN_INDEX_OPTIONS = frozenset({"model", "max_length"})
"""What an adapter's ``token_index=`` may set: the tokenizer's model and the longest passage it indexes."""


def token_index_options(token_index: bool | Mapping[str, Any]) -> dict[str, Any] | None:
    """``None`` (no token index asked for) or the checked options of an adapter's ``token_index=`` argument.

    Raises:
        ValueError: Not a bool or a mapping, an option other than ``model`` / ``max_length``, or a ``max_length``
            that is not an integer >= 2 or None.

    """
    if isinstance(token_index, bool):
        return {} if token_index else None
    if isinstance(token_index, Mapping):
        unknown = set(token_index) - TOKEN_INDEX_OPTIONS
        if unknown:
            raise ValueError(f"token_index options must be among {sorted(TOKEN_INDEX_OPTIONS)}; got {sorted(unknown)}")
        max_length = token_index.get("max_length", 256)
        if max_length is not None and (
            isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2
        ):
            raise ValueError(f"token_index max_length must be an integer >= 2 or None, got {max_length!r}")
        return dict(token_index)
    raise ValueError(f"token_index must be True, False or a dict of token index options, got {token_index!r}")


class DimensionRequiredError(StoreError, ValueError):
    """A Milvus collection cannot be created: no dimension, no model, no embeddings to take it from."""


@dataclass(frozen=True)
class CreateOptions:
    """How a session creates its collection when there is none (what an adapter's init parameters say).

    Args:
        model: The model a new store records and encodes with (``None``: none; an ``encoder`` given to the
            session is used instead when it has one).
        dimension: The vector dimension of a new store (``None``: learnt from the first vectors; a Milvus
            collection then takes it from the model or the first write's embeddings, see :class:`StoreSession`).
        index: The dense index kind or configuration.
        similarity: ``"cosine"``, ``"dot_product"`` or ``None`` (the store's default).
        corpus: Corpus facts recorded at creation (e.g. an adapter's own settings).
        dimension_why: Why no dimension could be found, in :class:`DimensionRequiredError`'s message.
        dimension_remedy: What to pass instead, in the same message.

    """

    model: str | None = None
    dimension: int | None = None
    index: IndexConfig | str | Mapping[str, Any] = "flat"
    similarity: str | None = None
    corpus: Mapping[str, Any] | None = None
    dimension_why: str = "this store has no model to take it from"
    dimension_remedy: str = "pass dimension=... (or model=...)"


@dataclass(frozen=True)
class ExtensionSpec:
    """How an adapter builds one extension: its configuration, and what to check on one already there.

    Args:
        config: The keyword arguments of ``ensure_extension`` (a mapping, or a function of the read-write handle
            when the configuration depends on the store, e.g. its model).
        check: Called with the handle and the extension after ``ensure_extension`` (which keeps an existing one
            as it is): raise to refuse it, or log that it differs from what was asked.

    """

    config: Mapping[str, Any] | Callable[[StoreBackend], Mapping[str, Any]] = field(default_factory=dict)
    check: Callable[[StoreBackend, StoreExtension], None] | None = None

    def config_for(self, store: StoreBackend) -> dict[str, Any]:
        """The ``ensure_extension`` keyword arguments for ``store``."""
        return dict(self.config(store) if callable(self.config) else self.config)


class StoreSession:
    """One collection's read and write handles for an adapter, opened (or created) on first use.

    Args:
        path: The store directory. Give ``path``, ``uri`` or ``handle``.
        uri: A Milvus collection (``./file.db#name`` or ``http://host:19530#name``).
        connection: The Milvus connection options (``token``, ``db_name``, ``timeout``, ``client_options``), or a
            function giving them at each open (a token resolved when connecting, never kept).
        encoder: A function giving the dense encoder the handles share, called at each open with whether the
            collection is being created (the store created by the session then lends its own encoder to the later
            handles).
        device: The device passed when opening (or a function giving it at each open).
        create: How a missing collection is created.
        extensions: How each extension is built (:class:`ExtensionSpec`), by name; others with no configuration.
        configured: Extensions ensured on every read-write handle the session opens.
        reads_use_writer: Reads go through the read-write handle once this session has one.
        check: Called with every handle opened on an existing collection (not on one the session creates); an
            error closes the handle and propagates.
        handle: A caller's handle, used for reads and writes alike (and never closed by the session).
        hit_rows: Where the handles the session opens read the rows of dense hits: ``"sqlite"`` (default) or
            ``"memory"`` (a table of the rows of every passage with a vector, kept in memory while a handle is
            open; see :meth:`HierStore.open <rag_hier.store.HierStore.open>`). A local-store option: with ``uri``,
            ``"memory"`` raises ``ValueError``.
        allow_other_model: Encode with the ``encoder`` given even when it is not the model the store's vectors come
            from (logged as a warning); by default such a handle is refused
            (:class:`~rag_hier.errors.ModelMismatchError`). An encoder of a model the store encoded with before its
            current one (its base before ``tune`` adopted) is not refused: the store's current model is used.

    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        uri: str | None = None,
        connection: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
        encoder: Callable[[bool], DenseEncoder | None] | None = None,
        device: str | Callable[[], str | None] | None = None,
        create: CreateOptions | None = None,
        extensions: Mapping[str, ExtensionSpec] | None = None,
        configured: Sequence[str] = (),
        reads_use_writer: bool = True,
        check: Callable[[StoreBackend], None] | None = None,
        handle: StoreBackend | None = None,
        hit_rows: HitRowsMode = "sqlite",
        allow_other_model: bool = False,
    ) -> None:
        check_hit_rows(hit_rows)
        if handle is not None:
            if path is not None or uri is not None:
                raise ValueError("give one of path, uri and handle")
            if handle.path is None:  # a collection in a database: reopened by its location and connection
                uri, connection = handle.location, handle.connection_options
            else:
                path = handle.path
        elif (path is None) == (uri is None):
            raise ValueError(f"give either path or uri, not {'both' if path is not None else 'neither'}")
        if uri is not None and hit_rows != "sqlite":
            raise ValueError(
                f"hit_rows={hit_rows!r} is an option of a local store (a directory path); a Milvus collection "
                f"({uri}) reads its hits from Milvus: leave hit_rows out or pass 'sqlite'"
            )
        self.hit_rows: HitRowsMode = hit_rows
        self.allow_other_model = allow_other_model
        self.path: Path | None = Path(path) if path is not None else None
        self.uri = uri
        self._connection = connection
        self._encoder_factory = encoder
        self._created_encoder: DenseEncoder | None = None
        self._created = False
        self._device = device
        self.create_options = create or CreateOptions()
        self._specs = dict(extensions or {})
        self.configured = tuple(configured)
        self.reads_use_writer = reads_use_writer
        self._check = check
        self._given = handle
        self._lock = threading.RLock()
        self._reader: StoreBackend | None = handle
        self._writer: StoreBackend | None = handle
        self._ensured: set[str] = set()
        self._closed = False

    # -- where --------------------------------------------------------------------------------------------
    @property
    def location(self) -> str:
        """Where the collection lives: the directory, or the Milvus URI."""
        return str(self.path) if self.path is not None else cast(str, self.uri)

    def connection_options(self) -> dict[str, Any]:
        """The Milvus connection options now (empty for a directory)."""
        if self.uri is None:
            return {}
        options = self._connection() if callable(self._connection) else self._connection
        return dict(options or {})

    def exists(self) -> bool:
        """Whether the directory (or Milvus collection) holds a store."""
        if self._given is not None:
            return True
        if self.uri is None:
            return (cast(Path, self.path) / MANIFEST).is_file()
        from rag_hier.store.milvus.store import MilvusStore  # as the factory does: Milvus only for a uri

        return MilvusStore.exists(self.uri, **self.connection_options())

    # -- the handles ----------------------------------------------------------------------------------------
    @property
    def open_reader(self) -> StoreBackend | None:
        """The read-only handle, if one is open."""
        return self._reader

    @property
    def open_writer(self) -> StoreBackend | None:
        """The read-write handle, if one is open."""
        return self._writer

    def reader(self) -> StoreBackend:
        """The handle reads use, opened on first use (creating the collection when there is none: a write)."""
        # the open handle without the lock (what every read asks for; handles change only when opened or closed)
        writer, reader = self._writer, self._reader
        if writer is not None and self.reads_use_writer:
            return writer
        if reader is not None:
            return reader
        with self._lock:
            self._check_open()
            if self._writer is not None and self.reads_use_writer:
                return self._writer
            if self._reader is None:
                store, created = self._open(write=False)
                if created:  # nothing to read yet: the store was created, by a read-write handle
                    self._adopt_writer(store)
                    if self.reads_use_writer:
                        return store
                    store, _ = self._open(write=False)
                self._reader = store
            return self._reader

    def writer(self, dimension_hint: int | None = None) -> StoreBackend:
        """The read-write handle, opened (or the collection created) on first use, configured extensions ensured.

        ``dimension_hint``: the size of the embeddings about to be written, for a Milvus collection created now.
        """
        writer = self._writer
        if writer is not None:
            return writer
        with self._lock:
            self._check_open()
            if self._writer is None:
                store, _ = self._open(write=True, dimension_hint=dimension_hint)
                self._adopt_writer(store)
            return cast("StoreBackend", self._writer)

    def _adopt_writer(self, store: StoreBackend) -> None:
        """Make ``store`` the read-write handle, once the configured extensions are ensured on it."""
        try:
            for name in self.configured:
                if name not in self._ensured:
                    self.ensure_extension(name, store)
        except BaseException:
            store.close()
            raise
        self._writer = store

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store session on {self.location} is closed")

    def _encoder(self, creating: bool) -> DenseEncoder | None:
        if self._created:
            return self._created_encoder
        return self._encoder_factory(creating) if self._encoder_factory is not None else None

    def _hit_rows_option(self) -> dict[str, Any]:
        """``hit_rows=`` for opening and creating: passed only when not the default (a Milvus store has none)."""
        return {} if self.hit_rows == "sqlite" else {"hit_rows": self.hit_rows}

    def _device_now(self) -> str | None:
        return self._device() if callable(self._device) else self._device

    def _open(self, *, write: bool, dimension_hint: int | None = None) -> tuple[StoreBackend, bool]:
        """A new handle, and whether it created the collection (then it is read-write whatever ``write`` says)."""
        with _OPEN_LOCK:
            if not self.exists():
                return self._create(dimension_hint), True
            # an explicit encoder of a model the store encoded with before (a pipeline saved before `tune` adopted)
            # gives way to the store's current model; another model is refused unless allow_other_model is set
            store = cast(
                "StoreBackend",
                open_store(
                    self.path,
                    uri=self.uri,
                    encoder=self._encoder(False),
                    device=self._device_now(),
                    read_only=not write,
                    allow_other_model=self.allow_other_model,
                    **self._hit_rows_option(),
                    **self.connection_options(),
                ),
            )
            if self._check is not None:
                try:
                    self._check(store)
                except BaseException:
                    store.close()
                    raise
            return store, False

    def _create(self, dimension_hint: int | None) -> StoreBackend:
        """A new collection, with the dimension a Milvus collection needs up front."""
        options = self.create_options
        encoder = self._encoder(True)
        dimension = options.dimension
        if self.uri is not None and dimension is None and encoder is None and options.model is None:
            dimension = dimension_hint
            if dimension is None:
                raise DimensionRequiredError(
                    f"cannot create the Milvus collection {self.uri}: Milvus fixes the vector dimension when a "
                    f"collection is created and {options.dimension_why}; {options.dimension_remedy}"
                )
        store = cast(
            "StoreBackend",
            create_store(
                self.path,
                uri=self.uri,
                model=options.model,
                encoder=encoder,
                dimension=dimension,
                index=options.index,
                similarity=options.similarity,  # type: ignore[arg-type]  # checked by the store
                corpus=options.corpus,
                **self._hit_rows_option(),
                **self.connection_options(),
            ),
        )
        self._created, self._created_encoder = True, store.encoder  # one encoder for every handle
        return store

    # -- extensions -----------------------------------------------------------------------------------------
    def ensure_extension(self, name: str, store: StoreBackend | None = None) -> StoreExtension:
        """The extension ``name`` of ``store`` (default: the read-write handle), built as its spec says if missing.

        A read-only handle refuses to build one (``StoreError``).
        """
        spec = self._specs.get(name, ExtensionSpec())
        target = store if store is not None else self.writer()
        ext = target.ensure_extension(name, **spec.config_for(target))
        if spec.check is not None:
            spec.check(target, ext)
        self._ensured.add(name)
        return ext

    def ensure_configured(self) -> None:
        """Ensure the configured extensions now: checked where the read handle has them, built where it has not.

        The read-write handle is opened only when one is missing.
        """
        with self._lock:
            reader = self.reader()
            missing = []
            for name in self.configured:
                ext = reader.extension(name)
                if ext is None:
                    missing.append(name)
                    continue
                spec = self._specs.get(name)
                if spec is not None and spec.check is not None:
                    spec.check(reader, ext)
                self._ensured.add(name)
            for name in missing:
                self.ensure_extension(name)  # the read-write handle, opened now, builds every missing one

    # -- closing --------------------------------------------------------------------------------------------
    def close(self, *, final: bool = False) -> None:
        """Close the handles the session opened (a caller's ``handle`` stays open).

        The next use opens them again, unless ``final`` (then it raises ``StoreError``).
        """
        with self._lock:
            handles = [h for h in dict.fromkeys((self._writer, self._reader)) if h is not None and h is not self._given]
            self._reader = self._writer = self._given
            self._ensured.clear()
            self._closed = final
        for handle in handles:
            handle.close()
