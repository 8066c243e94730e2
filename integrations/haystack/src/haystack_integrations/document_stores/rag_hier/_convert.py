"""Haystack ``Document`` ↔ rag-hier ``Passage``, and the filter view of a stored passage.

Mapping (passages written through :class:`RagHierDocumentStore`):

- ``Document.id`` → passage id; ``content`` → passage text (``None`` is kept as a flag in ``extra``);
- ``meta`` → passage metadata, as JSON. Values JSON cannot hold exactly (tuples, non-string dict keys,
  ``datetime``) are stored in their JSON form (so engine-level filters still see them) *and*, tagged, in
  ``extra``; reading restores the exact value unless the JSON form has been changed since (e.g. by
  ``update_by_filter``);
- ``embedding`` → the passage vector (the engine keeps vectors float32 cannot hold exactly in float64, so
  they come back bit-exact);
- ``blob`` (base64) and ``sparse_embedding`` → ``extra`` (JSON only, no pickle);
- the engine's document id (the passage's parent) is ``meta["__parent_id"]`` (HierarchicalDocumentSplitter,
  AutoMergingRetriever), else ``meta["source_id"]`` (DocumentSplitter, SentenceWindowRetriever), else the
  Document's own id; the position is ``meta["split_id"]`` when it is an integer.

Passages written by the engine itself (``HierStore.add_documents``, the CLI) carry no Haystack payload;
their Documents get ``source_id`` (the document id), ``split_id`` (the passage's position in it) and
``title_path`` added to their metadata, so SentenceWindowRetriever works on them too.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from typing import Any

import numpy as np
from haystack import Document
from haystack.dataclasses import ByteStream, SparseEmbedding
from haystack.document_stores.errors import DocumentStoreError
from haystack.errors import FilterError
from haystack.utils.filters import COMPARISON_OPERATORS, LOGICAL_OPERATORS

from rag_hier._limits import MAX_NESTING_DEPTH, exceeds_depth
from rag_hier.corpus.model import Passage
from rag_hier.retrieval.hit import Hit

__all__ = [
    "EXTRA_KEY",
    "FilterView",
    "document_meta",
    "document_to_passage",
    "filter_roots",
    "hit_to_document",
    "parent_id",
    "passage_to_document",
    "record_view",
    "to_plain_json",
    "validate_filters",
]

EXTRA_KEY = "haystack"
"""Key of the Haystack payload in ``Passage.extra``; its presence marks a passage written by Haystack."""

PARENT_ID_KEYS = ("__parent_id", "source_id")
"""Meta keys naming a Document's parent, in order of preference."""

_SCALARS = (str, int, float, bool, type(None))


# ----------------------------------------------------------------------------------------------------
# exact metadata
# ----------------------------------------------------------------------------------------------------
def _is_plain_json(value: Any) -> bool:
    """Whether a JSON round trip gives ``value`` back unchanged (same types, same structure)."""
    if isinstance(value, _SCALARS):
        return True
    if type(value) is list:
        return all(_is_plain_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _is_plain_json(v) for k, v in value.items())
    return False


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_plain_json(value: Any) -> Any:
    """The JSON form of ``value``: tuples become lists, keys strings, datetimes ISO strings, numpy scalars numbers."""
    return json.loads(json.dumps(value, default=_json_default, ensure_ascii=False))


def _encode_exact(value: Any) -> Any:
    """A tagged JSON encoding that restores tuples, non-string keys and datetimes exactly."""
    if isinstance(value, _SCALARS):
        return {"v": value}
    if isinstance(value, datetime):
        return {"dt": value.isoformat()}
    if isinstance(value, np.generic):
        return _encode_exact(value.item())
    if isinstance(value, tuple):
        return {"t": [_encode_exact(v) for v in value]}
    if isinstance(value, list):
        return {"l": [_encode_exact(v) for v in value]}
    if isinstance(value, dict):
        return {"d": [[_encode_exact(k), _encode_exact(v)] for k, v in value.items()]}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _decode_exact(data: Mapping[str, Any]) -> Any:
    if "v" in data:
        return data["v"]
    if "dt" in data:
        return datetime.fromisoformat(data["dt"])
    if "t" in data:
        return tuple(_decode_exact(v) for v in data["t"])
    if "l" in data:
        return [_decode_exact(v) for v in data["l"]]
    return {_decode_exact(k): _decode_exact(v) for k, v in data["d"]}


def _split_meta(meta: Mapping[str, Any], what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(JSON form, tagged exact values of the keys whose JSON form is lossy)``."""
    if exceeds_depth(meta, MAX_NESTING_DEPTH):
        raise DocumentStoreError(f"{what}: meta is nested more than {MAX_NESTING_DEPTH} levels deep")
    plain: dict[str, Any] = {}
    exact: dict[str, Any] = {}
    for key, value in meta.items():
        if not isinstance(key, str):
            raise DocumentStoreError(f"{what}: meta keys must be strings, got {key!r} ({type(key).__name__})")
        try:
            plain[key] = to_plain_json(value)
            if not _is_plain_json(value):
                exact[key] = _encode_exact(value)
        except (TypeError, ValueError) as exc:
            raise DocumentStoreError(
                f"{what}: meta[{key!r}] holds a {type(value).__name__}, which the store cannot keep "
                "(allowed: JSON values, tuples and datetimes)"
            ) from exc
    return plain, exact


def _own_copy(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of stored metadata that shares no nested list or dict with the engine's records."""
    if not meta:
        return {}
    if any(isinstance(v, list | dict) for v in meta.values()):
        return copy.deepcopy(dict(meta))
    return dict(meta)


def _restore_meta(plain: Mapping[str, Any], exact: Mapping[str, Any] | None) -> dict[str, Any]:
    meta = _own_copy(plain)
    for key, tagged in (exact or {}).items():
        if key not in meta:
            continue
        value = _decode_exact(tagged)
        if to_plain_json(value) == meta[key]:  # unchanged since it was written
            meta[key] = value
    return meta


# ----------------------------------------------------------------------------------------------------
# Document -> Passage
# ----------------------------------------------------------------------------------------------------
def parent_id(document: Document) -> str:
    """The engine document id of ``document``: its parent's id when its meta names one, else its own id."""
    for key in PARENT_ID_KEYS:
        value = document.meta.get(key)
        if isinstance(value, str) and value:
            return value
    return document.id


def _position(meta: Mapping[str, Any]) -> int:
    split_id = meta.get("split_id")
    if isinstance(split_id, int) and not isinstance(split_id, bool):
        return split_id
    return 0


def document_to_passage(document: Document) -> Passage:
    """The passage stored for ``document`` (its vector travels separately)."""
    what = f"Document {document.id!r}"
    meta, exact = _split_meta(document.meta, what)
    payload: dict[str, Any] = {}
    if exact:
        payload["meta_exact"] = exact
    if document.content is None:
        payload["content_none"] = True
    if document.blob is not None:
        blob_meta, blob_exact = _split_meta(document.blob.meta, f"{what} blob")
        payload["blob"] = {
            "data": base64.b64encode(bytes(document.blob.data)).decode("ascii"),
            "meta": blob_meta,
            "meta_exact": blob_exact,
            "mime_type": document.blob.mime_type,
        }
    if document.sparse_embedding is not None:
        sparse = document.sparse_embedding
        payload["sparse_embedding"] = {
            "indices": [int(i) for i in sparse.indices],
            "values": [float(v) for v in sparse.values],
        }
    return Passage(
        id=document.id,
        doc_id=parent_id(document),
        position=_position(meta),
        text=document.content or "",
        meta=meta,
        extra={EXTRA_KEY: payload},
    )


# ----------------------------------------------------------------------------------------------------
# Passage -> Document
# ----------------------------------------------------------------------------------------------------
def document_meta(
    meta: Mapping[str, Any], extra: Mapping[str, Any], doc_id: str, position: int, title_path: tuple[str, ...]
) -> dict[str, Any]:
    """The Document metadata of a stored passage (exact for Haystack-written ones, augmented otherwise)."""
    payload = extra.get(EXTRA_KEY)
    if payload is not None:
        return _restore_meta(meta, payload.get("meta_exact"))
    out = _own_copy(meta)
    out.setdefault("source_id", doc_id)
    out.setdefault("split_id", position)
    if title_path:
        out.setdefault("title_path", list(title_path))
    return out


def _payload(extra: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the Haystack adapter stored beside a passage (empty for passages it did not write)."""
    return extra.get(EXTRA_KEY) or {}


def _content(text: str, payload: Mapping[str, Any]) -> str | None:
    return None if payload.get("content_none") else text


def _blob(payload: Mapping[str, Any]) -> ByteStream | None:
    data = payload.get("blob")
    if data is None:
        return None
    return ByteStream(
        data=base64.b64decode(data["data"]),
        meta=_restore_meta(data.get("meta", {}), data.get("meta_exact")),
        mime_type=data.get("mime_type"),
    )


def _sparse(payload: Mapping[str, Any]) -> SparseEmbedding | None:
    data = payload.get("sparse_embedding")
    if data is None:
        return None
    return SparseEmbedding(indices=list(data["indices"]), values=list(data["values"]))


def passage_to_document(passage: Passage, embedding: Any = None, score: float | None = None) -> Document:
    """The Haystack Document for a stored passage (``embedding``: a numpy vector or ``None``)."""
    payload = _payload(passage.extra)
    return _document(
        passage.id,
        _content(passage.text, payload),
        _blob(payload),
        document_meta(passage.meta, passage.extra, passage.doc_id, passage.position, passage.title_path),
        score,
        None if embedding is None else embedding.tolist(),
        _sparse(payload),
    )


_EMPTY_PAYLOAD_JSON = json.dumps({EXTRA_KEY: {}}, separators=(",", ":"))
"""How the store keeps the extras of a Document with nothing but its metadata (recognised without decoding)."""

_DOCUMENT_FIELDS = ("id", "content", "blob", "meta", "score", "embedding", "sparse_embedding")


def _fast_documents_possible() -> bool:
    """Whether ``Document`` has exactly the fields :func:`_document` fills, all with plain defaults."""
    found = fields(Document)
    return tuple(f.name for f in found) == _DOCUMENT_FIELDS and all(
        f.default is not MISSING or f.default_factory is not MISSING for f in found
    )


_FAST_DOCUMENTS = _fast_documents_possible()


def _document(
    doc_id: str,
    content: str | None,
    blob: ByteStream | None,
    meta: dict[str, Any],
    score: float | None,
    embedding: list[float] | None,
    sparse_embedding: SparseEmbedding | None,
) -> Document:
    """A ``Document`` from values the store checked when they were written.

    ``Document(...)`` re-checks what cannot be wrong here (content is text or ``None``, the id is set, the
    embedding a list) and tracks its own construction against in-place mutation: 10x the cost of filling the
    instance, which is what this does (the instance is an ordinary ``Document``: equality, ``to_dict``,
    ``dataclasses.replace`` and the mutation warning afterwards all work). Falls back to the constructor when
    Haystack's ``Document`` has other fields than the seven it knows.
    """
    if not _FAST_DOCUMENTS or not doc_id:
        return Document(
            id=doc_id,
            content=content,
            blob=blob,
            meta=meta,
            score=score,
            embedding=embedding,
            sparse_embedding=sparse_embedding,
        )
    document = object.__new__(Document)
    document.__dict__.update(
        id=doc_id,
        content=content,
        blob=blob,
        meta=meta,
        score=score,
        embedding=embedding,
        sparse_embedding=sparse_embedding,
    )
    return document


_raw_decode = json.JSONDecoder().raw_decode


def _fresh_meta(hit: Hit) -> dict[str, Any]:
    """The metadata of a hit written by this adapter with nothing beside it, as a dict of its own.

    Decoded from the hit's stored JSON text when still undecoded (the decoded value is new, so it needs no
    copy, and the hit keeps its text); else the hit's decoded value, copied.
    """
    raw = hit.json_text("meta")
    if raw is not None:
        try:
            value, end = _raw_decode(raw)
        except json.JSONDecodeError:
            value, end = None, -1
        if end != len(raw):  # leading or trailing text: json.loads says what it makes of it
            value = json.loads(raw)
        if type(value) is dict:
            return value
    return _restore_meta(hit.meta, None)


def hit_to_document(
    hit: Hit, embedding: Any = None, score: float | None = None, extra_meta: Mapping[str, Any] | None = None
) -> Document:
    """The Haystack Document for a search hit (which carries everything the passage holds).

    Args:
        hit: The engine's hit.
        embedding: Its dense vector (numpy) when asked for, else ``None``.
        score: The Document's score (default: the hit's).
        extra_meta: Keys added to (replacing those of) the returned Document's meta, e.g. ``scores``.

    """
    if hit.json_text("extra") == _EMPTY_PAYLOAD_JSON:  # written by this adapter with nothing beside the meta
        meta = _fresh_meta(hit)
        if extra_meta:
            meta.update(extra_meta)
        return _document(
            hit.passage_id,
            hit.text,
            None,
            meta,
            hit.score if score is None else score,
            None if embedding is None else embedding.tolist(),
            None,
        )
    extra = hit.extra  # decoded once: the JSON stays undecoded in the hit until read
    payload = _payload(extra)
    meta = document_meta(hit.meta, extra, hit.doc_id, hit.position, hit.title_path)
    if extra_meta:
        meta.update(extra_meta)
    return _document(
        hit.passage_id,
        _content(hit.text, payload),
        _blob(payload) if payload else None,
        meta,
        hit.score if score is None else score,
        None if embedding is None else embedding.tolist(),
        _sparse(payload) if payload else None,
    )


# ----------------------------------------------------------------------------------------------------
# filters
# ----------------------------------------------------------------------------------------------------
@dataclass
class FilterView:
    """What ``haystack.utils.filters.document_matches_filter`` sees of a stored passage.

    It has the fields of ``Document`` (the reference matcher looks names up in them), filled from the
    passage record without building a full Document.
    """

    id: str
    content: str | None = None
    blob: ByteStream | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    score: float | None = None
    embedding: list[float] | None = None
    sparse_embedding: SparseEmbedding | None = None


def record_view(record: Mapping[str, Any], roots: frozenset[str], embedding: Any = None) -> FilterView:
    """A :class:`FilterView` of an engine passage record (``id``, ``doc_id``, ``content``, ``meta``, ...).

    ``roots`` are the Document fields the filter names; ``blob`` and ``sparse_embedding`` are decoded only
    when named. ``embedding`` is the vector (as a list) when the filter names ``embedding``.
    """
    extra = record.get("extra", {})
    payload = _payload(extra)
    return FilterView(
        id=record["id"],
        content=_content(record["content"], payload),
        blob=_blob(payload) if "blob" in roots else None,
        meta=document_meta(record["meta"], extra, record["doc_id"], record["position"], record["title_path"]),
        embedding=embedding,
        sparse_embedding=_sparse(payload) if "sparse_embedding" in roots else None,
    )


def validate_filters(filters: Any, _depth: int = 1) -> None:
    """Check the structure of a Haystack filter, raising ``FilterError`` (before any document is read)."""
    if _depth > MAX_NESTING_DEPTH:
        raise FilterError(f"the filter is nested more than {MAX_NESTING_DEPTH} levels deep")
    if not isinstance(filters, dict):
        raise FilterError(f"filters must be a dict, got {type(filters).__name__}: {filters!r}")
    if "field" in filters:
        for key in ("operator", "value"):
            if key not in filters:
                raise FilterError(f"'{key}' key missing in {filters}")
        if not isinstance(filters["field"], str):
            raise FilterError(f"'field' must be a string in {filters}")
        operator = filters["operator"]
        if operator not in COMPARISON_OPERATORS:
            raise FilterError(
                f"Unknown comparison operator '{operator}'. Valid operators are: {sorted(COMPARISON_OPERATORS)}"
            )
        if operator in ("in", "not in") and not isinstance(filters["value"], list):
            raise FilterError(
                f"Filter value must be a `list` when using operator '{operator}', "
                f"received type '{type(filters['value'])}'"
            )
        if operator in (">", ">=", "<", "<=") and isinstance(filters["value"], list):
            raise FilterError(f"Filter value can't be of type {type(filters['value'])} using operator '{operator}'")
        return
    for key in ("operator", "conditions"):
        if key not in filters:
            raise FilterError(f"'{key}' key missing in {filters}")
    if filters["operator"] not in LOGICAL_OPERATORS:
        raise FilterError(
            f"Unknown logical operator '{filters['operator']}'. Valid operators are: {sorted(LOGICAL_OPERATORS)}"
        )
    if not isinstance(filters["conditions"], list):
        raise FilterError(f"'conditions' must be a list in {filters}")
    for condition in filters["conditions"]:
        validate_filters(condition, _depth + 1)


def filter_roots(filters: Mapping[str, Any]) -> frozenset[str]:
    """The first component of every field a (validated) filter names."""
    if "field" in filters:
        return frozenset({filters["field"].split(".", 1)[0]})
    out: frozenset[str] = frozenset()
    for condition in filters["conditions"]:
        out |= filter_roots(condition)
    return out
