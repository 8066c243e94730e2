"""Helpers the tuning tests share: running the command line in-process, and a store directory's fingerprint."""

from __future__ import annotations

import contextlib
import hashlib
import io
from pathlib import Path

from rag_hier.cli.main import main

LEARN_FLAGS = ["--epochs", "3", "--learning-rate", "5e-3", "--train-batch-size", "16", "--negatives", "1"]
"""Command-line settings under which the tiny model learns the collection (the CLI twin of conftest's LEARNS)."""
COMMON = ["--device", "cpu", "--no-progress"]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``rag-hier ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def fingerprint(path: Path) -> dict[str, str]:
    """SHA-256 of every file of a store directory (the lock file aside)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != "store.lock"
    }
