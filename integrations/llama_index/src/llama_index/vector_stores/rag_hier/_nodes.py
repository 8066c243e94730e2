"""LlamaIndex nodes ↔ rag-hier passages.

A node becomes one passage:

- ``id`` = the node id; ``doc_id`` = the node's SOURCE document id (``node.ref_doc_id``), or the node id
  itself for a node without SOURCE (such a node is its own document);
- ``text`` = the node's text (``get_content(MetadataMode.NONE)``); ``meta`` = the node's metadata (what
  filters see);
- ``extra["llama_index"]`` = ``{"type": class name, "ref_doc_id": SOURCE id or None, "node": JSON dump}``,
  where the dump is the node's own pydantic JSON serialization (the one ``node_to_metadata_dict`` stores
  as ``_node_content``) without its text, metadata and embedding, which live in the passage already, and
  without fields left at their defaults (a third of the size; defaults are filled in again on reading).

A search hit (:class:`rag_hier.retrieval.hit.Hit`) carries the passage's text, metadata and extras, so the node
is rebuilt from the hit itself (:func:`hit_to_node`), with no second read of the store.

Reading a passage back gives the same node class with the same id, relationships (SOURCE, PREVIOUS, NEXT,
PARENT, CHILD), metadata, templates and exclusion lists. A passage written by the engine itself (no
LlamaIndex payload) comes back as a ``TextNode`` whose SOURCE is its document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.schema import (
    BaseNode,
    Document,
    ImageDocument,
    ImageNode,
    IndexNode,
    MetadataMode,
    Node,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.vector_stores.rag_hier._filters import NODE_KEY

from rag_hier.corpus.model import Passage
from rag_hier.retrieval.hit import Hit

__all__ = ["hit_to_node", "node_to_passage", "passage_record", "record_to_node"]

# Only these classes are rebuilt from stored JSON: a stored class name never imports anything.
_NODE_CLASSES: dict[str, type[BaseNode]] = {
    cls.class_name(): cls for cls in (TextNode, ImageNode, IndexNode, Node, Document, ImageDocument)
}


def node_to_passage(node: BaseNode, position: int) -> Passage:
    """The passage that stores ``node`` (its vector is written separately)."""
    dump = node.model_dump(mode="json", exclude={"embedding", "metadata"}, exclude_defaults=True)
    dump.pop("class_name", None)
    if "text" in dump:
        dump["text"] = ""
    resource = dump.get("text_resource")
    if isinstance(resource, dict):
        resource["text"] = ""
    meta = node.model_dump(mode="json", include={"metadata"})["metadata"]
    ref_doc_id = node.ref_doc_id
    return Passage(
        id=node.node_id,
        doc_id=ref_doc_id if ref_doc_id is not None else node.node_id,
        position=position,
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        meta=meta,
        extra={NODE_KEY: {"type": node.class_name(), "ref_doc_id": ref_doc_id, "node": dump}},
    )


def record_to_node(record: Mapping[str, Any]) -> BaseNode:
    """Rebuild the node from a passage record (``id``, ``doc_id``, ``content``, ``meta``, ``extra``)."""
    return _node(
        record["id"], record["doc_id"], record.get("content", ""), record.get("meta", {}), record.get("extra", {})
    )


def _node(node_id: str, doc_id: str, text: str, meta: Mapping[str, Any], extra: Mapping[str, Any]) -> BaseNode:
    """The node of a stored passage: its stored node payload (``extra``) with the passage's text and metadata."""
    payload = extra.get(NODE_KEY)
    if payload is None:
        return TextNode(
            id_=node_id,
            text=text,
            metadata=dict(meta),
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
        )
    data = dict(payload["node"])
    cls = _NODE_CLASSES.get(payload.get("type", ""))
    if cls is None:  # a subclass we do not know: keep its data in the closest core class
        cls = TextNode if "text" in data else Node
    if "text" in data:
        data["text"] = text
    resource = data.get("text_resource")
    if isinstance(resource, dict):
        data["text_resource"] = {**resource, "text": text}
        if cls is not TextNode and not issubclass(cls, TextNode):
            data.pop("text", None)
    data["metadata"] = dict(meta)
    return cls.model_validate(data)


def passage_record(passage: Passage) -> dict[str, Any]:
    """The record view (``id``, ``doc_id``, ``content``, ``meta``, ``extra``) of a stored passage."""
    return {
        "id": passage.id,
        "doc_id": passage.doc_id,
        "content": passage.text,
        "meta": passage.meta,
        "extra": passage.extra,
    }


def hit_to_node(hit: Hit) -> BaseNode:
    """The node a search hit stands for (its text, metadata and stored node payload)."""
    return _node(hit.passage_id, hit.doc_id, hit.text, hit.meta, hit.extra)
