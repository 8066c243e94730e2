"""Store extensions: extra indexes that live in a store directory and follow its writes.

Every retrieval method beyond flat dense search keeps something of its own next to the passages — a
document-level index (DHR), a binary token index (SVDR), a cluster tree (HCE/EHI). An extension is that
something. The store owns persistence and consistency: it tells each extension about every passage
added or removed and every document whose passages changed, writes the extension's files atomically in
the same commit as the data (temporary names, checksums in the committed state, renamed after the
SQLite commit), verifies them on load, and reloads the committed version on rollback.

An extension is named in the manifest by a registry key (never by an import path read from disk), so
opening a store from a stranger imports only rag-hier's own modules; and the files a stored state lists
for it must be among the names its class declares in :attr:`StoreExtension.FILES`, so a tampered state
cannot point it at any other file.

Writing one (a module in this folder, plus one line in :data:`KNOWN_EXTENSIONS`)::

    @register_extension
    class MyIndex(StoreExtension):
        name = "my-index"
        FILES = ("my.npz",)
        def files(self): return ["my.npz"]
        def write(self, paths): np.savez(paths["my.npz"], ...)
        def load(self, store, paths): ...
        def on_passages_added(self, store, rowids, passages, vectors): ...
        def on_passages_removed(self, store, rowids): ...
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from rag_hier.errors import StoreCorruptedError

if TYPE_CHECKING:
    from rag_hier.corpus.model import Passage
    from rag_hier.store.contract import StoreBackend as HierStore

__all__ = ["KNOWN_EXTENSIONS", "StoreExtension", "extension_class", "register_extension"]

_REGISTRY: dict[str, type[StoreExtension]] = {}

KNOWN_EXTENSIONS: dict[str, str] = {
    "doc-index": "rag_hier.store.extensions.doc_index",
    "tree": "rag_hier.store.extensions.tree",
    "token-index": "rag_hier.store.extensions.token_index",
    "svdr-vectors": "rag_hier.store.extensions.svdr_vectors",
    "sparse-embeddings": "rag_hier.store.extensions.sparse_embeddings",
}
"""Registry key → rag-hier module that defines it (imported on demand when a store names the key)."""

E = TypeVar("E", bound="type[StoreExtension]")


class StoreExtension:
    """Base class of store extensions (all hooks are no-ops by default).

    Subclasses set ``name`` and ``FILES`` and implement :meth:`files`, :meth:`write` and :meth:`load`, plus
    the hooks they need. Hooks run inside the store's write transaction; raising aborts the whole write.
    """

    name: ClassVar[str] = ""
    FILES: ClassVar[tuple[str, ...]] = ()
    """Every file name the extension may own (what :meth:`files` returns is always a subset)."""

    def config(self) -> dict[str, Any]:
        """JSON-ready configuration, passed back to :meth:`from_config` when the store is opened."""
        return {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StoreExtension:
        """Build an (empty) extension from :meth:`config`; :meth:`load` then reads its files."""
        return cls(**dict(config))

    def files(self) -> list[str]:
        """File names (inside the store directory) this extension owns now."""
        return list(self.FILES)

    def write(self, paths: Mapping[str, Path]) -> None:
        """Write the current state to ``paths`` (file name → temporary path to write)."""

    def load(self, store: HierStore, paths: Mapping[str, Path]) -> None:
        """Read the committed files (file name → path)."""

    def build(self, store: HierStore) -> None:
        """Populate from the passages already in ``store`` (called by :meth:`HierStore.add_extension`)."""

    def on_passages_added(
        self, store: HierStore, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """Passages were inserted under FAISS/SQLite ids ``rowids``.

        ``vectors`` are their dense vectors, rows aligned with ``passages`` (``None`` unless every passage
        came with one).
        """

    def on_passages_removed(self, store: HierStore, rowids: np.ndarray) -> None:
        """Passages with these ids were deleted (ids are never reused)."""

    def on_documents_changed(self, store: HierStore, doc_ids: set[str]) -> None:
        """Just before a commit: these documents gained, lost or changed passages (or were deleted)."""

    def verify(self, store: HierStore) -> None:
        """Check consistency with the store after loading; raise StoreCorruptedError on a mismatch."""

    def describe(self) -> dict[str, Any]:
        """Runtime facts for ``rag-hier info``."""
        return {}


def register_extension(cls: E) -> E:
    """Class decorator: make an extension loadable by its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if not cls.FILES:
        raise ValueError(f"{cls.__name__} declares no FILES")
    _REGISTRY[cls.name] = cls
    return cls


def extension_class(name: str, where: Path | str | None = None) -> type[StoreExtension]:
    """The class registered as ``name``, importing its rag-hier module if needed."""
    if not isinstance(name, str):
        raise StoreCorruptedError(f"{where or 'store'}: extension name {name!r} is not a string")
    if name not in _REGISTRY and name in KNOWN_EXTENSIONS:
        importlib.import_module(KNOWN_EXTENSIONS[name])
    if name not in _REGISTRY:
        raise StoreCorruptedError(
            f"{where or 'store'}: unknown extension {name!r}; this rag-hier knows "
            f"{', '.join(sorted(set(_REGISTRY) | set(KNOWN_EXTENSIONS))) or 'none'}"
        )
    return _REGISTRY[name]
