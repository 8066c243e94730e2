"""Store extensions: extra indexes that live in a store directory and follow its writes.

Every retrieval method beyond flat dense search keeps something of its own next to the passages — a
document-level index (DHR), a binary token index (SVDR), a cluster tree (HCE/EHI). An extension is that
something. The store owns persistence and consistency: it tells each extension about every passage
added or removed and every document whose passages changed, writes the extension's files atomically in
the same commit as the data (temporary names, checksums in the committed state, renamed after the
SQLite commit), verifies them on load, and reloads the committed version on rollback.

An extension is named in the manifest by a registry key (never by an import path read from disk), so
opening a store from a stranger imports only modules a registered method names (its
:class:`~rag_hier.index.methods.ExtensionSpec`); and the files a stored state lists for it must be among the
names its class declares in :attr:`StoreExtension.FILES`, so a tampered state cannot point it at any other file.

Writing one (a module in this folder, named with its kind of data by the method's registration in
:mod:`rag_hier.index.methods`)::

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
from pathlib import Path
from typing import TypeVar

from rag_hier.errors import StoreCorruptedError
from rag_hier.index.methods import extension_spec, extension_specs
from rag_hier.store.contract import StoreExtension

__all__ = ["StoreExtension", "extension_class", "known_extensions", "register_extension"]

_REGISTRY: dict[str, type[StoreExtension]] = {}


def known_extensions() -> dict[str, str]:
    """Every extension a store may name → the module defining it (those of the registered methods)."""
    return {n: e.module for n, e in extension_specs().items()}


E = TypeVar("E", bound="type[StoreExtension]")


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
    if name not in _REGISTRY:
        spec = extension_spec(name)
        if spec is not None:
            importlib.import_module(spec.module)
    if name not in _REGISTRY:
        raise StoreCorruptedError(
            f"{where or 'store'}: unknown extension {name!r}; this rag-hier knows "
            f"{', '.join(sorted(set(_REGISTRY) | set(known_extensions()))) or 'none'}"
        )
    return _REGISTRY[name]
