"""The ``--frameworks`` engines of ``bench_embedded_stores``: each store through its Haystack and LlamaIndex adapter.

Each is written through its framework (Haystack ``Document``s with embeddings through ``write_documents``;
LlamaIndex ``TextNode``s with embeddings through ``vector_store.add``) and queried through it (a Haystack embedding
retriever's ``run``; ``vector_store.query``), with the same filters in the framework's own syntax. LlamaIndex node
ids are UUIDs (Qdrant takes no other string ids), mapped back to the passage ids. The kill -9 test is left to the
native engines: an adapter writes through the same storage.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import numpy as np

from benchmarks.frameworks._embedded import Data, Engine


def haystack_filter(flt: tuple[str, str, Any] | None) -> dict[str, Any] | None:
    if flt is None:
        return None
    field, op, value = flt
    return {"field": f"meta.{field}", "operator": op, "value": value}


def llama_filter(flt: tuple[str, str, Any] | None) -> Any:
    if flt is None:
        return None
    from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

    field, op, value = flt
    operator = FilterOperator.EQ if op == "==" else FilterOperator.LT
    return MetadataFilters(filters=[MetadataFilter(key=field, value=value, operator=operator)])


def node_id(i: int) -> str:
    return str(uuid.UUID(int=i))


def passage_of(node: str) -> str:
    return f"p{uuid.UUID(node).int}"


class Unsupported(Exception):
    """The engine cannot answer this kind of query (reported as such)."""


class Haystack(Engine):
    via = "haystack"
    durable_test = False

    def store(self) -> Any:
        raise NotImplementedError

    def retriever(self, store: Any) -> Any:
        raise NotImplementedError

    def build(self, data: Data) -> None:
        from haystack import Document

        store = self.store()
        for start, stop in data.batches(self.batch):
            store.write_documents(
                [
                    Document(
                        id=data.ids[i], content=data.texts[i], meta=data.metas[i], embedding=data.vectors[i].tolist()
                    )
                    for i in range(start, stop)
                ]
            )
        close = getattr(store, "close", None)
        if close:
            close()

    def open(self) -> None:
        self.doc_store = self.store()
        self.component = self.retriever(self.doc_store)

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        out = self.component.run(query_embedding=q.tolist(), filters=haystack_filter(flt), top_k=k)
        return [d.id for d in out["documents"]]

    def close(self) -> None:
        close = getattr(self.doc_store, "close", None)
        if close:
            close()


class HaystackRagHier(Haystack):
    requires = ("rag_hier", "faiss", "haystack", "haystack_integrations.document_stores.rag_hier")
    kind: ClassVar[str] = "flat"
    hit_rows: ClassVar[str] = "sqlite"

    def store(self) -> Any:
        from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

        index = {"kind": self.kind} if self.kind == "flat" else {"kind": "hnsw", "hnsw_m": 32, "ef_search": 64}
        return RagHierDocumentStore(
            path=str(self.path), dimension=self.dim, similarity="dot_product", index=index, hit_rows=self.hit_rows
        )

    def retriever(self, store: Any) -> Any:
        from haystack_integrations.components.retrievers.rag_hier import RagHierEmbeddingRetriever

        return RagHierEmbeddingRetriever(document_store=store)


class HaystackRagHierHnswMemory(HaystackRagHier):
    name = "haystack: rag-hier hnsw memory"
    kind = "hnsw"
    hit_rows = "memory"


class HaystackRagHierFlat(HaystackRagHier):
    name = "haystack: rag-hier flat"


class HaystackChroma(Haystack):
    name = "haystack: Chroma"
    requires = ("chromadb", "haystack", "haystack_integrations.document_stores.chroma")

    def store(self) -> Any:
        from haystack_integrations.document_stores.chroma import ChromaDocumentStore

        return ChromaDocumentStore(collection_name="bench", persist_path=str(self.path), distance_function="ip")

    def retriever(self, store: Any) -> Any:
        from haystack_integrations.components.retrievers.chroma import ChromaEmbeddingRetriever

        return ChromaEmbeddingRetriever(document_store=store)


class HaystackQdrant(Haystack):
    name = "haystack: Qdrant local"
    requires = ("qdrant_client", "haystack", "haystack_integrations.document_stores.qdrant")

    def store(self) -> Any:
        from haystack_integrations.document_stores.qdrant import QdrantDocumentStore

        return QdrantDocumentStore(
            path=str(self.path), index="bench", embedding_dim=self.dim, similarity="dot_product", progress_bar=False
        )

    def retriever(self, store: Any) -> Any:
        from haystack_integrations.components.retrievers.qdrant import QdrantEmbeddingRetriever

        return QdrantEmbeddingRetriever(document_store=store)

    def close(self) -> None:
        client = getattr(self.doc_store, "_client", None)
        if client is not None:
            client.close()


class Llama(Engine):
    via = "llama-index"
    durable_test = False

    def vector_store(self, create: bool) -> Any:
        raise NotImplementedError

    def build(self, data: Data) -> None:
        from llama_index.core.schema import TextNode

        store = self.vector_store(create=True)
        for start, stop in data.batches(self.batch):
            store.add(
                [
                    TextNode(
                        id_=node_id(i), text=data.texts[i], metadata=data.metas[i], embedding=data.vectors[i].tolist()
                    )
                    for i in range(start, stop)
                ]
            )
        self.finish(store)

    def finish(self, store: Any) -> None:
        close = getattr(store, "close", None)
        if close:
            close()

    def open(self) -> None:
        self.store = self.vector_store(create=False)

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        from llama_index.core.vector_stores.types import VectorStoreQuery

        result = self.store.query(
            VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=k, filters=llama_filter(flt))
        )
        return [passage_of(i) for i in result.ids or []]

    def close(self) -> None:
        self.finish(self.store)


class LlamaRagHier(Llama):
    requires = ("rag_hier", "faiss", "llama_index.core", "llama_index.vector_stores.rag_hier")
    kind: ClassVar[str] = "flat"
    hit_rows: ClassVar[str] = "sqlite"

    def vector_store(self, create: bool) -> Any:
        from llama_index.vector_stores.rag_hier import RagHierVectorStore

        index = {"kind": self.kind} if self.kind == "flat" else {"kind": "hnsw", "hnsw_m": 32, "ef_search": 64}
        return RagHierVectorStore(
            self.path, dimension=self.dim, similarity="dot_product", index=index, hit_rows=self.hit_rows
        )


class LlamaRagHierFlat(LlamaRagHier):
    name = "llama-index: rag-hier flat"


class LlamaRagHierHnswMemory(LlamaRagHier):
    name = "llama-index: rag-hier hnsw memory"
    kind = "hnsw"
    hit_rows = "memory"


class LlamaChroma(Llama):
    name = "llama-index: Chroma"
    requires = ("chromadb", "llama_index.core", "llama_index.vector_stores.chroma")

    def vector_store(self, create: bool) -> Any:
        import chromadb
        from chromadb.config import Settings
        from llama_index.vector_stores.chroma import ChromaVectorStore

        self.client = chromadb.PersistentClient(path=str(self.path), settings=Settings(anonymized_telemetry=False))
        if create:
            col = self.client.create_collection(
                "bench", configuration={"hnsw": {"space": "ip"}}, embedding_function=None
            )
        else:
            col = self.client.get_collection("bench", embedding_function=None)
        return ChromaVectorStore(chroma_collection=col)


class LlamaLanceDB(Llama):
    name = "llama-index: LanceDB"
    requires = ("lancedb", "llama_index.core", "llama_index.vector_stores.lancedb")

    def vector_store(self, create: bool) -> Any:
        from llama_index.vector_stores.lancedb import LanceDBVectorStore

        return LanceDBVectorStore(uri=str(self.path), table_name="bench", distance_type="dot")


class LlamaQdrant(Llama):
    name = "llama-index: Qdrant local"
    requires = ("qdrant_client", "llama_index.core", "llama_index.vector_stores.qdrant")

    def vector_store(self, create: bool) -> Any:
        from llama_index.vector_stores.qdrant import QdrantVectorStore
        from qdrant_client import QdrantClient

        self.client = QdrantClient(path=str(self.path))
        return QdrantVectorStore(client=self.client, collection_name="bench")

    def finish(self, store: Any) -> None:
        self.client.close()


class LlamaFaiss(Llama):
    name = "llama-index: FAISS"
    requires = ("faiss", "llama_index.core", "llama_index.vector_stores.faiss")
    notes = "FaissVectorStore: no filters, no text (ids are FAISS positions)"

    def vector_store(self, create: bool) -> Any:
        import faiss
        from llama_index.vector_stores.faiss import FaissVectorStore

        if create:
            return FaissVectorStore(faiss_index=faiss.IndexFlatIP(self.dim))
        return FaissVectorStore.from_persist_path(str(self.path / "default__vector_store.json"))

    def finish(self, store: Any) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        store.persist(persist_path=str(self.path / "default__vector_store.json"))

    def close(self) -> None:
        pass

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        from llama_index.core.vector_stores.types import VectorStoreQuery

        if flt is not None:
            raise Unsupported("FaissVectorStore has no metadata filters")
        result = self.store.query(VectorStoreQuery(query_embedding=q.tolist(), similarity_top_k=k))
        return [f"p{i}" for i in result.ids or []]


FRAMEWORK: list[type[Engine]] = [
    HaystackRagHierFlat,
    HaystackRagHierHnswMemory,
    HaystackChroma,
    HaystackQdrant,
    LlamaRagHierFlat,
    LlamaRagHierHnswMemory,
    LlamaChroma,
    LlamaLanceDB,
    LlamaQdrant,
    LlamaFaiss,
]
"""The engines of ``--frameworks``."""
