"""Switching a local store's encoder: adopting a tuned model, rolling back (:mod:`rag_hier.store.encoder_switch`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import StoreError
from rag_hier.store.encoder_switch import (
    EncodedPassages,
    check_extensions,
    encode_passages,
    same_encoder,
    switch_encoder,
)
from rag_hier.store.local.base import LocalBase
from rag_hier.store.records import ModelSwitch, SwitchDirection
from rag_hier.store.schema import dumps

__all__ = ["LocalSwitching"]


class LocalSwitching(LocalBase):
    """What :class:`~rag_hier.store.store.HierStore` encodes with, and switching it in one commit."""

    @property
    def model_info(self) -> dict[str, Any]:
        """What the store encodes with, without loading it: the recorded encoder, and the one a rollback returns to.

        ``current`` and ``previous`` are the recorded configurations (``None`` when there is none); ``original``
        the model the store was built with (recorded at its first switch; ``None`` before), which
        ``rollback_model(to="original")`` returns to. A stored model (``stored``) lives in the store directory
        under ``model``, checked by ``sha256`` before loading; ``adopted`` holds what a tuning run recorded when it
        adopted the model.
        """
        with self._reading():
            state = json.loads(dumps(self._core.state))
        return {
            "current": state.get("encoder"),
            "previous": state.get("encoder_previous"),
            "original": state.get("encoder_original"),
        }

    def encoder_for(self, model: str | Path, *, device: str | None = None) -> DenseEncoder:
        """A :class:`DenseEncoder` for another model with this store's recorded encoder options.

        Normalization, prompts and sequence length are the store's, so the model's vectors compare as a search of
        this store compares them: what :meth:`adopt_model` encodes with, and what tuning scores a candidate with.
        """
        return self._recorded_encoder(self._core.state.get("encoder") or {}, str(model), device)

    def check_switchable(self, what: str) -> dict[str, Any]:
        """The recorded encoder, if this handle may switch it (:meth:`adopt_model`); else a :class:`StoreError`.

        Refused: a read-only handle, a store that records no encoder, an extension that cannot follow a new one.
        """
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only; {what} writes to it")
        current = self._core.state.get("encoder")
        if not current:
            raise StoreError(
                f"the store at {self.path} records no encoder (its vectors come from outside); {what} needs one"
            )
        check_extensions(self)
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
        """Make the sentence-transformers model directory ``model`` this store's encoder, in one commit.

        The model is copied into the store (``models/<name>``, checked by digest whenever it is loaded), every
        passage is re-encoded with it and the passage index rebuilt; readers see the old model with the old
        vectors or the new ones, never a mix. The model it replaces is kept for :meth:`rollback_model` until
        the next adoption. Extensions built on the vectors (tree, document index) are rebuilt in the same
        commit; one that cannot follow a new encoder (EHI's trained indexer) makes this refuse.
        ``rag-hier tune`` (:mod:`rag_hier.tuning`) calls this only for a model that measured better.

        Args:
            model: A sentence-transformers model directory (e.g. a fine-tuned copy of the store's model).
            encoded: The passages already encoded by this model (:func:`~rag_hier.store.encoder_switch.
                encode_passages`), so they are not encoded twice; passages written since are encoded here.
            details: Facts recorded with the model (what trained it, its measured scores).
            show_progress_bar: Show progress while encoding.
            expected: The recorded encoder (``model_info["current"]``) the caller measured the model against:
                adopted only if it is still the store's at the commit, else
                :class:`~rag_hier.errors.ModelChangedError` and the store is unchanged (two tuning runs, or a
                tuning run and a rollback, at once).

        Returns:
            The committed generation.

        Raises:
            ModelChangedError: ``expected`` is no longer the store's model.

        """
        self.check_switchable("adopt_model()")
        source = Path(model)
        if not source.is_dir():
            raise StoreError(f"model directory {source} does not exist")
        encoder = self.encoder_for(source)
        if encoded is None:
            encoded = encode_passages(self, encoder, show_progress_bar=show_progress_bar)
        return switch_encoder(
            self,
            source=source,
            encoded=encoded,
            encoder=encoder,
            details=dict(details) if details is not None else None,
            show_progress_bar=show_progress_bar,
            expected=dict(expected) if expected is not None else None,
        )

    def rollback_model(self, *, to: str = "previous", show_progress_bar: bool = False) -> ModelSwitch:
        """Return to an earlier encoder (re-encoding every passage), in one commit.

        ``to="previous"`` (default) returns to the encoder used before the last switch; the model left becomes the
        one a further rollback returns to (a second rollback rolls forward again). ``to="original"`` returns to the
        model the store was built with, whatever was adopted since.

        Returns:
            A :class:`~rag_hier.store.ModelSwitch`: the committed ``generation``, the ``model`` the store encodes
            with now, the ``previous`` one it left and the ``direction`` (``"back"``, ``"forward"`` or
            ``"original"``); ``print(switch)`` gives one line.

        Raises:
            StoreError: No such model to return to, or the store is already on it; the store's model changed while
                the passages were being encoded (:class:`~rag_hier.errors.ModelChangedError`).

        """
        if to not in ("previous", "original"):
            raise ValueError(f"to must be 'previous' or 'original', got {to!r}")
        self.check_switchable("rollback_model()")
        info = self.model_info
        target = info[to]
        if not target:
            what = "previous model" if to == "previous" else "model it was built with recorded (it was never switched)"
            raise StoreError(f"the store at {self.path} has no {what} to return to")
        if to == "original" and same_encoder(target, info["current"]):
            raise StoreError(f"the store at {self.path} encodes with the model it was built with already")
        direction: SwitchDirection = "original" if to == "original" else "back"
        if to == "previous" and _adopted_at(target) > _adopted_at(info["current"]):
            direction = "forward"  # a second rollback returns to the newer model the first one left
        encoder = self._recorded_encoder(target)
        encoded = encode_passages(self, encoder, show_progress_bar=show_progress_bar)
        generation = switch_encoder(
            self,
            source=None,
            target=target,
            encoded=encoded,
            encoder=encoder,
            show_progress_bar=show_progress_bar,
            expected=info["current"],
        )
        return ModelSwitch(
            generation=generation,
            model=str(target.get("model")),
            previous=str((info["current"] or {}).get("model")),
            direction=direction,
        )


def _adopted_at(encoder: Any) -> int:
    """The generation a stored model was adopted at (its name ``models/g<N>-...``); 0 for a model outside the store."""
    found = re.fullmatch(r"models/g(\d+)-[0-9a-f]+", str((encoder or {}).get("model", "")))
    return int(found.group(1)) if found else 0
