"""RagHierTextEmbedder: embed a query string with a rag-hier DenseEncoder."""

from __future__ import annotations

from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.rag_hier._backend import EmbeddedBy, EncoderConfig, serialize_device

from rag_hier.encoders.dense import DEFAULT_MODEL
from rag_hier.encoders.device import Precision

__all__ = ["RagHierTextEmbedder"]


@component
class RagHierTextEmbedder:
    """Embed a string (usually a query) with a sentence-transformers model through rag-hier's ``DenseEncoder``.

    Use the same model as the :class:`RagHierDocumentEmbedder` that embedded the documents, or give it the
    store (``document_store=``): it then encodes with the store's current model, also after ``tune`` adopted a
    tuned one. The default model is all-MiniLM-L6-v2 from the offline copy packaged with rag-hier;
    ``device=None`` picks CUDA when available and is saved as ``None``, so a saved pipeline loads on any machine.
    The embedding it returns names its model, so a ``RagHierDocumentStore`` whose vectors come from another
    model refuses it (with the fix) instead of comparing vectors of two models.

    Usage example:
    ```python
    from haystack_integrations.components.embedders.rag_hier import RagHierTextEmbedder

    RagHierTextEmbedder().run("How do tides work?")["embedding"]
    ```

    Args:
        model: A sentence-transformers model name or local path.
        device: Where to run the model; ``None`` picks CUDA when available, else the CPU.
        prefix: Text put before the string (e.g. ``"query: "`` for E5 models).
        suffix: Text put after the string.
        batch_size: Texts per forward pass.
        progress_bar: Show a progress bar while embedding.
        normalize_embeddings: L2-normalize (True) or not (False); ``None`` follows the model.
        precision: ``"auto"`` (float16 on CUDA, float32 on CPU), ``"float32"``, ``"float16"``, ``"bfloat16"``.
        document_store: A ``RagHierDocumentStore`` whose model encodes the text (``model`` is then not used):
            the store's current model at every run, so queries follow the store when its model is tuned.

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
        precision: Precision = "auto",
        document_store: Any = None,
    ) -> None:
        if document_store is not None and not callable(getattr(document_store, "query_encoder", None)):
            raise TypeError(
                f"document_store must be a RagHierDocumentStore (it encodes with its model), got {document_store!r}"
            )
        self.document_store = document_store
        self.model = model
        self.device = device
        self.prefix = prefix
        self.suffix = suffix
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.normalize_embeddings = normalize_embeddings
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
            precision=self.precision,
            **({"document_store": self.document_store} if self.document_store is not None else {}),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagHierTextEmbedder:
        """Deserialize the component from a dictionary."""
        return default_from_dict(cls, data)

    def warm_up(self) -> None:
        """Load the model (once; later calls return at once, as Haystack calls this before every run)."""
        if self.document_store is not None:
            _ = self.document_store.query_encoder().model
        else:
            self._backend.warm_up()

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, list[float]]:
        """Embed a string.

        Args:
            text: The string to embed.

        Returns:
            ``{"embedding": [...]}``.

        Raises:
            TypeError: ``text`` is not a string.

        """
        if not isinstance(text, str):
            raise TypeError(
                "RagHierTextEmbedder expects a string as input; to embed a list of Documents, "
                "use RagHierDocumentEmbedder."
            )
        encoder = self.document_store.query_encoder() if self.document_store is not None else self._backend.warm_up()
        vector = encoder.encode_queries([self.prefix + text + self.suffix])[0]
        named = EmbeddedBy.of_model(encoder.model_name, encoder.weights_digest())(vector.tolist())
        return {"embedding": named}
