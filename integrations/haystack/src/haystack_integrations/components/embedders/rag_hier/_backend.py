"""What the rag-hier embedders share: device resolution and the lazily built encoder."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from haystack.utils import ComponentDevice

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.encoders.device import Precision

logger = logging.getLogger(__name__)

__all__ = ["EmbeddedBy", "EncoderConfig", "resolve_device", "serialize_device"]


class EmbeddedBy(list[float]):
    """An embedding that names the model that computed it; a plain ``list[float]`` to everything else.

    :class:`RagHierDocumentEmbedder` returns these, so a ``RagHierDocumentStore`` created without
    ``model=`` records which model embedded its documents and encodes query text with the same one.
    :class:`RagHierTextEmbedder` returns one too (with ``weights_sha256``, the digest of the model's weights), so a
    ``RagHierDocumentStore`` refuses a query embedding from another model than its vectors'.
    The name survives copies (``copy.deepcopy``); serialization writes a plain list.
    """

    _model: str | None = None
    _weights: str | None = None

    def __init__(
        self,
        values: Iterable[float] = (),
        *,
        model: str | None = None,
        normalize_embeddings: bool | None = None,
        weights_sha256: str | None = None,
    ) -> None:
        super().__init__(values)
        cls = type(self)
        self.model = model if model is not None else cls._model
        self.normalize_embeddings = normalize_embeddings
        self.weights_sha256 = weights_sha256 if weights_sha256 is not None else cls._weights

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (list(self), self.model, self.normalize_embeddings, self.weights_sha256))

    @classmethod
    def of_model(cls, model: str, weights_sha256: str | None) -> type[EmbeddedBy]:
        """The subclass whose instances name ``model`` even when rebuilt from their values alone.

        Haystack copies a component's list outputs as ``type(value)(items)``; the model's name and digest then
        come from the class.
        """
        key = (model, weights_sha256)
        named = _NAMED.get(key)
        if named is None:
            named = _NAMED[key] = type(
                "EmbeddedBy", (EmbeddedBy,), {"_model": model, "_weights": weights_sha256, "__module__": __name__}
            )
        return named


_NAMED: dict[tuple[str, str | None], type[EmbeddedBy]] = {}


def _rebuild(
    values: list[float], model: str | None, normalize_embeddings: bool | None, weights_sha256: str | None
) -> EmbeddedBy:
    cls = EmbeddedBy.of_model(model, weights_sha256) if model is not None else EmbeddedBy
    return cls(values, model=model, normalize_embeddings=normalize_embeddings, weights_sha256=weights_sha256)


def _available(device: str) -> bool:
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            return False
        index = device.partition(":")[2]
        return not index or int(index) < torch.cuda.device_count()
    if device == "mps":
        return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    if device.startswith("xpu"):
        return bool(getattr(torch, "xpu", None) and torch.xpu.is_available())
    return True


def resolve_device(device: ComponentDevice | None) -> str | None:
    """The torch device string to load the model on; ``None`` lets rag-hier pick (CUDA when available).

    A device this machine lacks (a pipeline saved with ``cuda:0`` loaded on a CPU-only machine) falls
    back to the CPU with a warning instead of failing. With several devices, the first one is used.
    """
    if device is None:
        return None
    single = device.first_device if device.has_multiple_devices else device
    if single is None:
        return None
    name = single.to_torch_str()
    if not _available(name):
        logger.warning("device %s is not available on this machine; using the CPU instead", name)
        return "cpu"
    return name


def serialize_device(device: ComponentDevice | None) -> dict[str, Any] | None:
    """The device as the user gave it (``None`` stays ``None``, so a saved pipeline picks the device where it loads)."""
    return None if device is None else device.to_dict()


class EncoderConfig:
    """The encoder settings of an embedder, and the :class:`DenseEncoder` built from them on warm-up."""

    def __init__(
        self,
        model: str,
        device: ComponentDevice | None,
        batch_size: int,
        progress_bar: bool,
        normalize_embeddings: bool | None,
        precision: Precision,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if precision not in ("auto", "float32", "float16", "bfloat16"):
            raise ValueError(f"precision must be one of auto, float32, float16, bfloat16; got {precision!r}")
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.normalize_embeddings = normalize_embeddings
        self.precision: Precision = precision
        self.encoder: DenseEncoder | None = None

    def warm_up(self) -> DenseEncoder:
        """Build the encoder and load its model once; later calls return it at once."""
        if self.encoder is None:
            encoder = DenseEncoder(
                self.model,
                device=resolve_device(self.device),
                precision=self.precision,
                batch_size=self.batch_size,
                normalize_embeddings=self.normalize_embeddings,
                show_progress_bar=self.progress_bar,
            )
            _ = encoder.model  # load now, not in the first run
            self.encoder = encoder
        return self.encoder
