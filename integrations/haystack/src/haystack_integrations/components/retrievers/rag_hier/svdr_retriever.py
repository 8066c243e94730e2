"""RagHierSvdrRetriever: SVDR search (binary token index + vocabulary encoder) from a RagHierDocumentStore."""

from __future__ import annotations

from typing import Any, get_args

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.document_stores.types import FilterPolicy, apply_filter_policy
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.retrieval.svdr import SvdrMode

__all__ = ["RagHierSvdrRetriever"]

_MODES: tuple[str, ...] = get_args(SvdrMode)


@component
class RagHierSvdrRetriever:
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
    Results are the engine's ``SvdrRetriever`` results, as Documents with ``score`` set.

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
        if not isinstance(document_store, RagHierDocumentStore):
            raise TypeError("document_store must be an instance of RagHierDocumentStore")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}; got {mode!r}")
        if top_k <= 0:
            raise ValueError(f"top_k must be greater than 0, but got {top_k}")
        if not isinstance(rerank_m, int) or rerank_m <= 0:
            raise ValueError(f"rerank_m must be greater than 0, but got {rerank_m!r}")
        self.document_store = document_store
        self.mode: SvdrMode = mode
        self.filters = filters
        self.top_k = top_k
        self.rerank_m = rerank_m
        self.vocab_model = vocab_model
        self.return_embedding = return_embedding
        self.filter_policy = (
            filter_policy if isinstance(filter_policy, FilterPolicy) else FilterPolicy.from_str(filter_policy)
        )

    def _get_telemetry_data(self) -> dict[str, Any]:
        """Data sent to Haystack's usage analytics."""
        return {"document_store": type(self.document_store).__name__, "mode": self.mode}

    def warm_up(self) -> None:
        """Open the store and load the tokenizer and vocabulary encoder the mode needs (idempotent, cheap once done)."""
        self.document_store.warm_up_svdr(self.mode, self.rerank_m, self.vocab_model)

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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RagHierSvdrRetriever:
        """Deserialize the component from a dictionary (``data`` is not modified)."""
        init_params = dict(data.get("init_parameters", {}))
        if "filter_policy" in init_params:
            init_params["filter_policy"] = FilterPolicy.from_str(init_params["filter_policy"])
        return default_from_dict(cls, {**data, "init_parameters": init_params})

    def _resolve(
        self, filters: dict[str, Any] | None, top_k: int | None, return_embedding: bool | None
    ) -> dict[str, Any]:
        top_k = self.top_k if top_k is None else top_k
        if top_k < 0:
            raise ValueError(f"top_k must be greater than or equal to 0, but got {top_k}")
        return {
            "mode": self.mode,
            "filters": apply_filter_policy(self.filter_policy, self.filters, filters),
            "top_k": top_k,
            "rerank_m": self.rerank_m,
            "vocab_model": self.vocab_model,
            "return_embedding": self.return_embedding if return_embedding is None else return_embedding,
        }

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
        params = self._resolve(filters, top_k, return_embedding)
        return {"documents": self.document_store.svdr_retrieval(query=query, **params)}

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Asynchronously retrieve documents for query text (the search runs on the store's worker thread).

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
        params = self._resolve(filters, top_k, return_embedding)
        return {"documents": await self.document_store.svdr_retrieval_async(query=query, **params)}
