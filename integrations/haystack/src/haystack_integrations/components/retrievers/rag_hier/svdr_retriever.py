"""RagHierSvdrRetriever: SVDR search (binary token index + vocabulary encoder) from a RagHierDocumentStore."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict
from haystack.document_stores.types import FilterPolicy
from haystack_integrations.components.retrievers.rag_hier._base import StrategyComponent
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.retrieval.registry import strategy_names
from rag_hier.retrieval.svdr import SvdrMode

__all__ = ["RagHierSvdrRetriever"]


@component
class RagHierSvdrRetriever(StrategyComponent):
    """Retrieve documents for query text with SVDR (Semi-Parametric Vocabulary Disentangled Retrieval).

    The store keeps a binary token index of its documents (``RagHierDocumentStore(token_index=True)``), built
    by tokenization alone; this component scores queries against it in the tokenizer's vocabulary space
    (Zhou et al., arXiv 2405.01924):

    - ``"beta"``: ⟨E(q), T(d)⟩, a learned sparse query vector against the binary token index;
    - ``"beta-rerank"`` (default): β, then the top ``rerank_m`` re-scored by ⟨E(q), E(d)⟩, with E(d) encoded
      on the fly and kept in the store (so repeated queries get cheaper);
    - ``"full"``: ⟨E(q), E(d)⟩ and ``"alpha"``: ⟨T(q), E(d)⟩ over learned passage vectors, encoded on first
      use for documents that lack them;
    - ``"lexical"``: idf-weighted token overlap, no model at all.

    E is a ``rag_hier.encoders.vocab.VocabEncoder`` (``vocab_model``: a ``rag-hier train svdr`` output or any
    BERT-family model; default: the store's model, else its token index's tokenizer model). Filters are
    applied before the search, so a filtered query returns ``top_k`` documents whenever that many match.
    Results are the engine's ``SvdrRetriever`` results, as Documents with ``score`` set: this component is the
    preset of ``RagHierRetriever(strategy="svdr-<mode>")`` (which also returns the component scores in
    ``meta["scores"]``).

    Usage example:
    ```python
    from haystack import Document
    from haystack_integrations.components.retrievers.rag_hier import RagHierSvdrRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    store = RagHierDocumentStore(path="./svdr-collection", token_index=True, dense=False)
    store.write_documents([Document(content="The moon pulls the oceans."), Document(content="Bees make honey.")])
    retriever = RagHierSvdrRetriever(document_store=store, mode="lexical")
    retriever.run(query="why are there tides?", top_k=1)["documents"]
    ```
    """

    def __init__(
        self,
        document_store: RagHierDocumentStore,
        mode: SvdrMode = "beta-rerank",
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        rerank_m: int = 100,
        vocab_model: str | None = None,
        return_embedding: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        """Create the retriever.

        Args:
            document_store: The RagHierDocumentStore to search (with a token index for β, β+rerank and
                lexical search).
            mode: ``"beta"``, ``"beta-rerank"``, ``"full"``, ``"alpha"`` or ``"lexical"``.
            filters: Filters applied to every query (see ``filter_policy``).
            top_k: The maximum number of documents to return; must be greater than 0.
            rerank_m: Candidates re-ranked in ``"beta-rerank"`` mode (default 100, the paper's setting).
            vocab_model: The vocabulary encoder's model (name or path); ``None``: the store's default.
            return_embedding: Return the documents' dense embeddings.
            filter_policy: ``REPLACE`` (default): runtime filters replace the init filters; ``MERGE``: both
                apply.

        Raises:
            TypeError: ``document_store`` is not a RagHierDocumentStore.
            ValueError: Unknown ``mode``, or ``top_k`` / ``rerank_m`` not greater than 0.

        """
        self._setup(document_store, filters, top_k, return_embedding, filter_policy)
        modes = [name.removeprefix("svdr-") for name in strategy_names() if name.startswith("svdr-")]
        if mode not in modes:
            raise ValueError(f"mode must be one of {', '.join(modes)}; got {mode!r}")
        params = self._use_strategy(
            f"svdr-{mode}", {"rerank_m": rerank_m, "vocab_model": vocab_model}, where="RagHierSvdrRetriever"
        )
        self.mode: SvdrMode = mode
        self.rerank_m = params.rerank_m  # type: ignore[attr-defined]
        self.vocab_model = vocab_model
        self._component_scores = False  # Documents as written, scores in Document.score only

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"document_store": type(self.document_store).__name__, "mode": self.mode}

    def to_dict(self) -> dict[str, Any]:
        """Serialize the component, with its document store, to a dictionary."""
        return default_to_dict(
            self,
            document_store=self.document_store,
            mode=self.mode,
            filters=self.filters,
            top_k=self.top_k,
            rerank_m=self.rerank_m,
            vocab_model=self.vocab_model,
            return_embedding=self.return_embedding,
            filter_policy=self.filter_policy.value,
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve documents for query text.

        Args:
            query: The query text.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The mode needs a token index and the store has none.

        """
        return self._search(query=query, filters=filters, top_k=top_k, return_embedding=return_embedding)

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for query text (the search runs in a worker thread).

        Args:
            query: The query text.
            filters: Filters narrowing the search (combined with the init filters per ``filter_policy``).
            top_k: The maximum number of documents to return; 0 returns none.
            return_embedding: Override the init ``return_embedding``.

        Returns:
            ``{"documents": [...]}``, best first, with ``score`` set.

        Raises:
            ValueError: ``top_k`` is negative or ``query`` is empty.
            DocumentStoreError: The mode needs a token index and the store has none.

        """
        return await self._search_async(query=query, filters=filters, top_k=top_k, return_embedding=return_embedding)
