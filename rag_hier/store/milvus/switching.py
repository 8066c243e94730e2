"""Switching a Milvus collection's encoder in one commit: adopting another model, rolling back to an earlier one.

The switch is a write batch like any other (:mod:`.generations`): every passage with a vector gets a new row version
under generation ``G + 1`` holding the new model's vector (its other fields, leaves included, copied), the old
versions are listed as retired, extensions whose data follow the encoder (``encoder_dependency() == "rebuild"``:
the document index, the tree) are rebuilt, and the state row naming the new encoder is the commit point. Until then
no read sees a new vector; after it none sees an old one. A writer that dies before the commit point leaves the
previous model searchable (the next writer deletes the invisible rows); one that dies after it leaves the new one.

An adopted model is kept inside the collection, like a local store keeps it in its directory: its files are
written to ``C__files`` (``model/<name>/<file>``, base64 chunks checksummed, under the switch's generation) and the
recorded encoder names them (``model: "models/<name>"``, ``stored``, ``sha256`` over the directory, ``files``). A
client loads it through a local copy in the cache (``$RAG_HIER_CACHE`` or ``~/.cache/rag-hier``,
``milvus-models/<sha256>``), written once, checked against the digest, and shared by the collections holding that
model. The files stay while the current, previous or original encoder names them.
"""

from __future__ import annotations

import copy
import re
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import DimensionMismatchError, ModelChangedError, StoreCorruptedError, StoreError
from rag_hier.store.encoder_switch import EncodedPassages, same_encoder
from rag_hier.store.milvus.capabilities import TRUE
from rag_hier.store.milvus.model_files import REL_NAME, model_cache
from rag_hier.store.milvus.rows import Rows
from rag_hier.store.milvus.schema import PASSAGE_FIELDS
from rag_hier.store.models import MODELS_DIR, _walk, new_model_name, tree_digest
from rag_hier.store.records import ModelSwitch, SwitchDirection

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend

__all__ = ["Switching"]

_OPTIONS = ("normalize_embeddings", "query_prompt", "document_prompt", "max_seq_length")


class Switching(Rows):
    """``model_info``, ``encoder_for``, ``adopt_model`` and ``rollback_model`` on a Milvus collection."""

    @property
    def model_info(self) -> dict[str, Any]:
        """What the collection encodes with: ``current``, ``previous`` and ``original`` recorded configurations.

        ``previous`` is what a rollback returns to, ``original`` the model the collection was built with (recorded at
        its first switch); ``None`` where there is none.
        """
        with self._reading():
            state = copy.deepcopy(self._state)
        return {
            "current": state.get("encoder"),
            "previous": state.get("encoder_previous"),
            "original": state.get("encoder_original"),
        }

    def encoder_for(self, model: str | Path, *, device: str | None = None) -> DenseEncoder:
        """A :class:`DenseEncoder` for another model with this collection's recorded encoder options."""
        enc = self._state.get("encoder") or {}
        return DenseEncoder(
            str(model),
            device=device if device is not None else self._device,
            normalize_embeddings=enc.get("normalize_embeddings"),
            query_prompt=enc.get("query_prompt"),
            document_prompt=enc.get("document_prompt"),
            max_seq_length=enc.get("max_seq_length"),
        )

    def _encoding_rows(self) -> tuple[list[tuple[int, str]], list[str]]:
        """``(rowid, content hash)`` of every passage with a vector, and the text each is encoded from.

        In rowid order; :func:`rag_hier.store.encoder_switch.encode_passages` calls this inside a read.
        """
        rows = self._vector_rows(self._view())
        return [(int(r["rowid"]), str(r["content_hash"])) for r in rows], [
            self._record(r).to_passage().embedding_text for r in rows
        ]

    def _vector_rows(self, view: Any) -> list[dict[str, Any]]:
        fields = [*PASSAGE_FIELDS, "vector", *self._leaf_columns]
        rows = [r for r in self._passage_rows(TRUE, view, fields) if r["has_vector"]]
        return sorted(rows, key=lambda r: int(r["rowid"]))

    def check_switchable(self, what: str) -> dict[str, Any]:
        """The recorded encoder, if this handle may switch it (:meth:`adopt_model`); else a :class:`StoreError`."""
        return self._switchable(what)

    def _model_dir(self, enc: Mapping[str, Any]) -> Path:
        """A local directory holding the stored model ``enc`` names (copied from ``C__files`` once, checked)."""
        digest = str(enc.get("sha256", ""))
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise StoreCorruptedError(f"{self.location}: the stored model {enc.get('model')!r} has no valid digest")
        final = model_cache() / digest
        if final.is_dir() and (final / ".complete").is_file():
            return final
        name = str(enc["model"]).split("/", 1)[1]
        staging = final.parent / f".incoming-{digest[:16]}-{uuid.uuid4().hex[:8]}"
        try:
            for rel, info in sorted((enc.get("files") or {}).items()):
                if not REL_NAME.fullmatch(rel) or ".." in rel.split("/"):
                    raise StoreCorruptedError(f"{self.location}: the stored model names a file {rel!r}")
                path = staging / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(self._read_file(f"model/{name}/{rel}", info))
            if tree_digest(staging) != digest:
                raise StoreCorruptedError(f"{self.location}: the stored model {enc['model']!r} fails its digest")
            (staging / ".complete").write_bytes(b"")
            try:
                staging.rename(final)
            except OSError:  # another process put it there first
                if not (final / ".complete").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return final

    def _store_model(self, source: Path, gen: int) -> dict[str, Any]:
        """Write the model directory ``source`` into ``C__files`` under ``gen``; its entries for the state."""
        name = new_model_name(gen)
        files = {}
        for rel in _walk(source):
            text = rel.as_posix()
            if not REL_NAME.fullmatch(text) or len(text) > 180:
                raise StoreError(f"{source}: model file {text!r} cannot be stored in Milvus (plain names only)")
            files[text] = self._write_file(f"model/{name}/{text}", (source / rel).read_bytes(), gen)
        return {"model": f"{MODELS_DIR}/{name}", "stored": True, "sha256": tree_digest(source), "files": files}

    def _recorded(self, enc: Mapping[str, Any]) -> DenseEncoder:
        """A :class:`DenseEncoder` for a recorded configuration (a stored model: from the local copy)."""
        model = str(self._model_dir(enc)) if enc.get("stored") else str(enc["model"])
        encoder = DenseEncoder(
            model,
            device=self._device,
            normalize_embeddings=enc.get("normalize_embeddings"),
            query_prompt=enc.get("query_prompt"),
            document_prompt=enc.get("document_prompt"),
            max_seq_length=enc.get("max_seq_length"),
            weights_sha256=None if enc.get("stored") else enc.get("weights_sha256"),
        )
        encoder.weights_owner = f"the collection {self.location}"
        return encoder

    def _switchable(self, what: str) -> dict[str, Any]:
        if self.read_only:
            raise StoreError(f"{self.location} was opened read-only; {what} writes to it")
        current = self._state.get("encoder")
        if not current:
            raise StoreError(f"{self.location} records no encoder (its vectors come from outside); {what} needs one")
        for name, ext in sorted(self._extensions.items()):
            if ext.encoder_dependency() == "refuse":
                raise StoreError(
                    f"{self.location} has the {name!r} extension, which was trained for its current encoder and "
                    f"cannot follow a new one: remove it first (store.remove_extension({name!r})) and rebuild it "
                    "after the switch"
                )
        return dict(current)

    def adopt_model(
        self,
        model: str | Path,
        *,
        encoded: EncodedPassages | None = None,
        details: Mapping[str, Any] | None = None,
        show_progress_bar: bool = False,
        expected: Mapping[str, Any] | None = None,
    ) -> int:
        """Make ``model`` this collection's encoder, re-encoding every passage, in one commit.

        ``model``: a sentence-transformers directory every client can reach, or a hub name. Returns the committed
        generation. The model it replaces is kept for :meth:`rollback_model`. ``details``: facts recorded with it.
        ``expected``: the recorded encoder the caller measured against; if it is no longer the collection's at the
        commit, :class:`~rag_hier.errors.ModelChangedError` and nothing changes. ``encoded``: the passages already
        encoded by this model (:func:`~rag_hier.store.encoder_switch.encode_passages`); those written or changed
        since are encoded in the commit.
        """
        self._switchable("adopt_model()")
        source = Path(model)
        if not source.is_dir():
            raise StoreError(f"model directory {source} does not exist")
        encoder = self.encoder_for(source)
        cfg = {k: v for k, v in encoder.config().items() if k not in _OPTIONS} | {
            k: (self._state.get("encoder") or {}).get(k) for k in _OPTIONS
        }
        cfg["source"] = str(source)
        if details is not None:
            cfg["adopted"] = dict(details)
        cfg["adopted_at"] = int(self._state["generation"]) + 1  # kept through rollbacks (``since`` is not)
        return self._switch(cfg, encoder, expected, show_progress_bar, encoded)

    def rollback_model(self, *, to: str = "previous", show_progress_bar: bool = False) -> ModelSwitch:
        """Return to an earlier encoder (re-encoding every passage), in one commit (as the local store's)."""
        if to not in ("previous", "original"):
            raise ValueError(f"to must be 'previous' or 'original', got {to!r}")
        self._switchable("rollback_model()")
        info = self.model_info
        target = info[to]
        if not target:
            what = "previous model" if to == "previous" else "model it was built with recorded (it was never switched)"
            raise StoreError(f"{self.location} has no {what} to return to")
        if to == "original" and same_encoder(target, info["current"]):
            raise StoreError(f"{self.location} encodes with the model it was built with already")
        direction: SwitchDirection = "original" if to == "original" else "back"
        if to == "previous" and int(target.get("adopted_at", 0)) > int((info["current"] or {}).get("adopted_at", 0)):
            direction = "forward"  # a second rollback returns to the newer model the first one left
        encoder = self._recorded(target)
        generation = self._switch(dict(target), encoder, info["current"], show_progress_bar)
        return ModelSwitch(
            generation=generation,
            model=str(target.get("model")),
            previous=str((info["current"] or {}).get("model")),
            direction=direction,
        )

    def _switch(
        self,
        cfg: dict[str, Any],
        encoder: DenseEncoder,
        expected: Mapping[str, Any] | None,
        show_progress_bar: bool,
        encoded: EncodedPassages | None = None,
    ) -> int:
        override, checked = self._encoder_arg, self._encoder_checked
        try:
            with self.batch():
                b = self._require_batch()
                current = self._state.get("encoder")
                if expected is not None and not same_encoder(current, dict(expected)):
                    raise ModelChangedError(
                        f"{self.location} encodes with {(current or {}).get('model')!r} now, not "
                        f"{expected.get('model')!r} that this run measured as its base (another switch happened "
                        "meanwhile): nothing adopted; run again on the collection as it is now"
                    )
                rows = self._vector_rows(self._view())
                have: dict[tuple[int, str], int] = {}
                if encoded is not None:
                    have = {(int(r), h): i for i, (r, h) in enumerate(zip(encoded.rowids, encoded.hashes, strict=True))}
                todo = [j for j, r in enumerate(rows) if (int(r["rowid"]), str(r["content_hash"])) not in have]
                dim = int(self._state["dimension"])
                vectors = np.zeros((len(rows), dim), np.float32)
                for j, r in enumerate(rows):
                    i = have.get((int(r["rowid"]), str(r["content_hash"])))
                    if i is not None and encoded is not None:
                        if encoded.vectors.shape[1] != dim:
                            raise DimensionMismatchError(
                                f"the new model outputs {encoded.vectors.shape[1]}-d vectors; {self.location} holds "
                                f"{dim}-d vectors"
                            )
                        vectors[j] = encoded.vectors[i]
                if todo:  # passages not encoded yet (all of them, or those written since the given encoding)
                    texts = [self._record(rows[j]).to_passage().embedding_text for j in todo]
                    fresh = np.asarray(encoder.encode_documents(texts, show_progress_bar=show_progress_bar), np.float32)
                    if fresh.shape[1] != dim:
                        raise DimensionMismatchError(
                            f"the new model outputs {fresh.shape[1]}-d vectors; {self.location} holds {dim}-d vectors"
                        )
                    vectors[todo] = fresh
                self._at_step("switch_encoded")
                vid0 = self._alloc("next_vid", len(rows))
                new_rows = []
                for j, (row, vec) in enumerate(zip(rows, vectors, strict=True)):
                    passage = self._record(row).to_passage()
                    new_rows.append(self._passage_row(int(row["rowid"]), vid0 + j, b.gen, passage, vec, carry=row))
                    b.retired["p"].add(int(row["vid"]))
                self._insert(self._collections.passages, new_rows)
                if current and "encoder_original" not in self._state:
                    self._state["encoder_original"] = current
                source = cfg.pop("source", None)
                if source is not None:  # adopting: the model goes into the collection, under this generation
                    cfg.update(self._store_model(Path(source), b.gen))
                    self._at_step("switch_model_installed")
                self._state["encoder_previous"] = current
                self._state["encoder"] = {**cfg, "since": b.gen}
                self._encoder_arg = None  # this handle follows the collection's encoder from now on
                self._encoder_checked = False
                for name, ext in sorted(self._extensions.items()):
                    if ext.encoder_dependency() == "rebuild":
                        ext.build(cast("StoreBackend", self))
                        b.dirty_ext.add(name)
                        b.rebuilt.add(name)
                self._at_step("switch_before_commit")
        except BaseException:
            self._encoder_arg, self._encoder_checked = override, checked
            raise
        return int(self._state["generation"])
