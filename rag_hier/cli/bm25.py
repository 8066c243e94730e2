"""CLI plugin: BM25 — the ``bm25`` store extension and its strategy.

- ``rag-hier index CORPUS --store S --bm25`` attaches the term-frequency index (it then follows every write);
- ``rag-hier search|eval --strategy bm25 [--bm25-k1 K1] [--bm25-b B]`` (strategy and flags from the registry;
  ``--k1`` is DHR's document depth).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["add_index_arguments", "after_index"]


def add_index_arguments(parser: argparse.ArgumentParser) -> None:
    """``--bm25``."""
    g = parser.add_argument_group("BM25")
    g.add_argument(
        "--bm25",
        action="store_true",
        help="keep the passages' term frequencies (bm25s tokenization: English stopwords, Snowball stemmer when "
        "PyStemmer is installed) for --strategy bm25; kept in sync afterwards",
    )


def after_index(store: Any, args: argparse.Namespace) -> str | None:
    """Attach the BM25 index when asked; report it whenever the store has one."""
    from rag_hier.store.extensions.bm25 import BM25Extension

    ext = store.extension(BM25Extension.name)
    if isinstance(ext, BM25Extension):
        return f"bm25: {len(ext.index)} passages, {ext.index.terms.size} terms (follows this write)"
    if not getattr(args, "bm25", False):
        return None
    t0 = time.perf_counter()
    new = BM25Extension()
    store.add_extension(new)
    tok = new.tokenizer
    return (
        f"bm25: {len(new.index)} passages, {new.index.terms.size} terms ({time.perf_counter() - t0:.1f}s; "
        f"stopwords {tok.stopwords or 'none'}, stemmer {tok.stemmer or 'none'})"
    )
