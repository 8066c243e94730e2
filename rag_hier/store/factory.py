"""Opening and creating a store, whichever backend holds it: a directory (local) or a Milvus URI.

:func:`create_store` and :func:`open_store` take the arguments of :meth:`HierStore.create
<rag_hier.store.HierStore.create>` and :meth:`HierStore.open <rag_hier.store.HierStore.open>` (which remain, as
aliases of these for the local backend): a ``path`` opens or creates a local store, ``uri=`` a Milvus collection
(``./file.db#name`` for Milvus Lite, ``http://host:19530#name`` for a server; Milvus options such as ``token``,
``db_name``, ``timeout`` and ``client_options`` pass through). Both return an object of the store contract
(:class:`~rag_hier.store.contract.StoreBackend`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_hier.encoders.identity import DEFAULT_MODEL
from rag_hier.store.hit_table import HitRowsMode, check_hit_rows
from rag_hier.store.store import HierStore

if TYPE_CHECKING:
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.index.dense import IndexConfig
    from rag_hier.store.contract import Similarity
    from rag_hier.store.milvus.store import MilvusStore

__all__ = ["create_store", "open_store"]


def _local_only(hit_rows: object) -> None:
    """Refuse ``hit_rows="memory"`` for a Milvus collection (its hits come from Milvus)."""
    if check_hit_rows(hit_rows) != "sqlite":
        raise ValueError(
            f"hit_rows={hit_rows!r} is an option of a local store (a directory path); a Milvus collection (uri=) "
            "reads its hits from Milvus: leave hit_rows out or pass 'sqlite'"
        )


def create_store(
    path: str | Path | None = None,
    *,
    uri: str | None = None,
    model: str | None = DEFAULT_MODEL,
    encoder: DenseEncoder | None = None,
    dimension: int | None = None,
    index: IndexConfig | str | Mapping[str, Any] = "flat",
    corpus: Mapping[str, Any] | None = None,
    similarity: Similarity | None = None,
    exist_ok: bool = False,
    hit_rows: HitRowsMode = "sqlite",
    **milvus_options: Any,
) -> HierStore | MilvusStore:
    """Create a store at ``path`` (a directory) or ``uri`` (a Milvus collection); see :meth:`HierStore.create`."""
    kwargs: dict[str, Any] = {
        "model": model,
        "encoder": encoder,
        "dimension": dimension,
        "index": index,
        "corpus": corpus,
        "similarity": similarity,
        "exist_ok": exist_ok,
    }
    if uri is None:  # Milvus options without uri= are refused by the local store, named
        return HierStore.create(path, **kwargs, hit_rows=hit_rows, **milvus_options)
    if path is not None:
        raise ValueError("pass either a directory path or uri= (a Milvus URI), not both")
    _local_only(hit_rows)
    from rag_hier.store.milvus.store import MilvusStore

    return MilvusStore.create(uri, **kwargs, **milvus_options)


def open_store(
    path: str | Path | None = None,
    *,
    uri: str | None = None,
    encoder: DenseEncoder | None = None,
    device: str | None = None,
    read_only: bool = False,
    verify_checksums: bool = True,
    allow_other_model: bool = False,
    hit_rows: HitRowsMode = "sqlite",
    **milvus_options: Any,
) -> HierStore | MilvusStore:
    """Open the store at ``path`` (a directory) or ``uri`` (a Milvus collection); see :meth:`HierStore.open`."""
    if uri is None:
        return HierStore.open(
            path,
            encoder=encoder,
            device=device,
            read_only=read_only,
            verify_checksums=verify_checksums,
            allow_other_model=allow_other_model,
            hit_rows=hit_rows,
            **milvus_options,
        )
    if path is not None:
        raise ValueError("pass either a directory path or uri= (a Milvus URI), not both")
    _local_only(hit_rows)
    from rag_hier.store.milvus.store import MilvusStore

    return MilvusStore.open(
        uri, encoder=encoder, device=device, read_only=read_only, allow_other_model=allow_other_model, **milvus_options
    )
