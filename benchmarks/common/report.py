"""Result files: JSON under ``benchmarks/out/`` (git-ignored), with the machine that produced them."""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.common.data import REPO
from benchmarks.common.timing import loadavg

OUT = Path(os.environ.get("RAG_HIER_BENCH_OUT") or REPO / "benchmarks" / "out")
"""Where results go by default: ``$RAG_HIER_BENCH_OUT``, else ``benchmarks/out/`` (git-ignored)."""

_VERSIONS = ("numpy", "faiss-cpu", "torch", "transformers", "sentence-transformers", "rag-hier")


def out_path(*parts: str) -> Path:
    """``<OUT>/<parts...>`` (not created)."""
    return OUT.joinpath(*parts)


def write_json(path: str | Path, result: Any, *, indent: int = 1) -> Path:
    """Write ``result`` as JSON to ``path`` (folders created, a newline at the end) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent, default=str) + "\n", encoding="utf-8")
    return path


def machine(**extra: Any) -> dict[str, Any]:
    """The machine and versions behind a figure: host, CPUs, load averages, Python and the installed packages."""
    versions = {}
    for name in _VERSIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "loadavg": loadavg(),
        "python": sys.version.split()[0],
        "versions": versions,
        **extra,
    }


def paired_bootstrap(
    a: Any, b: Any, labels: tuple[str, str] = ("a", "b"), n_boot: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """Per-query scores ``a`` and ``b`` of two systems: their means (under ``labels``), the mean of ``b - a``, its
    paired bootstrap 95 % percentile interval (``n_boot`` resamples of the queries, numpy seeded ``seed``) and how
    many queries ``b`` is better / worse on."""
    import numpy as np

    d = b - a
    boots = d[np.random.default_rng(seed).integers(0, len(d), size=(n_boot, len(d)))].mean(1)
    return {
        labels[0]: round(float(a.mean()), 4),
        labels[1]: round(float(b.mean()), 4),
        "delta": round(float(d.mean()), 4),
        "ci95": [round(float(np.percentile(boots, 2.5)), 4), round(float(np.percentile(boots, 97.5)), 4)],
        "better_worse": [int((d > 0).sum()), int((d < 0).sum())],
    }
