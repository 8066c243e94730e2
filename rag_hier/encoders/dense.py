"""DenseEncoder: any sentence-transformers model, loaded lazily, with device and precision choice."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier.encoders.device import Precision, resolve_device, resolve_precision
from rag_hier.encoders.identity import DEFAULT_MODEL, resolve_model_path

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MODEL", "DenseEncoder", "resolve_model_path"]


class DenseEncoder:
    """Encode texts into dense vectors with a sentence-transformers model.

    The model loads on first use. Normalization follows the model: a model that ends in a ``Normalize``
    module, or whose similarity function is cosine, yields unit vectors (so inner product = cosine);
    a dot-product model is left as is. ``normalize_embeddings`` overrides that choice.

    Args:
        model: A model name (hub id), a local directory, or the default offline MiniLM.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...; ``None`` picks CUDA when available.
        precision: ``"auto"`` (float16 on CUDA, float32 on CPU), ``"float32"``, ``"float16"``, ``"bfloat16"``.
        batch_size: Texts per forward pass.
        normalize_embeddings: Force (True) or forbid (False) L2 normalization; ``None`` follows the model.
        max_seq_length: Override the model's maximum sequence length.
        show_progress_bar: Show a progress bar when encoding many texts.
        query_prompt: Prompt (or prompt name defined by the model) prepended to queries.
        document_prompt: Prompt (or prompt name) prepended to documents.
        model_kwargs: Extra keyword arguments for ``SentenceTransformer``.
        weights_sha256: The weights the model must have (:func:`~rag_hier.encoders.identity.weights_digest`);
            other weights are refused with :class:`~rag_hier.errors.ModelMismatchError` before
            they are loaded (a store passes what it recorded when it was built).

    Example:
        >>> enc = DenseEncoder()  # doctest: +SKIP
        >>> enc.encode_queries(["what is a tide?"]).shape  # doctest: +SKIP
        (1, 384)

    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        device: str | None = None,
        precision: Precision = "auto",
        batch_size: int = 64,
        normalize_embeddings: bool | None = None,
        max_seq_length: int | None = None,
        show_progress_bar: bool = False,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        weights_sha256: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_name = model
        self.requested_device = device
        self.precision: Precision = precision
        self.batch_size = batch_size
        self._normalize_override = normalize_embeddings
        self.max_seq_length = max_seq_length
        self.show_progress_bar = show_progress_bar
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.model_kwargs = dict(model_kwargs or {})
        self.weights_sha256 = weights_sha256
        self.weights_owner: str | None = None  # whose recorded digest weights_sha256 is (named in the error)
        self._model: SentenceTransformer | None = None
        self._digest: tuple[str | None, str | None] | None = None

    # -- lazy model -------------------------------------------------------------------------------
    @property
    def model(self) -> SentenceTransformer:
        """The underlying ``SentenceTransformer``, loaded on first access."""
        if self._model is None:
            self._model = self._load()
        return self._model

    def _load(self) -> SentenceTransformer:
        from rag_hier.encoders._st_loading import load_sentence_transformer, st_load_kwargs

        device = resolve_device(self.requested_device)
        path = resolve_model_path(self.model_name)
        logger.info("loading sentence-transformers model %s on %s", path, device)
        # a directory built from rag-hier's own module classes (Tied-Atomic) loads without trust_remote_code
        kwargs = {**st_load_kwargs(path), **self.model_kwargs}
        checked = self.weights_sha256 is None or self._check_weights(loaded=False)
        model = load_sentence_transformer(path, device=device, name=self.model_name, **kwargs)
        if not checked:
            self._check_weights(loaded=True)  # a hub id: its files are on disk only now
        precision = resolve_precision(device, self.precision)
        if precision == "float16":
            model.half()
        elif precision == "bfloat16":
            model.bfloat16()
        if self.max_seq_length is not None:
            model.max_seq_length = self.max_seq_length
        model.eval()
        return model

    def weights_digest(self) -> str | None:
        """SHA-256 over the model's weight files, read from disk (``None`` when they are not on disk)."""
        if self._digest is None or self._digest[1] is None:
            from rag_hier.encoders.identity import weights_digest

            directory, digest, _ = weights_digest(self.model_name)
            self._digest = (None if directory is None else str(directory), digest)
        return self._digest[1]

    def _check_weights(self, *, loaded: bool) -> bool:
        """Compare the weights on disk with :attr:`weights_sha256`; ``False`` when they cannot be read yet."""
        from rag_hier.errors import ModelMismatchError

        self._digest = None  # read the files again: they are what is about to be loaded
        digest = self.weights_digest()
        if digest is None:
            if loaded:
                logger.warning("cannot check the weights of %s: no weight files on disk", self.model_name)
            return loaded
        if digest != self.weights_sha256:
            assert self._digest is not None
            owner = f"{self.weights_owner} was built with other weights" if self.weights_owner else "other weights"
            raise ModelMismatchError(
                f"{self._digest[0]}: the model's weights (sha256 {digest[:12]}) are not the ones {owner} "
                f"(sha256 {str(self.weights_sha256)[:12]}); refusing to encode with them. Restore that model, "
                "or pass an encoder explicitly with allow_other_model=True"
            )
        return True

    def over_model(self, model: SentenceTransformer) -> DenseEncoder:
        """A copy of this encoder's settings (prompts, normalization, batch size) that encodes with ``model``.

        For scoring a model that lives only in memory (a model in training) exactly as this encoder would
        encode; the copy checks no weights digest.
        """
        import copy

        other = copy.copy(self)
        other._model = model
        other._digest = None
        other.weights_sha256 = None
        return other

    @property
    def is_loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._model is not None

    @property
    def device(self) -> str:
        """The device the model runs on (loads the model)."""
        return str(self.model.device)

    @property
    def dimension(self) -> int:
        """Output dimension (loads the model)."""
        model = self.model
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:  # pragma: no cover - exotic models
            dim = int(model.encode(["x"], convert_to_numpy=True).shape[1])
        return int(dim)

    @property
    def normalize_embeddings(self) -> bool:
        """Whether outputs are unit vectors (explicit override, else what the model implies)."""
        if self._normalize_override is not None:
            return self._normalize_override
        from rag_hier._compat import st_modules

        model = self.model
        if any(isinstance(m, st_modules().Normalize) for m in model):
            return True
        return getattr(model, "similarity_fn_name", "cosine") in (None, "cosine")

    def config(self) -> dict[str, Any]:
        """What a store records about its encoder (JSON-ready), with the digest of its weights."""
        dimension = self.dimension  # loads the model (a hub id's files are on disk from then on)
        return {
            "model": self.model_name,
            "dimension": dimension,
            "normalize_embeddings": self.normalize_embeddings,
            "query_prompt": self.query_prompt,
            "document_prompt": self.document_prompt,
            "max_seq_length": self.max_seq_length,
            "weights_sha256": self.weights_digest(),
        }

    # -- encoding ---------------------------------------------------------------------------------
    def _encode(self, texts: Sequence[str], prompt: str | None, show_progress_bar: bool | None) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        _check_encodable(texts)
        model = self.model
        kwargs: dict[str, Any] = {}
        if prompt:
            if prompt in getattr(model, "prompts", {}):
                kwargs["prompt_name"] = prompt
            else:
                kwargs["prompt"] = prompt
        show = self.show_progress_bar if show_progress_bar is None else show_progress_bar
        emb = model.encode(
            list(texts),
            batch_size=self.batch_size,
            # a bar for one or two batches is noise (e.g. a single search query)
            show_progress_bar=show and len(texts) > 2 * self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=self.normalize_embeddings,
            **kwargs,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_queries(self, queries: Sequence[str], *, show_progress_bar: bool | None = None) -> np.ndarray:
        """Encode queries into a float32 ``(n, dimension)`` array."""
        return self._encode(queries, self.query_prompt, show_progress_bar)

    def encode_documents(self, texts: Sequence[str], *, show_progress_bar: bool | None = None) -> np.ndarray:
        """Encode passages/documents into a float32 ``(n, dimension)`` array."""
        return self._encode(texts, self.document_prompt, show_progress_bar)

    def __repr__(self) -> str:
        return f"DenseEncoder(model={self.model_name!r}, device={self.requested_device!r})"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_encodable(texts: Sequence[str]) -> None:
    """Refuse a text with a lone surrogate (not valid Unicode: the tokenizer would fail with a ``TypeError``)."""
    for i, text in enumerate(texts):
        bad = _LONE_SURROGATE.search(text) if isinstance(text, str) else None
        if bad is not None:
            from rag_hier.errors import InvalidInputError

            raise InvalidInputError(
                f"text {i} to encode holds a lone surrogate {bad.group()!r} at character {bad.start()} "
                f"({text[:40]!r}): text must be valid Unicode"
            )
