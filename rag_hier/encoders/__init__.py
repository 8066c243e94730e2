"""Encoders: dense (sentence-transformers, :mod:`~rag_hier.encoders.dense`), SVDR's vocabulary encoder and token
binarizer (:mod:`~rag_hier.encoders.vocab`, :mod:`~rag_hier.encoders.binarizer`), device choice.
"""

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
