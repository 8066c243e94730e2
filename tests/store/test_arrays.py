"""Reading a store's NumPy files checks what they declare before anything is allocated."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rag_hier import _arrays
from rag_hier._arrays import read_npy, read_npz
from rag_hier.errors import StoreCorruptedError


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _lying_header(shape: tuple[int, ...], payload: bytes) -> bytes:
    """A .npy file whose header declares ``shape`` (int64) but which holds ``payload``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<i8", "fortran_order": False, "shape": shape})
    return np.lib.format.MAGIC_PREFIX + b"\x01\x00" + buf.getvalue()[8:] + payload


def test_arrays_as_written_read_back(tmp_path: Path) -> None:
    a, b = np.arange(10, dtype=np.int64).reshape(5, 2), np.linspace(0, 1, 7, dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    np.savez_compressed(tmp_path / "z.npz", a=a, b=b)
    assert np.array_equal(read_npy(tmp_path / "a.npy"), a)
    arrays = read_npz(tmp_path / "z.npz")
    assert np.array_equal(arrays["a"], a) and np.array_equal(arrays["b"], b)


def test_a_header_declaring_more_than_the_file_holds_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.npy"
    path.write_bytes(_lying_header((1 << 34, 2), b"\x00" * 16))  # 256 GiB declared, 16 bytes held
    with pytest.raises(StoreCorruptedError, match=r"huge.npy: the header declares \(17179869184, 2\) int64"):
        read_npy(path)
    zpath = tmp_path / "huge.npz"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("rows.npy", _lying_header((1 << 34,), b"\x00" * 8))
    with pytest.raises(StoreCorruptedError, match=r"member 'rows.npy'.*declares"):
        read_npz(zpath)


def test_objects_and_foreign_members_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(StoreCorruptedError, match="Python objects"):
        read_npy(path)
    zpath = tmp_path / "odd.npz"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("readme.txt", b"hello")
    with pytest.raises(StoreCorruptedError, match="not an array"):
        read_npz(zpath)
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(StoreCorruptedError, match=r"not a readable \.npz file"):
        read_npz(tmp_path / "garbage.npz")


def test_a_zip_bomb_is_refused_before_inflating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_arrays, "INFLATION_FLOOR", 1 << 16)  # a small bomb stands for a large one
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("rows.npy", _npy_bytes(np.zeros(1 << 20, dtype=np.int64)))  # 8 MiB of zeros: ~8 KiB
    with pytest.raises(StoreCorruptedError, match="compressed bytes would inflate to"):
        read_npz(path)


def test_arrays_larger_than_the_memory_available_are_refused(tmp_path: Path, monkeypatch) -> None:
    np.save(tmp_path / "a.npy", np.zeros(1000, dtype=np.int64))
    np.savez(tmp_path / "z.npz", a=np.zeros(1000, dtype=np.int64))
    monkeypatch.setattr(_arrays, "available_memory", lambda: 4096)
    with pytest.raises(StoreCorruptedError, match=r"would need .* GiB, more than the .* GiB available"):
        read_npy(tmp_path / "a.npy")
    with pytest.raises(StoreCorruptedError, match=r"more than the .* GiB available"):
        read_npz(tmp_path / "z.npz")
    assert _arrays.available_memory() == 4096
    monkeypatch.undo()
    assert _arrays.available_memory() > 1 << 20
