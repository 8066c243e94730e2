"""Device choice for encoders and FAISS: CUDA (half precision) when present, else CPU; always overridable."""

from __future__ import annotations

import functools
import logging
from typing import Literal

logger = logging.getLogger(__name__)

Precision = Literal["auto", "float32", "float16", "bfloat16"]


def resolve_device(device: str | None = None) -> str:
    """Return ``device`` if given (checked), else ``"cuda"`` when torch sees a GPU, else ``"cpu"``.

    Raises:
        InvalidInputError: A device name torch does not know (``"tpu:9"``), or a CUDA / MPS device this machine
            does not have (``"cuda:7"`` on one GPU, or on a CPU-only torch).

    """
    if device:
        check_device(device)
        return device
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda"
    except ImportError:  # pragma: no cover - torch is a hard dependency
        pass
    return "cpu"


def check_device(device: str) -> None:
    """Refuse, in one line, a device that torch does not know or that this machine does not have."""
    import torch

    from rag_hier.errors import InvalidInputError

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise InvalidInputError(f"device {device!r} is not one torch knows (cpu, cuda, cuda:1, mps, ...)") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InvalidInputError(
                f"device {device!r} is not available: this torch sees no CUDA GPU (torch {torch.__version__}; "
                "install a CUDA build of torch, or use cpu)"
            )
        if parsed.index is not None and parsed.index >= count:
            raise InvalidInputError(f"device {device!r} is not available: this machine has {count} CUDA GPU(s)")
    elif parsed.type == "mps" and not torch.backends.mps.is_available():
        raise InvalidInputError(f"device {device!r} is not available: this torch sees no Apple MPS device")


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
