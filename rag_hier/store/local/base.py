"""What every part of a local store handle shares: its directory, its core, its encoder, its reads, filter → rows.

:class:`LocalBase` is the bottom of :class:`~rag_hier.store.store.HierStore`: the other parts (:mod:`.reads`,
:mod:`.meta_aggregates`, :mod:`.dense`, :mod:`.writing`, :mod:`.switching`, :mod:`.extensions`) are mixins over
it, each one job; the front (:mod:`rag_hier.store.store`) adds creating and opening, batches and snapshots.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import DimensionMismatchError, StoreError
from rag_hier.store import meta_index
from rag_hier.store.contract import Filters
from rag_hier.store.core import StoreCore
from rag_hier.store.filters import Refined
from rag_hier.store.hit_table import HitRowsMode, check_hit_rows
from rag_hier.store.models import recorded_encoder_key, still_given_encoder, stored_model_dir
from rag_hier.store.records import PassageRecord, records_by_rowid
from rag_hier.store.sql_filters import select_matching

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreBackend


__all__ = ["LocalBase"]


class LocalBase:
    """The state of a handle on a store directory (the shared engine is ``self._core``)."""

    path: Path
    read_only: bool
    _core: StoreCore

    def __init__(
        self,
        path: Path,
        encoder: DenseEncoder | None,
        read_only: bool,
        device: str | None = None,
        hit_rows: HitRowsMode = "sqlite",
    ) -> None:
        self.path = path
        self.hit_rows_mode: HitRowsMode = check_hit_rows(hit_rows)
        """Where this handle's dense searches read their hit rows: ``"sqlite"`` or ``"memory"`` (see ``open``)."""
        self.read_only = read_only
        self._encoder_arg = encoder
        self._device = device
        self._encoder_checked = False
        self._closer: weakref.finalize | None = None
        self._override_key: Any = None  # the recorded encoder an explicit encoder= was given for

    def _attach(self, core: StoreCore) -> None:
        self._core = core
        memory = self.hit_rows_mode == "memory"
        if memory:
            core.use_hit_table()
        self._closer = weakref.finalize(self, core.release, hit_table=memory)

    def _reading(self) -> contextlib.AbstractContextManager[None]:
        return self._core.reading(cast("StoreBackend", self))  # the front implements the contract

    @property
    def dimension(self) -> int | None:
        """Vector dimension (``None`` until the first vector for a store without encoder)."""
        dim = self._core.state.get("dimension")
        return int(dim) if dim is not None else None

    @property
    def encoder(self) -> DenseEncoder | None:
        """The store's dense encoder (``None`` for stores fed with external vectors)."""
        enc = self._core.state.get("encoder")
        if self._encoder_arg is not None:
            self._encoder_arg = still_given_encoder(
                self._encoder_arg, self._override_key, enc, f"the store at {self.path}"
            )
            if self._encoder_arg is not None:
                return self._encoder_arg
        if not enc:
            return None
        key = self._device
        cached = self._core.encoders.get(key)
        tag = self.encoder_key
        if cached is None or self._core.encoder_tags.get(key) != tag:
            cached = self._core.encoders[key] = self._recorded_encoder(enc)
            self._core.encoder_tags[key] = tag
        return cached

    def _recorded_encoder(
        self, enc: Mapping[str, Any], model: str | None = None, device: str | None = None
    ) -> DenseEncoder:
        """A :class:`DenseEncoder` for a recorded encoder configuration (``model``: load this path instead)."""
        weights = None
        if model is None:
            # a model kept inside the store is checked against its recorded digest before it is loaded; one
            # outside it, by the digest of its weights recorded when the store was built
            model = str(stored_model_dir(self.path.absolute(), enc)) if enc.get("stored") else str(enc["model"])
            weights = None if enc.get("stored") else enc.get("weights_sha256")
        encoder = DenseEncoder(
            model,
            device=device if device is not None else self._device,
            normalize_embeddings=enc.get("normalize_embeddings"),
            query_prompt=enc.get("query_prompt"),
            document_prompt=enc.get("document_prompt"),
            max_seq_length=enc.get("max_seq_length"),
            weights_sha256=weights,
        )
        encoder.weights_owner = f"the store at {self.path}"
        return encoder

    @property
    def encoder_key(self) -> tuple[Any, ...] | None:
        """Which recorded encoder this handle's state holds: changes whenever the store's model is switched.

        A search compares it before encoding its queries and after searching: equal means the vectors and
        the index it searched come from the same model (a switch records the generation it happened at, so a
        later switch back to the same model still changes it).
        """
        return recorded_encoder_key(self._core.state.get("encoder"))

    def _require_encoder(self, what: str) -> DenseEncoder:
        encoder = self.encoder
        if encoder is None:
            raise StoreError(
                f"{what} needs an encoder, and the store at {self.path} has none: pass vectors, or open the store "
                "with encoder=DenseEncoder(model)"
            )
        if not self._encoder_checked:
            dim = encoder.dimension
            if self.dimension is not None and dim != self.dimension:
                raise DimensionMismatchError(
                    f"model {encoder.model_name!r} outputs {dim}-d vectors; the store at {self.path} "
                    f"holds {self.dimension}-d vectors"
                )
            self._encoder_checked = True
        return encoder

    def _select_matching(self, filters: Filters, *, column: str = "id", restrict: str = "") -> list[Any] | None:
        """Rows matching ``filters`` through SQL (:func:`~rag_hier.store.sql_filters.select_matching`).

        A :class:`Refined` filter: its coarse part through SQL, its predicate on the records SQL returns (not at
        all when it is ``equivalent``). ``None``: evaluate the (exact) predicate on every passage.
        """
        if isinstance(filters, Refined) and filters.equivalent:  # the coarse filter's rows are the answer
            filters = filters.coarse
        elif isinstance(filters, Refined):
            found = self._refined_records(filters, restrict)
            if found is None:
                return None
            return [r.rowid if column == "id" else getattr(r, column) for r in found]
        indexed = meta_index.fields(self._core.state, self.path)
        return select_matching(self._core.db, filters, indexed=indexed, column=column, restrict=restrict)

    def _refined_records(self, filters: Refined, restrict: str = "") -> list[PassageRecord] | None:
        """The records ``filters.exact`` accepts among those its coarse filter selects in SQL, in insertion order.

        ``None`` when SQL cannot answer the coarse filter exactly (the caller then runs the predicate on every
        passage; the coarse filter is never evaluated in Python).
        """
        indexed = meta_index.fields(self._core.state, self.path)
        rowids = select_matching(self._core.db, filters.coarse, indexed=indexed, restrict=restrict)
        if rowids is None:
            return None
        found = records_by_rowid(self._core.db, rowids)
        return [rec for _, rec in sorted(found.items()) if filters.exact(rec)]

    if TYPE_CHECKING:  # the front (rag_hier.store.store.HierStore) defines it

        def batch(self) -> contextlib.AbstractContextManager[Any]:
            """Group writes into one atomic commit (:meth:`HierStore.batch <rag_hier.store.store.HierStore.batch>`)."""
