"""RagHierDocumentEmbedder: embed Haystack Documents with a rag-hier DenseEncoder."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.rag_hier._backend import EmbeddedBy, EncoderConfig, serialize_device

from rag_hier.encoders.dense import DEFAULT_MODEL
from rag_hier.encoders.device import Precision

__all__ = ["RagHierDocumentEmbedder"]


@component
class RagHierDocumentEmbedder:
    """Compute document embeddings with a sentence-transformers model through rag-hier's ``DenseEncoder``.

    The default model is all-MiniLM-L6-v2, loaded from the offline copy packaged with rag-hier. The model
    runs on the GPU when there is one (``device=None``); the device is saved as given, so a pipeline saved
    on a GPU machine loads on a CPU-only one (and an explicit ``cuda`` device falls back to the CPU there).
    Embed queries with :class:`RagHierTextEmbedder` and the same model. Each embedding names its model, so a
    ``RagHierDocumentStore`` created without ``model=`` records it when it stores these documents and
    encodes query text with it (the embeddings are plain lists of floats to every other component).

    Usage example:
    ```python
    from haystack import Document
    from haystack_integrations.components.embedders.rag_hier import RagHierDocumentEmbedder

    embedder = RagHierDocumentEmbedder()
    embedder.run([Document(content="Tides follow the moon.")])["documents"][0].embedding
    ```

    Args:
        model: A sentence-transformers model name or local path.
        device: Where to run the model; ``None`` picks CUDA when available, else the CPU.
        prefix: Text put before each document (e.g. ``"passage: "`` for E5 models).
        suffix: Text put after each document.
        batch_size: Documents per forward pass.
        progress_bar: Show a progress bar while embedding.
        normalize_embeddings: L2-normalize (True) or not (False); ``None`` follows the model.
        meta_fields_to_embed: Metadata fields whose values are embedded before the content.
        embedding_separator: Separator between the metadata values and the content.
        precision: ``"auto"`` (float16 on CUDA, float32 on CPU), ``"float32"``, ``"float16"``, ``"bfloat16"``.

    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: ComponentDevice | None = None,
        prefix: str = "",
        suffix: str = "",
        batch_size: int = 32,
        progress_bar: bool = True,
        normalize_embeddings: bool | None = None,
        meta_fields_to_embed: list[str] | None = None,
        embedding_separator: str = "\n",
        precision: Precision = "auto",
    ) -> None:
        self.model = model
        self.device = device
        self.prefix = prefix
        self.suffix = suffix
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.normalize_embeddings = normalize_embeddings
        self.meta_fields_to_embed = list(meta_fields_to_embed or [])
        self.embedding_separator = embedding_separator
        self.precision: Precision = precision
        self._backend = EncoderConfig(model, device, batch_size, progress_bar, normalize_embeddings, precision)

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"model": self.model}

    def to_dict(self) -> dict[str, Any]:
        """Serialize the component to a dictionary (the device as given, ``None`` included)."""
        return default_to_dict(
            self,
            model=self.model,
            device=serialize_device(self.device),
            prefix=self.prefix,
            suffix=self.suffix,
            batch_size=self.batch_size,
            progress_bar=self.progress_bar,
            normalize_embeddings=self.normalize_embeddings,
            meta_fields_to_embed=self.meta_fields_to_embed,
            embedding_separator=self.embedding_separator,
            precision=self.precision,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagHierDocumentEmbedder:
        """Deserialize the component from a dictionary."""
        return default_from_dict(cls, data)

    def warm_up(self) -> None:
        """Load the model (once; later calls return at once, as Haystack calls this before every run)."""
        self._backend.warm_up()

    def _text(self, document: Document) -> str:
        fields = [
            str(document.meta[key])
            for key in self.meta_fields_to_embed
            if key in document.meta and document.meta[key] is not None
        ]
        return self.prefix + self.embedding_separator.join([*fields, document.content or ""]) + self.suffix

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """Embed documents.

        Args:
            documents: The documents to embed.

        Returns:
            ``{"documents": [...]}``: copies of the documents with ``embedding`` set.

        Raises:
            TypeError: ``documents`` is not a list of Documents.

        """
        if not isinstance(documents, list) or any(not isinstance(d, Document) for d in documents):
            raise TypeError(
                "RagHierDocumentEmbedder expects a list of Documents as input; "
                "to embed a string, use RagHierTextEmbedder."
            )
        if not documents:
            return {"documents": []}
        encoder = self._backend.warm_up()
        vectors = encoder.encode_documents([self._text(d) for d in documents])
        normalize = self.normalize_embeddings
        named = EmbeddedBy.of_model(self.model, encoder.weights_digest())
        return {
            "documents": [
                replace(d, embedding=named(v.tolist(), model=self.model, normalize_embeddings=normalize))
                for d, v in zip(documents, vectors, strict=True)
            ]
        }
