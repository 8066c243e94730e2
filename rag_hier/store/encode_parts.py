"""Encoding every passage of a store with a new model in parts saved as they finish, so a crash loses one part.

A part is one safetensors file (``part-000000.safetensors``, no pickle): ``rowids`` (int64) and ``vectors``
(float32), with the model's digest and each row's content hash in its metadata. :func:`encode_in_parts` reads the
parts a folder already holds, keeps every row whose passage still has the text that was encoded (same rowid, same
content hash), and encodes only the rest, saving a part every ``part_rows`` passages. Rows written or rewritten
after a part was saved are encoded again by the switch itself (:func:`~rag_hier.store.encoder_switch.switch_encoder`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import StoreCorruptedError
from rag_hier.store.encoder_switch import EncodedPassages
from rag_hier.store.files import fsync_dir, fsync_file
from rag_hier.store.records import records_by_rowid
from rag_hier.store.schema import rows_in

__all__ = ["PART_ROWS", "encode_in_parts", "read_parts"]

PART_ROWS = 4096
"""Passages per saved part: a crash loses at most this many encodings."""
_PART = re.compile(r"part-(\d{6})\.safetensors")
_FORMAT = "rag-hier encoded passages 1"


def _hashes(store: Any, rowids: list[int]) -> dict[int, str]:
    rows = rows_in(
        store._core.db, "SELECT id, content_hash FROM passages WHERE has_vector=1 AND id IN ({marks})", rowids
    )
    return {int(r[0]): str(r[1]) for r in rows}


def read_parts(folder: Path, model_digest: str, dimension: int | None) -> dict[int, tuple[str, np.ndarray]]:
    """``{rowid: (content hash, vector)}`` from the parts saved in ``folder`` for the model ``model_digest``.

    Raises:
        StoreCorruptedError: A part that is not a readable safetensors file of this model and shape (named).

    """
    from safetensors import SafetensorError, safe_open

    out: dict[int, tuple[str, np.ndarray]] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.iterdir()):
        if not _PART.fullmatch(path.name):
            continue
        try:
            with safe_open(str(path), framework="numpy") as fh:
                meta = fh.metadata() or {}
                if meta.get("format") != _FORMAT or meta.get("model") != model_digest:
                    raise StoreCorruptedError(f"{path}: not a part encoded by this model (format or model digest)")
                rowids = np.asarray(fh.get_tensor("rowids"))
                vectors = np.asarray(fh.get_tensor("vectors"))
        except (SafetensorError, OSError, KeyError) as exc:
            raise StoreCorruptedError(f"{path}: unreadable part of encoded passages ({exc})") from exc
        hashes = meta.get("hashes", "").split("\n") if meta.get("hashes") else []
        n = rowids.shape[0] if rowids.ndim == 1 else -1
        if (
            rowids.dtype != np.int64
            or vectors.dtype != np.float32
            or vectors.ndim != 2
            or vectors.shape[0] != n
            or len(hashes) != n
            or (dimension is not None and n and vectors.shape[1] != dimension)
        ):
            raise StoreCorruptedError(
                f"{path}: rowids, vectors and hashes do not agree (rowids {rowids.shape} {rowids.dtype}, vectors "
                f"{vectors.shape} {vectors.dtype}, {len(hashes)} hashes; expected dimension {dimension})"
            )
        for r, h, v in zip(rowids.tolist(), hashes, vectors, strict=True):
            out[int(r)] = (h, v)
    return out


def _write_part(path: Path, rowids: np.ndarray, hashes: list[str], vectors: np.ndarray, model_digest: str) -> None:
    """Write one part whole (a temporary file renamed onto ``path`` after an fsync)."""
    from safetensors.numpy import save_file

    tmp = path.with_name(f".{path.name}.tmp")
    save_file(
        {"rowids": np.ascontiguousarray(rowids, np.int64), "vectors": np.ascontiguousarray(vectors, np.float32)},
        str(tmp),
        metadata={"format": _FORMAT, "model": model_digest, "hashes": "\n".join(hashes)},
    )
    fsync_file(tmp)
    tmp.replace(path)
    fsync_dir(path.parent)


def encode_in_parts(
    store: Any,
    encoder: DenseEncoder,
    folder: Path,
    *,
    model_digest: str,
    part_rows: int | None = None,
    show_progress_bar: bool = False,
    label: str = "encoding passages",
    on_part: Callable[[int, int], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
) -> EncodedPassages:
    """Every passage of ``store`` with a vector, encoded by ``encoder``, reusing and saving parts in ``folder``.

    Args:
        store: A local store (read in short read transactions; writes may go on meanwhile).
        encoder: The new model.
        folder: Where parts are kept (created if missing).
        model_digest: The digest of the model's files: parts of another model are refused.
        part_rows: Passages per part (default :data:`PART_ROWS`).
        show_progress_bar: One bar over all passages (those found in saved parts count as done).
        label: The bar's label.
        on_part: Called with ``(passages done, passages in all)`` after each saved part.
        on_start: Called with ``(passages to encode, passages in all)`` once the saved parts are read.

    Returns:
        The passages in rowid order; rows whose text changed after their part was saved carry the hash of the text
        that was encoded, so the switch encodes them again.

    """
    if part_rows is None:
        part_rows = PART_ROWS
    if part_rows < 1:
        raise ValueError(f"part_rows must be >= 1, got {part_rows}")
    folder.mkdir(parents=True, exist_ok=True)
    with store.reading():
        rows = store._core.db.execute("SELECT id, content_hash FROM passages WHERE has_vector=1 ORDER BY id").fetchall()
    rows = [(int(r), str(h)) for r, h in rows]
    done = read_parts(folder, model_digest, store.dimension)
    todo = [r for r, h in rows if r not in done or done[r][0] != h]
    numbers = [int(m.group(1)) for p in folder.iterdir() if (m := _PART.fullmatch(p.name))]
    number = max(numbers, default=-1) + 1
    for stale in folder.glob(".part-*.tmp"):  # a part a crash left half-written
        with contextlib.suppress(OSError):
            stale.unlink()
    if on_start is not None:
        on_start(len(todo), len(rows))
    bar: Any = None
    if show_progress_bar:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(rows), initial=len(rows) - len(todo), desc=label, unit="passage")
    try:
        for start in range(0, len(todo), part_rows):
            ids = todo[start : start + part_rows]
            with store.reading():
                hashes = _hashes(store, ids)
                records = records_by_rowid(store._core.db, [r for r in ids if r in hashes])
            kept = [r for r in ids if r in records and r in hashes]
            texts = [records[r].to_passage().embedding_text for r in kept]
            if kept:
                vectors = np.asarray(encoder.encode_documents(texts, show_progress_bar=False), np.float32)
                _write_part(
                    folder / f"part-{number:06d}.safetensors",
                    np.asarray(kept, np.int64),
                    [hashes[r] for r in kept],
                    vectors,
                    model_digest,
                )
                number += 1
                for r, v in zip(kept, vectors, strict=True):
                    done[r] = (hashes[r], v)
            if bar is not None:
                bar.update(len(ids))
            if on_part is not None:
                on_part(len(rows) - len(todo) + min(start + part_rows, len(todo)), len(rows))
    finally:
        if bar is not None:
            bar.close()
    present = [r for r, _ in rows if r in done]
    dim = store.dimension or encoder.dimension
    vectors = np.stack([done[r][1] for r in present]) if present else np.zeros((0, dim), np.float32)
    return EncodedPassages(
        np.asarray(present, dtype=np.int64), tuple(done[r][0] for r in present), np.asarray(vectors, np.float32)
    )
