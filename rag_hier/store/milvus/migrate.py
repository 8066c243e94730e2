"""Moving a collection between a local store directory and Milvus, without re-encoding anything.

Everything is copied as stored: documents (title, metadata, table of contents, in insertion order), passages
with their **rowids** (so the extensions' files, which are keyed by rowid, stay valid), their vectors (and the
exact float64 copies of vectors float32 cannot hold), and every extension's committed files, loaded and
verified against the copy. The target is written in one commit: it appears whole or not at all (an
interrupted migration leaves a local target directory removed, a Milvus target collection dropped).

``rag-hier migrate --store DIR --to URI`` and ``rag-hier migrate --store URI --to DIR`` call these.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.store.extensions.base import extension_class
from rag_hier.store.milvus.store import MilvusStore
from rag_hier.store.models import MODELS_DIR, install_model, new_model_name, stored_model_dir
from rag_hier.store.records import PassageRecord
from rag_hier.store.store import HierStore
from rag_hier.store.writes import Writer

logger = logging.getLogger(__name__)

__all__ = ["local_to_milvus", "milvus_to_local"]

_CHUNK = 4096


def _local_rows(store: HierStore) -> Iterator[list[tuple[PassageRecord, np.ndarray | None, str]]]:
    """The local store's passages in rowid chunks, with vectors and exact copies."""
    records = list(store.iter_records())
    for i in range(0, len(records), _CHUNK):
        part = records[i : i + _CHUNK]
        with_vec = [r for r in part if r.has_vector]
        exact = store.get_embeddings([r.passage_id for r in with_vec])
        vec32 = store.vectors(np.asarray([r.rowid for r in with_vec], np.int64)) if with_vec else None
        by: dict[int, tuple[np.ndarray, str]] = {}
        for j, (r, e) in enumerate(zip(with_vec, exact, strict=True)):
            assert vec32 is not None
            ex = ""
            if e is not None and e.dtype == np.float64:
                ex = base64.b64encode(np.asarray(e, "<f8").tobytes()).decode("ascii")
            by[r.rowid] = (vec32[j], ex)
        yield [(r, *by[r.rowid]) if r.rowid in by else (r, None, "") for r in part]


def _next_rowid(store: HierStore) -> int:
    row = store._core.db.execute("SELECT seq FROM sqlite_sequence WHERE name='passages'").fetchone()
    return (int(row[0]) if row else 0) + 1


def local_to_milvus(source: HierStore | str | Path, uri: str, **milvus_options: Any) -> MilvusStore:
    """Copy a local store into a new Milvus collection (``uri``, ``URI#collection``); returns it, open.

    Raises:
        StoreError: The target collection exists, or the copy failed (the target is dropped again).

    """
    src = source if isinstance(source, HierStore) else HierStore.open(source, read_only=True)
    try:
        state = src.manifest
        if src.dimension is None:
            raise StoreError(f"{src.location} holds no vectors yet: nothing fixes the Milvus collection's dimension")
        target = MilvusStore.create(
            uri,
            model=None,
            dimension=src.dimension,
            index=src.index_config,
            corpus=state.get("corpus", {}),
            similarity=src.similarity,
            **milvus_options,
        )
        try:
            with target.batch():
                encoder: dict[str, Any] | None = state.get("encoder")
                if encoder and encoder.get("stored") and src.path is not None:  # a tuned model: into the collection
                    model_dir = stored_model_dir(src.path, encoder)
                    encoder = {**encoder, **target._store_model(model_dir, target._require_batch().gen)}
                target._state["encoder"] = encoder
                for doc_id in src.document_ids():
                    doc = src.get_document(doc_id)
                    assert doc is not None
                    target.import_document(doc_id, doc["title"], doc["meta"], doc["toc"])
                for rows in _local_rows(src):
                    target.import_passages([r for r, _, _ in rows], [v for _, v, _ in rows], [e for _, _, e in rows])
                target._state["next_rowid"] = max(int(target._state["next_rowid"]), _next_rowid(src))
                for name, info in state.get("extensions", {}).items():
                    files = src.extension_files(name)  # the committed files with their segments merged in
                    target.import_extension(name, info.get("config", {}), files)
        except BaseException:
            with contextlib.suppress(Exception):
                target._batch = None
                target.drop()
            target.close()
            raise
        return target
    finally:
        if src is not source:
            src.close()


def milvus_to_local(source: MilvusStore | str, directory: str | Path, **milvus_options: Any) -> HierStore:
    """Copy a Milvus collection into a new local store directory; returns it, open.

    Raises:
        StoreError: ``directory`` is not new (or empty), or the copy failed (the directory is removed again).

    """
    src = source if isinstance(source, MilvusStore) else MilvusStore.open(source, read_only=True, **milvus_options)
    root = Path(directory)
    created = not root.exists()
    try:
        state = src.manifest
        target = HierStore.create(
            root,
            model=None,
            dimension=src.dimension,
            index=src.index_config,
            corpus=state.get("corpus", {}),
            similarity=src.similarity,
        )
        try:
            core = target._core
            with target.batch():
                encoder: dict[str, Any] | None = state.get("encoder")
                if encoder and encoder.get("stored"):  # a model kept inside the collection: into the store's models/
                    name = new_model_name(target.generation + 1)
                    digest = install_model(root, src._model_dir(encoder), name)
                    encoder = {k: v for k, v in encoder.items() if k != "files"}
                    encoder.update(model=f"{MODELS_DIR}/{name}", sha256=digest)
                core.state["encoder"] = encoder
                db = core.db
                for doc in src.raw_documents():
                    db.execute(
                        "INSERT INTO documents(doc_id, title, meta, toc) VALUES (?,?,?,?)",
                        (doc["doc_id"], doc["title"], _dumps(doc["meta"]), _dumps(doc["toc"])),
                    )
                writer = Writer(core, target, target._require_encoder)
                run: list[tuple[PassageRecord, np.ndarray | None, str]] = []

                def flush() -> None:
                    if not run:
                        return
                    _set_sequence(db, run[0][0].rowid - 1)
                    writer.insert_passages(
                        [r.to_passage() for r, _, _ in run],
                        [
                            None if v is None else (np.frombuffer(base64.b64decode(e), "<f8").copy() if e else v)
                            for _, v, e in run
                        ],
                    )
                    run.clear()

                for item in src.raw_rows():
                    if run and (item[0].rowid != run[-1][0].rowid + 1 or len(run) >= _CHUNK):
                        flush()
                    run.append(item)
                flush()
                _set_sequence(db, int(state["next_rowid"]) - 1)
                for name, info in state.get("extensions", {}).items():
                    _attach_local(target, name, info.get("config", {}), src.extension_files(name))
        except BaseException:
            target.close()
            if created:
                shutil.rmtree(root, ignore_errors=True)
            else:
                for p in root.iterdir():
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink()
            raise
        return target
    finally:
        if src is not source:
            src.close()


def _set_sequence(db: Any, seq: int) -> None:
    """Make SQLite's next passage rowid ``seq + 1``.

    ``sqlite_sequence`` has no unique key, so ``INSERT OR REPLACE`` would add a second ``passages`` row (and
    SQLite would go on from the first one: rowids after a gap were renumbered, and the extensions' rowids no
    longer matched); update the one row instead.
    """
    if db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'passages'", (seq,)).rowcount == 0:
        db.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('passages', ?)", (seq,))


def _attach_local(store: HierStore, name: str, config: Mapping[str, Any], files: Mapping[str, bytes]) -> None:
    """Load an extension from its files into a local store being written (no rebuild)."""
    import tempfile

    cls = extension_class(name)
    ext = cls.from_config(dict(config))
    with tempfile.TemporaryDirectory(prefix="rag-hier-migrate-") as tmp:
        paths = {}
        for f, data in files.items():
            if f not in cls.FILES:
                raise StoreError(f"extension {name!r} cannot own {f!r}")
            paths[f] = Path(tmp) / f
            paths[f].write_bytes(data)
        ext.load(store, paths)
    ext.verify(store)
    store._core.extensions[name] = ext
    store._core.dirty_ext.add(name)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
