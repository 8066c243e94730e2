"""The strategy registry: a name → a retriever class, its parameters dataclass, and fixed parameter values.

Everything that offers strategies reads this one table: ``rag-hier search/eval --strategy`` (and the flags
generated from each strategy's parameters), the Haystack ``RagHierRetriever`` component and the LlamaIndex
``RagHierRetriever``. Registering a strategy makes it available in all three, with no adapter edit.

The table holds the strategies of every registered method (:func:`rag_hier.index.methods.register_method`: a
method's strategies, store extensions and command-line plugin in one registration; the built-in methods are
registered there by module path and imported on first use, so ``import rag_hier`` stays light). A strategy alone
(no extension, no plugin) may also be registered with :func:`register_strategy`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from rag_hier.errors import ParameterError
from rag_hier.index.methods import MethodSpec, StrategySpec, on_method
from rag_hier.retrieval.params import RetrieverParams

if TYPE_CHECKING:
    from rag_hier.retrieval.base import Retriever
    from rag_hier.store.contract import StoreBackend

__all__ = [
    "StrategyEntry",
    "build_retriever",
    "register_strategy",
    "strategy",
    "strategy_names",
    "strategy_params",
]


@dataclass(frozen=True)
class StrategyEntry:
    """One registered strategy.

    Args:
        name: The strategy name (``--strategy NAME``).
        target: The retriever class, or ``"module:Class"`` (imported on first use).
        help: One line for ``--help`` and the docs.
        fixed: Parameter values this entry fixes (e.g. SVDR's ``mode`` for ``svdr-beta``); not settable.
        extensions: Store extensions the strategy needs (adapters can build them on request).
        parameters: The parameters dataclass, or ``"module:Class"``; ``None``: the retriever's ``Params``
            (naming it lets ``--help`` and the adapters list the parameters without importing the retriever).

    """

    name: str
    target: type[Retriever[Any]] | str
    help: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    extensions: tuple[str, ...] = ()
    parameters: type[RetrieverParams] | str | None = None

    @cached_property
    def retriever(self) -> type[Retriever[Any]]:
        """The retriever class (imported on first use if registered by path, then kept)."""
        if isinstance(self.target, str):
            module, _, cls = self.target.partition(":")
            return getattr(importlib.import_module(module), cls)
        return self.target

    @cached_property
    def params(self) -> type[RetrieverParams]:
        """The parameters dataclass (imported on first use if registered by path, then kept)."""
        if isinstance(self.parameters, str):
            module, _, cls = self.parameters.partition(":")
            found: type[RetrieverParams] = getattr(importlib.import_module(module), cls)
            return found
        if self.parameters is not None:
            return self.parameters
        return self.retriever.Params

    def settable(self) -> tuple[str, ...]:
        """The parameters a user may set (all but the fixed ones)."""
        return tuple(n for n in self.params.field_names() if n not in self.fixed)

    def parse(self, values: Mapping[str, Any] | None = None, *, where: str = "strategy parameters") -> RetrieverParams:
        """Validated parameters from user values (fixed ones refused), with this entry's fixed values."""
        given = dict(values or {})
        clash = sorted(set(given) & set(self.fixed))
        if clash:
            raise ParameterError(f"{where}: {', '.join(clash)} is fixed by the {self.name!r} strategy")
        unknown = sorted(set(given) - set(self.settable()))
        if unknown:
            raise ParameterError(
                f"{where}: unknown parameter(s) {', '.join(unknown)} for the {self.name!r} strategy; "
                f"it takes {', '.join(self.settable()) or 'none'}"
            )
        return self.params.from_mapping({**given, **self.fixed}, where=where)


_ENTRIES: dict[str, StrategyEntry] = {}


def register_strategy(
    name: str,
    target: type[Retriever[Any]] | str,
    help: str,
    *,
    fixed: Mapping[str, Any] | None = None,
    extensions: tuple[str, ...] = (),
    params: type[RetrieverParams] | str | None = None,
    replace: bool = False,
) -> StrategyEntry:
    """Register a strategy alone under ``name`` (see :class:`StrategyEntry`; ``params``: its ``parameters``).

    A method with store extensions or command-line hooks is registered with
    :func:`rag_hier.index.methods.register_method` instead, which lists its strategies here.
    """
    if not name or not isinstance(name, str):
        raise ValueError(f"a strategy needs a name, got {name!r}")
    if name in _ENTRIES and not replace:
        raise ValueError(f"strategy {name!r} is already registered")
    entry = StrategyEntry(name, target, help, dict(fixed or {}), tuple(extensions), params)
    _ENTRIES[name] = entry
    _OWNER.pop(name, None)
    return entry


def strategy_names() -> list[str]:
    """Registered strategy names, ``dense`` first."""
    return list(_ENTRIES)


def strategy(name: str) -> StrategyEntry:
    """The entry registered as ``name`` (an error listing the known names otherwise)."""
    try:
        return _ENTRIES[name]
    except KeyError:
        raise ParameterError(f"unknown strategy {name!r}; known: {', '.join(_ENTRIES)}") from None


def strategy_params(
    name: str, values: Mapping[str, Any] | None = None, *, where: str = "strategy parameters"
) -> RetrieverParams:
    """The validated parameters of strategy ``name`` from user values."""
    return strategy(name).parse(values, where=where)


def build_retriever(
    name: str, store: StoreBackend, params: RetrieverParams | Mapping[str, Any] | None = None, **kwargs: Any
) -> Retriever[Any]:
    """A retriever of strategy ``name`` over ``store`` (parameters validated against the strategy's dataclass)."""
    entry = strategy(name)
    if isinstance(params, RetrieverParams):
        wrong = [k for k, v in entry.fixed.items() if getattr(params, k) != v]
        if wrong or kwargs:
            params = entry.parse({**{k: v for k, v in params.to_dict().items() if k not in entry.fixed}, **kwargs})
    else:
        params = entry.parse({**dict(params or {}), **kwargs})
    return entry.retriever(store, params=params)


# -- the strategies of the registered methods (rag_hier.index.methods) ---------------------------------------
_OWNER: dict[str, str] = {}
"""Strategy name → the method that registered it (strategies registered alone are not listed)."""


def _entry(spec: StrategySpec) -> StrategyEntry:
    return StrategyEntry(spec.name, spec.target, spec.help, dict(spec.fixed), tuple(spec.extensions), spec.params)


def _add_method(spec: MethodSpec, replaced: MethodSpec | None) -> None:
    """Make a registered method's strategies known (a replaced method's strategies go first)."""
    for s in spec.strategies:
        owner = _OWNER.get(s.name)
        if s.name in _ENTRIES and owner != spec.name:
            raise ValueError(f"method {spec.name!r}: strategy {s.name!r} is already registered")
    for s in replaced.strategies if replaced is not None else ():
        _ENTRIES.pop(s.name, None)
        _OWNER.pop(s.name, None)
    for s in spec.strategies:
        _ENTRIES[s.name] = _entry(s)
        _OWNER[s.name] = spec.name


on_method(_add_method)
