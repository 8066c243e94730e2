"""RagHierEmbedding: a rag-hier :class:`~rag_hier.encoders.DenseEncoder` as a LlamaIndex embedding model."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder

logger = logging.getLogger(__name__)

__all__ = ["NamedEmbedding", "RagHierEmbedding"]


class NamedEmbedding(list[float]):
    """A query embedding that names the model that computed it; a plain ``list[float]`` to everything else.

    :class:`RagHierEmbedding` returns these for queries, so a ``RagHierVectorStore`` whose vectors come from another
    model refuses the query (with the fix) instead of comparing vectors of two models.
    """

    def __init__(
        self, values: Iterable[float] = (), *, model: str | None = None, weights_sha256: str | None = None
    ) -> None:
        super().__init__(values)
        self.model = model
        self.weights_sha256 = weights_sha256


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
        vector_store: A ``RagHierVectorStore`` whose model this embeds with (the other model options are then not
            used): the store's current model at every call, so queries follow the store when its model is tuned.

    Query embeddings name their model (:class:`NamedEmbedding`): a ``RagHierVectorStore`` whose vectors come from
    another model refuses them.

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
    _store: Any = PrivateAttr(default=None)

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
        vector_store: Any = None,
        **kwargs: Any,
    ) -> None:
        if vector_store is not None:
            if not callable(getattr(vector_store, "query_encoder", None)):
                raise TypeError(f"vector_store must be a RagHierVectorStore, got {vector_store!r}")
            encoder = vector_store.query_encoder()
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
        self._store = vector_store
        if warm_up:
            self.warm_up()

    def warm_up(self) -> None:
        """Load the model now rather than at the first embedding (idempotent)."""
        self.encoder.model  # noqa: B018 - loads it

    @classmethod
    def class_name(cls) -> str:
        """Name used by LlamaIndex serialization."""
        return "RagHierEmbedding"

    @property
    def encoder(self) -> DenseEncoder:
        """The wrapped :class:`~rag_hier.encoders.DenseEncoder` (with ``vector_store``: the store's current one)."""
        if self._store is not None:
            current = self._store.query_encoder()
            if current is not self._encoder:
                self._encoder = current
                self.model_name = current.model_name
        return self._encoder

    @property
    def dimension(self) -> int:
        """Embedding dimension (loads the model)."""
        return self.encoder.dimension

    def _named(self, values: Iterable[float], encoder: DenseEncoder) -> NamedEmbedding:
        return NamedEmbedding(values, model=encoder.model_name, weights_sha256=encoder.weights_digest())

    def get_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., Embedding] | None = None
    ) -> Embedding:
        """LlamaIndex's aggregate of the queries' embeddings, still naming the model (see :class:`NamedEmbedding`)."""
        encoder = self.encoder
        return self._named(super().get_agg_embedding_from_queries(queries, agg_fn), encoder)

    async def aget_agg_embedding_from_queries(
        self, queries: list[str], agg_fn: Callable[..., Embedding] | None = None
    ) -> Embedding:
        """Asynchronous :meth:`get_agg_embedding_from_queries`."""
        encoder = self.encoder
        return self._named(await super().aget_agg_embedding_from_queries(queries, agg_fn), encoder)

    # -- sync -----------------------------------------------------------------------------------------
    def _get_query_embedding(self, query: str) -> Embedding:
        encoder = self.encoder
        return self._named(encoder.encode_queries([query])[0].tolist(), encoder)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self.encoder.encode_documents([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self.encoder.encode_documents(list(texts)).tolist()

    # -- async: the encoder runs in a worker thread ---------------------------------------------------
    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
