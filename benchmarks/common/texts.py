"""Passage texts of a chosen length, as real corpora have, for benchmarks that store text.

Short synthetic texts ("passage 17") hide what a store pays per hit for reading and copying text; 100-word
passages are closer to what a RAG pipeline stores (SciFact's passages average ≈ 200 words, XQuAD-en's
paragraphs ≈ 140).
"""

from __future__ import annotations

__all__ = ["passage_texts"]

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "se", "di", "an", "or", "ep", "ul", "ix", "ba", "te")


def _vocabulary(size: int = 4096) -> list[str]:
    words = []
    n = len(_SYLLABLES)
    for i in range(size):
        parts = [_SYLLABLES[i % n], _SYLLABLES[(i // n) % n]]
        if i >= n * n:
            parts.append(_SYLLABLES[(i // (n * n)) % n])
        words.append("".join(parts))
    return words


def passage_texts(n: int, words: int, *, seed: int = 0, prefix: str = "passage") -> list[str]:
    """``n`` texts: ``"<prefix> i:"`` then ``words`` words drawn from a 4,096-word vocabulary (Zipf-like).

    ``words = 0`` gives the short texts ``"<prefix> i"``. Deterministic for a seed.
    """
    if words <= 0:
        return [f"{prefix} {i}" for i in range(n)]
    import numpy as np

    vocabulary = np.array(_vocabulary())
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.1, size=(n, words)) - 1, len(vocabulary) - 1)
    drawn = vocabulary[ranks]
    return [f"{prefix} {i}: " + " ".join(row) for i, row in enumerate(drawn.tolist())]
