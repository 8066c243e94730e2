"""Reading the NumPy files a store writes (``.npy``, ``.npz``) without trusting what they declare.

``np.load`` allocates whatever a file's header declares: a few crafted bytes (a header declaring a huge shape,
or a small zip member that inflates to gigabytes) would make it allocate before anything is checked. These
readers check first, from the file's own bytes, and only then load:

- every array's header (``allow_pickle=False``: an object dtype is refused) must declare exactly as many bytes
  as the file (or zip member) holds;
- a zip member may not inflate more than :data:`MAX_INFLATION` times its compressed size once it is larger
  than :data:`INFLATION_FLOOR` bytes (a "zip bomb");
- the arrays together may not need more memory than the machine has available.

Anything else is a :class:`~rag_hier.errors.StoreCorruptedError` naming the file (and member).
"""

from __future__ import annotations

import math
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np

from rag_hier.errors import StoreCorruptedError

__all__ = ["INFLATION_FLOOR", "MAX_INFLATION", "available_memory", "read_npy", "read_npz"]

MAX_INFLATION = 200
"""Largest uncompressed / compressed ratio accepted for a large zip member (deflate reaches about 1,000)."""
INFLATION_FLOOR = 256 << 20
"""Members smaller than this (uncompressed) are not held to :data:`MAX_INFLATION`."""


def available_memory() -> int:
    """Bytes of memory available to this process (``MemAvailable``; without ``/proc``, physical memory)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import os

        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - every platform we run on has one of them
        return 1 << 62


def _header(fh: IO[bytes], where: str) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """Shape, dtype and header length of the ``.npy`` stream ``fh`` (positioned at its start)."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except (
        ValueError,
        SyntaxError,
        TypeError,
        EOFError,
        OverflowError,
        MemoryError,
        RecursionError,
        tokenize.TokenError,  # numpy parses the header's dict literal with Python's tokenizer
        zlib.error,
        zipfile.BadZipFile,
    ) as exc:
        raise StoreCorruptedError(f"{where}: not a readable .npy array ({type(exc).__name__}: {exc})") from exc
    if dtype.hasobject:
        raise StoreCorruptedError(f"{where}: holds Python objects (never unpickled)")
    if any(not isinstance(n, int) or n < 0 for n in shape):
        raise StoreCorruptedError(f"{where}: declares the shape {shape}")
    return tuple(shape), dtype, fh.tell()


def _declared(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    return math.prod(shape) * dtype.itemsize


def read_npy(path: str | Path) -> np.ndarray:
    """An ``.npy`` file's array, after checking its header against the file's size and the memory available."""
    where = str(path)
    try:
        with Path(path).open("rb") as fh:
            shape, dtype, offset = _header(fh, where)
            size = fh.seek(0, 2)
    except OSError as exc:
        raise StoreCorruptedError(f"{where}: not readable ({exc})") from exc
    need = _declared(shape, dtype)
    if need != size - offset:
        raise StoreCorruptedError(
            f"{where}: the header declares {shape} {dtype} ({need} bytes) but the file holds {size - offset}"
        )
    _check_memory(need, where)
    try:
        return np.load(Path(path), allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise StoreCorruptedError(f"{where}: not a readable .npy array ({exc})") from exc


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file, after checking each member's header, size and inflation."""
    where = str(path)
    total = 0
    try:
        with zipfile.ZipFile(Path(path)) as zf:
            for info in zf.infolist():
                member = f"{where} (member {info.filename!r:.80})"
                if not info.filename.endswith(".npy") or info.is_dir():
                    raise StoreCorruptedError(f"{member}: not an array")
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    raise StoreCorruptedError(f"{member}: compression method {info.compress_type} is not NumPy's")
                if info.file_size > INFLATION_FLOOR and info.file_size > MAX_INFLATION * max(info.compress_size, 1):
                    raise StoreCorruptedError(
                        f"{member}: {info.compress_size} compressed bytes would inflate to {info.file_size}"
                    )
                with zf.open(info) as fh:
                    shape, dtype, offset = _header(fh, member)
                need = _declared(shape, dtype)
                if need != info.file_size - offset:
                    raise StoreCorruptedError(
                        f"{member}: the header declares {shape} {dtype} ({need} bytes) but the member holds "
                        f"{info.file_size - offset}"
                    )
                total += info.file_size
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, zlib.error) as exc:
        raise StoreCorruptedError(f"{where}: not a readable .npz file ({type(exc).__name__}: {exc})") from exc
    _check_memory(total, where)
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise StoreCorruptedError(f"{where}: not a readable .npz file ({type(exc).__name__}: {exc})") from exc


def _check_memory(need: int, where: str) -> None:
    have = available_memory()
    if need > have:
        raise StoreCorruptedError(
            f"{where}: its arrays would need {need / 2**30:.1f} GiB, more than the {have / 2**30:.1f} GiB available"
        )
