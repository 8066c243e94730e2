"""DocumentIndex: the document level of Dense Hierarchical Retrieval (DHR), kept as a store extension.

One vector per document, in a FAISS :class:`~rag_hier.index.dense.DenseIndex` of its own (``doc.faiss``),
plus the map from each document to the FAISS ids of its passages, so that a hierarchical search can
restrict the passage search to the passages of the top-k1 documents with an id selector.

A document is represented (``representation=``) by

- ``"mean"`` (the default): the mean of its passage vectors (re-normalised when the passage vectors are unit
  vectors). No model run, no extra text; follows any passage encoder, including vectors written from
  outside. Chosen by measurement: on XQuAD-en with the untrained default model it ranks the gold document
  first for 84.7% of questions, against 70.2% for the DHR summary and 69.4% for title + first paragraph;
  it stays ahead after DHR training (see ``docs/dhr.md``).
- ``"summary"``: the DHR summary (title, abstract, table of contents; :mod:`rag_hier.corpus.summary`) encoded
  by the store's encoder or by a distinct document encoder (``model=``), e.g. one trained by
  :class:`~rag_hier.training.dhr.DHRTrainer` at the document level.

The index follows the store: after any write that adds, removes or changes passages of a document (or its
title or table of contents), the store calls :meth:`on_documents_changed` inside the same transaction and
the document is re-embedded (only if its representation's input changed: the set of passage ids for
``"mean"``, the summary text for ``"summary"``) or dropped when it has no passage vectors left. Files:
``doc.faiss`` (document vectors), ``doc.json`` (document ids and input hashes), ``doc.passages.npy``
(passage FAISS id → document, int64, loaded with ``allow_pickle=False``). A small write commits only its
change as a segment of ``store.sqlite``: the changed documents (id, FAISS id, input hash, passages), the
vectors added to and removed from ``doc.faiss`` (the change set of its :class:`~rag_hier.index.dense.Journal`);
the three files are rewritten once the segments pass a tenth of the documents, or on ``HierStore.optimize()``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from rag_hier._arrays import read_npy
from rag_hier.corpus.summary import DEFAULT_ABSTRACT_WORDS, DOC_REPRESENTATIONS, DocRepresentation, document_summary
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.dense import DenseIndex, IndexConfig, Journal
from rag_hier.store.extensions.base import StoreExtension, register_extension
from rag_hier.store.segments import Delta

if TYPE_CHECKING:
    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.store.contract import StoreBackend
    from rag_hier.store.records import PassageRecord

logger = logging.getLogger(__name__)

__all__ = ["DOC_REPRESENTATIONS", "DocRepresentation", "DocumentIndex"]


_INDEX_FILE = "doc.faiss"
_IDS_FILE = "doc.json"
_PASSAGES_FILE = "doc.passages.npy"
_FORMAT = "rag-hier-doc-index"
_VERSION = 1
_CHUNK = 2048  # documents re-embedded per step (bounds the memory of reconstructed passage vectors)


def _strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of ``values`` end to end, and where each ends."""
    encoded = [v.encode("utf-8") for v in values]
    ends = np.cumsum([len(b) for b in encoded], dtype=np.int64) if encoded else np.zeros(0, np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), ends


def _unstrings(data: np.ndarray, ends: np.ndarray) -> list[str]:
    """The strings of :func:`_strings` (``ValueError`` when the ends do not fit the bytes)."""
    if ends.size and ((np.diff(ends) < 0).any() or ends[0] < 0 or int(ends[-1]) != data.size):
        raise ValueError("string ends do not fit the bytes")
    if not ends.size and data.size:
        raise ValueError("bytes without strings")
    raw = data.tobytes()
    starts = np.concatenate([[0], ends[:-1]]) if ends.size else ends
    return [raw[int(a) : int(b)].decode("utf-8") for a, b in zip(starts, ends, strict=True)]


def _index_config(index: IndexConfig | str | Mapping[str, Any]) -> IndexConfig:
    if isinstance(index, IndexConfig):
        return index
    if isinstance(index, str):
        return IndexConfig(kind=index)  # type: ignore[arg-type]
    return IndexConfig.from_dict(dict(index))


@register_extension
class DocumentIndex(StoreExtension):
    """A document-level dense index that follows a :class:`~rag_hier.store.HierStore` (DHR's first stage).

    Args:
        representation: ``"mean"`` (mean of the document's passage vectors) or ``"summary"`` (its DHR
            summary, encoded).
        model: A distinct document encoder (sentence-transformers name or path) for ``"summary"``; ``None``
            shares the store's encoder. Queries are encoded by the same model at the document level.
        encoder: A ready :class:`~rag_hier.encoders.DenseEncoder` for ``"summary"`` (overrides ``model``;
            its ``model_name`` is what the store records).
        abstract_words: Words of the abstract in a summary.
        include_toc: Put the table of contents in a summary.
        index: The document index kind: ``"flat"`` (exact, default), ``"hnsw"``, ``"ivf"`` or an
            :class:`~rag_hier.index.IndexConfig` (or its dict).
        normalize: L2-normalise ``"mean"`` vectors; ``None`` normalises when the passage vectors are unit
            vectors.

    Example:
        >>> store.add_extension(DocumentIndex())  # doctest: +SKIP
        >>> HierarchicalRetriever(store, k1=100).search("who wrote the book?", top_k=5)  # doctest: +SKIP

    """

    name = "doc-index"
    FILES = (_INDEX_FILE, _IDS_FILE, _PASSAGES_FILE)

    def __init__(
        self,
        representation: DocRepresentation = "mean",
        *,
        model: str | None = None,
        encoder: DenseEncoder | None = None,
        abstract_words: int = DEFAULT_ABSTRACT_WORDS,
        include_toc: bool = True,
        index: IndexConfig | str | Mapping[str, Any] = "flat",
        normalize: bool | None = None,
    ) -> None:
        if representation not in DOC_REPRESENTATIONS:
            raise ValueError(f"representation must be one of {', '.join(DOC_REPRESENTATIONS)}; got {representation!r}")
        if representation == "mean" and (model is not None or encoder is not None):
            raise ValueError("model/encoder only apply to representation='summary'; 'mean' pools the passage vectors")
        if abstract_words < 0:
            raise ValueError(f"abstract_words must be >= 0, got {abstract_words}")
        self.representation: DocRepresentation = representation
        self._encoder = encoder
        self.model = encoder.model_name if encoder is not None else model
        self.abstract_words = abstract_words
        self.include_toc = include_toc
        self.index_config = _index_config(index)
        self.normalize = normalize
        self._reset()

    def _reset(self) -> None:
        self._index: DenseIndex | None = None
        self._dimension: int | None = None
        self._next_id = 0
        self._ids: dict[str, int] = {}  # doc_id -> FAISS id in doc.faiss (a new one at every re-embedding)
        self._doc_of: dict[int, str] = {}
        self._hashes: dict[str, str] = {}  # doc_id -> hash of the representation's input
        self._passages: dict[int, np.ndarray] = {}  # doc FAISS id -> sorted passage FAISS ids
        self._lookup: tuple[np.ndarray, np.ndarray] | None = None  # (sorted passage ids, their doc ids)
        self._touched: set[str] | None = None  # documents synced in the write batch (see begin_delta)
        self._delta_ok = False

    # ------------------------------------------------------------------------------------------------
    # configuration and persistence
    # ------------------------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """What the store records (and passes back to :meth:`from_config` on open)."""
        return {
            "representation": self.representation,
            "model": self.model,
            "abstract_words": self.abstract_words,
            "include_toc": self.include_toc,
            "index": self.index_config.to_dict(),
            "normalize": self.normalize,
        }

    def files(self) -> list[str]:
        """``doc.json`` and ``doc.passages.npy``, plus ``doc.faiss`` once the dimension is known."""
        out = [_IDS_FILE, _PASSAGES_FILE]
        if self._index is not None:
            out.insert(0, _INDEX_FILE)
        return out

    def write(self, paths: Mapping[str, Path]) -> None:
        """Write the document vectors, ids and the passage → document map."""
        if self._index is not None:
            self._index.write(paths[_INDEX_FILE])
        state = {
            "format": _FORMAT,
            "version": _VERSION,
            "dimension": self._dimension,
            "next_id": self._next_id,
            "documents": [[d, i, self._hashes.get(d, "")] for d, i in self._ids.items()],
        }
        paths[_IDS_FILE].write_text(json.dumps(state, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
        parts = [np.stack([rows, np.full(rows.shape, doc, np.int64)], axis=1) for doc, rows in self._passages.items()]
        pairs = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
        with paths[_PASSAGES_FILE].open("wb") as f:
            np.save(f, np.ascontiguousarray(pairs, dtype=np.int64), allow_pickle=False)

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the committed files (no pickle anywhere)."""
        self._reset()
        ids_path = paths[_IDS_FILE]
        try:
            state = json.loads(ids_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreCorruptedError(f"{ids_path}: not a readable document index ({exc})") from exc
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise StoreCorruptedError(f"{ids_path}: not a rag-hier document index")
        if state.get("version") != _VERSION:
            raise StoreError(
                f"{ids_path}: document index version {state.get('version')}; this rag-hier reads {_VERSION}"
            )
        self._dimension = state.get("dimension")
        self._next_id = int(state["next_id"])
        for doc_id, fid, digest in state["documents"]:
            self._ids[str(doc_id)] = int(fid)
            self._doc_of[int(fid)] = str(doc_id)
            if digest:
                self._hashes[str(doc_id)] = str(digest)
        pairs = read_npy(paths[_PASSAGES_FILE])  # its header checked against its size before allocating
        if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype != np.int64:
            raise StoreCorruptedError(f"{paths[_PASSAGES_FILE]}: expected an (n, 2) int64 array, got {pairs.shape}")
        if pairs.size:
            order = np.lexsort((pairs[:, 0], pairs[:, 1]))
            pairs = pairs[order]
            docs, starts = np.unique(pairs[:, 1], return_index=True)
            for doc, rows in zip(docs.tolist(), np.split(pairs[:, 0], starts[1:]), strict=True):
                self._passages[int(doc)] = rows
        if _INDEX_FILE in paths:
            if self._dimension is None:
                raise StoreCorruptedError(f"{ids_path}: {_INDEX_FILE} is recorded but no dimension")
            self._index = DenseIndex.read(paths[_INDEX_FILE], int(self._dimension), self.index_config)
            if self.index_config.kind in ("flat", "hnsw"):  # kinds that remove lazily
                self._index.mark_tombstones(np.setdiff1d(self._index.ids(), np.fromiter(self._doc_of, np.int64)))

    def verify(self, store: StoreBackend) -> None:
        """Check that every passage vector of the store belongs to an indexed document, and vice versa."""
        vectors = store.count_vectors()
        mapped = sum(len(r) for r in self._passages.values())
        if mapped != vectors:
            raise StoreCorruptedError(
                f"{store.location}/{_PASSAGES_FILE}: maps {mapped} passages, the store holds {vectors} passage vectors"
            )
        if self._passages:
            rows = np.concatenate(list(self._passages.values()))
            if np.unique(rows).size != rows.size or not np.isin(rows, store.passage_rowids()).all():
                raise StoreCorruptedError(
                    f"{store.location}/{_PASSAGES_FILE}: maps passages the store does not hold, or one passage twice"
                )
        held = len(self._index) if self._index is not None else 0
        if held != len(self._ids) or set(self._passages) != set(self._doc_of):
            raise StoreCorruptedError(
                f"{store.location}/{_INDEX_FILE}: holds {held} document vectors for {len(self._ids)} documents"
            )

    def describe(self) -> dict[str, Any]:
        """Runtime facts for ``rag-hier info``."""
        return {
            "representation": self.representation,
            "model": self.model,
            "documents": len(self._ids),
            "passages": sum(len(r) for r in self._passages.values()),
            "index": self._index.describe() if self._index is not None else None,
        }

    def encoder_dependency(self) -> Literal["none", "rebuild", "refuse"]:
        """Rebuilt when its vectors come from the store's encoder (mean of passage vectors, or shared summaries)."""
        return "rebuild" if self.shares_encoder else "none"

    # ------------------------------------------------------------------------------------------------
    # following the store
    # ------------------------------------------------------------------------------------------------
    def build(self, store: StoreBackend) -> None:
        """Index every document of ``store`` from scratch."""
        self._reset()
        self._sync(store, store.document_ids())

    def on_documents_changed(self, store: StoreBackend, doc_ids: set[str]) -> None:
        """Re-embed the documents whose passages, title or table of contents changed; drop deleted ones."""
        self._sync(store, sorted(doc_ids))

    def _sync(self, store: StoreBackend, doc_ids: Sequence[str]) -> None:
        if self._touched is not None:
            self._touched.update(doc_ids)
        for i in range(0, len(doc_ids), _CHUNK):
            self._sync_chunk(store, list(doc_ids[i : i + _CHUNK]))
        self._lookup = None

    def _sync_chunk(self, store: StoreBackend, doc_ids: list[str]) -> None:
        rowids = store.rowids_of(doc_ids=doc_ids)
        owner = store.doc_ids_for_rowids(rowids.tolist())
        grouped: dict[str, list[int]] = {}
        for r in rowids.tolist():
            grouped.setdefault(owner[r], []).append(r)
        rows_of = {d: np.asarray(sorted(r), dtype=np.int64) for d, r in grouped.items()}
        gone = [d for d in doc_ids if d not in rows_of and d in self._ids]
        keys = self._input_keys(store, rows_of)
        stale = [d for d in rows_of if d not in self._ids or self._hashes.get(d) != keys[d][0]]
        vectors = self._embed(store, [keys[d][1] for d in stale], [rows_of[d] for d in stale]) if stale else None
        # drop replaced and deleted documents, then add the new vectors under fresh ids (never reused)
        old = [self._ids[d] for d in (*gone, *stale) if d in self._ids]
        if old and self._index is not None:
            self._index.remove(np.asarray(old, dtype=np.int64))
        for d in gone:
            fid = self._ids.pop(d)
            self._doc_of.pop(fid, None)
            self._passages.pop(fid, None)
            self._hashes.pop(d, None)
        for d in stale:
            if d in self._ids:
                fid = self._ids.pop(d)
                self._doc_of.pop(fid, None)
                self._passages.pop(fid, None)
        if vectors is not None:
            new_ids = np.arange(self._next_id, self._next_id + len(stale), dtype=np.int64)
            self._next_id += len(stale)
            self._ensure_index(int(vectors.shape[1])).add(new_ids, vectors)
            for d, fid in zip(stale, new_ids.tolist(), strict=True):
                self._ids[d] = fid
                self._doc_of[fid] = d
                self._hashes[d] = keys[d][0]
        for d, rows in rows_of.items():
            self._passages[self._ids[d]] = rows

    def _input_keys(self, store: StoreBackend, rows_of: Mapping[str, np.ndarray]) -> dict[str, tuple[str, str]]:
        """Per document: (hash of the representation's input, summary text or "")."""
        out: dict[str, tuple[str, str]] = {}
        if self.representation == "mean":
            for d, rows in rows_of.items():
                out[d] = (hashlib.sha1(rows.tobytes(), usedforsecurity=False).hexdigest(), "")
            return out
        records = store.records(np.concatenate(list(rows_of.values())).tolist() if rows_of else [])
        by_doc: dict[str, list[PassageRecord]] = {}
        for rec in records.values():
            by_doc.setdefault(rec.doc_id, []).append(rec)
        for d in rows_of:
            info = store.get_document(d) or {"title": "", "toc": []}
            recs = sorted(by_doc.get(d, []), key=lambda r: (r.section, r.position))
            lead = [r.text for r in recs if recs and r.section == recs[0].section]
            title = info["title"] or (recs[0].title_path[0] if recs and recs[0].title_path else "")
            text = document_summary(
                title, lead, info["toc"], abstract_words=self.abstract_words, include_toc=self.include_toc
            )
            out[d] = (hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest(), text)
        return out

    def _embed(self, store: StoreBackend, texts: list[str], rows: list[np.ndarray]) -> np.ndarray:
        if self.representation == "summary":
            return self.document_encoder(store).encode_documents(texts)
        counts = np.asarray([len(r) for r in rows])
        vectors = store.vectors(np.concatenate(rows)).astype(np.float32, copy=False)
        sums = np.add.reduceat(vectors, np.concatenate([[0], np.cumsum(counts)[:-1]]), axis=0)
        means = sums / counts[:, None]
        normalize = self.normalize
        if normalize is None:
            norms = np.linalg.norm(vectors, axis=1)
            normalize = bool(np.allclose(norms, 1.0, atol=1e-3))
        if normalize:
            means /= np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(means, dtype=np.float32)

    def _ensure_index(self, dimension: int) -> DenseIndex:
        if self._index is None:
            self._index = DenseIndex(dimension, self.index_config)
            self._dimension = dimension
            self._delta_ok = False  # a new doc.faiss: written whole
        elif dimension != self._dimension:
            raise StoreError(
                f"document vectors are {dimension}-d but the document index holds {self._dimension}-d vectors; "
                "rebuild it (store.add_extension(DocumentIndex(...), replace=True))"
            )
        return self._index

    # ------------------------------------------------------------------------------------------------
    # incremental commits
    # ------------------------------------------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = {
        "doc_ids": ("|u1", 1),
        "doc_ends": ("<i8", 1),
        "doc_fids": ("<i8", 1),
        "hashes": ("|u1", 1),
        "hash_ends": ("<i8", 1),
        "rows": ("<i8", 1),
        "row_ends": ("<i8", 1),
        "next_id": ("<i8", 1),
        "vec_ids": ("<i8", 1),
        "vectors": ("<f4", 2),
        "vec_removed": ("<i8", 1),
    }

    def begin_delta(self, limit: int) -> None:
        """Record the documents synced and the vectors changed by the write batch."""
        self._touched = set()
        self._delta_ok = self._index is not None
        if self._index is not None:
            self._index.journal = Journal(limit)

    def delta(self) -> Delta | None:
        """Per changed document: its id, FAISS id (-1: gone), input hash and passages; the vector change set."""
        index, touched = self._index, self._touched
        if index is None or touched is None or not self._delta_ok or index.journal is None:
            return None
        if not index.journal.complete:
            return None
        vec_ids, vectors, vec_removed = index.journal.arrays(index.dimension)
        docs = sorted(touched)
        fids = np.asarray([self._ids.get(d, -1) for d in docs], dtype=np.int64)
        empty = np.zeros(0, np.int64)
        rows = [self._passages.get(int(f), empty) if f >= 0 else empty for f in fids.tolist()]
        doc_bytes, doc_ends = _strings(docs)
        hash_bytes, hash_ends = _strings([self._hashes.get(d, "") for d in docs])
        arrays = {
            "doc_ids": doc_bytes,
            "doc_ends": doc_ends,
            "doc_fids": fids,
            "hashes": hash_bytes,
            "hash_ends": hash_ends,
            "rows": np.concatenate(rows).astype(np.int64) if rows else empty,
            "row_ends": np.cumsum([r.size for r in rows], dtype=np.int64) if rows else empty,
            "next_id": np.array([self._next_id], np.int64),
            "vec_ids": vec_ids,
            "vectors": vectors,
            "vec_removed": vec_removed,
        }
        return Delta(arrays, len(docs) + int(vec_ids.size + vec_removed.size))

    def end_delta(self) -> None:
        """Stop recording."""
        self._touched = None
        if self._index is not None:
            self._index.journal = None

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay a committed segment on the document index read from the files (all checked first)."""
        index = self._index
        if index is None:
            raise ValueError(f"no {_INDEX_FILE} to apply a change to")
        docs = _unstrings(arrays["doc_ids"], arrays["doc_ends"])
        hashes = _unstrings(arrays["hashes"], arrays["hash_ends"])
        fids, row_ends, rows = arrays["doc_fids"], arrays["row_ends"], arrays["rows"]
        next_id = arrays["next_id"]
        if len(hashes) != len(docs) or fids.shape != (len(docs),) or row_ends.shape != (len(docs),):
            raise ValueError(f"{len(docs)} documents, {len(hashes)} hashes, {fids.size} ids, {row_ends.size} rows")
        if row_ends.size and ((np.diff(row_ends) < 0).any() or row_ends[0] < 0 or int(row_ends[-1]) != rows.size):
            raise ValueError("passage ends do not fit the passages")
        if not row_ends.size and rows.size:
            raise ValueError("passages without documents")
        if next_id.shape != (1,) or int(next_id[0]) < self._next_id or (fids.size and int(fids.max()) >= next_id[0]):
            raise ValueError("document FAISS ids out of range")
        if (fids < -1).any() or len(set(docs)) != len(docs):
            raise ValueError("bad document FAISS ids or repeated documents")
        vectors = arrays["vectors"]
        if vectors.shape != (arrays["vec_ids"].size, index.dimension):
            raise ValueError(f"vectors of shape {vectors.shape} for {arrays['vec_ids'].size} {index.dimension}-d ids")
        index.apply_segment(arrays["vec_ids"], vectors, arrays["vec_removed"])
        starts = np.concatenate([[0], row_ends[:-1]]).astype(np.int64) if row_ends.size else row_ends
        for d, fid, digest, a, b in zip(docs, fids.tolist(), hashes, starts.tolist(), row_ends.tolist(), strict=True):
            old = self._ids.pop(d, None)
            if old is not None:
                self._doc_of.pop(old, None)
                self._passages.pop(old, None)
            self._hashes.pop(d, None)
            if fid < 0:
                continue
            self._ids[d] = fid
            self._doc_of[fid] = d
            if digest:
                self._hashes[d] = digest
            self._passages[fid] = rows[a:b].copy()
        self._next_id = int(next_id[0])
        self._lookup = None

    def delta_size(self) -> int:
        """Documents indexed."""
        return len(self._ids)

    # ------------------------------------------------------------------------------------------------
    # searching
    # ------------------------------------------------------------------------------------------------
    @property
    def shares_encoder(self) -> bool:
        """Whether queries are encoded once for both levels (no distinct document encoder)."""
        return self.representation == "mean" or (self.model is None and self._encoder is None)

    def document_encoder(self, store: StoreBackend) -> DenseEncoder:
        """The encoder of summaries and document-level queries (the store's unless ``model`` was given)."""
        if self._encoder is None and self.model is not None:
            from rag_hier.encoders.dense import DenseEncoder

            device = store.encoder.requested_device if store.encoder is not None else None
            self._encoder = DenseEncoder(self.model, device=device)
        if self._encoder is not None:
            return self._encoder
        if store.encoder is None:
            raise StoreError(
                f"representation='summary' needs an encoder, and the store at {store.location} has none; "
                "pass model= (a document encoder) or use representation='mean'"
            )
        return store.encoder

    def encode_queries(self, store: StoreBackend, queries: Sequence[str]) -> np.ndarray:
        """Document-level query vectors (the store's query vectors when the encoder is shared)."""
        if self.shares_encoder:
            return store.encode_queries(queries)
        return self.document_encoder(store).encode_queries(queries)

    @property
    def dimension(self) -> int | None:
        """Dimension of the document vectors (``None`` before the first one)."""
        return self._dimension

    def __len__(self) -> int:
        return len(self._ids)

    def search(
        self, queries: np.ndarray, k1: int, allowed_docs: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k1`` documents: ``(scores, document FAISS ids)``, ``(n, k1)``, ids ``-1``-padded."""
        q = np.asarray(queries, dtype=np.float32)
        if self._index is None or not self._ids:
            return np.full((q.shape[0], k1), -np.inf, np.float32), np.full((q.shape[0], k1), -1, np.int64)
        return self._index.search(q, k1, allowed_ids=allowed_docs)

    def scores(self, queries: np.ndarray, doc_fids: np.ndarray) -> np.ndarray:
        """Inner products of each query with the given documents, ``(n_queries, n_docs)``."""
        if self._index is None or doc_fids.size == 0:
            return np.zeros((np.asarray(queries).shape[0], doc_fids.size), np.float32)
        return np.asarray(queries, dtype=np.float32) @ self._index.reconstruct(doc_fids).T

    def passages_of(self, doc_fids: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """The passage FAISS ids of documents, and for each the position of its document in ``doc_fids``."""
        empty = np.zeros(0, np.int64)
        parts = [self._passages.get(int(fid), empty) for fid in doc_fids]
        if not parts:
            return empty, empty
        counts = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
        return np.concatenate(parts), np.repeat(np.arange(len(parts), dtype=np.int64), counts)

    def documents_of(self, passage_rowids: np.ndarray) -> np.ndarray:
        """The document FAISS id of each passage FAISS id (``-1`` for passages the index does not know)."""
        if self._lookup is None:
            if self._passages:
                rows = np.concatenate(list(self._passages.values()))
                docs = np.concatenate([np.full(r.shape, d, np.int64) for d, r in self._passages.items()])
                order = np.argsort(rows, kind="stable")
                self._lookup = (rows[order], docs[order])
            else:
                self._lookup = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        rows, docs = self._lookup
        ids = np.asarray(passage_rowids, dtype=np.int64)
        if rows.size == 0:
            return np.full(ids.shape, -1, np.int64)
        pos = np.clip(np.searchsorted(rows, ids), 0, rows.size - 1)
        return np.where(rows[pos] == ids, docs[pos], -1)

    def doc_id(self, fid: int) -> str:
        """The store's document id of a document FAISS id."""
        return self._doc_of[int(fid)]

    def doc_ids(self) -> list[str]:
        """The indexed document ids."""
        return list(self._ids)
