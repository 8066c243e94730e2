"""Another version of the engine beside the working tree's: ``rag_hier`` as a git revision has it."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from benchmarks.common.data import REPO

__all__ = ["extract_package"]


def extract_package(rev: str, dest: Path) -> str:
    """Write ``rag_hier`` of git revision ``rev`` under ``dest`` (``dest/rag_hier``); returns the full commit id."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "rag_hier"], capture_output=True, check=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tf:
        tf.extractall(dest, filter="data")
    return commit
