"""Sentence boundaries for the passage splitter, from the ``sentencex`` segmenter.

``sentencex`` (Wikimedia; rule-based, about 300 languages, a compiled extension with no model files to
download) finds the boundaries. It was chosen over ``pysbd`` (pure Python, about 100 times slower on
SciFact abstracts and unreleased since 2021), ``blingfire`` (fast but unreleased since 2021) and
``syntok`` (English-centric, about 25 times slower); see ``docs/corpus.md`` for the comparison.

The splitter needs one guarantee a segmenter does not give: that joining the sentences gives back the
text. Segmenters sometimes cut inside a run of non-space characters (``"H2A.X"`` becomes ``"H2A."`` and
``"X"``); :func:`split_sentences` keeps only boundaries that fall on whitespace, so the words of the
sentences are exactly the words of the text, in order.
"""

from __future__ import annotations

import itertools

import sentencex

__all__ = ["split_sentences"]


def split_sentences(text: str, language: str = "en") -> list[str]:
    """Split ``text`` into sentences with runs of whitespace collapsed to one space.

    ``" ".join(split_sentences(t)) == " ".join(t.split())`` for every string ``t``: boundaries are kept
    only where the text has whitespace, and nothing is dropped or changed.

    Args:
        text: Any text; line breaks count as spaces (pass paragraphs one at a time to keep paragraph
            ends as boundaries).
        language: An ISO 639 language code for the segmenter's abbreviation rules (unknown codes fall
            back to generic rules).

    Returns:
        The sentences, none empty; ``[]`` for a text with no words.

    """
    normalized = " ".join(text.split())
    if not normalized:
        return []
    cuts: list[int] = []
    position = 0
    for segment in sentencex.segment(language, normalized):
        if not normalized.startswith(segment, position):
            return [normalized]  # the segmenter changed the text: keep it whole rather than guess
        position += len(segment)
        if position < len(normalized) and (normalized[position - 1] == " " or normalized[position] == " "):
            cuts.append(position)
    if position != len(normalized):
        return [normalized]
    bounds = [0, *cuts, len(normalized)]
    sentences = (normalized[start:end].strip() for start, end in itertools.pairwise(bounds))
    return [s for s in sentences if s]
