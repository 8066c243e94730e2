"""How retrieval methods plug into the ``rag-hier`` command line.

Each method has one module listed in :data:`PLUGIN_MODULES` (rag-hier's own modules only). A plugin
module may define any of:

- ``STRATEGIES: dict[str, Strategy]`` — names accepted by ``search/eval --strategy``.
- ``add_search_arguments(parser)`` — extra flags of ``search`` and ``eval`` (e.g. ``--k1``).
- ``add_index_arguments(parser)`` — extra flags of ``index`` (e.g. ``--hierarchical``).
- ``after_index(store, args) -> str | None`` — runs inside the indexing commit, after the documents
  are written (e.g. attach a store extension); returns a summary line.
- ``add_train_parser(subparsers)`` — a ``rag-hier train <method>`` sub-command; set ``func`` with
  ``parser.set_defaults(func=...)``, a callable ``(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = ["PLUGIN_MODULES", "SearchFn", "Strategy", "plugins", "strategies"]

PLUGIN_MODULES: tuple[str, ...] = (
    "rag_hier.cli.dense",
    "rag_hier.cli.dhr",
    "rag_hier.cli.hce",
    "rag_hier.cli.svdr",
    "rag_hier.cli.ehi",
)

SearchFn = Callable[[Any, argparse.Namespace, list[str], int, Any, str], list[list[Any]]]
"""``(store, args, queries, top_k, filters, aggregate) -> one ranked list of Hits per query``."""


@dataclass(frozen=True)
class Strategy:
    """A ``--strategy`` choice: its name, one-line help, and how it searches."""

    name: str
    help: str
    search: SearchFn


def plugins() -> list[ModuleType]:
    """The plugin modules, imported."""
    return [importlib.import_module(m) for m in PLUGIN_MODULES]


def strategies(mods: Sequence[ModuleType] | None = None) -> dict[str, Strategy]:
    """Every strategy of every plugin, by name (``dense`` first)."""
    out: dict[str, Strategy] = {}
    for mod in mods if mods is not None else plugins():
        out.update(getattr(mod, "STRATEGIES", {}))
    return out
