"""RagHierEmbedding: a rag-hier :class:`~rag_hier.encoders.DenseEncoder` as a LlamaIndex embedding model."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder

logger = logging.getLogger(__name__)

__all__ = ["RagHierEmbedding"]


class RagHierEmbedding(BaseEmbedding):
    """Embed queries and texts with a rag-hier dense encoder (any sentence-transformers model).

    Queries go through the encoder's query side (``query_prompt``), texts through its document side
    (``document_prompt``), so asymmetric models and models trained by rag-hier (HCE) work as intended. The model
    loads on first use (or on construction with ``warm_up=True``); by default it is the offline all-MiniLM-L6-v2
    packaged with rag-hier, so nothing is downloaded. The async methods run the encoder in a worker thread.

    Args:
        model_name: Model name, local directory, or the default offline MiniLM.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` picks CUDA when available.
        embed_batch_size: Texts per forward pass (and per LlamaIndex batch).
        normalize_embeddings: Force (True) or forbid (False) unit vectors; ``None`` follows the model.
        query_prompt: Prompt (or prompt name defined by the model) for queries.
        document_prompt: Prompt (or prompt name) for texts.
        encoder: A ready :class:`~rag_hier.encoders.DenseEncoder` to share (overrides the options above).
        warm_up: Load the model on construction (:meth:`warm_up`), so that the first query is as fast as the next.

    Example:
        >>> embed_model = RagHierEmbedding()  # doctest: +SKIP
        >>> len(embed_model.get_query_embedding("what is a tide?"))  # doctest: +SKIP
        384

    """

    embed_batch_size: int = Field(default=64, gt=0, le=2048, description="Texts per batch.")
    device: str | None = Field(default=None, description="Device of the model (None: CUDA when available).")
    normalize_embeddings: bool | None = Field(default=None, description="Unit vectors (None: as the model).")
    query_prompt: str | None = Field(default=None, description="Prompt prepended to queries.")
    document_prompt: str | None = Field(default=None, description="Prompt prepended to texts.")

    _encoder: DenseEncoder = PrivateAttr()

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        device: str | None = None,
        embed_batch_size: int = 64,
        normalize_embeddings: bool | None = None,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        encoder: DenseEncoder | None = None,
        warm_up: bool = False,
        **kwargs: Any,
    ) -> None:
        if encoder is not None:
            model_name = encoder.model_name
            device = encoder.requested_device
            query_prompt = encoder.query_prompt
            document_prompt = encoder.document_prompt
        super().__init__(  # type: ignore[call-arg]  # pydantic fields of this class
            model_name=model_name,
            device=device,
            embed_batch_size=embed_batch_size,
            normalize_embeddings=normalize_embeddings,
            query_prompt=query_prompt,
            document_prompt=document_prompt,
            **kwargs,
        )
        self._encoder = encoder or DenseEncoder(
            model_name,
            device=device,
            batch_size=embed_batch_size,
            normalize_embeddings=normalize_embeddings,
            query_prompt=query_prompt,
            document_prompt=document_prompt,
        )
        if warm_up:
            self.warm_up()

    def warm_up(self) -> None:
        """Load the model now rather than at the first embedding (idempotent)."""
        self._encoder.model  # noqa: B018 - loads it

    @classmethod
    def class_name(cls) -> str:
        """Name used by LlamaIndex serialization."""
        return "RagHierEmbedding"

    @property
    def encoder(self) -> DenseEncoder:
        """The wrapped :class:`~rag_hier.encoders.DenseEncoder`."""
        return self._encoder

    @property
    def dimension(self) -> int:
        """Embedding dimension (loads the model)."""
        return self._encoder.dimension

    # -- sync -----------------------------------------------------------------------------------------
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encoder.encode_queries([query])[0].tolist()

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._encoder.encode_documents([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._encoder.encode_documents(list(texts)).tolist()

    # -- async: the encoder runs in a worker thread ---------------------------------------------------
    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
