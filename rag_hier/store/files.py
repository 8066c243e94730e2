"""Files inside a store directory: names that cannot escape it, atomic writes, checksums, the writer lock.

Every file name the store reads from disk (``manifest.json``, the committed state in SQLite, an extension's
list of files) passes :func:`check_name` before it is joined to the store directory, and every file is
checked to be a regular file (:func:`regular_file`, no symlink followed) before it is read, renamed or
deleted. A store from a stranger therefore cannot make rag-hier read, overwrite or delete anything outside
its directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from rag_hier.errors import StoreCorruptedError, StoreError

__all__ = [
    "LOCK_FILE",
    "WriterLock",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_name",
    "copy_fd",
    "fsync_dir",
    "fsync_file",
    "regular_file",
    "sha256_fd",
    "sha256_file",
]

LOCK_FILE = "store.lock"
"""The writer lock: an empty file whose ``flock`` a writer holds from its first change to its last rename."""

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,200}")


def check_name(name: Any, where: str | Path) -> str:
    """``name`` if it is a plain file name inside a store directory, else a :class:`StoreCorruptedError`.

    Plain means: a string of letters, digits, ``_``, ``.`` and ``-`` that starts with a letter, digit or
    ``_``, with no path separator, no ``..`` component and not absolute.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise StoreCorruptedError(f"{where}: {name!r} is not a plain file name inside the store directory")
    return name


def regular_file(path: Path) -> os.stat_result | None:
    """``lstat`` of ``path`` if it is a regular file (not a symlink), ``None`` if it does not exist.

    Raises:
        StoreCorruptedError: ``path`` exists but is a symlink, a directory or anything else.

    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise StoreCorruptedError(f"{path} is {what}; a store holds only regular files")
    return st


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file (opened without following a symlink).

    Never for ``store.sqlite`` while its connection is open: closing any descriptor of a file drops every
    POSIX lock the process holds on it, SQLite's included (use :func:`sha256_fd` on a descriptor kept open).
    """
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_fd(fd: int, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of the file open as ``fd``, read with ``pread`` (the descriptor stays open)."""
    h = hashlib.sha256()
    offset = 0
    while block := os.pread(fd, chunk, offset):
        h.update(block)
        offset += len(block)
    return h.hexdigest()


def copy_fd(fd: int, target: Path, chunk: int = 1 << 22) -> None:
    """Copy the file open as ``fd`` to the new file ``target`` (fsynced), leaving ``fd`` open."""
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        offset = 0
        while block := os.pread(fd, chunk, offset):
            os.write(out, block)
            offset += len(block)
        os.fsync(out)
    finally:
        os.close(out)


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable."""
    with contextlib.suppress(OSError):  # not every platform can open directories
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a file's content to disk."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, fsync it, then ``os.replace`` it onto ``path``.

    The temporary name carries the process id, so two processes never write the same one.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: Path, obj: Any) -> None:
    """:func:`atomic_write_bytes` of pretty-printed JSON."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())


class WriterLock:
    """An exclusive ``flock`` on ``store.lock``: one writer per store directory across processes.

    A writer holds it from the start of a batch until the files of its commit are renamed into place and the
    manifest is rewritten, so recovery (finishing a dead writer's renames, removing its temporary files) can
    run under it knowing that no live process owns those files. Readers never take it. Within a process the
    store's shared handle serializes writers, so the lock is taken once per process.
    """

    def __init__(self, root: Path) -> None:
        self.path = root / LOCK_FILE
        self._fd: int | None = None
        self._depth = 0

    def _open(self) -> int:
        if self._fd is None:
            if regular_file(self.path) is None and not self.path.parent.is_dir():
                raise StoreError(f"store directory {self.path.parent} does not exist")
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            try:
                self._fd = os.open(self.path, flags, 0o644)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise StoreCorruptedError(f"{self.path} is a symbolic link; refusing to use it") from exc
                raise StoreError(f"cannot open the writer lock {self.path}: {exc.strerror or exc}") from exc
        return self._fd

    def acquire(self, *, blocking: bool = True, timeout: float = 600.0) -> bool:
        """Take the lock (re-entrant within this object); ``False`` if not blocking and another process holds it."""
        import fcntl

        if self._depth:
            self._depth += 1
            return True
        fd = self._open()
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not blocking:
                    return False
                if time.monotonic() > deadline:
                    raise StoreError(
                        f"{self.path.parent}: another process has been writing for over {timeout:.0f} s; try again"
                    ) from None
                time.sleep(0.01)
        self._depth = 1
        return True

    def release(self) -> None:
        """Release one level of the lock (the file lock itself when the outermost holder releases)."""
        import fcntl

        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._depth > 0

    def close(self) -> None:
        """Release the lock and close the file."""
        self._depth = 0
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
