"""Device choice for encoders and FAISS: CUDA (half precision) when present, else CPU; always overridable."""

from __future__ import annotations

import functools
import logging
from typing import Literal

logger = logging.getLogger(__name__)

Precision = Literal["auto", "float32", "float16", "bfloat16"]


def resolve_device(device: str | None = None) -> str:
    """Return ``device`` if given, else ``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    if device:
        return device
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda"
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    return "cpu"


def resolve_precision(device: str, precision: Precision = "auto") -> Literal["float32", "float16", "bfloat16"]:
    """``auto`` means float16 on CUDA (inference) and float32 elsewhere."""
    if precision == "auto":
        return "float16" if device.startswith("cuda") else "float32"
    if precision not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"precision must be one of auto, float32, float16, bfloat16; got {precision!r}")
    return precision


@functools.cache
def faiss_gpu_count() -> int:
    """Number of GPUs FAISS can use (0 with faiss-cpu); probed once per process (it is asked on every search)."""
    try:
        import faiss

        get = getattr(faiss, "get_num_gpus", None)
        return int(get()) if get is not None else 0
    except Exception:
        logger.debug("faiss GPU probe failed", exc_info=True)
        return 0
