"""Generative retrieval with atomic docids, two ways: tied to the store (Tied-Atomic) and untied (DSI-atomic).

Nguyen & Yates, "Generative Retrieval as Dense Retrieval" (arXiv 2306.11397): a seq2seq model that
"generates" an atomic docid runs one decoding step and scores every docid with its output embedding,
``O = softmax(W_docsᵀ h(q))``. That is a maximum inner product search.

* :class:`TiedAtomicHead` is the generative API over a :class:`~rag_hier.store.HierStore` built with a
  Tied-Atomic model (:mod:`rag_hier.encoders.encdec`): ``W_docs`` *is* the store's matrix of passage
  vectors, each the same encoder-decoder run over the passage text. ``logits`` / ``generate`` rank exactly
  as the store's dense search; adding a document to the store adds its docid.
* :class:`AtomicDocidModel` is what an untied DSI-atomic baseline offers (Tay et al., 2022): logits over its
  docids, ``generate``, ``score``, ``add_docids``, ``save``. Its rows are free parameters learned by training
  (:class:`~rag_hier.training.tied_atomic.DSIAtomicTrainer`); a docid added after training has an untrained row.
  Two models implement it: :class:`~rag_hier.retrieval.dsi_seq2seq.DSIAtomicSeq2SeqModel`, DSI as the paper's
  baseline (docids are new tokens of a seq2seq model's vocabulary), and :class:`DSIAtomicModel`, a free
  ``(n_docids, dim)`` matrix over the Tied-Atomic embedding ``h(x)`` (Eq. 1 of the paper on the very vector
  Tied-Atomic uses). They exist to reproduce the paper's argument, not as recommended retrievers. Both save
  without pickle (safetensors + JSON; ``dsi_atomic.json`` says which model a directory holds).
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from rag_hier.errors import DimensionMismatchError, RagHierError

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders.dense import DenseEncoder
    from rag_hier.store.store import HierStore

logger = logging.getLogger(__name__)

__all__ = [
    "DSI_FORMAT",
    "DSI_META",
    "AtomicDocidModel",
    "DSIAtomicModel",
    "DSIObjective",
    "DocidLevel",
    "TiedAtomicHead",
    "UnknownDocidError",
    "read_dsi_meta",
]

DocidLevel = Literal["passage", "document"]
DSIObjective = Literal["seq2seq", "docid_softmax"]
DSI_FORMAT = "rag-hier-dsi-atomic"
DSI_META = "dsi_atomic.json"
"""The file that says what a DSI-atomic directory holds (format, version, objective, docids)."""
DSI_VERSION = 2
"""Version written; version 1 (no ``objective`` field) is read as ``"docid_softmax"``."""
_DSI_WEIGHTS = "dsi_atomic.safetensors"
_READERS: dict[str, str] = {
    "docid_softmax": "rag_hier.retrieval.generative.DSIAtomicModel.load",
    "seq2seq": "rag_hier.retrieval.dsi_seq2seq.DSIAtomicSeq2SeqModel.load",
}


class UnknownDocidError(RagHierError, KeyError):
    """A docid that the store (or the DSI model) does not hold."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def _top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest logits per row, best first (equal logits: lower index first)."""
    n = logits.shape[1]
    k = min(k, n)
    if k < n:
        cand = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    else:
        cand = np.broadcast_to(np.arange(n, dtype=np.int64), logits.shape)
    vals = np.take_along_axis(logits, cand, axis=1)
    order = np.lexsort((cand, -vals), axis=1)
    return np.take_along_axis(cand, order, axis=1).astype(np.int64)


def _queries(queries: str | Sequence[str]) -> tuple[list[str], bool]:
    if isinstance(queries, str):
        return [queries], True
    return list(queries), False


class TiedAtomicHead:
    """The docid view of a store: logits of a query over every stored passage or document, and ``generate``.

    The output embedding matrix ``W_docs`` is read from the store (its dense index's vectors); nothing is
    copied into a vocabulary. Logits are raw dot products ``W_docs · h(q)`` with ``h(q)`` from the store's
    encoder, so ranking by logits is the store's dense search (exact with a flat index). At the
    ``"document"`` level a document's logit is its best passage's (MaxP, like ``aggregate="doc"``); with one
    passage per document (BEIR corpora indexed whole, the paper's setting) both levels coincide.

    Args:
        store: A store whose passages have dense vectors.
        level: ``"passage"`` (docid = passage id) or ``"document"`` (docid = document id).
        encoder: Encode queries with this encoder instead of the store's; it must be the store's model
            (same name and dimension).

    Raises:
        RagHierError: The store has no encoder (and none is given) or no dense index.
        DimensionMismatchError: ``encoder`` outputs vectors of another dimension than the store's.

    Example:
        >>> head = TiedAtomicHead(HierStore.open("scifact-tied"))  # doctest: +SKIP
        >>> head.generate("what causes tides?", k=3)  # doctest: +SKIP
        ['4983', '1204', '77']

    """

    def __init__(self, store: HierStore, level: DocidLevel = "passage", *, encoder: DenseEncoder | None = None) -> None:
        if level not in ("passage", "document"):
            raise ValueError(f"level must be 'passage' or 'document', got {level!r}")
        self.store = store
        self.level: DocidLevel = level
        recorded = (store.manifest.get("encoder") or {}).get("model")
        if encoder is not None:
            dim = encoder.dimension
            if store.dimension is not None and dim != store.dimension:
                raise DimensionMismatchError(
                    f"model {encoder.model_name!r} outputs {dim}-d vectors; the store at {store.path} holds "
                    f"{store.dimension}-d vectors"
                )
            if recorded is not None and str(recorded) != str(encoder.model_name):
                raise RagHierError(
                    f"the store at {store.path} was built with model {recorded!r}, not {encoder.model_name!r}: "
                    "its docid vectors are that model's"
                )
        elif store.encoder is None:
            raise RagHierError(f"the store at {store.path} has no encoder: pass the model it was built with")
        self._encoder = encoder
        self._cache: tuple[int, tuple[str, ...], np.ndarray, np.ndarray, tuple[str, ...]] | None = None

    # -- the output embedding matrix -------------------------------------------------------------
    def _state(self) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, tuple[str, ...]]:
        generation = self.store.generation
        if self._cache is not None and self._cache[0] == generation:
            return self._cache[1:]
        if self.store.index is None:
            raise RagHierError(f"the store at {self.store.path} has no dense index")
        rowids = np.asarray(self.store.rowids_of(), dtype=np.int64)
        records = self.store.records(rowids.tolist())
        passage_ids = tuple(records[int(r)].passage_id for r in rowids)
        doc_of = tuple(records[int(r)].doc_id for r in rowids)
        weight = np.ascontiguousarray(self.store.vectors(rowids), dtype=np.float32)
        doc_ids = tuple(dict.fromkeys(doc_of))
        position = {d: i for i, d in enumerate(doc_ids)}
        owner = np.fromiter((position[d] for d in doc_of), dtype=np.int64, count=len(doc_of))
        self._cache = (generation, passage_ids, weight, owner, doc_ids)
        return passage_ids, weight, owner, doc_ids

    @property
    def docids(self) -> tuple[str, ...]:
        """The docids, in the order of the logits' columns (passage ids, or document ids by first passage)."""
        passage_ids, _, _, doc_ids = self._state()
        return passage_ids if self.level == "passage" else doc_ids

    @property
    def weight(self) -> np.ndarray:
        """``W_docs``: one row per stored passage vector (float32 ``(n_passages, dim)``), in insertion order."""
        return self._state()[1]

    def __len__(self) -> int:
        return len(self.docids)

    # -- scoring ---------------------------------------------------------------------------------
    def encode_queries(self, queries: str | Sequence[str]) -> np.ndarray:
        """``h(q)``: the decoder states of the queries, float32 ``(n, dim)``."""
        texts, _ = _queries(queries)
        if self._encoder is not None:
            return self._encoder.encode_queries(texts)
        return self.store.encode_queries(texts)

    def logits_from_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """Logits ``(n_queries, len(docids))`` of query vectors over every docid."""
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        _, weight, owner, doc_ids = self._state()
        if q.shape[1] != weight.shape[1] and weight.shape[0]:
            raise DimensionMismatchError(f"query vectors are {q.shape[1]}-d; the store holds {weight.shape[1]}-d")
        passage_logits = q @ weight.T
        if self.level == "passage":
            return passage_logits
        out = np.full((q.shape[0], len(doc_ids)), -np.inf, dtype=np.float32)
        for i in range(q.shape[0]):
            np.maximum.at(out[i], owner, passage_logits[i])
        return out

    def logits(self, queries: str | Sequence[str]) -> np.ndarray:
        """Logits ``(n_queries, len(docids))``: the dot product of each query with every docid's vector."""
        return self.logits_from_vectors(self.encode_queries(queries))

    def probabilities(self, queries: str | Sequence[str]) -> np.ndarray:
        """``softmax`` of :meth:`logits` over all docids (the generative model's docid distribution)."""
        z = self.logits(queries).astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def score(self, queries: str | Sequence[str], docids: Sequence[str]) -> np.ndarray:
        """Logits ``(n_queries, len(docids))`` of the given docids only.

        Raises:
            UnknownDocidError: A docid the store does not hold (at this level).

        """
        columns = self._columns(docids)
        return self.logits(queries)[:, columns]

    def _columns(self, docids: Sequence[str]) -> np.ndarray:
        if isinstance(docids, str):
            raise TypeError("docids must be a sequence of docids, not a single string")
        known = {d: i for i, d in enumerate(self.docids)}
        missing = [d for d in docids if d not in known]
        if missing:
            shown = ", ".join(repr(d) for d in missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise UnknownDocidError(
                f"{len(missing)} docid(s) not held by the store at {self.store.path} ({self.level} level): {shown}"
            )
        return np.asarray([known[d] for d in docids], dtype=np.int64)

    @overload
    def generate(self, queries: str, k: int = 10) -> list[str]: ...  # type: ignore[overload-overlap]
    @overload
    def generate(self, queries: Sequence[str], k: int = 10) -> list[list[str]]: ...
    def generate(self, queries: str | Sequence[str], k: int = 10) -> list[str] | list[list[str]]:
        """The top-``k`` docids (one decoding step, beam = k): a list for one query, a list of lists for several."""
        ranked = self.generate_scored(queries, k)
        docids = [[d for d, _ in row] for row in ranked]
        return docids[0] if isinstance(queries, str) else docids

    def generate_scored(self, queries: str | Sequence[str], k: int = 10) -> list[list[tuple[str, float]]]:
        """``(docid, logit)`` of the top-``k`` docids, per query (always a list of lists)."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        logits = self.logits(queries)
        ids = self.docids
        top = _top_k(logits, k)
        return [[(ids[j], float(logits[i, j])) for j in row] for i, row in enumerate(top)]

    def __repr__(self) -> str:
        return f"TiedAtomicHead(store={str(self.store.path)!r}, level={self.level!r})"


def read_dsi_meta(path: str | Path, objective: DSIObjective) -> dict[str, Any]:
    """Read and check ``dsi_atomic.json`` of a DSI-atomic directory written for ``objective``.

    Checks the format, the version, the objective and the docid list (strings, no repeats, ``num_docids`` of
    them); the caller checks its own fields.

    Raises:
        RagHierError: A missing or unreadable file, or a field with a wrong value (the message names both).

    """
    root = Path(path)
    meta_file = root / DSI_META
    if not meta_file.is_file():
        raise RagHierError(f"{meta_file} is missing: {root} is not a DSI-atomic model directory")
    try:
        meta: Any = json.loads(meta_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RagHierError(f"{meta_file}: not valid JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != DSI_FORMAT:
        raise RagHierError(f"{meta_file}: not a DSI-atomic description (field 'format' must be {DSI_FORMAT!r})")
    version = meta.get("format_version")
    if version not in (1, DSI_VERSION):
        raise RagHierError(
            f"{meta_file}: field 'format_version' is {version!r}; this version reads 1 and {DSI_VERSION}"
        )
    found = meta.get("objective") if version == DSI_VERSION else "docid_softmax"
    if found != objective:
        reader = _READERS.get(str(found))
        hint = f"; load it with {reader}" if reader else f" (known: {', '.join(sorted(_READERS))})"
        raise RagHierError(f"{meta_file}: field 'objective' is {found!r}, not {objective!r}{hint}")
    docids = meta.get("docids")
    if (
        not isinstance(docids, list)
        or not all(isinstance(d, str) for d in docids)
        or len(docids) != meta.get("num_docids")
    ):
        raise RagHierError(f"{meta_file}: field 'docids' must be a list of 'num_docids' strings")
    if len(set(docids)) != len(docids):
        raise RagHierError(f"{meta_file}: field 'docids' repeats a docid")
    return meta


class AtomicDocidModel(ABC):
    """An untied DSI-atomic model: one learned output row per docid; logits over docids, ``generate``, ``score``.

    Subclasses compute :meth:`logits` and own their rows; ranking, scoring and the docid list live here.
    """

    docids: list[str]

    def __len__(self) -> int:
        return len(self.docids)

    @abstractmethod
    def logits(self, queries: str | Sequence[str]) -> np.ndarray:
        """Logits ``(n_queries, len(docids))`` of every docid, one decoding step from the start token."""

    @abstractmethod
    def add_docids(
        self, docids: Sequence[str], *, init: Literal["random", "tied"] = "random", texts: Sequence[str] | None = None
    ) -> None:
        """Append output rows for new docids, without training (``"random"`` or ``"tied"`` to the text)."""

    @abstractmethod
    def save(self, path: str | Path) -> Path:
        """Write the model (safetensors and JSON only)."""

    def _check_new_docids(self, docids: Sequence[str]) -> list[str]:
        new = [str(d) for d in docids]
        clash = set(new) & set(self.docids)
        if clash or len(set(new)) != len(new):
            raise RagHierError(f"docids already present or repeated: {sorted(clash)[:5] or new[:5]!r}")
        return new

    @overload
    def generate(self, queries: str, k: int = 10) -> list[str]: ...  # type: ignore[overload-overlap]
    @overload
    def generate(self, queries: Sequence[str], k: int = 10) -> list[list[str]]: ...
    def generate(self, queries: str | Sequence[str], k: int = 10) -> list[str] | list[list[str]]:
        """The top-``k`` docids: a list for one query, a list of lists for several."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        top = _top_k(self.logits(queries), k)
        out = [[self.docids[j] for j in row] for row in top]
        return out[0] if isinstance(queries, str) else out

    def score(self, queries: str | Sequence[str], docids: Sequence[str]) -> np.ndarray:
        """Logits of the given docids only.

        Raises:
            UnknownDocidError: A docid the model has no row for.

        """
        if isinstance(docids, str):
            raise TypeError("docids must be a sequence of docids, not a single string")
        known = {d: i for i, d in enumerate(self.docids)}
        missing = [d for d in docids if d not in known]
        if missing:
            raise UnknownDocidError(f"{len(missing)} docid(s) without an output row: {missing[:5]!r}")
        return self.logits(queries)[:, [known[d] for d in docids]]


class DSIAtomicModel(AtomicDocidModel):
    """DSI with atomic docids as a softmax head: the Tied-Atomic embedding and one free output row per docid.

    ``logits = W_docs · h(x)`` with ``h`` the :class:`~rag_hier.encoders.encdec.EncoderDecoderEmbedding` vector
    and ``W_docs`` a learned ``(n_docids, dim)`` matrix. Train it with
    :class:`~rag_hier.training.tied_atomic.DSIAtomicTrainer`.

    Args:
        model: The encoder-decoder sentence-transformers model.
        docids: The docids, one per row of ``weight``.
        weight: ``W_docs`` (``(len(docids), dim)``); ``None`` draws rows from ``N(0, init_std²)``.
        init_std: Standard deviation of random rows (here and in :meth:`add_docids`).
        seed: Seed of the random rows.

    """

    def __init__(
        self,
        model: SentenceTransformer,
        docids: Sequence[str],
        weight: torch.Tensor | np.ndarray | None = None,
        *,
        init_std: float = 0.02,
        seed: int = 0,
    ) -> None:
        import torch

        ids = [str(d) for d in docids]
        if len(set(ids)) != len(ids):
            dup = next(d for d in ids if ids.count(d) > 1)
            raise RagHierError(f"docid {dup!r} appears twice")
        self.model = model
        self.docids: list[str] = ids
        self.init_std = float(init_std)
        self._generator = torch.Generator().manual_seed(seed)
        dim = self.dimension
        if weight is None:
            w = torch.randn((len(ids), dim), generator=self._generator) * self.init_std
        else:
            w = torch.as_tensor(np.asarray(weight, dtype=np.float32) if isinstance(weight, np.ndarray) else weight)
            w = w.detach().to(torch.float32).cpu()
        if tuple(w.shape) != (len(ids), dim):
            raise DimensionMismatchError(f"weight has shape {tuple(w.shape)}; expected ({len(ids)}, {dim})")
        self.weight = torch.nn.Parameter(w.clone())

    @property
    def dimension(self) -> int:
        """The model's output dimension."""
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = getter()
        if dim is None:  # pragma: no cover - exotic models
            raise RagHierError("the model does not report its embedding dimension")
        return int(dim)

    def encode(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """``h(x)`` for texts (float32 ``(n, dim)``)."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        if not texts:
            return np.zeros((0, self.dimension), np.float32)
        emb = self.model.encode(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def logits(self, queries: str | Sequence[str]) -> np.ndarray:
        """Logits ``(n_queries, len(docids))``."""
        texts, _ = _queries(queries)
        return self.encode(texts) @ self.weight.detach().cpu().numpy().T

    def add_docids(
        self, docids: Sequence[str], *, init: Literal["random", "tied"] = "random", texts: Sequence[str] | None = None
    ) -> None:
        """Append output rows for new docids, without training.

        Args:
            docids: New docids (none may exist already).
            init: ``"random"``: new atomic tokens as DSI adds them (``N(0, init_std²)``, so the model cannot
                retrieve them until it is trained again); ``"tied"``: the row is ``h(text)``, Tied-Atomic's
                row, computed from ``texts``.
            texts: The documents' texts (for ``init="tied"``).

        """
        import torch

        new = self._check_new_docids(docids)
        if init == "random":
            rows = torch.randn((len(new), self.dimension), generator=self._generator) * self.init_std
        elif init == "tied":
            if texts is None or len(texts) != len(new):
                raise ValueError("init='tied' needs one text per new docid")
            rows = torch.from_numpy(self.encode(list(texts)))
        else:
            raise ValueError(f"init must be 'random' or 'tied', got {init!r}")
        self.weight = torch.nn.Parameter(torch.cat([self.weight.detach().cpu(), rows.to(torch.float32)], dim=0))
        self.docids.extend(new)

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write a sentence-transformers directory plus ``dsi_atomic.safetensors`` and ``dsi_atomic.json``."""
        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save(str(out))
        save_file({"weight": self.weight.detach().cpu().contiguous()}, str(out / _DSI_WEIGHTS))
        meta = {
            "format": DSI_FORMAT,
            "format_version": DSI_VERSION,
            "objective": "docid_softmax",
            "dimension": self.dimension,
            "num_docids": len(self.docids),
            "init_std": self.init_std,
            "docids": self.docids,
        }
        (out / DSI_META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return out

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None) -> DSIAtomicModel:
        """Load what :meth:`save` wrote (safetensors and JSON only).

        Raises:
            RagHierError: A missing or inconsistent file (the message names it).

        """
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from rag_hier.encoders.encdec import encoder_decoder_sentence_transformer

        root = Path(path)
        meta_file, weight_file = root / DSI_META, root / _DSI_WEIGHTS
        meta = read_dsi_meta(root, "docid_softmax")
        docids = meta["docids"]
        if not weight_file.is_file():
            raise RagHierError(f"{weight_file} is missing: {root} is not a DSI-atomic model directory")
        try:
            tensors = load_file(str(weight_file))
        except (SafetensorError, OSError) as exc:
            raise RagHierError(f"{weight_file}: not a readable safetensors file ({exc})") from exc
        if "weight" not in tensors:
            raise RagHierError(f"{weight_file}: no 'weight' tensor")
        weight = tensors["weight"]
        if tuple(weight.shape) != (len(docids), meta.get("dimension")):
            raise RagHierError(
                f"{weight_file}: weight has shape {tuple(weight.shape)}, but {meta_file} describes "
                f"({len(docids)}, {meta.get('dimension')})"
            )
        model = encoder_decoder_sentence_transformer(str(root), device=device)
        return cls(model, docids, weight, init_std=float(meta.get("init_std", 0.02)))

    def __repr__(self) -> str:
        return f"DSIAtomicModel(docids={len(self.docids)}, dim={self.dimension})"
