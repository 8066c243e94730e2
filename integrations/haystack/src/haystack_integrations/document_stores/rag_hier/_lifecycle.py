"""RagHierDocumentStore's lifecycle: its init options checked, and the engine's store session built from them.

Opening and creating, the read-only / read-write handle pair, the dimension a Milvus collection needs at creation
and how extensions are built are the engine's :class:`rag_hier.store.session.StoreSession`; this module only says
what Haystack's store asks of it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from haystack.document_stores.errors import DocumentStoreError, DuplicateDocumentError
from haystack_integrations.document_stores.rag_hier._convert import EXTRA_KEY

from rag_hier.encoders.dense import DEFAULT_MODEL
from rag_hier.errors import DuplicateIdError, StoreError
from rag_hier.index.dense import IndexConfig
from rag_hier.store.contract import StoreBackend, StoreExtension
from rag_hier.store.session import CreateOptions, ExtensionSpec, StoreSession

if TYPE_CHECKING:
    from haystack_integrations.document_stores.rag_hier.document_store import RagHierDocumentStore

logger = logging.getLogger(__name__)

__all__ = ["MILVUS_TOKEN_ENV", "SPARSE_EMBEDDING_KEY", "parse_index", "store_session"]

MILVUS_TOKEN_ENV = "RAG_HIER_MILVUS_TOKEN"  # noqa: S105 - the name of a variable, not a secret
"""The environment variable the Milvus token is read from by default (the CLI reads the same one)."""

SPARSE_EMBEDDING_KEY = (EXTRA_KEY, "sparse_embedding")
"""Where a Document's ``sparse_embedding`` lives in ``Passage.extra`` (read by the ``sparse-embeddings`` extension)."""

_EMBEDDED_BY = "embedded_by"
"""The corpus fact naming the model that embedded a model-less store's documents (RagHierDocumentEmbedder's)."""


@contextlib.contextmanager
def _engine_errors() -> Iterator[None]:
    """Report engine errors as Haystack document-store errors."""
    try:
        yield
    except DuplicateIdError as exc:
        raise DuplicateDocumentError(str(exc)) from exc
    except StoreError as exc:
        raise DocumentStoreError(str(exc)) from exc


def parse_index(index: str | dict[str, Any]) -> IndexConfig:
    """The index configuration of ``index=`` (a kind or a dict of ``IndexConfig`` options)."""
    if isinstance(index, str):
        return IndexConfig(kind=index)  # type: ignore[arg-type]
    if isinstance(index, Mapping):
        return IndexConfig.from_dict(dict(index))
    raise ValueError(f"index must be 'flat', 'ivf', 'hnsw' or a dict of index options, got {index!r}")


def _check_sparse_key(store: StoreBackend, ext: StoreExtension) -> None:
    if tuple(getattr(ext, "key", ())) != SPARSE_EMBEDDING_KEY:
        raise StoreError(
            f"{store.location} indexes sparse embeddings stored at {list(getattr(ext, 'key', ()))}, "
            "not Haystack's; remove its 'sparse-embeddings' extension"
        )


def store_session(ds: RagHierDocumentStore, token_options: dict[str, Any] | None) -> StoreSession:
    """The engine's session on ``ds``'s directory or collection: opened on first use, read-only until a write."""
    options = token_options or {}
    asked = options.get("model")

    def warn_other_tokenizer(store: StoreBackend, ext: StoreExtension) -> None:
        if asked and getattr(ext, "model", asked) != asked:
            logger.warning(
                "%s has a token index built with %r; keeping it (token_index asked for %r)",
                store.location,
                getattr(ext, "model", None),
                asked,
            )

    token_config = {"model": str(asked or ds.model or DEFAULT_MODEL), "max_length": options.get("max_length", 256)}
    why = "this store computes no vectors (dense=False)" if not ds.dense else "this store has no model to take it from"
    return StoreSession(
        ds.path,
        uri=ds.uri,
        connection=ds._milvus_options,  # the token resolved at each connection, never kept
        encoder=lambda creating: ds._dense_encoder(),  # one object for both handles, created or opened
        device=ds._device,
        create=CreateOptions(
            model=None,  # the model, if any, is the encoder's (one object for both handles)
            dimension=ds.dimension,
            index=ds._index_config,
            similarity=ds.similarity,
            dimension_why=why,
            dimension_remedy="pass dimension=... (or model=...), or write documents with embeddings first",
        ),
        extensions={
            "token-index": ExtensionSpec(token_config, warn_other_tokenizer),
            "sparse-embeddings": ExtensionSpec({"key": list(SPARSE_EMBEDDING_KEY)}, _check_sparse_key),
        },
        configured=("token-index",) if token_options is not None else (),
        reads_use_writer=True,  # once this instance writes, it reads what it wrote through the same handle
        check=ds._check_recorded,
        hit_rows=ds.hit_rows,
        allow_other_model=ds.allow_other_model,
    )
