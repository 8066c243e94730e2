"""Encoders: dense (sentence-transformers), SVDR's vocabulary encoder and token binarizer, device choice."""

from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder, resolve_model_path
from rag_hier.encoders.device import faiss_gpu_count, resolve_device, resolve_precision

__all__ = [
    "DEFAULT_MODEL",
    "DenseEncoder",
    "faiss_gpu_count",
    "resolve_device",
    "resolve_model_path",
    "resolve_precision",
]
