"""What it takes to reproduce an evaluation figure: file digests, the model's weights digest, the device."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path
from typing import Any

__all__ = ["WEIGHT_SUFFIXES", "file_sha256", "host_description", "model_fingerprint"]

WEIGHT_SUFFIXES: tuple[str, ...] = (".safetensors", ".bin", ".pt", ".pth", ".onnx")
"""Files counted as a model's weights."""


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_fingerprint(model: str | None) -> dict[str, Any]:
    """The model's name, its resolved local directory and a SHA-256 over its weight files.

    The digest covers every file with a :data:`WEIGHT_SUFFIXES` suffix under the model directory (its
    relative path, then its bytes, in sorted order), so two copies of the same weights agree wherever
    they lie and a fine-tuned model never matches its base.

    Args:
        model: A sentence-transformers model name or path, as recorded in a store; ``None`` for a store
            without a model.

    Returns:
        ``{"name", "path", "weights_sha256", "weight_files"}``; ``path`` and the digest are ``None`` when
        the model is not a local directory (nor resolvable to one offline).

    """
    if model is None:
        return {"name": None, "path": None, "weights_sha256": None, "weight_files": 0}
    from rag_hier.encoders.dense import resolve_model_path

    resolved = Path(resolve_model_path(model))
    if not resolved.is_dir():
        return {"name": model, "path": None, "weights_sha256": None, "weight_files": 0}
    files = sorted(p for p in resolved.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.relative_to(resolved).as_posix().encode("utf-8") + b"\0")
        digest.update(file_sha256(p).encode("ascii"))
    return {
        "name": model,
        "path": str(resolved.absolute()),
        "weights_sha256": digest.hexdigest() if files else None,
        "weight_files": len(files),
    }


def host_description() -> str:
    """``"<cpu or machine>, <OS> <release>"`` for the record."""
    return f"{platform.processor() or platform.machine()}, {platform.system()} {platform.release()}"
