"""SvdrRetriever: SVDR's search modes over a store — full, α, β, β+rerank — plus plain token search.

SVDR (Zhou, Dong, Wei, Chen, "Semi-Parametric Retrieval via Binary Token Index", arXiv 2405.01924)
scores a query q against a passage d in the vocabulary space with either side parametric (E, a
:class:`~rag_hier.encoders.vocab.VocabEncoder`) or non-parametric (T, the binary bag of tokens):

====================  =====================  =======================================================
mode                  score                  needs
====================  =====================  =======================================================
``"full"``            ⟨E(q), E(d)⟩           every passage's E(d) (``svdr-vectors`` extension)
``"alpha"``           ⟨T(q), E(d)⟩           every E(d); no query encoding
``"beta"``            ⟨E(q), T(d)⟩           the token index (``token-index``); no passage encoding
``"beta-rerank"``     β, then the top ``m``  the token index; E(d) of the top m, encoded on the fly
                      by ⟨E(q), E(d)⟩        and cached in the store
``"lexical"``         ⟨idf·T(q), T(d)⟩       the token index only (no model at all)
====================  =====================  =======================================================

β+rerank caches every E(d) it computes: into the store's ``svdr-vectors`` extension (a commit per
:meth:`SvdrRetriever.search` call, per 2,048 new vectors) when the store is writable and ``cache=True``,
in this retriever's memory otherwise (:meth:`SvdrRetriever.take_unsaved` hands those over, which is how
``rag-hier search`` persists them from its read-only handle), so the full representation fills in as
queries arrive. On a backend that keeps E(d) in its engine (Milvus: a sparse vector field), a search never
writes: the vectors it computes stay in this retriever's memory for the store's committed generation (and in
:meth:`~SvdrRetriever.take_unsaved`); full and α are one sparse search in the engine (plus the few rows in
memory), and β+rerank reads only the E(d) rows of its m candidates from the engine. Cached and freshly
computed vectors are the same up to float rounding (pooling ignores padding), so results do not depend on
the cache. Hits below the re-ranked top m keep their β order, with scores shifted just below the lowest
re-ranked score; ``Hit.scores`` holds the raw ``beta`` and ``rerank`` scores.

Example:
    >>> retriever = SvdrRetriever(store, mode="beta-rerank", rerank_m=100)  # doctest: +SKIP
    >>> retriever.search("what pulls the tides?", top_k=5)  # doctest: +SKIP

"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.encoders.dense import DEFAULT_MODEL
from rag_hier.errors import StoreError
from rag_hier.index.sparse import SearchMethod, SparseRowIndex
from rag_hier.retrieval.base import Aggregate, Queries, Ranking, Retriever
from rag_hier.retrieval.params import SVDR_MODES, SvdrMode, SvdrParams
from rag_hier.store.candidates import (
    complete_with_zeros,
    idf_weighted_queries,
    search_sparse_rows,
    sparse_rowids,
    sparse_rows_engine,
    sparse_rows_kept_in_engine,
)
from rag_hier.store.contract import EngineExtensions, Filters
from rag_hier.store.extensions.svdr_vectors import SparseVectorExtension
from rag_hier.store.extensions.token_index import TokenIndexExtension, passage_texts

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

if TYPE_CHECKING:
    from rag_hier.encoders.binarizer import TokenBinarizer
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.retrieval.hit import Hit
    from rag_hier.store.contract import StoreBackend

logger = logging.getLogger(__name__)

__all__ = [
    "SVDR_MODES",
    "SvdrMode",
    "SvdrParams",
    "SvdrRetriever",
    "default_vocab_model",
    "encode_missing_vectors",
    "save_vectors",
]


def default_vocab_model(store: StoreBackend) -> str:
    """The vocabulary encoder a store implies: its dense model, else its token index's, else the default."""
    if store.encoder is not None:
        return store.encoder.model_name
    tok = store.extension(TokenIndexExtension.name)
    if isinstance(tok, TokenIndexExtension):
        return tok.model
    vec = store.extension(SparseVectorExtension.name)
    if isinstance(vec, SparseVectorExtension) and vec.model:
        return vec.model
    return DEFAULT_MODEL


def save_vectors(store: StoreBackend, encoder: VocabEncoder, ids: np.ndarray, rows: sp.csr_matrix) -> int:
    """Add E(d) rows to the store's ``svdr-vectors`` extension (created if absent) and commit.

    Rows of passages no longer in the store are dropped. If the extension holds vectors of another
    encoder (different fingerprint), nothing is written and 0 is returned. Returns the rows written.
    """
    fingerprint = encoder.fingerprint
    ext = store.extension(SparseVectorExtension.name)
    if isinstance(ext, SparseVectorExtension) and ext.fingerprint != fingerprint:
        logger.warning(
            "%s holds SVDR vectors of another encoder (%s); not caching vectors of %s",
            store.location,
            ext.model,
            encoder.model_name,
        )
        return 0
    id_arr = np.asarray(ids, dtype=np.int64)
    live = np.isin(id_arr, store.passage_rowids())
    id_arr, mat = id_arr[live], sp.csr_matrix(rows)[np.flatnonzero(live)]
    with store.batch():
        ext = store.extension(SparseVectorExtension.name)
        if ext is None:
            ext = SparseVectorExtension(
                model=encoder.model_name, fingerprint=fingerprint, vocab_size=encoder.vocab_size
            )
            ext.index.add(id_arr, mat)
            store.add_extension(ext)
        else:
            assert isinstance(ext, SparseVectorExtension)
            ext.index.add(id_arr, mat)
            store.mark_extension_dirty(ext.name)
    return int(id_arr.shape[0])


def encode_missing_vectors(
    store: StoreBackend,
    encoder: VocabEncoder,
    *,
    batch_passages: int = 2048,
    show_progress_bar: bool = False,
) -> int:
    """Encode E(d) of every passage that lacks one and store them (full and α search need them all).

    Commits every ``batch_passages`` passages, so an interrupted run keeps what it finished.
    Returns how many passages were encoded.
    """
    ext = store.extension(SparseVectorExtension.name)
    have = np.zeros(0, dtype=np.int64)
    if isinstance(ext, SparseVectorExtension):
        if ext.fingerprint != encoder.fingerprint:
            raise StoreError(
                f"{store.location} holds SVDR vectors of another encoder ({ext.model}); remove the "
                f"'{SparseVectorExtension.name}' extension first to encode with {encoder.model_name}"
            )
        have = sparse_rowids(store, ext)
    missing = np.setdiff1d(store.passage_rowids(), have)
    done = 0
    for start in range(0, missing.shape[0], batch_passages):
        part = missing[start : start + batch_passages]
        rows = encoder.encode_documents(passage_texts(store, part), show_progress_bar=show_progress_bar)
        done += save_vectors(store, encoder, part, rows)
    return done


class SvdrRetriever(Retriever["sp.csr_matrix"]):  # a string: SciPy loads on first use
    """SVDR retrieval over a :class:`~rag_hier.store.HierStore` (see the module docstring for the modes).

    Args:
        store: The store; β, β+rerank and lexical need its ``token-index`` extension.
        mode: ``"full"``, ``"alpha"``, ``"beta"``, ``"beta-rerank"`` or ``"lexical"`` (or give it in ``params``).
        params: :class:`SvdrParams` (or a mapping): ``rerank_m`` (default 100, the paper's setting), ``vocab_model``,
            ``cache`` (keep the E(d) computed by β+rerank, and by full/α filling in missing ones, in the store when
            it is writable; always in memory), ``encode_missing`` (full and α: encode missing E(d), else raise),
            ``method`` (``"auto"``, ``"matmul"``, ``"inverted"``; same results).
        encoder: A ready :class:`VocabEncoder` (else ``vocab_model``, else the store's model:
            :func:`default_vocab_model`). Loaded only when the mode needs it.

    """

    name = "svdr"
    Params = SvdrParams
    params: SvdrParams
    over_vectors = False

    def __init__(
        self,
        store: StoreBackend,
        mode: SvdrMode | None = None,
        params: SvdrParams | Mapping[str, Any] | None = None,
        *,
        encoder: VocabEncoder | str | None = None,
        **kwargs: Any,
    ) -> None:
        if mode is not None:
            kwargs["mode"] = mode
        if isinstance(encoder, str):
            kwargs["vocab_model"] = encoder
            encoder = None
        super().__init__(store, params, **kwargs)
        self.mode: SvdrMode = self.params.mode
        self.rerank_m = self.params.rerank_m
        self.cache = self.params.cache
        self.encode_missing = self.params.encode_missing
        self.method: SearchMethod = self.params.method
        self._encoder_arg: VocabEncoder | str | None = encoder if encoder is not None else self.params.vocab_model
        self._encoder: VocabEncoder | None = None
        self._memory: dict[str, SparseRowIndex] = {}
        self._engine_memory: dict[str, tuple[int, SparseRowIndex]] = {}
        """Engine-kept E(d): vectors this retriever computed, by fingerprint, for one committed generation."""
        self.unsaved: dict[str, tuple[list[np.ndarray], list[sp.csr_matrix]]] = {}
        """Vectors computed but not written to the store (read-only store or ``cache=False``), by fingerprint."""

    # -- components ---------------------------------------------------------------------------------
    @property
    def encoder(self) -> VocabEncoder:
        """The vocabulary encoder (created on first use)."""
        if self._encoder is None:
            from rag_hier.encoders.vocab import VocabEncoder

            arg = self._encoder_arg
            self._encoder = (
                arg if isinstance(arg, VocabEncoder) else VocabEncoder(arg or default_vocab_model(self.store))
            )
        return self._encoder

    def _token_index(self) -> TokenIndexExtension:
        return TokenIndexExtension.of(self.store)

    def _check_vocabulary(self, tok: TokenIndexExtension) -> None:
        if self.encoder.binarizer.fingerprint != tok.index.fingerprint:
            raise StoreError(
                f"the vocabulary encoder {self.encoder.model_name!r} tokenizes differently from the store's "
                f"token index (built with {tok.model!r}); use a model with the same tokenizer"
            )

    def _store_vectors(self) -> SparseVectorExtension | None:
        ext = self.store.extension(SparseVectorExtension.name)
        return ext if isinstance(ext, SparseVectorExtension) else None

    def _binarizer(self) -> TokenBinarizer:
        if self._encoder is not None or self._encoder_arg is not None:
            return self.encoder.binarizer
        tok = self.store.extension(TokenIndexExtension.name)
        if isinstance(tok, TokenIndexExtension):
            return tok.index.binarizer
        return self.encoder.binarizer

    def read_block(self) -> contextlib.AbstractContextManager[Any]:
        """No one-generation block while E(d) computed during the search may be written to the store."""
        if (
            self.mode in ("full", "alpha", "beta-rerank")
            and self.cache
            and not self.store.read_only
            and not self._engine_backend()
        ):
            return contextlib.nullcontext()
        return super().read_block()

    # -- E(d) vectors kept in the store's engine (Milvus' sparse field) ------------------------------
    def _engine_backend(self) -> bool:
        """Whether the store keeps (or would keep, once attached) ``svdr-vectors`` in its engine.

        Such a store is never written by a search: a commit there costs seconds, bumps the generation every
        reader re-syncs to, and Milvus does not arbitrate two writers (a searching process would race the
        indexing one). The vectors computed stay in memory (see :meth:`_engine_rows`).
        """
        ext = self._store_vectors()
        return sparse_rows_kept_in_engine(self.store, SparseVectorExtension.name, attached=ext is not None)

    def _engine(self, fingerprint: str) -> EngineExtensions | None:
        """The store, when it keeps E(d) of this encoder in its engine (else ``None``: the client-side path)."""
        ext = self._store_vectors()
        if ext is None or ext.fingerprint != fingerprint or fingerprint in self._memory:
            return None
        return sparse_rows_engine(self.store, ext.name)

    def _engine_rows(self, fingerprint: str) -> SparseRowIndex:
        """E(d) this retriever computed that the engine lacks, for the store's committed generation."""
        gen = int(self.store.generation)
        held = self._engine_memory.get(fingerprint)
        if held is None or held[0] != gen:  # a commit may have stored or removed them: start again
            held = (gen, SparseRowIndex(self.encoder.vocab_size, binary=False))
            self._engine_memory[fingerprint] = held
        return held[1]

    def _engine_missing(self, engine: EngineExtensions, fingerprint: str, wanted: np.ndarray) -> np.ndarray:
        """The rowids of ``wanted`` with E(d) neither in the engine nor in memory."""
        name = SparseVectorExtension.name
        out = wanted[~np.isin(wanted, engine.sparse_rowids(name))]
        return out[~self._engine_rows(fingerprint).contains(out)] if out.size else out

    def _encode_into_memory(self, fingerprint: str, missing: np.ndarray) -> None:
        for start in range(0, missing.size, 2048):
            part = missing[start : start + 2048]
            self._remember(fingerprint, part, self.encoder.encode_documents(passage_texts(self.store, part)))

    def _engine_search(
        self, engine: EngineExtensions, q: sp.csr_matrix, k: int, allowed: np.ndarray | None, fingerprint: str | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Full / α over engine-kept E(d): one sparse search in the engine, merged with the rows in memory."""
        scores, ids = engine.search_sparse(SparseVectorExtension.name, q, k, allowed)
        mem = self._engine_rows(fingerprint) if fingerprint is not None else None
        if mem is not None and len(mem):
            m_scores, m_ids = mem.search(q, k, allowed_ids=allowed, method=self.method)
            for r in range(ids.shape[0]):
                keep = (ids[r] >= 0) & np.isfinite(scores[r])
                mk = (m_ids[r] >= 0) & (m_scores[r] > 0)  # score 0: left to the padding, in rowid order
                all_ids = np.concatenate([ids[r][keep], m_ids[r][mk]])
                all_s = np.concatenate([scores[r][keep], m_scores[r][mk]])
                all_ids, first = np.unique(all_ids, return_index=True)
                all_s = all_s[first]
                order = np.lexsort((all_ids, -all_s))[:k]
                ids[r], scores[r] = -1, -np.inf
                ids[r, : order.size], scores[r, : order.size] = all_ids[order], all_s[order]
        return complete_with_zeros(self.store, scores, ids, allowed)

    def _engine_vectors_of(self, engine: EngineExtensions, fingerprint: str, rowids: np.ndarray) -> SparseRowIndex:
        """E(d) of ``rowids``: their rows read from the engine by rowid, plus memory; missing ones encoded."""
        mem = self._engine_rows(fingerprint)
        ask = rowids[~mem.contains(rowids)] if rowids.size else rowids
        found, rows = engine.sparse_rows_of(SparseVectorExtension.name, ask, self.encoder.vocab_size)
        missing = ask[~np.isin(ask, found)]
        if missing.size and self.mode in ("full", "alpha") and not self.encode_missing:
            raise StoreError(
                f"{self.mode} search needs E(d) of every passage; {missing.size} of {rowids.size} are missing "
                f"in {self.store.location} (encode them with `rag-hier index ... --svdr-vectors` or "
                "encode_missing_vectors(), or pass encode_missing=True)"
            )
        self._encode_into_memory(fingerprint, missing)
        mem = self._engine_rows(fingerprint)
        index = SparseRowIndex(self.encoder.vocab_size, binary=False)
        index.add(found, rows)
        have = rowids[mem.contains(rowids)] if rowids.size else rowids
        if have.size:
            index.add(have, mem.rows(have))
        return index

    # -- E(d) vectors: the store's extension, or a private in-memory copy -----------------------------
    def _persisting(self, fingerprint: str) -> bool:
        """Whether new vectors of this encoder go to the store.

        Only when it is writable, caching, holds no other encoder's and does not keep them in an engine
        (:meth:`_engine_backend`).
        """
        ext = self._store_vectors()
        return (
            fingerprint not in self._memory
            and self.cache
            and not self.store.read_only
            and (ext is None or ext.fingerprint == fingerprint)
            and not self._engine_backend()
        )

    def _memory_index(self, fingerprint: str) -> SparseRowIndex:
        """The retriever's own vectors of the encoder, starting from the store's when they match."""
        if fingerprint not in self._memory:
            mem = SparseRowIndex(self.encoder.vocab_size, binary=False)
            ext = self._store_vectors()
            if ext is not None and ext.fingerprint == fingerprint:
                ids, rows = ext.index.matrix()
                mem.add(ids, rows)
            elif ext is not None:
                logger.warning(
                    "%s holds SVDR vectors of another encoder (%s); %s keeps its own in memory",
                    self.store.location,
                    ext.model,
                    self.encoder.model_name,
                )
            self._memory[fingerprint] = mem
        return self._memory[fingerprint]

    def _index_for(self, fingerprint: str) -> SparseRowIndex:
        if fingerprint in self._memory:
            return self._memory[fingerprint]
        ext = self._store_vectors()
        if ext is not None and ext.fingerprint == fingerprint:
            return ext.index
        if self._persisting(fingerprint):
            return SparseRowIndex(self.encoder.vocab_size, binary=False)  # empty until the first save
        return self._memory_index(fingerprint)

    def _remember(self, fingerprint: str, ids: np.ndarray, rows: sp.csr_matrix) -> None:
        """Keep new E(d) rows: in the store when possible, else in memory (and in :attr:`unsaved`)."""
        if ids.size == 0:
            return
        if self._persisting(fingerprint):
            try:
                if save_vectors(self.store, self.encoder, ids, rows):
                    return
            except StoreError as exc:
                logger.warning("could not cache SVDR vectors in %s: %s", self.store.location, exc)
        if self._engine(fingerprint) is not None:
            self._engine_rows(fingerprint).add(ids, rows)
        else:
            self._memory_index(fingerprint).add(ids, rows)
        pending = self.unsaved.setdefault(fingerprint, ([], []))
        pending[0].append(np.asarray(ids, dtype=np.int64))
        pending[1].append(sp.csr_matrix(rows))

    def take_unsaved(self) -> tuple[np.ndarray, sp.csr_matrix] | None:
        """Vectors of the current encoder computed but not stored (then forgotten here); ``None`` if none."""
        if self._encoder is None:
            return None
        ids, rows = self.unsaved.pop(self.encoder.fingerprint, ([], []))
        if not ids:
            return None
        return np.concatenate(ids), sp.csr_matrix(sp.vstack(rows, format="csr"))

    def _vectors_of(self, rowids: np.ndarray) -> SparseRowIndex:
        """An index holding E(d) of every rowid (missing ones encoded and remembered)."""
        fp = self.encoder.fingerprint
        engine = self._engine(fp)
        if engine is not None:
            return self._engine_vectors_of(engine, fp, rowids)
        index = self._index_for(fp)
        missing = rowids[~index.contains(rowids)]
        if missing.size:
            if self.mode in ("full", "alpha") and not self.encode_missing:
                raise StoreError(
                    f"{self.mode} search needs E(d) of every passage; {missing.size} of {rowids.size} are missing "
                    f"in {self.store.location} (encode them with `rag-hier index ... --svdr-vectors` or "
                    "encode_missing_vectors(), or pass encode_missing=True)"
                )
            if self.mode in ("full", "alpha"):
                logger.info("encoding E(d) of %d passages for %s search", missing.size, self.mode)
            for start in range(0, missing.size, 2048):
                part = missing[start : start + 2048]
                self._remember(fp, part, self.encoder.encode_documents(passage_texts(self.store, part)))
            index = self._index_for(fp)
        return index

    def _complete_vectors(self, allowed: np.ndarray | None) -> SparseRowIndex:
        """E(d) of every (allowed) passage, for full and α search."""
        wanted = self.store.passage_rowids() if allowed is None else allowed
        ext = self._store_vectors()
        model_free = self.mode == "alpha" and self._encoder is None and self._encoder_arg is None
        if model_free and ext is not None and ext.index.contains(wanted).all():
            return ext.index  # α with complete vectors: no model needed
        return self._vectors_of(wanted)

    def _engine_full_search(
        self, q: sp.csr_matrix, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Full / α as one sparse search in the engine when it keeps E(d) (``None``: the client-side path)."""
        ext = self._store_vectors()
        if ext is None:
            return None
        model_free = self.mode == "alpha" and self._encoder is None and self._encoder_arg is None
        wanted = (
            np.asarray(self.store.passage_rowids(), np.int64)
            if allowed is None
            else np.unique(np.asarray(allowed, np.int64))
        )
        if model_free:  # α with complete vectors: no model needed (as on the local store)
            engine = sparse_rows_engine(self.store, ext.name)
            if engine is None:
                return None
            if np.isin(wanted, engine.sparse_rowids(ext.name)).all():
                return self._engine_search(engine, q, k, allowed, None)
        fp = self.encoder.fingerprint
        engine = self._engine(fp)
        if engine is None:
            return None
        missing = self._engine_missing(engine, fp, wanted)
        if missing.size:
            if not self.encode_missing:
                raise StoreError(
                    f"{self.mode} search needs E(d) of every passage; {missing.size} of {wanted.size} are missing "
                    f"in {self.store.location} (encode them with `rag-hier index ... --svdr-vectors` or "
                    "encode_missing_vectors(), or pass encode_missing=True)"
                )
            logger.info("encoding E(d) of %d passages for %s search (kept in memory)", missing.size, self.mode)
            self._encode_into_memory(fp, missing)
        return self._engine_search(engine, q, k, allowed, fp)

    def warm_up(self) -> None:
        """Load the token index's tokenizer and the vocabulary encoder, as far as this mode uses them."""
        if self.mode in ("beta", "beta-rerank", "lexical"):
            self._token_index().index.binarizer  # noqa: B018 - loads the tokenizer
        if self.mode in ("full", "beta", "beta-rerank") or (self.mode == "alpha" and self._encoder_arg is not None):
            self.encoder.module  # noqa: B018 - loads the model

    # -- search -------------------------------------------------------------------------------------
    @property
    def uses_query_vectors(self) -> bool:
        """SVDR searches with the query text (vocabulary-space vectors), never dense query vectors."""
        return False

    def query_vectors(self, queries: Sequence[str]) -> sp.csr_matrix:
        """The query side this mode uses: E(q), T(q) (α) or idf-weighted T(q) (lexical)."""
        if self.mode == "lexical":
            return idf_weighted_queries(self.store, self._token_index(), queries)
        if self.mode == "alpha":
            return self._binarizer().transform(queries, max_length=self._query_length())
        return self.encoder.encode_queries(queries)

    def _query_length(self) -> int:
        if self._encoder is not None or self._encoder_arg is not None:
            return self.encoder.config.query_max_length
        from rag_hier.encoders.vocab import VocabEncoderConfig

        return VocabEncoderConfig().query_max_length

    def prepare(self, queries: Queries) -> sp.csr_matrix:
        """Vocabulary-space query vectors of the query texts (:meth:`query_vectors`)."""
        if queries.texts is None:
            raise ValueError(f"SVDR {self.mode} search needs the query text")
        for text in queries.texts:
            if not text.strip():
                raise ValueError("SVDR search needs a non-empty query text")
        return self.query_vectors(list(queries.texts))

    def select(self, queries: sp.csr_matrix, rows: Sequence[int]) -> sp.csr_matrix:
        """The query rows at ``rows``."""
        return queries[list(rows)]

    def search_vectors(
        self,
        vectors: sp.spmatrix | sp.sparray | np.ndarray,
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
    ) -> list[list[Hit]]:
        """Search with ready vocabulary-space query vectors ``(n, vocab_size)`` (:meth:`query_vectors` gives them)."""
        q = sp.csr_matrix(vectors, dtype=np.float32)
        if q.shape[0] == 0:
            return []
        return [r.hits for r in self.run_prepared(q, q.shape[0], top_k, filters, aggregate)]

    def rank(
        self, queries: sp.csr_matrix, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """The top ``k`` passages in this mode."""
        q = sp.csr_matrix(queries, dtype=np.float32)
        mode = self.mode
        if mode in ("beta", "lexical", "beta-rerank"):
            tok = self._token_index()
            if mode != "lexical":
                self._check_vocabulary(tok)
            depth = max(k, self.rerank_m) if mode == "beta-rerank" else k
            scores, ids = search_sparse_rows(  # ⟨q, T(d)⟩: one sparse search in the engine when it keeps T(d)
                self.store,
                tok.name,
                depth,
                allowed,
                queries=lambda: q,
                here=lambda: tok.index.search(q, depth, allowed_ids=allowed, method=self.method),
                zero_padded=True,
            )
            if mode == "beta-rerank":
                return self._rerank(q, scores, ids, k)
            name = "beta" if mode == "beta" else "lexical"
        else:
            engine_scored = self._engine_full_search(q, k, allowed)
            if engine_scored is not None:
                scores, ids = engine_scored
            else:
                index = self._complete_vectors(allowed)
                scores, ids = index.search(q, k, allowed_ids=allowed, method=self.method)
            name = mode
        out = []
        for srow, irow in zip(scores, ids, strict=True):
            keep = irow >= 0
            s64 = srow[keep].astype(np.float64)
            out.append(Ranking(irow[keep], s64, components={name: s64}))
        return out

    def _rerank(self, q: sp.csr_matrix, scores: np.ndarray, ids: np.ndarray, k: int) -> list[Ranking]:
        m = self.rerank_m
        heads = [irow[:m][irow[:m] >= 0] for irow in ids]
        needed = np.unique(np.concatenate(heads)) if heads else np.zeros(0, dtype=np.int64)
        index = self._vectors_of(needed)
        out: list[Ranking] = []
        for r, head in enumerate(heads):
            rer = index.score(q[r], head)[0].astype(np.float64) if head.size else np.zeros(0)
            beta = scores[r, : head.size].astype(np.float64)
            tail_ids, tail_scores = ids[r, m:], scores[r, m:].astype(np.float64)
            keep = tail_ids >= 0
            tail_ids, tail_scores = tail_ids[keep], tail_scores[keep]
            shifted = tail_scores
            if tail_ids.size and head.size:
                # below every re-ranked hit, in β order
                shifted = tail_scores + (float(rer.min()) - float(tail_scores[0]) - 1e-3)
            rows = np.concatenate([head, tail_ids]).astype(np.int64)
            nan = np.full(tail_ids.size, np.nan)
            out.append(
                Ranking(
                    rows,
                    np.concatenate([rer, shifted]),
                    components={"beta": np.concatenate([beta, tail_scores]), "rerank": np.concatenate([rer, nan])},
                )
            )
        return out
