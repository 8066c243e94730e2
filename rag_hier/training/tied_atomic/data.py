"""Tied-Atomic's training data: BM25 negatives for each (query, relevant item) pair."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag_hier.training.corpus import TrainingCorpus
from rag_hier.training.hce.data import SupervisedPair

__all__ = ["bm25_negatives"]


def bm25_negatives(
    corpus: TrainingCorpus,
    pairs: Sequence[SupervisedPair],
    *,
    n_negatives: int,
    depth: int,
    k1: float = 10.0,
    b: float = 0.8,
    seed: int = 0,
) -> list[list[int]]:
    """For each pair, ``n_negatives`` corpus positions drawn from the query's BM25 top-``depth`` (bm25s).

    The query's relevant items are never drawn. Where the top-``depth`` holds too few usable items (tiny
    corpora, queries without known words), the rest are drawn uniformly from the corpus.
    """
    if n_negatives == 0:
        return [[] for _ in pairs]
    import bm25s

    n = len(corpus.texts)
    rng = np.random.default_rng(seed)
    index = bm25s.BM25(k1=k1, b=b)
    index.index(bm25s.tokenize(list(corpus.texts), stopwords="en", show_progress=False), show_progress=False)
    vocab = index.vocab_dict
    ranking: dict[str, np.ndarray] = {}
    out: list[list[int]] = []
    for pair in pairs:
        order = ranking.get(pair.query)
        if order is None:
            tokens = bm25s.tokenize([pair.query], stopwords="en", return_ids=False, show_progress=False)[0]
            known = [t for t in tokens if t in vocab]
            if known:
                scores = np.asarray(index.get_scores(known), dtype=np.float32)
                keep = min(n, depth + len(pair.relevant))
                if keep < n:  # the top-``keep`` and everything tied with the last of them
                    cut = scores[np.argpartition(-scores, keep - 1)[keep - 1]]
                    top = np.nonzero(scores >= cut)[0]
                else:
                    top = np.arange(n)
                top = top[np.lexsort((top, -scores[top]))]
                order = top[scores[top] > 0]
            else:
                order = np.zeros(0, np.int64)
            ranking[pair.query] = order
        pool = [int(i) for i in order if int(i) not in pair.relevant][:depth]
        if len(pool) > n_negatives:
            picks = rng.choice(len(pool), size=n_negatives, replace=False)
            chosen = [pool[i] for i in sorted(picks.tolist())]
        else:
            chosen = list(pool)
        if len(chosen) < n_negatives:
            rest = [i for i in rng.permutation(n).tolist() if i not in pair.relevant and i not in chosen]
            chosen += rest[: n_negatives - len(chosen)]
        out.append(chosen)
    return out
