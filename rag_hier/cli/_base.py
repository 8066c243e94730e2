"""What the command line's modules share, importable with nothing but ``argparse``: errors, argument types, names.

The generated parser tables (:mod:`rag_hier.cli._tables`) name the argument types (:func:`positive_int`,
:func:`comma_list`) and :data:`LATE`: ``rag-hier --help`` and every sub-command's ``--help`` read them without
importing the modules that declare the flags.
"""

from __future__ import annotations

import argparse

__all__ = ["COMMAND_HELP", "LATE", "CliError", "comma_list", "positive_int", "registry_fingerprint"]


class CliError(Exception):
    """An error reported as one line on stderr with a non-zero exit status."""


COMMAND_HELP: dict[str, str] = {
    "index": "index a corpus into a store (re-running adds/updates, never duplicates)",
    "search": "search a store; writes a TREC run for a queries file",
    "eval": "search a queries file and score it against qrels (nDCG@10, Recall@10/100, MRR@10)",
    "compare": "paired comparison of systems (TREC runs or --per-query files): differences, CIs, tests",
    "info": "describe a store (counts, encoder, index, files)",
    "migrate": "copy a store between a local directory and Milvus (no re-encoding)",
    "tune": "fine-tune the store's model on judged queries; adopt it only if it measures better",
    "train": "train or fine-tune a model with one of the methods",
}
"""Each sub-command's one-line help (``rag-hier --help`` lists them without building their parsers)."""


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse reports anything else as a usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def comma_list(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list (``"a, b,"`` → ``("a", "b")``)."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


class _Late:
    """The type of :data:`LATE`."""

    def __repr__(self) -> str:
        return "LATE"


LATE = _Late()
"""A parser default that the tables cannot hold (a sub-command's ``func``, a ``ConfigFlags`` table): a command that
runs takes it from the parser that the flags' own modules build (:func:`rag_hier.cli.main.build_parser`)."""


def registry_fingerprint() -> int:
    """A checksum of the registered methods, strategies and tuning recipes, whose flags the generated tables hold."""
    import zlib

    from rag_hier.index.methods import methods
    from rag_hier.retrieval.registry import strategy_names
    from rag_hier.tuning.recipes import recipe_names

    return zlib.crc32(repr((methods(), strategy_names(), recipe_names())).encode())
