"""How retrieval methods plug into the ``rag-hier`` command line.

Search strategies and their flags come from the strategy registry (:mod:`rag_hier.retrieval.registry`,
through :mod:`rag_hier.cli.strategies`). Each registered method (:func:`rag_hier.index.methods.register_method`)
may also name one module of command-line hooks (``MethodSpec.cli``; rag-hier's own modules for the built-in
methods), which may define any of:

- ``add_index_arguments(parser)`` — extra flags of ``index`` (e.g. ``--hierarchical``).
- ``after_index(store, args) -> str | None`` — runs inside the indexing commit, after the documents
  are written (e.g. attach a store extension); returns a summary line.
- ``configure_search(name, store, args) -> dict`` — keyword arguments for the retriever of strategy ``name``
  (e.g. an encoder on the ``--device`` asked for); ``{}`` for strategies it does not own.
- ``after_search(name, store, retriever, args)`` — after ``search``/``eval`` ran strategy ``name``.
- ``add_train_parser(subparsers)`` — the ``rag-hier train <method>`` sub-command of a method with a trainer
  (``MethodSpec.train``); make its parser with :func:`rag_hier.cli._train.train_parser` (the registered help line)
  and set ``func`` with ``parser.set_defaults(func=...)``, a callable ``(args) -> int``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rag_hier.index.methods import methods

__all__ = ["PLUGIN_MODULES", "TRAIN_METHODS", "plugin_modules", "plugins", "train_methods"]


def plugin_modules() -> tuple[str, ...]:
    """The plugin modules of the registered methods, in registration order."""
    return tuple(m.cli for m in methods() if m.cli is not None)


def train_methods() -> dict[str, tuple[str, str]]:
    """``rag-hier train`` methods: name → (the plugin module defining its ``add_train_parser``, its help line).

    Read from the registrations, so that ``rag-hier train --help`` and ``rag-hier train METHOD --help`` import no
    other method's module (a test checks that each module's parser has this name and help line).
    """
    return {m.name: (m.cli, m.train.help) for m in methods() if m.cli is not None and m.train is not None}


PLUGIN_MODULES: tuple[str, ...] = plugin_modules()
"""The plugin modules of the methods registered when this module was imported (:func:`plugin_modules`: now)."""
TRAIN_METHODS: dict[str, tuple[str, str]] = train_methods()
"""The train commands of the methods registered when this module was imported (:func:`train_methods`: now)."""


def plugins() -> list[ModuleType]:
    """The plugin modules, imported."""
    return [importlib.import_module(m) for m in plugin_modules()]
