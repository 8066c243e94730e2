"""Extension files in Milvus: ``C__files`` holds each file of a generation as base64 chunks, checksummed.

A file ``F`` written under generation ``G`` is the rows ``F:G:0``, ``F:G:1``, ... (48,000 bytes each: 64,000
characters of base64, under VARCHAR's 65,535); the state records ``{"gen", "chunks", "sha256", "bytes"}`` per
file, and reading checks the chunk numbers and the checksum. Extensions are loaded from their files through a
temporary directory (``StoreExtension.load`` reads paths), and written the same way.
"""

from __future__ import annotations

import base64
import hashlib
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.milvus.base import MilvusBase
from rag_hier.store.milvus.fields import SparseRows
from rag_hier.store.milvus.schema import DUMMY_DIM

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend, StoreExtension

__all__ = ["BLOB_CHUNK", "ExtensionFiles"]

BLOB_CHUNK = 48_000
"""Bytes per file chunk (64,000 characters of base64, under VARCHAR's 65,535)."""


def _temporary() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="rag-hier-milvus-")


class ExtensionFiles(MilvusBase):
    """Reading and writing extension files in ``C__files``, and loading or writing an extension through them."""

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
        chunks = [data[i : i + BLOB_CHUNK] for i in range(0, len(data), BLOB_CHUNK)] or [b""]
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

    def _write_extension_files(self, name: str, ext: StoreExtension, gen: int) -> dict[str, Any]:
        """Write every file of ``ext`` under generation ``gen``; returns their entries for the state."""
        files = {}
        with _temporary() as tmp:
            paths = {f: Path(tmp) / f for f in ext.files()}
            ext.write(paths)
            for f, path in paths.items():
                if not path.is_file():
                    raise StoreError(f"extension {name!r} did not write {f}")
                files[f] = self._write_file(f, path.read_bytes(), gen)
        return files

    def _load_extension(self, name: str, info: Mapping[str, Any]) -> StoreExtension:
        """Extension ``name`` as the state records it: from its files, or (a sparse field) from its configuration."""
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
            if self._engine_data(name) != "sparse-rows" or files:
                raise StoreCorruptedError(f"{self.location}: extension {name!r} cannot be a sparse field")
            return ext  # its rows stay in Milvus (C__sparse); the client holds only a write batch's new rows
        store = cast("StoreBackend", self)
        with _temporary() as tmp:
            paths = {}
            for fname, finfo in files.items():
                path = Path(tmp) / fname
                path.write_bytes(self._read_file(fname, finfo))
                paths[fname] = path
            ext.load(store, paths)
        ext.verify(store)
        return ext

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
        with _temporary() as tmp:
            paths = {f: Path(tmp) / f for f in ext.files()}
            ext.write(paths)
            return {f: p.read_bytes() for f, p in paths.items()}

    def import_extension(self, name: str, config: Mapping[str, Any], files: Mapping[str, bytes]) -> None:
        """Attach an extension from its files as another store wrote them (inside a batch; no rebuild)."""
        b = self._require_batch()
        cls = extension_class(name)
        ext = cls.from_config(dict(config))
        store = cast("StoreBackend", self)
        with _temporary() as tmp:
            paths = {}
            for f, data in files.items():
                if f not in cls.FILES:
                    raise StoreError(f"extension {name!r} cannot own {f!r}")
                paths[f] = Path(tmp) / f
                paths[f].write_bytes(data)
            ext.load(store, paths)
        ext.verify(store)
        self._extensions[name] = ext
        b.dirty_ext.add(name)
        b.rebuilt.add(name)
