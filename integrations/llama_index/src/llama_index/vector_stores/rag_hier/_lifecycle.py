"""RagHierVectorStore's lifecycle: its init options checked, and the engine's store session opened from them.

Opening and creating, the read-only / read-write handle pair, the dimension a Milvus collection needs at creation
and how the token and BM25 indexes are built are the engine's :class:`rag_hier.store.session.StoreSession`; this
module says what LlamaIndex's store asks of it, and reads back what the store records (similarity, ``dense``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.errors import StoreError
from rag_hier.store.contract import StoreBackend, StoreExtension
from rag_hier.store.extensions.bm25 import BM25Extension
from rag_hier.store.extensions.token_index import TokenIndexExtension
from rag_hier.store.hit_table import HitRowsMode
from rag_hier.store.session import CreateOptions, ExtensionSpec, StoreSession

logger = logging.getLogger(__name__)

__all__ = ["CONFIG_KEY", "MILVUS_TOKEN_ENV", "Opened", "bm25_options", "open_session"]

_TOKEN_INDEX = TokenIndexExtension.name
_BM25 = BM25Extension.name
_BM25_OPTIONS = frozenset({"stopwords", "stemmer"})
_BM25_MODE = "bm25"
CONFIG_KEY = "llama_index"
"""The corpus fact where a store this adapter creates records its similarity and ``dense``."""
MILVUS_TOKEN_ENV = "RAG_HIER_MILVUS_TOKEN"  # noqa: S105 - the name of a variable, not a secret
"""The environment variable a Milvus store reads its token from when ``token=`` is not given (as the CLI)."""


def bm25_options(bm25: bool | Mapping[str, Any]) -> dict[str, Any] | None:
    """``None`` (no BM25 index asked for) or the BM25 index's tokenization options (checked when it is built)."""
    if isinstance(bm25, bool):
        return {} if bm25 else None
    if isinstance(bm25, Mapping):
        unknown = set(bm25) - _BM25_OPTIONS
        if unknown:
            raise ValueError(f"bm25 options must be among {sorted(_BM25_OPTIONS)}; got {sorted(unknown)}")
        return dict(bm25)
    raise ValueError(f"bm25 must be True, False or a dict of BM25 index options, got {bm25!r}")


def milvus_options(path: Any, uri: Any, token: Any, db_name: Any, timeout: Any, client_options: Any) -> dict[str, Any]:
    """The checked connection options of a Milvus store (the token from ``RAG_HIER_MILVUS_TOKEN`` by default)."""
    if path is not None:
        raise ValueError("give either path (a store directory) or uri (a Milvus Lite file or server), not both")
    from rag_hier.store.milvus.client import check_connection_options  # Milvus code loads on use

    check_connection_options(
        uri,
        timeout,
        client_options,
        credentials_hint="they would be serialized with the store's configuration; pass token=... (or set "
        "RAG_HIER_MILVUS_TOKEN) instead",
    )
    if token is not None and not isinstance(token, str):
        raise ValueError(f"token must be a string or None, got {type(token).__name__}")
    if not isinstance(db_name, str):
        raise ValueError(f"db_name must be a string, got {db_name!r}")
    if token is None:
        token = os.environ.get(MILVUS_TOKEN_ENV, "")
    return {"token": token, "db_name": db_name, "timeout": timeout, "client_options": dict(client_options or {})}


def _token_index_spec(options: Mapping[str, Any], model: str | None) -> ExtensionSpec:
    def config(store: StoreBackend) -> dict[str, Any]:
        tokenizer = options.get("model") or model or (store.encoder.model_name if store.encoder else DEFAULT_MODEL)
        return {"model": str(tokenizer), "max_length": options.get("max_length", 256)}

    def warn_other_tokenizer(store: StoreBackend, ext: StoreExtension) -> None:
        held = getattr(ext, "model", None)
        if "model" in options and held is not None and held != options["model"]:
            logger.warning(
                "%s has a token index built with %r; keeping it (token_index asked for %r)",
                store.location,
                held,
                options["model"],
            )

    return ExtensionSpec(config, warn_other_tokenizer)


def _bm25_spec(options: Mapping[str, Any]) -> ExtensionSpec:
    def warn_other_bm25_tokenizer(store: StoreBackend, held: StoreExtension) -> None:
        """Warn when the store's BM25 index tokenizes otherwise than ``bm25=`` asks (the index is kept as it is)."""
        if not options:
            return  # bm25=True asks for no tokenization in particular
        asked = BM25Extension(**options).config()
        have = held.config()
        differs = {k: (have.get(k), asked[k]) for k in ("stopwords", "stemmer") if have.get(k) != asked[k]}
        if differs:
            logger.warning(
                "%s has a BM25 index built with %s; keeping it (bm25 asked for %s). Rebuild it with "
                "`client.add_extension(BM25Extension(...), replace=True)` to change its tokenization",
                store.location,
                {k: v[0] for k, v in differs.items()},
                {k: v[1] for k, v in differs.items()},
            )

    return ExtensionSpec(options, warn_other_bm25_tokenizer)


class Opened(NamedTuple):
    """What :func:`open_session` opened, and what the store's fields are set from."""

    session: StoreSession
    reader: StoreBackend
    root: Path | None
    tmpdir: str | None
    uri: str | None
    milvus: dict[str, Any] | None
    fields: dict[str, Any]


def close_session(session: StoreSession | None, tmpdir: str | None) -> None:
    """Close the session for good (the caller's own handle stays open) and remove a temporary directory."""
    if session is not None:
        try:
            session.close(final=True)
        except Exception:  # closing at exit or in a finalizer must not raise
            logger.debug("closing the store session failed", exc_info=True)
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


def open_session(
    path: str | Path | None,
    *,
    uri: str | None,
    milvus: dict[str, Any] | None,
    store: StoreBackend | None,
    encoder: DenseEncoder | None,
    model: str | None,
    dimension: int | None,
    similarity: str | None,
    index: str | Mapping[str, Any],
    dense: bool | None,
    tokens: dict[str, Any] | None,
    bm25: dict[str, Any] | None,
    hit_rows: HitRowsMode = "sqlite",
    allow_other_model: bool = False,
) -> Opened:
    """Open (or create) the store of a ``RagHierVectorStore``, its configured indexes ensured and its options checked.

    The read-only handle is opened now; the read-write one when the store is created, an index must be built, or
    on the first write. ``path=None`` (and no ``uri``) keeps the store in a temporary directory.
    """
    tmpdir: str | None = None
    root: Path | None = None
    if store is None and path is None and uri is None:
        tmpdir = tempfile.mkdtemp(prefix="rag-hier-llama-index-")
        root = Path(tmpdir) / "store"
    elif store is None and path is not None:
        root = Path(path)
    keep_dense = dense is not False
    loaded: list[DenseEncoder] = []

    def encoder_for(creating: bool) -> DenseEncoder | None:
        """The given encoder; a new store gets none with ``dense=False``, an existing one the model's if asked."""
        if creating:
            return encoder if keep_dense else None
        if encoder is None and model is not None and keep_dense:
            if not loaded:
                loaded.append(DenseEncoder(model))  # e.g. for text queries on a store fed with vectors
            return loaded[0]
        return encoder

    specs = {}
    if tokens is not None:
        specs[_TOKEN_INDEX] = _token_index_spec(tokens, model)
    if bm25 is not None:
        specs[_BM25] = _bm25_spec(bm25)
    session: StoreSession | None = None
    try:
        session = StoreSession(
            root,
            uri=uri if store is None else None,
            connection=milvus,
            encoder=encoder_for,  # a store the session creates lends its own to later handles
            create=CreateOptions(
                model=model if keep_dense else None,
                dimension=dimension,
                index=index if isinstance(index, str) else dict(index),
                similarity=similarity or "cosine",
                corpus={CONFIG_KEY: {"similarity": similarity or "cosine", "dense": keep_dense}},
                dimension_why="this store has no model to take it from",
                dimension_remedy="pass dimension=... (the size of your embed model's vectors; any size for a "
                "dense=False store, which writes none)" + ("" if not keep_dense else " or model=..."),
            ),
            extensions=specs,
            configured=tuple(specs),
            reads_use_writer=False,  # queries read through the read-only handle, which sees every write
            handle=store,
            hit_rows=hit_rows,
            allow_other_model=allow_other_model,
        )
        session.ensure_configured()
        reader = session.reader()
        location = session.location
        config = reader.corpus_info.get(CONFIG_KEY, {})
        resolved_dense = dense if dense is not None else config.get("dense", True)
        has_tokens = reader.extension(_TOKEN_INDEX) is not None
        has_bm25 = reader.extension(_BM25) is not None
        if not resolved_dense and not has_tokens and not has_bm25:
            raise ValueError(
                f"dense=False needs a token index or a BM25 index to search, and the store at {location} has "
                "neither; pass token_index=True or bm25=True"
            )
        recorded = config.get("similarity")
        if similarity is not None and recorded is not None and similarity != recorded:
            raise StoreError(f"similarity={similarity!r} but the store at {location} was created with {recorded!r}")
    except BaseException:
        close_session(session, tmpdir)
        raise
    if store is not None:
        if store.path is None:  # a Milvus collection: reopened by its location and connection options
            uri, milvus = store.location, store.connection_options
        else:
            root = store.path
    fields = {
        "similarity": similarity or recorded or reader.similarity,  # an engine-built store records none here
        "model": reader.encoder.model_name if reader.encoder is not None else None,
        "index": reader.index_config.to_dict(),
        "dense": bool(resolved_dense),
        "token_index": has_tokens,
        "bm25": has_bm25,
        "default_sparse_mode": _BM25_MODE if has_bm25 and not has_tokens else "beta-rerank",
    }
    return Opened(session, reader, root, tmpdir, uri if milvus is not None else None, milvus, fields)
