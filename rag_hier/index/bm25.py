r"""BM25Index: Okapi BM25 (Lucene's variant) over hashed terms, with bm25s's tokenization.

Each row (a store rowid) holds the term frequencies of one text after tokenization; nothing that depends on
the collection (idf, average length) or on ``k1``/``b`` is stored, so adding or removing rows never touches
other rows, and the scores are computed at query time from the rows held:

- ``idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))`` — ``N`` the rows held, ``df(t)`` the rows holding ``t``;
- ``score(q, d) = Σ_{t ∈ q} idf(t) · tf(t, d) / (tf(t, d) + k1 · (1 − b + b · |d| / avgdl))`` — ``|d|`` the
  number of (kept) tokens of ``d``, i.e. ``Σ_t tf(t, d)``, ``avgdl`` its mean over the rows held; a term that
  occurs twice in the query counts twice.

This is the formula of Lucene ≥ 8 (Elasticsearch, OpenSearch, Anserini) and of bm25s' ``method="lucene"``,
whose scores it reproduces (tested against bm25s itself). Classic Robertson BM25 multiplies every term by
``k1 + 1``: a constant factor, the same ranking; Lucene dropped it in 8.0.

**Tokenization** follows ``bm25s.tokenize``: lowercase, the words of the regex ``(?u)\b\w\w+\b`` (two or more
word characters), stopwords removed (bm25s's lists; English by default), then stemmed with a Snowball stemmer
(PyStemmer; English by default when it is installed). A :class:`BM25Tokenizer` has a fingerprint (the regex,
the stopword list and the stemmer's name): an index built with one tokenizer refuses to tokenize with another
(a missing PyStemmer, a bm25s release with another stopword list), since mixing them would silently break the
match between queries and rows.

**Terms** are the 63-bit prefix of their BLAKE2b digest (8 bytes, little-endian, top bit cleared: a
non-negative int64), stable across processes and machines (never Python's salted ``hash``); the index numbers
the terms it holds in order of first appearance (compact columns of a
:class:`~rag_hier.index.sparse.SparseRowIndex`) and drops unused ones when it is saved.

**Search** caches, per state of the rows and ``(k1, b)``, one column-major matrix of the per-term scores
``idf · tf / (tf + k1 · (…))``; a query then reads only the postings of its own terms (its cost is the length
of those postings, not the size of the collection). Rows sharing no term with the query are not returned.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.selection import select_top_k
from rag_hier.index.sparse import SparseRowIndex

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

__all__ = [
    "STOPWORD_LISTS",
    "WORD_PATTERN",
    "BM25Index",
    "BM25Tokenizer",
    "TermCounts",
    "default_stemmer",
    "term_hashes",
]

WORD_PATTERN = r"(?u)\b\w\w+\b"
"""bm25s's (and scikit-learn's CountVectorizer's) default: words of two or more word characters."""
_SPLIT = re.compile(WORD_PATTERN).findall
_TERM_MASK = (1 << 63) - 1
_FORMAT = "rag-hier-bm25"
_VERSION = 1

STOPWORD_LISTS: dict[str, str] = {
    "en": "STOPWORDS_EN",
    "en_plus": "STOPWORDS_EN_PLUS",
    "da": "STOPWORDS_DANISH",
    "de": "STOPWORDS_GERMAN",
    "es": "STOPWORDS_SPANISH",
    "fr": "STOPWORDS_FRENCH",
    "it": "STOPWORDS_ITALIAN",
    "ko": "STOPWORDS_KOREAN",
    "nl": "STOPWORDS_DUTCH",
    "no": "STOPWORDS_NORWEGIAN",
    "pt": "STOPWORDS_PORTUGUESE",
    "ru": "STOPWORDS_RUSSIAN",
    "sv": "STOPWORDS_SWEDISH",
    "tr": "STOPWORDS_TURKISH",
    "zh": "STOPWORDS_CHINESE",
}
"""Stopword list names (as ``bm25s.tokenize(stopwords=...)`` takes them) → the list in ``bm25s.stopwords``."""
_STOPWORD_ALIASES = {
    "english": "en",
    "english_plus": "en_plus",
    "danish": "da",
    "german": "de",
    "spanish": "es",
    "french": "fr",
    "italian": "it",
    "korean": "ko",
    "dutch": "nl",
    "norwegian": "no",
    "portuguese": "pt",
    "russian": "ru",
    "swedish": "sv",
    "turkish": "tr",
    "chinese": "zh",
}


def term_hashes(terms: Sequence[str]) -> np.ndarray:
    """The stable 63-bit id of each term: BLAKE2b (8 bytes) of its UTF-8, little-endian, top bit cleared."""
    out = np.empty(len(terms), np.int64)
    for i, t in enumerate(terms):
        digest = hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") & _TERM_MASK
    return out


def _stemmer_module() -> Any:
    try:
        import Stemmer  # PyStemmer
    except ImportError:
        return None
    return Stemmer


def default_stemmer() -> str | None:
    """``"english"`` when PyStemmer is installed (bm25s's recommended stemmer), else ``None``."""
    return "english" if _stemmer_module() is not None else None


@dataclass(frozen=True)
class TermCounts:
    """Term frequencies of several texts, CSR-like.

    Row ``i`` holds the terms ``terms[indptr[i]:indptr[i+1]]`` (hashes, distinct within a row) with their
    ``counts`` (positive).
    """

    indptr: np.ndarray
    terms: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return int(self.indptr.shape[0]) - 1

    def rows(self, positions: Sequence[int] | np.ndarray) -> TermCounts:
        """The rows at ``positions``, in that order."""
        pos = np.asarray(positions, np.int64)
        starts, ends = self.indptr[pos], self.indptr[pos + 1]
        lengths = ends - starts
        indptr = np.zeros(pos.size + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        take = _ranges(starts, lengths)
        return TermCounts(indptr, self.terms[take], self.counts[take])

    @classmethod
    def concat(cls, parts: Sequence[TermCounts]) -> TermCounts:
        """The rows of ``parts``, one after another."""
        if not parts:
            return cls(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32))
        lengths = np.concatenate([np.diff(p.indptr) for p in parts])
        indptr = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        return cls(
            indptr,
            np.concatenate([p.terms for p in parts]).astype(np.int64),
            np.concatenate([p.counts for p in parts]).astype(np.int32),
        )

    def check(self) -> None:
        """Raise ``ValueError`` unless the arrays describe rows of non-negative terms with positive counts."""
        if self.indptr.ndim != 1 or self.indptr.size == 0:
            raise ValueError("row pointers must be a non-empty 1-d array")
        if int(self.indptr[0]) != 0 or (np.diff(self.indptr) < 0).any():
            raise ValueError(f"row pointers do not describe {len(self)} rows")
        if int(self.indptr[-1]) != self.terms.size or self.counts.shape != self.terms.shape:
            raise ValueError(
                f"{self.terms.size} terms and {self.counts.size} counts for rows ending at {int(self.indptr[-1])}"
            )
        if self.terms.size and (int(self.terms.min()) < 0 or int(self.counts.min()) < 1):
            raise ValueError("negative term ids or counts below 1")


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + (np.arange(total) - offsets)


class BM25Tokenizer:
    r"""bm25s's tokenization: lowercase, ``(?u)\b\w\w+\b`` words, stopwords removed, then Snowball-stemmed.

    Args:
        stopwords: A bm25s stopword list (``"en"`` — also ``"english"`` —, ``"en_plus"``, ``"de"``, ``"fr"``, ...:
            :data:`STOPWORD_LISTS`), or ``None`` to keep every word.
        stemmer: A PyStemmer algorithm (``"english"``, ``"porter"``, ``"german"``, ...), or ``None`` (no stemming).
        fingerprint: The fingerprint an existing index was built with (checked before tokenizing; empty: this
            tokenizer's own).

    Tokenizing needs PyStemmer when ``stemmer`` is set, and the same stopword list and stemmer as the index was
    built with; :meth:`problem` says what is missing, :meth:`check` raises it (the store opens anyway).

    """

    def __init__(self, stopwords: str | None = "en", stemmer: str | None = "english", fingerprint: str = "") -> None:
        if stopwords is not None:
            if not isinstance(stopwords, str):
                raise ValueError(f"stopwords must be a list name or None, got {stopwords!r}")
            stopwords = _STOPWORD_ALIASES.get(stopwords, stopwords)
            if stopwords not in STOPWORD_LISTS:
                raise ValueError(f"unknown stopword list {stopwords!r}; known: {', '.join(STOPWORD_LISTS)} or None")
        if stemmer is not None and (not isinstance(stemmer, str) or not stemmer):
            raise ValueError(f"stemmer must be a PyStemmer algorithm name or None, got {stemmer!r}")
        if not isinstance(fingerprint, str):
            raise ValueError(f"fingerprint must be a string, got {fingerprint!r}")
        self.stopwords = stopwords
        self.stemmer = stemmer
        self._expected = fingerprint
        self._stopset: frozenset[str] | None = None
        self._stem: Any = None
        self._lock = threading.Lock()  # a PyStemmer object is not thread-safe

    def stopword_set(self) -> frozenset[str]:
        """The stopwords (bm25s's list)."""
        if self._stopset is None:
            if self.stopwords is None:
                self._stopset = frozenset()
            else:
                import bm25s.stopwords

                self._stopset = frozenset(getattr(bm25s.stopwords, STOPWORD_LISTS[self.stopwords]))
        return self._stopset

    @property
    def fingerprint(self) -> str:
        """What decides the terms of a text here: the regex, lowercasing, the stopwords and the stemmer's name."""
        spec = [WORD_PATTERN, True, sorted(self.stopword_set()), self.stemmer]
        return hashlib.sha256(json.dumps(spec, ensure_ascii=True).encode()).hexdigest()[:16]

    @property
    def expected_fingerprint(self) -> str:
        """The fingerprint an index built with this configuration has (recorded, or this tokenizer's own)."""
        return self._expected or self.fingerprint

    def problem(self) -> str | None:
        """Why this tokenizer cannot produce the index's terms here (``None``: it can)."""
        if self.stemmer is not None:
            module = _stemmer_module()
            if module is None:
                return (
                    f"the BM25 index was built with the Snowball stemmer {self.stemmer!r}, and PyStemmer is not "
                    "installed here (pip install PyStemmer); unstemmed terms would not match it"
                )
            if self.stemmer not in module.algorithms():
                return f"PyStemmer has no stemmer {self.stemmer!r} (it has {', '.join(module.algorithms())})"
        if self._expected and self._expected != self.fingerprint:
            return (
                f"the BM25 index was built by a tokenizer with fingerprint {self._expected}, this installation's "
                f"(stopwords {self.stopwords}, stemmer {self.stemmer}) has {self.fingerprint}: another bm25s "
                "stopword list? Rebuild the index (store.add_extension(BM25Extension(...), replace=True))"
            )
        return None

    def check(self) -> None:
        """Raise :class:`~rag_hier.errors.StoreError` when :meth:`problem` finds one."""
        problem = self.problem()
        if problem is not None:
            raise StoreError(problem)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The terms of each text, in order: ``bm25s.tokenize(texts, stopwords=..., stemmer=..., return_ids=False)``."""
        self.check()
        stop = self.stopword_set()
        docs = [[t for t in _SPLIT(text.lower()) if t not in stop] for text in texts]
        if self.stemmer is not None:
            words = list({t for d in docs for t in d})
            with self._lock:
                if self._stem is None:
                    self._stem = _stemmer_module().Stemmer(self.stemmer)
                stems = dict(zip(words, self._stem.stemWords(words), strict=True))
            docs = [[stems[t] for t in d] for d in docs]
        return docs

    def term_counts(self, texts: Sequence[str]) -> TermCounts:
        """The term frequencies of each text, terms as :func:`term_hashes`."""
        docs = self.tokenize(texts)
        vocab: dict[str, int] = {}
        local = np.fromiter((vocab.setdefault(t, len(vocab)) for d in docs for t in d), np.int64)
        lengths = np.fromiter((len(d) for d in docs), np.int64, count=len(docs))
        width = max(1, len(vocab))
        doc_of = np.repeat(np.arange(len(docs), dtype=np.int64), lengths)
        keys, counts = np.unique(doc_of * width + local, return_counts=True)
        indptr = np.zeros(len(docs) + 1, np.int64)
        np.cumsum(np.bincount(keys // width, minlength=len(docs)), out=indptr[1:])
        return TermCounts(indptr, term_hashes(list(vocab))[keys % width], counts.astype(np.int32))

    def config(self) -> dict[str, Any]:
        """``stopwords``, ``stemmer`` and the ``fingerprint`` of the index's tokenization."""
        return {"stopwords": self.stopwords, "stemmer": self.stemmer, "fingerprint": self.expected_fingerprint}


@dataclass(frozen=True)
class BM25Statistics:
    """The collection statistics a score uses: ``n`` rows held and their mean length ``avgdl``."""

    n: int
    avgdl: float


class _Scorer:
    """Per-term scores ``idf · tf / (tf + k1 · (1 − b + b · |d| / avgdl))`` of every row, column-major."""

    def __init__(self, ids: np.ndarray, tf: sp.csr_matrix, k1: float, b: float) -> None:
        n = ids.shape[0]
        lengths = np.asarray(tf.sum(axis=1), dtype=np.float64).ravel()
        avgdl = float(lengths.mean()) if n else 0.0
        df = np.bincount(tf.indices, minlength=tf.shape[1]).astype(np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        weights = np.zeros(tf.nnz, np.float64)
        if tf.nnz:  # avgdl > 0 here
            norm = k1 * (1.0 - b + b * lengths / avgdl)
            counts = tf.data.astype(np.float64)
            row = np.repeat(np.arange(n), np.diff(tf.indptr))
            weights = idf[tf.indices] * counts / (counts + norm[row])
        mat = sp.csr_matrix((weights.astype(np.float32), tf.indices, tf.indptr), shape=tf.shape)
        self.ids = ids
        self.columns = sp.csc_matrix(mat)
        self.statistics = BM25Statistics(n, avgdl)


class BM25Index:
    """Term-frequency rows keyed by int64 ids, searched by BM25 (see the module docstring).

    Args:
        tokenizer: How texts become terms (default: English stopwords, the English stemmer when PyStemmer is
            installed).

    Example:
        >>> index = BM25Index(BM25Tokenizer(stemmer=None))
        >>> _ = index.add_texts([1, 2, 3], ["tides and the moon", "bees make honey", "honey and tea"])
        >>> [(int(i), round(float(s), 3)) for i, s in zip(*index.search([index.query("honey bees")], 2)[0][:2])]
        [(2, 0.514), (3, 0.201)]

    """

    def __init__(self, tokenizer: BM25Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer if tokenizer is not None else BM25Tokenizer(stemmer=default_stemmer())
        self.terms = np.zeros(0, np.int64)
        """Column ``j`` holds term ``terms[j]`` (a :func:`term_hashes` id)."""
        self.rows = SparseRowIndex(1, binary=False)
        """Term frequencies of every row over the columns."""
        self.version = 0
        """Bumped by every change of the rows or columns (what the cached scorers are valid for)."""
        self._lookup: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._scorers: dict[tuple[float, float], tuple[int, _Scorer]] = {}

    # -- size ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def ids(self) -> np.ndarray:
        """Ids of the rows held, ascending."""
        return self.rows.ids()

    # -- columns ------------------------------------------------------------------------------------
    def columns_of(self, terms: np.ndarray, *, grow: bool = False) -> np.ndarray:
        """The column of each term (``-1`` for terms not held, unless ``grow``: new terms get new columns)."""
        t = np.asarray(terms, np.int64).ravel()
        keys, cols = self._lookup
        out = np.full(t.size, -1, np.int64)
        if keys.size:
            pos = np.minimum(np.searchsorted(keys, t), keys.size - 1)
            found = keys[pos] == t
            out[found] = cols[pos[found]]
        if grow and (out < 0).any():
            self._set_terms(np.concatenate([self.terms, np.unique(t[out < 0])]))
            return self.columns_of(t)
        return out

    def _set_terms(self, terms: np.ndarray) -> None:
        self.terms = np.asarray(terms, np.int64)
        order = np.argsort(self.terms, kind="stable")
        self._lookup = (self.terms[order], order.astype(np.int64))
        if self.terms.size > self.rows.vocab_size:
            self.rows.widen(self.terms.size)
        self.version += 1

    # -- writes -------------------------------------------------------------------------------------
    def add_counts(self, ids: Sequence[int] | np.ndarray, counts: TermCounts) -> None:
        """Add (or replace) the rows of ``ids`` from their term frequencies."""
        id_arr = np.asarray(ids, np.int64).ravel()
        counts.check()
        if id_arr.size != len(counts):
            raise ValueError(f"got {id_arr.size} ids for {len(counts)} rows of term counts")
        if id_arr.size == 0:
            return
        cols = self.columns_of(counts.terms, grow=True)
        mat = sp.csr_matrix(
            (counts.counts.astype(np.float32), cols, counts.indptr), shape=(id_arr.size, self.rows.vocab_size)
        )
        self.rows.add(id_arr, mat)  # replaces live rows with the same id
        self.version += 1

    def add_texts(self, ids: Sequence[int] | np.ndarray, texts: Sequence[str]) -> TermCounts:
        """Tokenize ``texts`` and add their rows; returns their term frequencies."""
        counts = self.tokenizer.term_counts(texts)
        self.add_counts(ids, counts)
        return counts

    def remove(self, ids: Sequence[int] | np.ndarray) -> int:
        """Drop the rows of ``ids`` (unknown ids ignored); returns how many were held."""
        n = self.rows.remove(ids)
        if n:
            self.version += 1
        return n

    def term_counts(self) -> tuple[np.ndarray, TermCounts]:
        """``(ids ascending, their term frequencies)`` of every row held."""
        ids, mat = self.rows.matrix()
        mat.sort_indices()
        return ids, TermCounts(mat.indptr.astype(np.int64), self.terms[mat.indices], mat.data.astype(np.int32))

    # -- search -------------------------------------------------------------------------------------
    def query(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """``(terms, counts)`` of a query text (one :meth:`queries` row)."""
        return self.queries([text])[0]

    def queries(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(terms, counts)`` of each query text (a term repeated in a query counts as often)."""
        counts = self.tokenizer.term_counts(texts)
        b = counts.indptr
        return [(counts.terms[b[i] : b[i + 1]], counts.counts[b[i] : b[i + 1]]) for i in range(len(counts))]

    def _scorer(self, k1: float, b: float) -> _Scorer:
        key = (float(k1), float(b))
        held = self._scorers.get(key)
        if held is not None and held[0] == self.version:
            return held[1]
        version = self.version
        ids, tf = self.rows.matrix()
        scorer = _Scorer(ids, tf, key[0], key[1])
        kept = {k: v for k, v in self._scorers.items() if v[0] == version}
        if len(kept) >= 8:  # a sweep over many (k1, b): keep the latest few
            kept.pop(next(iter(kept)))
        kept[key] = (version, scorer)
        self._scorers = kept
        return scorer

    def statistics(self) -> BM25Statistics:
        """``N`` and ``avgdl`` over the rows held."""
        ids, tf = self.rows.matrix()
        return BM25Statistics(int(ids.size), float(tf.sum()) / ids.size if ids.size else 0.0)

    def search(
        self,
        queries: Sequence[tuple[np.ndarray, np.ndarray]],
        top_k: int,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        allowed_ids: np.ndarray | None = None,
    ) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """The ``top_k`` best rows of each query (``(terms, counts)``, as :meth:`queries` gives them).

        Returns, per query, ``(ids, scores float64, postings read)``, best first, ties by ascending id; rows that
        share no term with the query (or are not among ``allowed_ids``) are left out.
        """
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        scorer = self._scorer(k1, b)
        cols_mat = scorer.columns
        mask: np.ndarray | None = None
        if allowed_ids is not None:
            allowed = np.asarray(allowed_ids, np.int64).ravel()
            mask = np.zeros(scorer.ids.size, bool)
            if scorer.ids.size and allowed.size:
                pos = np.clip(np.searchsorted(scorer.ids, allowed), 0, scorer.ids.size - 1)
                mask[pos[scorer.ids[pos] == allowed]] = True
        out = []
        for terms, counts in queries:
            cols = self.columns_of(terms)
            known = cols >= 0
            cols, weight = cols[known], np.asarray(counts, np.float64)[known]
            starts, ends = cols_mat.indptr[cols], cols_mat.indptr[cols + 1]
            take = _ranges(starts.astype(np.int64), (ends - starts).astype(np.int64))
            rows = cols_mat.indices[take]
            values = cols_mat.data[take].astype(np.float64) * np.repeat(weight, ends - starts)
            if mask is not None:
                keep = mask[rows]
                rows, values = rows[keep], values[keep]
            if rows.size == 0:
                out.append((np.zeros(0, np.int64), np.zeros(0, np.float64), int(take.size)))
                continue
            uniq, inverse = np.unique(rows, return_inverse=True)
            scores = np.bincount(inverse.ravel(), weights=values, minlength=uniq.size)
            ids = scorer.ids[uniq]
            best = select_top_k(scores, ids, top_k)
            out.append((ids[best], scores[best], int(take.size)))
        return out

    def scores(self, query: tuple[np.ndarray, np.ndarray], *, k1: float = 1.5, b: float = 0.75) -> dict[int, float]:
        """Every non-zero score of one query, by id (for tests and inspection)."""
        ids, scores, _ = self.search([query], max(1, len(self)), k1=k1, b=b)[0]
        return dict(zip(ids.tolist(), scores.tolist(), strict=True))

    # -- persistence --------------------------------------------------------------------------------
    def compact(self) -> None:
        """Drop the removed rows and the columns no row uses."""
        self.rows.compact()
        used = self.rows.document_frequency()[: self.terms.size] > 0
        if used.all():
            return
        ids, mat = self.rows.matrix()
        new_col = np.cumsum(used) - 1
        rows = SparseRowIndex(max(1, int(used.sum())), binary=False)
        if ids.size:
            remapped = (mat.data, new_col[mat.indices], mat.indptr)
            rows.add(ids, sp.csr_matrix(remapped, shape=(ids.size, rows.vocab_size)))
        self.rows = rows
        self._set_terms(self.terms[used])

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The compacted rows and their terms as plain numeric arrays (``np.savez``-ready; no objects)."""
        self.compact()
        return {
            "bm25_format": np.array(_FORMAT),
            "bm25_header": np.array([_VERSION, self.terms.size], np.int64),
            "terms": self.terms,
            **self.rows.to_arrays(),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], tokenizer: BM25Tokenizer, where: str) -> BM25Index:
        """Rebuild an index from :meth:`to_arrays` output, validating every array (errors name ``where``)."""

        def bad(msg: str) -> StoreCorruptedError:
            return StoreCorruptedError(f"{where}: {msg}")

        try:
            fmt, header, terms = str(arrays["bm25_format"]), np.asarray(arrays["bm25_header"]), arrays["terms"]
        except KeyError as exc:
            raise bad(f"missing array {exc}") from exc
        if fmt != _FORMAT or header.shape != (2,) or not np.issubdtype(header.dtype, np.integer):
            raise bad("not a rag-hier BM25 index")
        if int(header[0]) != _VERSION:
            raise bad(f"BM25 index version {int(header[0])}; this rag-hier reads version {_VERSION}")
        terms = np.asarray(terms)
        if terms.ndim != 1 or terms.dtype != np.int64 or terms.size != int(header[1]) or (terms < 0).any():
            raise bad("the terms array does not match its header")
        if np.unique(terms).size != terms.size:
            raise bad("repeated terms")
        rows = SparseRowIndex.from_arrays(arrays, where=where)
        if rows.binary or rows.vocab_size != max(1, terms.size):
            raise bad("the term-frequency rows do not match the terms")
        _, mat = rows.matrix()
        if mat.nnz and ((mat.data < 1).any() or (mat.data != np.round(mat.data)).any()):
            raise bad("term frequencies must be positive integers")
        index = cls(tokenizer)
        index.rows = rows
        index._set_terms(terms)
        return index

    def describe(self) -> dict[str, Any]:
        """Rows, terms, postings and the mean length."""
        stats = self.statistics()
        return {
            "passages": stats.n,
            "terms": int(self.terms.size),
            "postings": int(self.rows.nnz),
            "avgdl": round(stats.avgdl, 3),
        }
