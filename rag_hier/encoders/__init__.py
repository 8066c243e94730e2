"""Encoders: dense (sentence-transformers), SVDR's vocabulary encoder and token binarizer, device choice.

Names load on first use (``rag_hier.encoders.identity`` imports no NumPy or torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.encoders.device import faiss_gpu_count, resolve_device, resolve_precision
    from rag_hier.encoders.identity import DEFAULT_MODEL, resolve_model_path

__getattr__ = lazy_getattr(
    __name__,
    {
        "DEFAULT_MODEL": "identity",
        "DenseEncoder": "dense",
        "faiss_gpu_count": "device",
        "resolve_device": "device",
        "resolve_model_path": "identity",
        "resolve_precision": "device",
    },
    globals(),
)

__all__ = [
    "DEFAULT_MODEL",
    "DenseEncoder",
    "faiss_gpu_count",
    "resolve_device",
    "resolve_model_path",
    "resolve_precision",
]
