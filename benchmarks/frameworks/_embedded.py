"""The engines of ``bench_embedded_stores``: one small class per store, each behind the same five calls.

Every engine stores the same passages (id, 100-word text, ``{"group": "g<i % 100>", "year": 1990 + i % 30}``,
a float32 unit vector) in its own folder, and answers one query vector with the ids of its top ``k`` under one of
three filters (:data:`FILTERS`). An engine names the module it needs (``requires``); the benchmark skips and
reports those not installed. Imports happen inside the methods, so ``--help`` and the skipping cost nothing.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

FILTERS = {
    "unfiltered": None,
    "selective": ("group", "==", "g7"),  # 1 % of the passages
    "broad": ("year", "<", 2005),  # 50 % of the passages
}
"""The filters every engine answers: ``(field, operator, value)`` in each engine's own filter language."""


def meta_of(i: int) -> dict[str, Any]:
    """The metadata of passage ``i``."""
    return {"group": f"g{i % 100}", "year": 1990 + i % 30}


def matches(meta: dict[str, Any], flt: tuple[str, str, Any] | None) -> bool:
    if flt is None:
        return True
    field, op, value = flt
    return meta[field] == value if op == "==" else meta[field] < value


@dataclass
class Data:
    """What every engine stores: passage ids, texts, metadata and vectors (rows in the same order)."""

    ids: list[str]
    texts: list[str]
    metas: list[dict[str, Any]]
    vectors: np.ndarray

    def batches(self, size: int) -> Any:
        for start in range(0, len(self.ids), size):
            stop = min(len(self.ids), start + size)
            yield start, stop


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Engine:
    """One store behind the benchmark's calls; subclasses fill in the five methods."""

    name: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    via: ClassVar[str] = "native"  # or "haystack" / "llama-index"
    notes: ClassVar[str] = ""
    batch: ClassVar[int] = 10_000

    def __init__(self, path: Path, dim: int) -> None:
        self.path = path
        self.dim = dim

    def build(self, data: Data) -> None:
        """Create the store and write every passage (vectors given), durably as the engine defines it."""
        raise NotImplementedError

    def open(self) -> None:
        """Open the store written by :meth:`build` (in this or a fresh process)."""
        raise NotImplementedError

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        """The ids of the top ``k`` passages for one query vector, best first."""
        raise NotImplementedError

    def write_one(self, pid: str, vector: np.ndarray, text: str, meta: dict[str, Any]) -> None:
        """Write one passage and return once the engine acknowledges it (its documented durable point)."""
        raise NotImplementedError

    def has(self, pid: str) -> bool:
        """Whether passage ``pid`` is stored (read after reopening)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store."""


# ------------------------------------------------------------------------------------------------------------
# rag-hier
# ------------------------------------------------------------------------------------------------------------
def rag_hier_filter(flt: tuple[str, str, Any] | None) -> dict[str, Any] | None:
    if flt is None:
        return None
    field, op, value = flt
    return {"field": f"meta.{field}", "operator": op, "value": value}


class RagHier(Engine):
    requires = ("rag_hier", "faiss")
    kind: ClassVar[str] = "flat"
    hit_rows: ClassVar[str] = "sqlite"
    notes = "metadata fields `group` and `year` indexed (`index_meta_field`)"

    def _index(self) -> dict[str, Any]:
        if self.kind == "hnsw":
            return {"kind": "hnsw", "hnsw_m": 32, "ef_construction": 80, "ef_search": 64}
        if self.kind == "ivf":
            return {"kind": "ivf", "nprobe": 16}
        return {"kind": "flat"}

    def build(self, data: Data) -> None:
        from rag_hier import HierStore, Passage

        store = HierStore.create(
            self.path, model=None, dimension=self.dim, similarity="dot_product", index=self._index()
        )
        store.index_meta_field("group")
        store.index_meta_field("year")
        for start, stop in data.batches(self.batch):
            passages = [
                Passage(data.ids[i], f"d{i // 10}", i % 10, data.texts[i], meta=data.metas[i])
                for i in range(start, stop)
            ]
            store.add_passages(passages, embeddings=data.vectors[start:stop])
        store.close()

    def open(self) -> None:
        from rag_hier import DenseRetriever, HierStore

        self.store = HierStore.open(self.path, hit_rows=self.hit_rows)  # type: ignore[arg-type]
        self.retriever = DenseRetriever(self.store)

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        (hits,) = self.retriever.search_vectors(q[None, :], top_k=k, filters=rag_hier_filter(flt))
        return [h.passage_id for h in hits]

    def write_one(self, pid: str, vector: np.ndarray, text: str, meta: dict[str, Any]) -> None:
        from rag_hier import Passage

        self.store.add_passages([Passage(pid, "dw", 0, text, meta=meta)], embeddings=vector[None, :])

    def has(self, pid: str) -> bool:
        return bool(self.store.get_passages([pid]))

    def close(self) -> None:
        self.store.close()


def _rag_hier(kind: str, hit_rows: str) -> type[RagHier]:
    fields: dict[str, Any] = {"name": f"rag-hier {kind}", "kind": kind, "hit_rows": hit_rows}
    if hit_rows == "memory":
        fields.update(name=f"rag-hier {kind} memory", copy_of=f"rag-hier {kind}")
    return type(f"RagHier_{kind}_{hit_rows}", (RagHier,), fields)


# ------------------------------------------------------------------------------------------------------------
# FAISS + a docstore (the do-it-yourself baseline: an IndexIDMap2 over a Flat index and a JSON docstore)
# ------------------------------------------------------------------------------------------------------------
class FaissDocstore(Engine):
    name = "FAISS + docstore"
    requires = ("faiss",)
    notes = "Flat index, a JSON docstore rewritten by `save()`; filters: a Python scan, then an ID selector"

    def _save(self) -> None:
        import faiss

        self.path.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(self.path / "index.faiss.tmp"))
        (self.path / "index.faiss.tmp").replace(self.path / "index.faiss")
        tmp = self.path / "docstore.json.tmp"
        with tmp.open("w", encoding="utf-8") as f:
            json.dump({"ids": self.ids, "texts": self.texts, "metas": self.metas}, f)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self.path / "docstore.json")

    def build(self, data: Data) -> None:
        import faiss

        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        self.ids, self.texts, self.metas = list(data.ids), list(data.texts), list(data.metas)
        for start, stop in data.batches(self.batch):
            self.index.add_with_ids(data.vectors[start:stop], np.arange(start, stop, dtype=np.int64))
        self._save()

    def open(self) -> None:
        import faiss

        self.index = faiss.read_index(str(self.path / "index.faiss"))
        with (self.path / "docstore.json").open(encoding="utf-8") as f:
            doc = json.load(f)
        self.ids, self.texts, self.metas = doc["ids"], doc["texts"], doc["metas"]

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        import faiss

        params = None
        if flt is not None:
            allowed = np.fromiter((i for i, m in enumerate(self.metas) if matches(m, flt)), dtype=np.int64)
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed.size, faiss.swig_ptr(allowed)))
        _, ids = self.index.search(q[None, :], k, params=params)
        return [self.ids[i] for i in ids[0] if i >= 0]

    def write_one(self, pid: str, vector: np.ndarray, text: str, meta: dict[str, Any]) -> None:
        self.index.add_with_ids(vector[None, :], np.array([len(self.ids)], dtype=np.int64))
        self.ids.append(pid)
        self.texts.append(text)
        self.metas.append(meta)
        self._save()

    def has(self, pid: str) -> bool:
        return pid in set(self.ids)


# ------------------------------------------------------------------------------------------------------------
# Chroma (PersistentClient: SQLite + an HNSW index)
# ------------------------------------------------------------------------------------------------------------
def chroma_where(flt: tuple[str, str, Any] | None) -> dict[str, Any] | None:
    if flt is None:
        return None
    field, op, value = flt
    return {field: value} if op == "==" else {field: {"$lt": value}}


class Chroma(Engine):
    name = "Chroma"
    requires = ("chromadb",)
    notes = "PersistentClient, HNSW (space ip, defaults)"

    def _client(self) -> Any:
        import chromadb
        from chromadb.config import Settings

        return chromadb.PersistentClient(path=str(self.path), settings=Settings(anonymized_telemetry=False))

    def build(self, data: Data) -> None:
        client = self._client()
        col = client.create_collection("bench", configuration={"hnsw": {"space": "ip"}}, embedding_function=None)
        size = min(self.batch, client.get_max_batch_size())
        for start, stop in data.batches(size):
            col.add(
                ids=data.ids[start:stop],
                embeddings=data.vectors[start:stop],
                documents=data.texts[start:stop],
                metadatas=data.metas[start:stop],
            )
        del col, client

    def open(self) -> None:
        self.client = self._client()
        self.col = self.client.get_collection("bench", embedding_function=None)

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        r = self.col.query(
            query_embeddings=[q], n_results=k, where=chroma_where(flt), include=["documents", "metadatas", "distances"]
        )
        return list(r["ids"][0])

    def write_one(self, pid: str, vector: np.ndarray, text: str, meta: dict[str, Any]) -> None:
        self.col.add(ids=[pid], embeddings=vector[None, :], documents=[text], metadatas=[meta])

    def has(self, pid: str) -> bool:
        return bool(self.col.get(ids=[pid])["ids"])


# ------------------------------------------------------------------------------------------------------------
# LanceDB (Lance columnar files; no ANN index: an exact scan, as a table starts)
# ------------------------------------------------------------------------------------------------------------
def lance_where(flt: tuple[str, str, Any] | None) -> str | None:
    if flt is None:
        return None
    field, op, value = flt
    return f"{field} = '{value}'" if op == "==" else f"{field} < {value}"


class LanceDB(Engine):
    name = "LanceDB"
    requires = ("lancedb", "pyarrow")
    notes = "no ANN index (exact scan, as a table starts), prefilter=True"

    def _table(self, data: Data, start: int, stop: int) -> Any:
        import pyarrow as pa

        vecs = pa.FixedSizeListArray.from_arrays(pa.array(data.vectors[start:stop].ravel()), self.dim)
        return pa.table(
            {
                "id": data.ids[start:stop],
                "vector": vecs,
                "text": data.texts[start:stop],
                "group": [m["group"] for m in data.metas[start:stop]],
                "year": [m["year"] for m in data.metas[start:stop]],
            }
        )

    def build(self, data: Data) -> None:
        import lancedb

        db = lancedb.connect(str(self.path))
        tbl = None
        for start, stop in data.batches(self.batch):
            part = self._table(data, start, stop)
            if tbl is None:
                tbl = db.create_table("bench", data=part)
            else:
                tbl.add(part)

    def open(self) -> None:
        import lancedb

        self.tbl = lancedb.connect(str(self.path)).open_table("bench")

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        query = self.tbl.search(q).distance_type("dot").limit(k).select(["id", "text", "group", "year", "_distance"])
        where = lance_where(flt)
        if where is not None:
            query = query.where(where, prefilter=True)
        return [row["id"] for row in query.to_list()]

    def write_one(self, pid: str, vector: np.ndarray, text: str, meta: dict[str, Any]) -> None:
        self.tbl.add(self._table(Data([pid], [text], [meta], vector[None, :]), 0, 1))

    def has(self, pid: str) -> bool:
        return self.tbl.count_rows(f"id = '{pid}'") > 0


# ------------------------------------------------------------------------------------------------------------
# Qdrant, local mode (QdrantClient(path=...): the Python engine, points pickled into SQLite)
# ------------------------------------------------------------------------------------------------------------
def qdrant_filter(flt: tuple[str, str, Any] | None) -> Any:
    if flt is None:
        return None
    from qdrant_client import models

    field, op, value = flt
    cond = (
        models.FieldCondition(key=field, match=models.MatchValue(value=value))
        if op == "=="
        else models.FieldCondition(key=field, range=models.Range(lt=value))
    )
    return models.Filter(must=[cond])


class QdrantLocal(Engine):
    name = "Qdrant local"
    requires = ("qdrant_client",)
    notes = "QdrantClient(path=...): exact NumPy scan; payload with pid, text, group, year"

    def _client(self) -> Any:
        from qdrant_client import QdrantClient

        return QdrantClient(path=str(self.path))

    def build(self, data: Data) -> None:
        from qdrant_client import models

        client = self._client()
        client.create_collection(
            "bench", vectors_config=models.VectorParams(size=self.dim, distance=models.Distance.DOT)
        )
        for start, stop in data.batches(self.batch):
            payloads = [{"pid": data.ids[i], "text": data.texts[i], **data.metas[i]} for i in range(start, stop)]
            client.upsert(
                "bench",
                points=models.Batch(
                    ids=list(range(start, stop)), vectors=data.vectors[start:stop].tolist(), payloads=payloads
                ),
            )
        client.close()

    def open(self) -> None:
        self.client = self._client()
        self.next_id = 10**9

    def search(self, q: np.ndarray, k: int, flt: tuple[str, str, Any] | None) -> list[str]:
        res = self.client.query_points(
            "bench", query=q.tolist(), limit=k, query_filter=qdrant_filter(flt), with_payload=True
        ).points
        return [p.payload["pid"] for p in res]

    def write_one(self, pid: str, vector: np.ndarray, text: str, meta: dict[str, Any]) -> None:
        from qdrant_client import models

        self.client.upsert(
            "bench",
            points=[
                models.PointStruct(id=self.next_id, vector=vector.tolist(), payload={"pid": pid, "text": text, **meta})
            ],
        )

    def has(self, pid: str) -> bool:
        return any(p.payload["pid"] == pid for p in self.client.retrieve("bench", ids=[self.next_id]))

    def close(self) -> None:
        self.client.close()


NATIVE: list[type[Engine]] = [
    *(_rag_hier(kind, rows) for kind in ("flat", "hnsw", "ivf") for rows in ("sqlite", "memory")),
    FaissDocstore,
    Chroma,
    LanceDB,
    QdrantLocal,
]
"""The engines, native APIs (the framework integrations follow in :data:`FRAMEWORK`)."""


def copy_store(src: Path, dst: Path) -> None:
    """A copy of a built store (the ``hit_rows="memory"`` variants read a copy: a process shares one engine per
    directory, and a handle opened with ``"memory"`` would serve the other handles' hits too)."""
    shutil.copytree(src, dst)


def ids_present(engine: Engine, pids: Sequence[str]) -> list[bool]:
    return [engine.has(p) for p in pids]
