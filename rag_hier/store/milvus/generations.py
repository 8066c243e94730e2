"""The generation log: how a Milvus collection commits, what a read sees, and how a writer recovers.

Milvus has no multi-row transaction, so a write is made atomic the way a log-structured store does it: new row
versions are inserted with ``gen = G + 1`` (invisible: every read filters ``gen <= G``), the versions they
replace are listed in ``C__retired`` (also under ``G + 1``), the extensions' changed files are written under
``G + 1``, and then the one state row is upserted with ``generation = G + 1`` — the commit point (a single-row
upsert is atomic). Afterwards the retired versions and old file chunks are deleted (:meth:`GenerationLog._recover`,
which also removes what a dead writer left). ``floor`` (raised by ``delete_all``) hides every row at or below it.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.store.milvus.base import KINDS, Batch, View
from rag_hier.store.milvus.blobs import ExtensionFiles
from rag_hier.store.milvus.field_sync import FieldSync
from rag_hier.store.milvus.fields import MAX_ARRAY, SparseRows
from rag_hier.store.milvus.filters import ids_expr, str_list
from rag_hier.store.milvus.model_files import stored_files
from rag_hier.store.milvus.schema import DUMMY_DIM, IN_CHUNK, VARCHAR
from rag_hier.store.schema import dumps

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend, StoreExtension

logger = logging.getLogger(__name__)

__all__ = ["FORMAT", "FORMAT_VERSION", "GenerationLog"]

FORMAT = "rag-hier-milvus"
FORMAT_VERSION = 1

_Self = TypeVar("_Self", bound="GenerationLog")


class GenerationLog(ExtensionFiles, FieldSync):
    """The state row, the view reads see, write batches with their commit and rollback, and recovery."""

    # ------------------------------------------------------------------------------------------------
    # the state row
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

    # ------------------------------------------------------------------------------------------------
    # what reads see
    # ------------------------------------------------------------------------------------------------
    def _sync(self, *, force: bool = False, state: dict[str, Any] | None = None) -> None:
        """Bring the handle to the committed generation (reload extensions whose files changed).

        ``state``: the collection state as just read (else it is read now).
        """
        if self._batch is not None or self._syncing or self._pinned:
            return
        if state is None:
            state = self._get_state()
        gen = int(state["generation"])
        if not force and self._loaded_files.get("__gen__") == gen:
            return
        self._state = state
        excluded: dict[str, set[int]] = {k: set() for k in KINDS}
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

    @contextlib.contextmanager
    def _reading(self) -> Iterator[View]:
        with self._lock:
            self._sync()
            yield self._view()

    @contextlib.contextmanager
    def reading(self: _Self) -> Iterator[_Self]:
        """Run several reads against one committed generation: ``with store.reading(): ...``.

        Every read inside the block answers from the generation current when it starts (the handle does not
        look for a newer commit until the block ends, which also saves a round trip per read); other threads
        of this process wait on this handle until it ends. Writers in other processes are not held up (Milvus
        has no lock to hold them): their new row versions are invisible to this generation, but a writer
        deletes the versions its commit replaced right after committing, so a block that outlives another
        process' commit may miss those rows. Keep the block short, and write nothing inside it (a write raises
        :class:`StoreError`, as on the local store).
        """
        with self._lock:
            self._sync()
            self._pinned += 1
            try:
                yield self
            finally:
                self._pinned -= 1
                if not self._pinned:  # what the block kept for its own reads goes with it
                    self._hit_rows = (-1, {})
                    self._meta_rows = None

    # ------------------------------------------------------------------------------------------------
    # write batches
    # ------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def batch(self: _Self) -> Iterator[_Self]:
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
            if self._pinned:  # as the local store: a write would leave the block's generation behind
                raise StoreError(f"{self.location}: cannot write inside store.reading() (a read of one generation)")
            self._sync()
            if self._settled_gen != int(self._state["generation"]):
                self._recover()
            self._batch = Batch(gen=int(self._state["generation"]) + 1, saved_state=copy.deepcopy(self._state))
            try:
                yield self
                self._commit()
            except BaseException:
                self._rollback()
                raise

    def _recover(self) -> None:
        """Delete what no committed generation owns; finish the deletions of committed ones."""
        names = self._collections
        gen, floor = int(self._state["generation"]), int(self._state.get("floor", 0))
        self._delete(names.passages, f"gen > {gen}")
        self._delete(names.documents, f"gen > {gen}")
        self._delete(names.retired, f"gen > {gen}")
        self._delete(names.files, f"gen > {gen}")
        if floor > 0:
            self._delete(names.passages, f"gen <= {floor}")
            self._delete(names.documents, f"gen <= {floor}")
        sparse = self._sparse_collection_present()
        if sparse:
            self._delete(names.sparse, f"gen > {gen}")
            if floor > 0:
                self._delete(names.sparse, f"gen <= {floor}")
            tags = [
                i["fields"]["sparse"]
                for i in self._state.get("extensions", {}).values()
                if "sparse" in (i.get("fields") or {})
            ]
            self._delete(names.sparse, f"not (tag in {str_list(tags)})" if tags else "vid >= 0")
        retired = self._retired_rows(f"gen <= {gen}")
        if retired:
            for kind, coll in (("p", names.passages), ("d", names.documents), ("s", names.sparse)):
                if kind == "s" and not sparse:
                    continue
                targets = [int(r["target"]) for r in retired if r["kind"] == kind]
                for i in range(0, len(targets), IN_CHUNK):
                    self._delete(coll, ids_expr("vid", targets[i : i + IN_CHUNK]))
            keys = [r["key"] for r in retired]
            for i in range(0, len(keys), IN_CHUNK):
                self._delete(names.retired, f"key in {str_list(keys[i : i + IN_CHUNK])}")
            self._excluded = {k: set() for k in KINDS}
        current = {f: int(i["gen"]) for e in self._state.get("extensions", {}).values() for f, i in e["files"].items()}
        current.update(stored_files(self._state))  # the models a kept encoder names (.switching)
        stale = self._query(names.files, "gen >= 0", ["key", "file", "gen"], what="listing files")
        drop = [r["key"] for r in stale if current.get(r["file"]) != int(r["gen"])]
        for i in range(0, len(drop), IN_CHUNK):
            self._delete(names.files, f"key in {str_list(drop[i : i + IN_CHUNK])}")
        self._settled_gen = gen

    def _write_extensions(self, b: Batch) -> tuple[dict[str, Any], list[str], bool]:
        """Write the extensions' changes under the batch's generation (sparse rows, leaf fields, files).

        Returns ``(their entries for the state, the sparse extensions synced, whether sparse rows were written)``.
        """
        leaf_fields = self._leaf_fields()
        extensions_state: dict[str, Any] = {}
        old_ext = self._state.get("extensions", {})
        synced: list[str] = []
        wrote_sparse = False
        leaf_plans: dict[str, tuple[StoreExtension, bool]] = {}
        for name, ext in self._extensions.items():
            old_fields = old_ext.get(name, {}).get("fields") or {}
            data = self._engine_data(name)
            if data == "sparse-rows" and (name not in old_ext or name in b.rebuilt or "sparse" in old_fields):
                full = name not in old_ext or name in b.rebuilt
                tag = f"{name}@{b.gen}" if full else str(old_fields["sparse"])
                if self._sync_sparse(ext, tag, full=full):
                    wrote_sparse = True
                synced.append(name)
                extensions_state[name] = {"config": ext.config(), "files": {}, "fields": {"sparse": tag}}
                continue
            fields: dict[str, Any] = {}
            column, _ = leaf_fields.get(name, ("", data))
            if column in self._leaf_columns and getattr(ext, "leaves_per_passage", 1) <= MAX_ARRAY:
                leaf_plans[column] = (ext, name not in old_ext or name in b.rebuilt or "leaf" not in old_fields)
                fields = {"leaf": column}
            files = dict(old_ext.get(name, {}).get("files", {}))
            if name in b.dirty_ext or name not in old_ext:
                files = self._write_extension_files(name, ext, b.gen)
            extensions_state[name] = {"config": ext.config(), "files": files, **({"fields": fields} if fields else {})}
        if leaf_plans:
            self._sync_leaves(leaf_plans)
        return extensions_state, synced, wrote_sparse

    def _commit(self) -> None:
        b = self._batch
        assert b is not None
        names = self._collections
        if b.changed_docs:
            changed, b.changed_docs = b.changed_docs, set()
            for name, ext in self._extensions.items():
                ext.on_documents_changed(cast("StoreBackend", self), changed)
                b.dirty_ext.add(name)
        extensions_state, synced, wrote_sparse = self._write_extensions(b)
        self._at_step("files_written")
        markers = [
            {"key": f"{kind}:{vid}", "kind": kind, "target": int(vid), "gen": b.gen, "dummy": [0.0] * DUMMY_DIM}
            for kind, vids in b.retired.items()
            for vid in sorted(vids)
        ]
        self._insert(names.retired, markers)
        self._at_step("before_commit")
        state = dict(self._state)
        state["generation"] = b.gen
        if b.floor is not None:
            state["floor"] = b.floor
        state["extensions"] = extensions_state
        view = self._view()
        state["counts"] = {
            "documents": self._count(names.documents, view.expr("d")),
            "passages": self._count(names.passages, view.expr("p")),
            "vectors": self._count(names.passages, f"has_vector == true and {view.expr('p')}"),
        }
        self._put_state(state)  # the commit point
        self._state = state
        self._batch = None
        self._excluded = {k: set(self._excluded.get(k, set())) | b.retired.get(k, set()) for k in KINDS}
        self._loaded_files = {"__gen__": b.gen} | {
            n: dumps([i.get("config"), i.get("files"), i.get("fields")]) for n, i in extensions_state.items()
        }
        for name in synced:  # committed to C__sparse: the client forgets them
            cast(SparseRows, self._extensions[name]).clear_rows()
        if wrote_sparse and self._is_lite():
            # Milvus Lite scores sparse vectors in Python and re-indexes its unflushed rows on every search;
            # sealing them once here lets it build a segment's index once and cache it, so searches stop paying
            # for that re-indexing. A server indexes growing segments itself: no flush there.
            try:
                self._call("sealing the sparse rows", "flush", names.sparse)
            except StoreError as exc:
                logger.warning(
                    "%s: could not flush %s (%s); searches stay correct, only slower", self.location, names.sparse, exc
                )
        try:
            self._at_step("after_commit")
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
