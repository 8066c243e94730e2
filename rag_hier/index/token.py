"""TokenIndex: SVDR's binary token index T(D), built by tokenization alone.

The index holds one 0/1 row per passage over the tokenizer's vocabulary (``1`` when the token occurs in
the passage's :attr:`~rag_hier.corpus.model.Passage.embedding_text`, truncated like the encoder's input).
Building it needs a tokenizer and nothing else: no model, no GPU. It answers

- β search ⟨E(q), T(D)⟩ with learned sparse query vectors from a
  :class:`~rag_hier.encoders.vocab.VocabEncoder` (:meth:`TokenIndex.search`), and
- plain lexical search with no model at all (:meth:`TokenIndex.search_text`: idf-weighted token overlap).

In a store, the ``token-index`` extension (:class:`~rag_hier.store.extensions.token_index.TokenIndexExtension`,
file ``tokens.npz``) keeps it in sync with every write: added passages are tokenized, removed ones masked,
and the file is compacted and rewritten in the store's atomic commit.

Example:
    >>> from rag_hier import HierStore
    >>> store = HierStore.create("my-store", model=None)  # doctest: +SKIP
    >>> store.add_extension(TokenIndexExtension())  # doctest: +SKIP
    >>> store.add_documents(docs, encode=False)  # doctest: +SKIP
    >>> TokenIndexExtension.of(store).index.search_text(["how do tides work?"], top_k=5)  # doctest: +SKIP

"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.encoders.binarizer import TokenBinarizer
from rag_hier.encoders.dense import DEFAULT_MODEL
from rag_hier.errors import StoreCorruptedError
from rag_hier.index.sparse import SearchMethod, SparseRowIndex

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

logger = logging.getLogger(__name__)

__all__ = ["LexicalWeighting", "TokenIndex"]

LexicalWeighting = Literal["idf", "binary"]


class TokenIndex:
    """The binary token index T(D): passages as sets of vocabulary tokens, keyed by store rowids.

    Args:
        tokenizer: A :class:`TokenBinarizer`, or a model name/path whose tokenizer to use (default: the
            offline all-MiniLM-L6-v2, i.e. BERT uncased WordPiece).
        max_length: Tokens per passage, special tokens included, as the encoder truncates
            (``None``: every token). Ignored when ``tokenizer`` is a ready binarizer.

    Example:
        >>> index = TokenIndex()  # doctest: +SKIP
        >>> index.add_texts([1, 2], ["tides and the moon", "bees make honey"])  # doctest: +SKIP
        >>> index.search_text(["honey bees"], top_k=1)[1]  # doctest: +SKIP
        array([[2]])

    """

    def __init__(
        self,
        tokenizer: TokenBinarizer | str = DEFAULT_MODEL,
        *,
        max_length: int | None = 256,
        fingerprint: str = "",
    ) -> None:
        self._binarizer = tokenizer if isinstance(tokenizer, TokenBinarizer) else None
        self.source = tokenizer.source if isinstance(tokenizer, TokenBinarizer) else str(tokenizer)
        self.max_length = tokenizer.max_length if isinstance(tokenizer, TokenBinarizer) else max_length
        self._expected_fingerprint = fingerprint
        self._rows: SparseRowIndex | None = None
        if self._binarizer is not None:
            self._check_tokenizer(self._binarizer)

    def _check_tokenizer(self, binarizer: TokenBinarizer) -> None:
        fp = binarizer.fingerprint
        if self._expected_fingerprint and fp != self._expected_fingerprint:
            raise StoreCorruptedError(
                f"the token index was built with another tokenizer than {self.source!r} loads now "
                f"(fingerprint {self._expected_fingerprint[:12]}…, now {fp[:12]}…); rebuild it"
            )
        if self._rows is not None and self._rows.vocab_size != binarizer.vocab_size:
            raise StoreCorruptedError(
                f"the token index has {self._rows.vocab_size} columns; the tokenizer of {self.source!r} has "
                f"{binarizer.vocab_size} tokens"
            )
        self._expected_fingerprint = fp

    @property
    def binarizer(self) -> TokenBinarizer:
        """The tokenizer side (loaded on first use: searching with ready query vectors never needs it)."""
        if self._binarizer is None:
            binarizer = TokenBinarizer(self.source, max_length=self.max_length)
            if self._expected_fingerprint and binarizer.fingerprint != self._expected_fingerprint:
                # built with the tokenizer loaded the ordinary way (AutoTokenizer): compare that one
                binarizer = TokenBinarizer(self.source, max_length=self.max_length, light=False)
            self._check_tokenizer(binarizer)
            self._binarizer = binarizer
        return self._binarizer

    @property
    def fingerprint(self) -> str:
        """The tokenizer's fingerprint (from the saved configuration until the tokenizer is loaded)."""
        return self._expected_fingerprint or self.binarizer.fingerprint

    @property
    def rows(self) -> SparseRowIndex:
        """The binary rows (a :class:`SparseRowIndex`)."""
        if self._rows is None:
            self._rows = SparseRowIndex(self.binarizer.vocab_size, binary=True)
        return self._rows

    @rows.setter
    def rows(self, rows: SparseRowIndex) -> None:
        if not rows.binary:
            raise ValueError("a token index holds binary rows")
        if self._binarizer is not None and rows.vocab_size != self._binarizer.vocab_size:
            raise ValueError(f"rows have {rows.vocab_size} columns; the tokenizer has {self._binarizer.vocab_size}")
        self._rows = rows

    @property
    def vocab_size(self) -> int:
        """Columns: the tokenizer's vocabulary size."""
        return self._rows.vocab_size if self._rows is not None else self.binarizer.vocab_size

    def __len__(self) -> int:
        return len(self.rows)

    def add_texts(self, ids: Sequence[int] | np.ndarray, texts: Sequence[str], *, chunk_size: int = 16384) -> None:
        """Tokenize ``texts`` and add them under ``ids`` (replacing rows with the same ids)."""
        id_arr = np.asarray(ids, dtype=np.int64).ravel()
        if id_arr.shape[0] != len(texts):
            raise ValueError(f"got {id_arr.shape[0]} ids for {len(texts)} texts")
        for start in range(0, len(texts), chunk_size):
            block = self.binarizer.transform(texts[start : start + chunk_size])
            self.rows.add(id_arr[start : start + chunk_size], block)

    def remove(self, ids: Sequence[int] | np.ndarray) -> int:
        """Mask the rows of ``ids``; returns how many were present."""
        return self.rows.remove(ids)

    def search(
        self,
        queries: sp.spmatrix | sp.sparray | np.ndarray,
        top_k: int = 10,
        *,
        allowed_ids: np.ndarray | None = None,
        method: SearchMethod = "auto",
    ) -> tuple[np.ndarray, np.ndarray]:
        """⟨q, T(d)⟩ for sparse query vectors over the vocabulary (β search with ``q = E(query)``).

        Returns ``(scores, ids)`` of shape ``(nq, top_k)``, padded with ``-inf`` / ``-1``.
        """
        return self.rows.search(queries, top_k, allowed_ids=allowed_ids, method=method)

    def idf(self) -> np.ndarray:
        """Inverse document frequency per token, ``log(1 + (N - df + 0.5) / (df + 0.5))`` (BM25's, ≥ 0)."""
        return self.idf_of(self.rows.document_frequency(), len(self.rows))

    def query_vectors(self, queries: Sequence[str], *, weighting: LexicalWeighting = "idf") -> sp.csr_matrix:
        """T(q) of query texts, optionally weighted by :meth:`idf`."""
        if weighting not in ("idf", "binary"):
            raise ValueError(f"weighting must be 'idf' or 'binary', got {weighting!r}")
        q = self.binarizer.transform(queries, max_length=None)
        if weighting == "idf":
            q = sp.csr_matrix(q.multiply(self.idf()[None, :]))
        return q

    def search_text(
        self,
        queries: Sequence[str],
        top_k: int = 10,
        *,
        weighting: LexicalWeighting = "idf",
        allowed_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Plain lexical search with no model: the query's tokens, idf-weighted (or not), against T(D)."""
        return self.rows.search(self.query_vectors(queries, weighting=weighting), top_k, allowed_ids=allowed_ids)

    @staticmethod
    def idf_of(df: np.ndarray, n: int) -> np.ndarray:
        """:meth:`idf` from document frequencies ``df`` over ``n`` rows (for rows kept outside this object)."""
        df64 = np.asarray(df, dtype=np.float64)
        return np.log1p((float(n) - df64 + 0.5) / (df64 + 0.5)).astype(np.float32)

    def held_rows(self) -> SparseRowIndex | None:
        """The rows in memory, or ``None`` when none were ever added or loaded (no tokenizer is loaded)."""
        return self._rows

    def clear(self) -> None:
        """Forget every row in memory (a store keeping the rows in its engine calls this once they are written)."""
        self._rows = None

    def save(self, path: str | Path) -> None:
        """Write the rows to ``path`` (``.npz``, see :meth:`SparseRowIndex.save`)."""
        self.rows.save(path)

    def load_rows(self, path: str | Path) -> None:
        """Replace the rows with those saved at ``path`` (checked against the tokenizer once it loads)."""
        rows = SparseRowIndex.load(path)
        if not rows.binary:
            raise StoreCorruptedError(f"{path}: a weighted sparse index, not a binary token index")
        if self._binarizer is not None and rows.vocab_size != self._binarizer.vocab_size:
            raise StoreCorruptedError(
                f"{path}: an index over {rows.vocab_size} tokens; the tokenizer has {self._binarizer.vocab_size}"
            )
        self._rows = rows
