"""Writing and deleting: RagHierDocumentStore's write_documents, write_corpus and deletes (a mixin of the store)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any, cast

from haystack import Document
from haystack.document_stores.errors import DocumentStoreError, DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError
from haystack_integrations.components.embedders.rag_hier._backend import EmbeddedBy
from haystack_integrations.document_stores.rag_hier._convert import (
    document_to_passage,
    to_plain_json,
)
from haystack_integrations.document_stores.rag_hier._lifecycle import _EMBEDDED_BY, _engine_errors

from rag_hier.corpus.model import Document as CorpusDocument
from rag_hier.errors import InvalidInputError, StoreError
from rag_hier.store.contract import StoreBackend as Store
from rag_hier.store.filters import Predicate
from rag_hier.store.records import WriteSummary

logger = logging.getLogger(__name__)

__all__ = ["DocumentWrites"]

_ENGINE_POLICY = {
    DuplicatePolicy.FAIL: "fail",
    DuplicatePolicy.SKIP: "skip",
    DuplicatePolicy.OVERWRITE: "upsert",
}

UNIT_NORM_TOLERANCE = 1e-3
"""How far from 1 the norm of an embedding written to a cosine store may be (float32 rounding, half precision)."""


def _check_unit_vectors(docs: Sequence[Document], path: str) -> None:
    """Refuse embeddings that are not unit vectors in a cosine store (its scores are inner products).

    InMemoryDocumentStore normalizes every vector when it scores; this store's index ranks by inner product,
    which is the cosine only for unit vectors, so a longer or shorter one would be ranked and scaled wrongly.
    """
    for doc in docs:
        if doc.embedding is None:
            continue
        try:
            norm = math.sqrt(math.fsum(float(x) * float(x) for x in doc.embedding))
        except (TypeError, ValueError):
            continue  # not numbers: the engine's check names the problem
        if not math.isfinite(norm):
            continue  # NaN or infinite values: the engine's check names the problem
        if not abs(norm - 1.0) <= UNIT_NORM_TOLERANCE:
            raise DocumentStoreError(
                f"document {doc.id!r}: its embedding has norm {norm:.6g}, but the store at {path} records "
                "similarity 'cosine' and holds unit vectors. Normalize the embeddings (e.g. "
                "SentenceTransformersDocumentEmbedder(normalize_embeddings=True)), or create the store with "
                "similarity='dot_product'."
            )


class DocumentWrites:
    """RagHierDocumentStore's writes: documents (with their vectors), corpus documents, deletes and updates."""

    @staticmethod
    def _check_documents(documents: Any) -> list[Document]:
        if isinstance(documents, str | bytes) or not isinstance(documents, Iterable):
            raise ValueError(f"Please provide a list of Documents, got {type(documents).__name__}.")
        docs = list(documents)
        for doc in docs:
            if not isinstance(doc, Document):
                raise ValueError(f"Please provide a list of Documents; got an item of type {type(doc).__name__}.")
        return docs

    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """Write documents atomically (all or nothing); returns how many were written.

        Documents without an embedding are encoded with the store's model when it has one (and have
        content) unless the store was created with ``dense=False``; otherwise they are stored without a
        vector (found by filters, the token index or their sparse embedding, not by dense vector search).
        A ``sparse_embedding`` is kept as written and indexed for the ``sparse-embedding`` strategy.

        Args:
            documents: The documents.
            policy: ``NONE`` (same as ``FAIL``), ``FAIL`` (raise if an id is stored or repeated in the
                input), ``SKIP`` (keep stored documents; the first of repeated ids wins) or ``OVERWRITE``
                (replace stored documents; the last of repeated ids wins).

        Raises:
            ValueError: ``documents`` is not a list of Documents.
            DuplicateDocumentError: Under ``FAIL``, an id already stored or repeated in the input.
            DocumentStoreError: Embeddings of different dimensions, an embedding that is not a unit vector
                in a ``similarity="cosine"`` store, metadata the store cannot keep, or a sparse embedding with
                negative indices or non-finite values.

        """
        docs = self._check_documents(documents)
        if policy == DuplicatePolicy.NONE:
            policy = DuplicatePolicy.FAIL
        if policy not in _ENGINE_POLICY:
            raise ValueError(f"unknown duplicate policy {policy!r}")
        if not docs:
            return 0
        if policy == DuplicatePolicy.FAIL:
            seen: set[str] = set()
            for doc in docs:
                if doc.id in seen:
                    raise DuplicateDocumentError(f"ID '{doc.id}' appears more than once in the documents written.")
                seen.add(doc.id)
        try:
            passages = [document_to_passage(doc) for doc in docs]
        except InvalidInputError as exc:  # metadata or text the store cannot keep
            raise DocumentStoreError(f"cannot write documents to {self.location}: {exc}") from exc
        with _engine_errors():
            hint = next((len(e) for doc in docs if isinstance(e := doc.embedding, Sequence) and e), None)
            store = self._write_handle(hint)
            self._check_embedding_model(store, docs)
            if store.similarity == "cosine":
                _check_unit_vectors(docs, self.location)
            vectors: list[Any] = [doc.embedding for doc in docs]
            if self.dense:
                self._encode_missing(store, docs, vectors, skip_stored=policy == DuplicatePolicy.SKIP)
            try:
                with store.batch():
                    if any(doc.sparse_embedding is not None for doc in docs):
                        self._ensure_extension(store, "sparse-embeddings")
                    summary = store.add_passages(
                        passages,
                        embeddings=vectors,
                        policy=_ENGINE_POLICY[policy],  # type: ignore[arg-type]
                        allow_moves=True,  # an id names a chunk, whatever its parent (Haystack's OVERWRITE)
                    )
                    self._record_embedder_model(store, docs)
            except (ValueError, TypeError) as exc:
                if isinstance(exc, StoreError):
                    raise
                raise DocumentStoreError(f"cannot write documents to {self.location}: {exc}") from exc
        if policy == DuplicatePolicy.SKIP:
            return summary.passages_added
        return len(docs)

    def _check_embedding_model(self, store: Store, docs: list[Document]) -> None:
        """Refuse embeddings that name another model than the one the store's vectors come from.

        Only embeddings that name their weights (``RagHierDocumentEmbedder``'s) can be checked.
        """
        encoder = store.encoder
        given = {
            e.weights_sha256: e.model
            for doc in docs
            if isinstance(e := doc.embedding, EmbeddedBy) and e.weights_sha256 is not None
        }
        ours = encoder.weights_digest() if encoder is not None and given else None
        other = next((model for digest, model in given.items() if digest != ours), None) if ours else None
        if other is None or encoder is None:
            return
        line = (
            f"the documents were embedded by model {other!r}, but the vectors of the store at {self.location} come "
            f"from {encoder.model_name!r}: passages of two models would be searched together. Drop the document "
            "embedder (the store encodes documents written without an embedding with its own model)"
        )
        if not self.allow_other_model:
            raise DocumentStoreError(line + ", or create the store with allow_other_model=True to write them anyway")
        logger.warning("%s (allow_other_model=True: writing anyway)", line)

    @staticmethod
    def _encode_missing(store: Store, docs: list[Document], vectors: list[Any], *, skip_stored: bool) -> None:
        """Vectors from the store's model for the documents with content and no embedding."""
        encoder = store.encoder
        if encoder is None:
            return
        todo = [i for i, doc in enumerate(docs) if doc.embedding is None and doc.content]
        if skip_stored and todo:
            stored = {p.id for p in store.get_passages([docs[i].id for i in todo])}
            todo = [i for i in todo if docs[i].id not in stored]
        if not todo:
            return
        encoded = encoder.encode_documents([cast(str, docs[i].content) for i in todo])
        for row, i in enumerate(todo):
            vectors[i] = encoded[row]

    def delete_documents(self, document_ids: list[str]) -> None:
        """Delete documents by id; unknown ids are ignored."""
        if isinstance(document_ids, str):
            raise ValueError("document_ids must be a list of ids, not a single string")
        with _engine_errors():
            self._write_handle().delete_passages(list(document_ids))

    def delete_all_documents(self, recreate_index: bool = False) -> None:
        """Delete every document.

        Args:
            recreate_index: Also forget the vector dimension (a store without a model), so documents with
                embeddings of another size can be written next. A Milvus collection keeps its dimension (Milvus
                fixes it at creation): it is emptied the same way, and embeddings of another size are refused
                with an error naming the dimension; use a new ``uri`` (``#name``) for them. The store keeps its
                index kind, model and extensions (token index, document index, ...; rebuilt empty with the same
                settings). Nothing but the store's own data is touched.

        """
        with _engine_errors():
            store = self._write_handle()
            forget = recreate_index and store.encoder is None and store.can_forget_dimension
            store.delete_all(forget_dimension=forget)

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Delete the documents matching ``filters``; returns how many were deleted."""
        if not filters:
            raise FilterError("delete_by_filter() needs a non-empty filter; use delete_all_documents() to delete all")
        with _engine_errors():
            store = self._write_handle()
            doc_id = self._id_lookup(filters)
            if doc_id is not None:
                return store.delete_passages([doc_id])
            return store.delete_by_filter(cast(Predicate, self._predicate(filters, store)))

    def update_by_filter(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Merge ``meta`` into the metadata of the documents matching ``filters``; returns how many.

        The new values are stored in their JSON form (a tuple comes back as a list).
        """
        if not filters:
            raise FilterError("update_by_filter() needs a non-empty filter")
        if not isinstance(meta, dict):
            raise ValueError(f"meta must be a dict, got {type(meta).__name__}")
        try:
            payload = to_plain_json(meta)
        except (TypeError, ValueError, RecursionError) as exc:
            raise DocumentStoreError(f"update_by_filter(): meta is not JSON serializable ({exc})") from exc
        with _engine_errors():
            store = self._write_handle()
            return store.update_by_filter(cast(Predicate, self._predicate(filters, store)), payload)

    # ------------------------------------------------------------------------------------------------
    # rag-hier specific: corpus documents
    # ------------------------------------------------------------------------------------------------
    def write_corpus(
        self,
        documents: Iterable[CorpusDocument],
        *,
        max_passage_words: int | None = None,
        policy: DuplicatePolicy = DuplicatePolicy.OVERWRITE,
        show_progress_bar: bool = False,
    ) -> WriteSummary:
        """Add structured corpus documents (``rag_hier.corpus.read_corpus``) with the engine's splitter.

        Passages never cross a section boundary, are encoded with their title path (as DHR does) by the
        store's model, and read back as Documents whose meta has ``source_id`` (the document id),
        ``split_id`` (the passage's position) and ``title_path``. Needs a store with a model.

        Args:
            documents: ``rag_hier.corpus.Document`` objects.
            max_passage_words: Passage length in words (``0``: one passage per paragraph); default: 100.
            policy: ``OVERWRITE`` replaces a stored document's passages (unchanged ones are not re-encoded),
                ``SKIP`` keeps stored documents, ``FAIL``/``NONE`` raise if one is stored.
            show_progress_bar: Show a progress bar while encoding.

        """
        engine_policy = _ENGINE_POLICY[DuplicatePolicy.FAIL if policy == DuplicatePolicy.NONE else policy]
        with _engine_errors():
            return self._write_handle().add_documents(
                documents,
                max_passage_words=max_passage_words,
                policy=engine_policy,  # type: ignore[arg-type]
                show_progress_bar=show_progress_bar,
            )

    @staticmethod
    def _record_embedder_model(store: Store, docs: list[Document]) -> None:
        """Record the model that embedded these documents, for a store without one (inside the write's batch)."""
        if store.encoder is not None:
            return
        models = {
            (e.model, e.normalize_embeddings)
            for doc in docs
            if isinstance(e := doc.embedding, EmbeddedBy) and isinstance(e.model, str)
        }
        if len(models) != 1:
            return
        model, normalize = next(iter(models))
        entry = {"model": model, "normalize_embeddings": normalize}
        recorded = store.corpus_info.get(_EMBEDDED_BY)
        if recorded == entry:
            return
        if isinstance(recorded, dict) and recorded.get("model") != model:
            logger.warning(
                "%s holds documents embedded by %s; these were embedded by %s, which query text is encoded "
                "with from now on",
                store.location,
                recorded.get("model"),
                model,
            )
        store.update_corpus_info(**{_EMBEDDED_BY: entry})
