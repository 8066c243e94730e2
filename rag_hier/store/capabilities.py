"""Optional store capabilities: what a backend may offer beyond :class:`~rag_hier.store.contract.StoreBackend`.

Every store implements :class:`~rag_hier.store.contract.StoreBackend`. Some also offer more, and each such extra
is a small protocol here, implemented or not by a backend (structurally: a class that has the members has the
capability; nothing is inherited or registered). Code outside the store asks for one by name:

- :func:`supports` — ``if supports(store, HitRows): rows = store.hit_rows(ids)`` — when there is another way;
- :func:`require` — ``require(store, ModelSwitching, what="tuning").adopt_model(...)`` — when there is none: a
  store without it raises :class:`~rag_hier.errors.CapabilityError` naming the capability, its members, the
  operation and the store's type.

=====================  =============================================================  ==========  ==========
capability             members                                                        HierStore   Milvus
=====================  =============================================================  ==========  ==========
:class:`EncoderIdentity`  ``encoder_key``                                              yes         yes
:class:`HitRows`       ``hit_rows``                                                   yes         no
:class:`DenseHitSearch`  ``search_dense_hits``                                        yes         no
:class:`ModelSwitching`  ``model_info``, ``encoder_for``, ``check_switchable``,        yes         yes
                       ``adopt_model``, ``rollback_model``
:class:`Reopenable`    ``reopen``                                                     no          yes
:class:`Maintenance`   ``optimize``, ``index_meta_field``, ``meta_indexes``           yes         yes
=====================  =============================================================  ==========  ==========

(:class:`~rag_hier.store.contract.EngineExtensions`, searching extensions inside the engine, is one more, used by
the store's own candidate search.) A capability is declared by the store's class: :func:`supports` looks at the
class once and remembers the answer, so asking costs a dictionary look-up on the search path. A member set to
``None`` on the class counts as absent.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, cast, runtime_checkable

import numpy as np

from rag_hier.errors import CapabilityError

if TYPE_CHECKING:
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.store.records import ModelSwitch

__all__ = [
    "CAPABILITIES",
    "DenseHitSearch",
    "EncoderIdentity",
    "HitRows",
    "Maintenance",
    "ModelSwitching",
    "Reopenable",
    "capability_members",
    "require",
    "supports",
]

C = TypeVar("C")
R = TypeVar("R", bound="Reopenable")


@runtime_checkable
class EncoderIdentity(Protocol):
    """Which recorded encoder a store handle holds, so a search can tell that the model changed under it."""

    @property
    def encoder_key(self) -> tuple[Any, ...] | None:
        """Changes whenever the store's model is switched (``None``: no recorded encoder).

        A text search compares it before encoding its queries and after searching; when it changed, the queries
        are encoded again and searched within one read block.
        """
        ...


@runtime_checkable
class HitRows(Protocol):
    """A fast read of exactly the fields a :class:`~rag_hier.store.records.Hit` is built from."""

    def hit_rows(self, rowids: Sequence[int]) -> Mapping[int, tuple[Any, ...]]:
        """Rows of :data:`~rag_hier.store.records.HIT_COLUMNS` by rowid, for :func:`~rag_hier.store.records.new_hit`.

        Unknown rowids are left out. A store without it is read through ``records()``.
        """
        ...


@runtime_checkable
class DenseHitSearch(Protocol):
    """An unfiltered dense search and the hit rows of what it found, both of one committed generation, in one call."""

    def search_dense_hits(
        self, queries: np.ndarray, top_k: int
    ) -> tuple[np.ndarray, np.ndarray, Mapping[int, tuple[Any, ...]]]:
        """``(scores, rowids, hit rows)``: ``search_dense(queries, top_k)`` and ``hit_rows`` of the rowids found."""
        ...


@runtime_checkable
class ModelSwitching(Protocol):
    """Switching the store's encoder in one commit: adopting a tuned model, rolling back (what tuning needs)."""

    @property
    def model_info(self) -> dict[str, Any]:
        """The recorded encoders: ``current``, ``previous`` (a rollback's target) and ``original``."""
        ...

    def encoder_for(self, model: str | Path, *, device: str | None = None) -> DenseEncoder:
        """A dense encoder for another model with this store's recorded encoder options."""
        ...

    def check_switchable(self, what: str) -> dict[str, Any]:
        """The recorded encoder, if this handle may switch it; else a :class:`~rag_hier.errors.StoreError`."""
        ...

    def adopt_model(
        self,
        model: str | Path,
        *,
        encoded: Any = None,
        details: Mapping[str, Any] | None = None,
        show_progress_bar: bool = False,
        expected: Mapping[str, Any] | None = None,
    ) -> int:
        """Make ``model`` the store's encoder, re-encoding every passage, in one commit; the committed generation."""
        ...

    def rollback_model(self, *, to: str = "previous", show_progress_bar: bool = False) -> ModelSwitch:
        """Return to an earlier encoder (``"previous"`` or ``"original"``), in one commit."""
        ...


@runtime_checkable
class Reopenable(Protocol):
    """Another handle on the same collection, with the same connection options and encoder.

    A store kept in a directory is reopened by its path instead (``HierStore.open(store.path)``).
    """

    def reopen(self: R, *, read_only: bool = False) -> R:
        """A new handle (writable unless ``read_only``)."""
        ...


@runtime_checkable
class Maintenance(Protocol):
    """Compacting the store after a burst of writes, and indexing metadata keys for filters."""

    def optimize(self) -> None:
        """Merge small segments and drop deleted rows."""
        ...

    def index_meta_field(self, field: str) -> None:
        """Index a top-level metadata key for filters (same answers, fewer rows read)."""
        ...

    @property
    def meta_indexes(self) -> list[str]:
        """The indexed metadata keys."""
        ...


CAPABILITIES: tuple[type, ...] = (EncoderIdentity, HitRows, DenseHitSearch, ModelSwitching, Reopenable, Maintenance)
"""The optional capabilities a backend may implement (besides the store's own ``EngineExtensions``)."""

_PROTOCOL_BASES = frozenset({"Protocol", "Generic", "object"})
_MEMBERS: dict[type, tuple[str, ...]] = {}
_SUPPORT: dict[tuple[type, object], bool] = {}


def capability_members(capability: type) -> tuple[str, ...]:
    """The members a class needs to have ``capability`` (a protocol class), sorted."""
    found = _MEMBERS.get(capability)
    if found is None:
        names: set[str] = set()
        for klass in capability.__mro__:
            if klass.__name__ in _PROTOCOL_BASES and klass.__module__ in ("typing", "builtins"):
                continue
            names.update(n for n in getattr(klass, "__annotations__", {}) if not n.startswith("_"))
            names.update(n for n in vars(klass) if not n.startswith("_"))
        found = _MEMBERS[capability] = tuple(sorted(names))
    return found


def _implements(cls: type, capability: type) -> bool:
    for name in capability_members(capability):
        value = inspect.getattr_static(cls, name, None)
        if value is None:
            return False
    return True


def supports(store: object, capability: Callable[..., C]) -> TypeGuard[C]:
    """Whether ``store``'s class implements ``capability`` (one of :data:`CAPABILITIES`, or another protocol).

    Every member of the protocol must be on the class (a method, a property or a class attribute) and not
    ``None``. The answer is remembered per class. (``capability`` is a protocol class; it is typed as a callable
    because type checkers refuse a protocol where ``type[...]`` is expected.)
    """
    try:
        return _SUPPORT[type(store), capability]
    except KeyError:
        found = _SUPPORT[type(store), capability] = _implements(type(store), cast(type, capability))
        return found


def require(store: object, capability: Callable[..., C], *, what: str) -> C:
    """``store`` as ``capability``; a :class:`~rag_hier.errors.CapabilityError` naming what is missing otherwise.

    Args:
        store: The store.
        capability: The protocol the operation needs.
        what: The operation, for the message (``"tuning"``, ``"rag-hier tune --rollback"``).

    """
    if supports(store, capability):
        return store
    cls, proto = type(store), cast(type, capability)
    missing = [n for n in capability_members(proto) if inspect.getattr_static(cls, n, None) is None]
    where = getattr(store, "location", None)
    at = f" at {where}" if isinstance(where, str) and where else ""
    raise CapabilityError(
        f"{what} needs a store with the {proto.__name__} capability; the {cls.__module__}.{cls.__qualname__} "
        f"store{at} lacks {', '.join(missing)}"
    )
