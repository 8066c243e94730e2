r"""The ``bm25`` store extension: the term frequencies of every passage, for BM25 search; file ``bm25.npz``.

Per passage it keeps the term frequencies of :attr:`Passage.embedding_text` — the title path, then the text,
what the dense encoder and SVDR's token index see — after bm25s's tokenization (lowercase, ``\w\w+`` words,
English stopwords removed, Snowball-stemmed when PyStemmer is installed), terms as stable 63-bit hashes; a
passage's length is the sum of its frequencies. Nothing collection-wide is stored: ``N``, ``avgdl``, the
document frequencies and ``k1``/``b`` enter at query time (:class:`~rag_hier.index.bm25.BM25Index`), so a write
changes only the rows of the passages it adds or removes, and the ``bm25`` strategy
(:mod:`rag_hier.retrieval.bm25`) scores from the committed rows whatever was written before.

The tokenization (stopword list, stemmer, and their fingerprint) is the extension's configuration. A store
whose index was stemmed opens where PyStemmer is missing (dense search, deletes and every other extension
work), with a warning; BM25 search and writes that add passages then fail with an error naming the fix, since
unstemmed terms would silently miss the stemmed rows. The same holds when this installation's bm25s has
another stopword list than the one that built the index.

Like the other extensions, it follows every write and is written in the store's atomic commit (read back with
``np.load(allow_pickle=False)``). A small write commits only its rows — rowids, CSR row pointers, term hashes
and frequencies — and the rowids removed, as a segment of ``store.sqlite``; the file is compacted and rewritten
once the segments pass a tenth of the rows, or on ``HierStore.optimize()``.

Example:
    >>> store.ensure_extension("bm25")  # doctest: +SKIP
    >>> build_retriever("bm25", store).search("how do tides work?", top_k=5)  # doctest: +SKIP

"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rag_hier._arrays import read_npz
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.bm25 import BM25Index, BM25Tokenizer, TermCounts, default_stemmer
from rag_hier.store.extensions.base import StoreExtension, register_extension
from rag_hier.store.extensions.token_index import passage_texts
from rag_hier.store.segments import Delta

if TYPE_CHECKING:
    from rag_hier.corpus.model import Passage
    from rag_hier.store.contract import StoreBackend

logger = logging.getLogger(__name__)

__all__ = ["BM25Extension"]

_AUTO = "auto"


@register_extension
class BM25Extension(StoreExtension):
    """The ``bm25`` store extension: term frequencies of every passage (see the module docstring).

    Args:
        stopwords: bm25s stopword list (``"en"`` by default; ``"de"``, ``"fr"``, ...; ``None``: keep every word).
        stemmer: PyStemmer algorithm (``"english"``, ``"porter"``, ...), ``None`` for no stemming, or ``"auto"``
            (default): ``"english"`` when PyStemmer is installed, else ``None``. Recorded as resolved.
        fingerprint: The tokenizer's fingerprint when the index was built (checked before tokenizing; leave it
            empty when creating one).

    """

    name: ClassVar[str] = "bm25"
    FILE: ClassVar[str] = "bm25.npz"
    FILES: ClassVar[tuple[str, ...]] = (FILE,)

    def __init__(self, stopwords: str | None = "en", stemmer: str | None = _AUTO, fingerprint: str = "") -> None:
        if stemmer == _AUTO:
            stemmer = default_stemmer()
        self.index = BM25Index(BM25Tokenizer(stopwords, stemmer, fingerprint))
        """The in-memory :class:`BM25Index`."""
        # the write batch's changes (see begin_delta): (rowids, their term counts) added, (rowids, None) removed
        self._events: list[tuple[np.ndarray, TermCounts | None]] | None = None
        self._recorded = 0
        self._limit = 0

    @classmethod
    def of(cls, store: StoreBackend) -> BM25Extension:
        """The store's BM25 extension (a clear error when it has none)."""
        ext = store.extension(cls.name)
        if not isinstance(ext, BM25Extension):
            raise StoreError(
                f"{store.location} has no BM25 index; create one with `rag-hier index ... --bm25` or "
                "store.ensure_extension('bm25')"
            )
        return ext

    @property
    def tokenizer(self) -> BM25Tokenizer:
        """How passages and queries become terms."""
        return self.index.tokenizer

    # -- the StoreExtension contract ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """``stopwords``, ``stemmer`` and the tokenizer's ``fingerprint``."""
        return self.tokenizer.config()

    def files(self) -> list[str]:
        """``bm25.npz``."""
        return [self.FILE]

    def write(self, paths: Mapping[str, Path]) -> None:
        """Compact (drop removed rows and unused terms) and save the rows and their terms."""
        with Path(paths[self.FILE]).open("wb") as f:
            np.savez_compressed(f, **self.index.to_arrays())  # type: ignore[arg-type]

    def load(self, store: StoreBackend, paths: Mapping[str, Path]) -> None:
        """Read the rows (``allow_pickle=False``), checking every array; warn when this machine cannot tokenize."""
        path = paths[self.FILE]
        arrays = read_npz(path)  # headers, sizes and inflation checked before anything is allocated
        self.index = BM25Index.from_arrays(arrays, self.tokenizer, where=str(path))
        problem = self.tokenizer.problem()
        if problem is not None:
            logger.warning(
                "%s: %s; BM25 search and adding passages will fail (deletes and other searches work)",
                store.location,
                problem,
            )

    def build(self, store: StoreBackend) -> None:
        """Tokenize every passage of ``store``."""
        self.index = BM25Index(self.tokenizer)
        rowids = np.asarray(store.passage_rowids(), dtype=np.int64)
        for start in range(0, rowids.shape[0], 16384):
            part = rowids[start : start + 16384]
            self.index.add_texts(part, passage_texts(store, part))

    def on_passages_added(
        self, store: StoreBackend, rowids: np.ndarray, passages: Sequence[Passage], vectors: np.ndarray | None
    ) -> None:
        """Tokenize the new passages (an error, aborting the write, when this machine cannot)."""
        ids = np.asarray(rowids, np.int64)
        counts = self.index.add_texts(ids, [p.embedding_text for p in passages])
        self._record(ids, counts)

    def on_passages_removed(self, store: StoreBackend, rowids: np.ndarray) -> None:
        """Drop the rows of removed passages."""
        ids = np.asarray(rowids, np.int64)
        if self.index.remove(ids):
            self._record(ids, None)

    # -- incremental commits ----------------------------------------------------------------------
    DELTA_ARRAYS: ClassVar[Mapping[str, tuple[str, int]]] = {
        "ids": ("<i8", 1),
        "indptr": ("<i8", 1),
        "terms": ("<i8", 1),
        "counts": ("<i4", 1),
        "removed": ("<i8", 1),
    }

    def _record(self, ids: np.ndarray, counts: TermCounts | None) -> None:
        if self._events is None:
            return
        self._recorded += len(ids)
        if self._recorded > self._limit:
            self._events = None  # too large for a segment: the file is written whole
            return
        self._events.append((ids.copy(), counts))

    def begin_delta(self, limit: int) -> None:
        """Record the rows added (term hashes and frequencies) and the rowids removed by the write batch."""
        self._events, self._recorded, self._limit = [], 0, limit

    def delta(self) -> Delta | None:
        """Each rowid's last change: its row (CSR over term hashes) or its removal."""
        if self._events is None:
            return None
        decided = np.zeros(0, np.int64)
        ids: list[np.ndarray] = []
        rows: list[TermCounts] = []
        removed: list[np.ndarray] = []
        for event_ids, counts in reversed(self._events):
            if counts is None:
                removed.append(event_ids)
            else:
                fresh = np.flatnonzero(~np.isin(event_ids, decided))
                ids.append(event_ids[fresh])
                rows.append(counts.rows(fresh))
            decided = np.union1d(decided, event_ids)
        added = TermCounts.concat(rows)
        id_arr = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        gone = np.unique(np.concatenate(removed)) if removed else np.zeros(0, np.int64)
        arrays = {
            "ids": id_arr.astype(np.int64),
            "indptr": added.indptr,
            "terms": added.terms,
            "counts": added.counts,
            "removed": gone,
        }
        return Delta(arrays, int(id_arr.size + gone.size))

    def end_delta(self) -> None:
        """Stop recording."""
        self._events = None

    def apply_delta(self, store: StoreBackend, arrays: Mapping[str, np.ndarray]) -> None:
        """Replay a committed segment: drop the removed rows, then add the rows (new terms get new columns)."""
        ids = arrays["ids"]
        counts = TermCounts(arrays["indptr"], arrays["terms"], arrays["counts"])
        counts.check()
        if len(counts) != ids.size or np.unique(ids).size != ids.size:
            raise ValueError(f"{ids.size} rowids (or repeated ones) for {len(counts)} rows")
        self.index.remove(arrays["removed"])
        self.index.add_counts(ids, counts)

    def delta_size(self) -> int:
        """Rows held."""
        return self.index.rows.rows_held

    def verify(self, store: StoreBackend) -> None:
        """The index holds exactly the store's passages."""
        held = self.index.ids()
        stored = np.asarray(store.passage_rowids(), dtype=np.int64)
        if held.shape != stored.shape or not np.array_equal(held, stored):
            raise StoreCorruptedError(
                f"{store.location}/{self.FILE}: holds {held.shape[0]} passages, the store {stored.shape[0]} "
                "(or different ones); remove and re-add the bm25 extension"
            )

    def describe(self) -> dict[str, Any]:
        """Tokenization and size."""
        return {"stopwords": self.tokenizer.stopwords, "stemmer": self.tokenizer.stemmer, **self.index.describe()}
