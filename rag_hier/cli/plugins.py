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

__all__ = ["PLUGIN_MODULES", "TRAIN_METHODS", "plugins"]

PLUGIN_MODULES: tuple[str, ...] = (
    "rag_hier.cli.dhr",
    "rag_hier.cli.hce",
    "rag_hier.cli.svdr",
    "rag_hier.cli.tied_atomic",
    "rag_hier.cli.ehi",
    "rag_hier.cli.bm25",
)


TRAIN_METHODS: dict[str, tuple[str, str]] = {
    "dhr": ("rag_hier.cli.dhr", "train DHR document/passage encoders (In-Doc, In-Sec and BM25 negatives)"),
    "hce": (
        "rag_hier.cli.hce",
        "fine-tune an encoder with HCE (hierarchical corpus encoder): unsupervised, supervised or joint",
    ),
    "svdr": ("rag_hier.cli.svdr", "train an SVDR vocabulary encoder (L_p + L_sp, beta-mined hard negatives)"),
    "tied-atomic": (
        "rag_hier.cli.tied_atomic",
        "train a Tied-Atomic encoder-decoder embedding (generative retrieval as dense retrieval)",
    ),
    "ehi": (
        "rag_hier.cli.ehi",
        "train an EHI tree index (learned jointly with the encoder, or alone on its vectors)",
    ),
}
"""``rag-hier train`` methods: name → (the plugin module defining its ``add_train_parser``, its help line).

Listed here so that ``rag-hier train --help`` and ``rag-hier train METHOD --help`` import no other method's
module (a test checks that each module's parser has this name and help line)."""


def plugins() -> list[ModuleType]:
    """The plugin modules, imported."""
    return [importlib.import_module(m) for m in PLUGIN_MODULES]
