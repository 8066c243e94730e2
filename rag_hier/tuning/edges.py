"""Checks at the edges of a tuning run: what must be refused before anything is trained."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rag_hier.errors import ParameterError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX: folders are cleaned by age only
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

__all__ = ["CANDIDATE_PREFIX", "candidate_workspace", "check_finite", "clean_stale_candidates"]

CANDIDATE_PREFIX = "rag-hier-candidate-"
"""The prefix of the temporary folders a tuning run trains its candidates in."""
_OWNER = ".owner.lock"
"""A file in a candidate folder its run holds an exclusive lock on while it lives."""
UNLOCKED_MAX_AGE_S = 2 * 24 * 3600
"""A candidate folder without an owner lock (left by an older version) is removed when this old."""

_FINITE = ("epochs", "learning_rate", "temperature", "dev_fraction")


def check_finite(config: Any) -> None:
    """Refuse a :class:`~rag_hier.tuning.TuneConfig` whose counts or rates are not finite (``epochs=inf``)."""
    for name in _FINITE:
        value = getattr(config, name, None)
        if value is not None and not math.isfinite(float(value)):
            raise ParameterError(f"TuneConfig.{name} must be a finite number, got {value!r}")


def _owner_alive(folder: Path) -> bool | None:
    """Whether a live process holds ``folder``'s owner lock; ``None`` when the folder has no lock file."""
    lock = folder / _OWNER
    try:
        fd = os.open(lock, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError:
        return True  # cannot tell: leave it
    try:
        if fcntl is None:  # pragma: no cover
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        return False
    finally:
        os.close(fd)


def clean_stale_candidates(root: str | Path | None = None, *, now: float | None = None) -> int:
    """Remove the candidate folders of tuning runs that died (killed, crashed) from ``root`` (the temp folder).

    A folder is removed when its owner lock is free (its process is gone), or, without a lock file, when it is
    older than :data:`UNLOCKED_MAX_AGE_S`. Only this user's folders are looked at. Returns how many were removed.
    """
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(CANDIDATE_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
            continue
        alive = _owner_alive(Path(entry.path))
        if alive or (alive is None and now - st.st_mtime < UNLOCKED_MAX_AGE_S):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    if removed:
        logger.info("removed %d candidate folders of tuning runs that did not finish from %s", removed, base)
    return removed


@contextlib.contextmanager
def candidate_workspace() -> Iterator[str]:
    """A temporary folder for a run's candidates, locked by this process while it lives, removed at the end.

    Folders that runs killed before their end left behind are removed first (:func:`clean_stale_candidates`).
    """
    clean_stale_candidates()
    with tempfile.TemporaryDirectory(prefix=CANDIDATE_PREFIX) as tmp:
        fd = os.open(Path(tmp) / _OWNER, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield tmp
        finally:
            os.close(fd)
