"""Replacing a store's dense encoder in one commit: adopting a tuned model, or rolling back to the previous one.

The switch is a write batch like any other (writer lock, one SQLite transaction, files renamed after the
commit point), so a kill at any moment leaves either the old model with the old vectors or the new model
with the new vectors; readers in other processes see one or the other, never a mix (a search checks that the
model that encoded its queries is the one of the generation it searched, and encodes again if not).

1. The passages are encoded by the new model *before* the batch (:func:`encode_passages`: minutes for a large
   store, while the store keeps answering and accepting writes).
2. In the batch: passages written meanwhile (a rowid or content hash the encoding did not see) are encoded
   now; model directories no state names are removed; the new model is copied into ``models/<name>``
   (:mod:`rag_hier.store.models`, fsynced before the commit names it); a new passage index is built from the
   vectors (same kind and parameters) and written whole; the recorded encoder becomes the new one and the
   old one is kept as ``encoder_previous`` (for :meth:`~rag_hier.store.HierStore.rollback_model`); extensions
   whose data follow the encoder are rebuilt (``encoder_dependency() == "rebuild"``), and one that cannot
   follow (``"refuse"``) stops the switch before anything is done.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import DimensionMismatchError, ModelChangedError, StoreError
from rag_hier.index.dense import DenseIndex
from rag_hier.store import core as core_module
from rag_hier.store.models import (
    KEPT_ENCODERS,
    MODELS_DIR,
    install_model,
    new_model_name,
    prune_models,
    stored_model_dir,
)
from rag_hier.store.records import records_by_rowid

HierStore = Any
"""A :class:`~rag_hier.store.HierStore` (not imported: that module imports this one)."""

logger = logging.getLogger(__name__)

__all__ = [
    "EncodedPassages",
    "check_extensions",
    "check_still_current",
    "encode_passages",
    "same_encoder",
    "switch_encoder",
]

_ENCODER_OPTIONS = ("normalize_embeddings", "query_prompt", "document_prompt", "max_seq_length")


@dataclass(frozen=True)
class EncodedPassages:
    """Every passage that has a vector, encoded by one model.

    Attributes:
        rowids: The passages' rowids (ascending).
        hashes: The content hash of the text each was encoded from (aligned with ``rowids``).
        vectors: ``(len(rowids), dimension)`` float32 vectors.

    """

    rowids: np.ndarray
    hashes: tuple[str, ...]
    vectors: np.ndarray


def _rows(store: HierStore) -> list[tuple[int, str]]:
    """``(rowid, content hash)`` of every passage with a vector (the caller holds a read or write transaction)."""
    rows = store._core.db.execute("SELECT id, content_hash FROM passages WHERE has_vector=1 ORDER BY id").fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def _texts(store: HierStore, rows: list[tuple[int, str]]) -> list[str]:
    """The encoded text (title path, then text) of each row's passage, in order."""
    records = records_by_rowid(store._core.db, [r for r, _ in rows])
    return [records[r].to_passage().embedding_text for r, _ in rows]


def _encode(encoder: DenseEncoder, texts: list[str], dimension: int | None, show_progress_bar: bool) -> np.ndarray:
    if not texts:
        return np.zeros((0, dimension or encoder.dimension), np.float32)
    return np.asarray(encoder.encode_documents(texts, show_progress_bar=show_progress_bar), np.float32)


def encode_passages(store: HierStore, encoder: DenseEncoder, *, show_progress_bar: bool = False) -> EncodedPassages:
    """Encode every passage of ``store`` that has a vector with ``encoder`` (texts read from one generation).

    A backend without the local store's SQLite (Milvus) lists its passages itself (``_encoding_rows()``).
    """
    with store.reading():
        listing = getattr(store, "_encoding_rows", None)
        if listing is not None:
            rows, texts = listing()
        else:
            rows = _rows(store)
            texts = _texts(store, rows)
    vectors = _encode(encoder, texts, None, show_progress_bar)
    return EncodedPassages(np.asarray([r for r, _ in rows], dtype=np.int64), tuple(h for _, h in rows), vectors)


def check_extensions(store: HierStore) -> list[str]:
    """The extensions a switch rebuilds; raises if one cannot follow a new encoder."""
    rebuild = []
    for name, ext in sorted(store.extensions.items()):
        need = ext.encoder_dependency()
        if need == "refuse":
            raise StoreError(
                f"the store at {store.path} has the {name!r} extension, which was trained for its current encoder "
                f"and cannot follow a new one: remove it first (store.remove_extension({name!r})) and rebuild it "
                "after the switch"
            )
        if need == "rebuild":
            rebuild.append(name)
    return rebuild


def _encoder_config(
    previous: dict[str, Any] | None, model: str, digest: str | None, dimension: int, generation: int
) -> dict[str, Any]:
    prev = previous or {}
    cfg: dict[str, Any] = {"model": model, "dimension": dimension}
    cfg.update({k: prev.get(k) for k in _ENCODER_OPTIONS})
    if digest is not None:
        cfg["stored"] = True
        cfg["sha256"] = digest
    cfg["since"] = generation
    return cfg


def switch_encoder(
    store: HierStore,
    *,
    source: Path | None,
    encoded: EncodedPassages,
    encoder: DenseEncoder,
    target: dict[str, Any] | None = None,
    details: dict[str, Any] | None = None,
    show_progress_bar: bool = False,
    expected: dict[str, Any] | None = None,
) -> int:
    """Make a new encoder the store's, with ``encoded`` as its passage vectors, in one commit.

    Args:
        store: A writable local store.
        source: A sentence-transformers model directory to copy into the store (adoption), or ``None`` with
            ``target`` (a recorded encoder configuration to return to: rollback).
        encoded: The passages encoded by the new model (:func:`encode_passages`); passages written since are
            encoded inside the commit.
        encoder: The new model, to encode those passages.
        target: For a rollback: the recorded configuration of the model to return to.
        details: Free facts recorded with the new encoder (``encoder.adopted``): what trained it, its scores.
        show_progress_bar: Show a progress bar for passages encoded inside the commit.
        expected: The recorded encoder the caller measured (``model_info["current"]``): the switch happens only
            if it is still the store's inside the commit (compare-and-switch), else :class:`ModelChangedError`
            and nothing changes.

    Returns:
        The committed generation.

    """
    override, checked = store._encoder_arg, store._encoder_checked
    try:
        with store.batch():
            if expected is not None:
                check_still_current(store, expected)
            _switch(store, source, encoded, encoder, target, details, show_progress_bar)
    except BaseException:
        store._encoder_arg, store._encoder_checked = override, checked
        raise
    return store.generation


_IDENTITY = ("model", "sha256", "weights_sha256")


def same_encoder(a: Any, b: Any) -> bool:
    """Whether two recorded encoder configurations name the same model (same name and recorded digests)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a == b
    return all(a.get(k) == b.get(k) for k in _IDENTITY)


def check_still_current(store: HierStore, expected: dict[str, Any]) -> None:
    """Refuse a switch when the store's recorded encoder is no longer ``expected`` (inside the batch)."""
    current = store._core.state.get("encoder")
    if not same_encoder(current, expected):
        raise ModelChangedError(
            f"the store at {store.path} encodes with {(current or {}).get('model')!r} now, not "
            f"{expected.get('model')!r} that this run measured as its base (another tune or a rollback switched "
            "it meanwhile): nothing adopted; run again on the store as it is now"
        )


def _switch(
    store: HierStore,
    source: Path | None,
    encoded: EncodedPassages,
    encoder: DenseEncoder,
    target: dict[str, Any] | None,
    details: dict[str, Any] | None,
    show_progress_bar: bool,
) -> None:
    core = store._core
    rebuild = check_extensions(store)
    state = core.state
    current = state.get("encoder")
    generation = core.generation + 1
    dim = state.get("dimension")
    vectors = np.asarray(encoded.vectors, np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != encoded.rowids.shape[0]:
        raise ValueError(f"encoded vectors must be ({encoded.rowids.shape[0]}, dimension), got {vectors.shape}")
    if dim is not None and vectors.shape[0] and vectors.shape[1] != dim:
        raise DimensionMismatchError(
            f"the new model outputs {vectors.shape[1]}-d vectors; the store at {store.path} holds {dim}-d vectors"
        )
    # passages written since the encoding (or rewritten with other text) are encoded now
    rows = _rows(store)
    have = {r: (i, h) for i, (r, h) in enumerate(zip(encoded.rowids.tolist(), encoded.hashes, strict=True))}
    keep = [(r, have[r][0]) for r, h in rows if r in have and have[r][1] == h]
    todo = [(r, h) for r, h in rows if r not in have or have[r][1] != h]
    id_parts = [np.asarray([r for r, _ in keep], dtype=np.int64)]
    vec_parts = [vectors[np.asarray([i for _, i in keep], dtype=np.int64)]]
    if todo:
        logger.info("%s: encoding %d passages written since the model's first pass", store.path, len(todo))
        id_parts.append(np.asarray([r for r, _ in todo], dtype=np.int64))
        vec_parts.append(_encode(encoder, _texts(store, todo), store.dimension, show_progress_bar))
    ids = np.concatenate(id_parts)
    mat = np.ascontiguousarray(np.concatenate(vec_parts), dtype=np.float32)
    core_module._step("switch_encoded")
    dimension = int(mat.shape[1]) if mat.shape[0] else int(dim or encoder.dimension)
    if dim is not None and dimension != dim:
        raise DimensionMismatchError(
            f"the new model outputs {dimension}-d vectors; the store at {store.path} holds {dim}-d vectors"
        )
    if "encoder_original" not in state and current:
        state["encoder_original"] = current  # the model the store was built with: always a rollback target
    if source is not None:
        referenced = {_dir_name(state.get(k)) for k in KEPT_ENCODERS} - {None}
        prune_models(store.path, {str(n) for n in referenced})
        name = new_model_name(generation)
        digest = install_model(store.path, source, name)
        cfg = _encoder_config(current, f"{MODELS_DIR}/{name}", digest, dimension, generation)
        if details is not None:
            cfg["adopted"] = details
    elif target is not None:
        if target.get("stored"):
            stored_model_dir(store.path, target)  # still there and intact
        cfg = {**target, "since": generation}
    else:
        raise ValueError("switch_encoder needs a model directory (source) or a recorded encoder (target)")
    core_module._step("switch_model_installed")
    index = DenseIndex(dimension, core.index_config)
    if ids.size:
        index.add(ids, mat)
    core.indexes["dense"] = index
    core.dirty.add("dense")
    core.merge_requested = True  # dense.faiss written whole, its segments dropped
    core.db.execute("UPDATE passages SET exact_embedding=NULL WHERE exact_embedding IS NOT NULL")
    state["dimension"] = dimension
    state["encoder_previous"] = current
    state["encoder"] = cfg
    store._encoder_arg = None  # this handle follows the store's encoder from now on
    store._encoder_checked = False
    for name in rebuild:
        ext = core.extensions[name]
        logger.info("%s: rebuilding the %s extension for the new encoder", store.path, name)
        ext.build(store)
        core.dirty_ext.add(name)
        core.rewrite_ext.add(name)
    core_module._step("switch_before_commit")


def _dir_name(enc: Any) -> str | None:
    if not isinstance(enc, dict) or not enc.get("stored"):
        return None
    model = str(enc.get("model", ""))
    return model.split("/", 1)[1] if "/" in model else None
