"""How retrieval methods plug into the ``rag-hier`` command line.

Search strategies and their flags come from the strategy registry (:mod:`rag_hier.retrieval.registry`,
through :mod:`rag_hier.cli.strategies`). Each method may also have one module listed in :data:`PLUGIN_MODULES`
(rag-hier's own modules only), which may define any of:

- ``add_index_arguments(parser)`` — extra flags of ``index`` (e.g. ``--hierarchical``).
- ``after_index(store, args) -> str | None`` — runs inside the indexing commit, after the documents
  are written (e.g. attach a store extension); returns a summary line.
- ``configure_search(name, store, args) -> dict`` — keyword arguments for the retriever of strategy ``name``
  (e.g. an encoder on the ``--device`` asked for); ``{}`` for strategies it does not own.
- ``after_search(name, store, retriever, args)`` — after ``search``/``eval`` ran strategy ``name``.
- ``add_train_parser(subparsers)`` — a ``rag-hier train <method>`` sub-command; set ``func`` with
  ``parser.set_defaults(func=...)``, a callable ``(args) -> int``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["PLUGIN_MODULES", "plugins"]

PLUGIN_MODULES: tuple[str, ...] = (
    "rag_hier.cli.dhr",
    "rag_hier.cli.hce",
    "rag_hier.cli.svdr",
    "rag_hier.cli.tied_atomic",
    "rag_hier.cli.ehi",
    "rag_hier.cli.bm25",
)


def plugins() -> list[ModuleType]:
    """The plugin modules, imported."""
    return [importlib.import_module(m) for m in PLUGIN_MODULES]
