"""What it takes to reproduce an evaluation figure: file digests, the model's weights digest, the device."""

from __future__ import annotations

import platform
from typing import Any

from rag_hier.encoders.identity import WEIGHT_SUFFIXES, file_sha256, weights_digest

__all__ = ["WEIGHT_SUFFIXES", "file_sha256", "host_description", "model_fingerprint"]


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
    directory, digest, count = weights_digest(model)
    return {
        "name": model,
        "path": None if directory is None else str(directory),
        "weights_sha256": digest,
        "weight_files": count,
    }


def host_description() -> str:
    """``"<cpu or machine>, <OS> <release>"`` for the record."""
    return f"{platform.processor() or platform.machine()}, {platform.system()} {platform.release()}"
