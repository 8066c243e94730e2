"""A local store's extensions (:mod:`rag_hier.store.extensions`): attaching, reading, removing, marking changed."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rag_hier.errors import StoreError
from rag_hier.store.contract import StoreExtension
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.local.base import LocalBase

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend

logger = logging.getLogger(__name__)

__all__ = ["LocalExtensions"]


class LocalExtensions(LocalBase):
    """The extensions of :class:`~rag_hier.store.store.HierStore`, committed with the store."""

    @property
    def extensions(self) -> dict[str, StoreExtension]:
        """The store's extensions by name (document index, token index, tree, ...)."""
        with self._reading():
            return dict(self._core.extensions)

    def extension(self, name: str) -> StoreExtension | None:
        """The extension registered as ``name``, or ``None``."""
        with self._reading():
            return self._core.extensions.get(name)

    def extension_files(self, name: str) -> dict[str, bytes]:
        """The content of extension ``name``'s files as of the committed generation, its segments merged in.

        The files on disk lack the changes committed since as ``extension_segments`` rows; a copy of the
        extension elsewhere (another backend) takes these bytes instead. Without segments they are the
        committed files themselves; with segments the extension, which holds them replayed, writes them.
        """
        import tempfile

        from rag_hier.store.state import committed_path

        with self._reading():
            core = self._core
            info = core.state.get("extensions", {}).get(name)
            ext = core.extensions.get(name)
            if info is None or ext is None:
                raise StoreError(f"{self.path} has no {name!r} extension")
            if not info.get("segments"):
                return {
                    f: committed_path(self.path, f, core.state["files"][f], verify=False).read_bytes()
                    for f in info.get("files", [])
                }
            with tempfile.TemporaryDirectory(prefix="rag-hier-ext-") as tmp:
                paths = {f: Path(tmp) / f for f in ext.files()}
                ext.write(paths)
                return {f: path.read_bytes() for f, path in paths.items()}

    def add_extension(self, extension: StoreExtension, *, replace: bool = False) -> None:
        """Attach an extension, build it from the stored passages, and commit it with the store."""
        if not extension.name:
            raise StoreError(f"{type(extension).__name__} has no name")
        extension_class(extension.name)  # must be registered, or the store could not be reopened
        with self.batch():
            if extension.name in self._core.extensions and not replace:
                raise StoreError(f"{self.path} already has a {extension.name!r} extension (pass replace=True)")
            extension.build(cast("StoreBackend", self))
            self._core.extensions[extension.name] = extension
            self._core.dirty_ext.add(extension.name)
            self._core.rewrite_ext.add(extension.name)

    def ensure_extension(self, name: str, *, create: bool = True, **config: Any) -> StoreExtension:
        """The extension ``name``; when the store has none and ``create`` is true, one built with ``config``.

        Raises:
            StoreError: The store has no such extension and ``create`` is false or the store is read-only.

        """
        existing = self.extension(name)
        if existing is not None:
            return existing
        if not create:
            raise StoreError(f"the store at {self.path} has no {name!r} extension")
        if self.read_only:
            raise StoreError(f"the store at {self.path} has no {name!r} extension and was opened read-only")
        ext = extension_class(name).from_config(config)
        with self.batch():
            if name in self._core.extensions:  # added meanwhile (another handle or process)
                return self._core.extensions[name]
            logger.info("adding the %s extension to %s", name, self.path)
            self.add_extension(ext)
        return ext

    def remove_extension(self, name: str) -> None:
        """Detach an extension and delete its files at the next commit."""
        with self.batch():
            if self._core.extensions.pop(name, None) is None:
                raise StoreError(f"{self.path} has no {name!r} extension")

    def mark_extension_dirty(self, name: str) -> None:
        """Tell the store an extension changed outside a hook, so it is written at the next commit."""
        if name not in self._core.extensions:
            raise StoreError(f"{self.path} has no {name!r} extension")
        self._core.dirty_ext.add(name)
        if not self._core.extensions[name].DELTA_SEES_ALL_CHANGES:  # the delta may miss this change
            self._core.rewrite_ext.add(name)
