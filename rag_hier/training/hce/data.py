"""Training data for HCE: the corpus as tree items, supervised pairs, ICT/SimCSE pseudo-queries, tree negatives."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rag_hier.errors import RagHierError
from rag_hier.index.tree import ClusterTree
from rag_hier.training.corpus import TrainingCorpus

logger = logging.getLogger(__name__)

__all__ = [
    "SupervisedPair",
    "TrainingCorpus",
    "build_rows",
    "ict_examples",
    "ict_queries",
    "resolve_pairs",
    "sample_tree_negatives",
]

Tokenize = Callable[[str], list[tuple[int, int]]]
"""Character offsets ``(start, end)`` of each token of a text."""


@dataclass(frozen=True)
class SupervisedPair:
    """A training query and the item positions it is judged relevant to (``positive`` is the one trained on)."""

    query_id: str
    query: str
    positive: int
    relevant: frozenset[int]


def resolve_pairs(
    corpus: TrainingCorpus,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    choose: Callable[[str, list[int]], int] | None = None,
) -> list[SupervisedPair]:
    """Turn queries and qrels (relevance > 0) into one pair per (query, relevant item).

    A judgement that names a document split into several passages yields one pair, its positive chosen
    by ``choose(query_text, positions)`` (default: the first passage). Judgements naming nothing in the
    corpus, and queries without text, are skipped with a warning.
    """
    pairs: list[SupervisedPair] = []
    missing = 0
    for qid, rels in qrels.items():
        text = queries.get(qid)
        if not text:
            missing += 1
            continue
        groups = [corpus.positions_for(d) for d, r in rels.items() if r > 0]
        groups = [g for g in groups if g]
        relevant = frozenset(p for g in groups for p in g)
        for g in groups:
            pos = g[0] if len(g) == 1 or choose is None else choose(text, g)
            pairs.append(SupervisedPair(qid, text, pos, relevant))
    if missing:
        logger.warning("%d judged queries have no text in the queries file; skipped", missing)
    if not pairs:
        raise RagHierError("no (query, relevant document) pair found: do the qrels name documents of the corpus?")
    return pairs


def _whitespace_offsets(text: str) -> list[tuple[int, int]]:
    out = []
    pos = 0
    for word in text.split():
        start = text.index(word, pos)
        out.append((start, start + len(word)))
        pos = start + len(word)
    return out


def ict_queries(
    texts: Sequence[str],
    rng: np.random.Generator,
    *,
    span_tokens: int = 64,
    tokenize: Tokenize | None = None,
    max_tokens: int | None = None,
) -> list[str]:
    """Inverse Cloze Task pseudo-queries: a random span of ``span_tokens`` tokens of each text.

    Texts shorter than twice the span give a span of half their length (so the query never is the whole
    text). The span is cut from the original text at token boundaries (``tokenize`` returns character
    offsets per token, e.g. a fast tokenizer's ``offset_mapping``; default: whitespace words). With
    ``max_tokens`` the span lies inside the first ``max_tokens`` tokens: the part of the text an encoder
    truncating there sees.
    """
    return ict_examples(texts, rng, span_tokens=span_tokens, tokenize=tokenize, max_tokens=max_tokens)[0]


def _sentence_spans(text: str, window_end: int) -> list[tuple[int, int]]:
    """Character spans of ``text``'s sentences that end inside its first ``window_end`` characters."""
    from rag_hier.corpus.sentences import split_sentences

    words = _whitespace_offsets(text)
    spans = []
    first = 0
    for sentence in split_sentences(text):
        count = len(sentence.split())
        if count == 0:
            continue
        a, b = words[first][0], words[first + count - 1][1]
        first += count
        if b > window_end:
            break
        spans.append((a, b))
    return spans


def ict_examples(
    texts: Sequence[str],
    rng: np.random.Generator,
    *,
    span_tokens: int = 64,
    tokenize: Tokenize | None = None,
    remove_rate: float = 0.0,
    max_tokens: int | None = None,
    unit: str = "tokens",
) -> tuple[list[str], list[str]]:
    """Inverse Cloze Task examples: ``(pseudo-queries, contexts)``.

    Each pseudo-query is a random span of ``span_tokens`` tokens (see :func:`ict_queries`), drawn inside the
    first ``max_tokens`` tokens when given (the encoder's window: a span beyond it would pair the query with
    a document whose encoded part does not contain it). With ``unit="sentence"`` it is one random sentence
    lying inside that window instead (Lee et al., 2019's pseudo-query), when the window holds at least two
    sentences (else a token span as above). Its context is the text with the span cut out with probability
    ``remove_rate`` (Lee et al. remove it 90 % of the time, so that the task is not solved by word overlap
    alone), else the whole text. The same generator state gives the same spans whatever the rate.
    """
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 or None, got {max_tokens}")
    if unit not in ("tokens", "sentence"):
        raise ValueError(f"unit must be 'tokens' or 'sentence', got {unit!r}")
    queries: list[str] = []
    contexts: list[str] = []
    offsets_of = tokenize or _whitespace_offsets
    for text in texts:
        offsets = offsets_of(text)
        n = len(offsets) if max_tokens is None else min(len(offsets), max_tokens)
        if n == 0:
            queries.append(text)
            contexts.append(text)
            continue
        sentences = _sentence_spans(text, offsets[n - 1][1]) if unit == "sentence" else []
        if len(sentences) >= 2:
            a, b = sentences[int(rng.integers(0, len(sentences)))]
        else:
            length = min(span_tokens, max(1, n // 2))
            start = int(rng.integers(0, n - length + 1))
            a, b = offsets[start][0], offsets[start + length - 1][1]
        queries.append(text[a:b])
        if rng.random() < remove_rate:  # drawn for every text: the spans do not depend on the rate
            contexts.append(" ".join(part for part in (text[:a].rstrip(), text[b:].lstrip()) if part))
        else:
            contexts.append(text)
    return queries, contexts


def sample_tree_negatives(
    tree: ClusterTree,
    positives: np.ndarray,
    *,
    levels_m: int,
    n_negatives: int,
    rng: np.random.Generator,
    exclude: Sequence[frozenset[int]] | None = None,
) -> np.ndarray:
    """Tiered negatives: for each level below ``M``, ``n_negatives`` items among the children of the positive's prefix.

    For level ``t`` (``M < t <= H + 1``, ``H + 1`` being the items themselves) a negative is an item that
    shares the positive's path down to level ``t - 1`` but not its level-``t`` node: a sibling item in
    the same leaf at the item level, an item of a sibling subtree above it. A node without siblings
    falls back to the next level up (and, at the root, to any other item).

    Args:
        tree: The cluster tree (item positions index its items).
        positives: ``(n,)`` item positions.
        levels_m: ``M`` (levels trained against centroids take no sampled negatives).
        n_negatives: ``n_NS`` per level.
        rng: Random generator.
        exclude: Per row, item positions that must not be drawn (e.g. other documents relevant to the query).

    Returns:
        ``(n, n_negatives * (H + 1 - min(M, H)))`` item positions, grouped by level (top level first).

    """
    depth = tree.depth
    m = min(levels_m, depth)
    levels = list(range(m + 1, depth + 2))
    n_rows = len(positives)
    out = np.zeros((n_rows, n_negatives * len(levels)), np.int64)
    if n_negatives == 0 or n_rows == 0:
        return out
    paths = tree.node_paths()
    n_items = len(tree)

    def pool(level: int, item: int) -> tuple[np.ndarray, int | None]:
        """Items under the level-(level-1) ancestor, and the level-``level`` node to avoid (None: the item)."""
        parent_level = level - 1
        members = tree.members(parent_level, int(paths[item, parent_level - 1])) if parent_level else tree.members(0, 0)
        own = None if level == depth + 1 else int(paths[item, level - 1])
        return members, own

    for row, item in enumerate(np.asarray(positives, dtype=np.int64)):
        banned = exclude[row] if exclude is not None else frozenset()
        for li, level in enumerate(levels):
            drawn: list[int] = []
            lvl = level
            while lvl >= 1 and not drawn:
                members, own = pool(lvl, int(item))
                cands = members[members != item] if own is None else members[paths[members, lvl - 1] != own]
                if banned:
                    cands = cands[~np.isin(cands, list(banned))]
                if cands.size:
                    drawn = rng.choice(cands, size=n_negatives, replace=cands.size < n_negatives).tolist()
                lvl -= 1
            if (
                not drawn
            ):  # a one-item corpus, or everything banned: any item (masked by the loss if it is the positive)
                drawn = rng.integers(0, n_items, size=n_negatives).tolist()
            out[row, li * n_negatives : (li + 1) * n_negatives] = drawn
    return out


def build_rows(
    anchors: Sequence[str],
    positives: np.ndarray,
    negatives: np.ndarray,
    corpus: TrainingCorpus,
    *,
    positive_texts: Sequence[str] | None = None,
) -> dict[str, list[Any]]:
    """Columns of a sentence-transformers training dataset: ``anchor, positive, negative_1.., label``.

    ``label`` holds the item positions of ``positive`` and each negative (the loss masks duplicates with it).
    ``positive_texts`` replaces the positives' corpus texts (ICT contexts with their span cut out).
    """
    pos_texts = list(positive_texts) if positive_texts is not None else [corpus.texts[p] for p in positives]
    if len(pos_texts) != len(positives):
        raise ValueError(f"{len(pos_texts)} positive texts for {len(positives)} positives")
    cols: dict[str, list[Any]] = {"anchor": list(anchors), "positive": pos_texts}
    for j in range(negatives.shape[1]):
        cols[f"negative_{j + 1}"] = [corpus.texts[int(i)] for i in negatives[:, j]]
    cols["label"] = [[int(p), *map(int, neg)] for p, neg in zip(positives, negatives, strict=True)]
    return cols
