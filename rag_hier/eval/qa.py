"""Open-domain QA retrieval accuracy: top-k accuracy by gold passage and by answer string.

Answer-string accuracy follows DPR's ``has_answer`` (string mode): the retrieved passage *text* — never its
headings or title path, which the public DHR evaluation wrongly included — is lower-cased, accent-stripped
and tokenised into words and punctuation-free tokens, and an answer counts when its token sequence occurs
in it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from rag_hier.retrieval.hit import Hit

__all__ = ["has_answer", "top_k_accuracy"]

_TOKEN = re.compile(r"\w+", re.UNICODE)


def _tokens(text: str) -> list[str]:
    norm = unicodedata.normalize("NFD", text.lower())
    norm = "".join(c for c in norm if unicodedata.category(c) != "Mn")
    return _TOKEN.findall(norm)


def has_answer(text: str, answers: Iterable[str]) -> bool:
    """Whether any answer's token sequence occurs in ``text`` (case-, accent- and punctuation-insensitive).

    Example:
        >>> has_answer("The Broncos won 24–10.", ["24-10"])
        True
        >>> has_answer("The Broncos won.", ["Panthers"])
        False

    """
    words = _tokens(text)
    for answer in answers:
        target = _tokens(answer)
        if not target:
            continue
        n = len(target)
        if any(words[i : i + n] == target for i in range(len(words) - n + 1)):
            return True
    return False


def top_k_accuracy(
    results: Mapping[str, Sequence[Hit]],
    *,
    ks: Sequence[int] = (1, 5, 20),
    by: Literal["passage", "answer", "document"] = "passage",
    gold: Mapping[str, Iterable[str]] | None = None,
    answers: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, float]:
    """Fraction of queries with a hit in the top ``k``, for each ``k``: ``{"top1": ..., "top5": ...}``.

    Args:
        results: Query id → ranked hits.
        ks: Cut-offs.
        by: ``"passage"``: a hit's passage id is in ``gold[qid]``; ``"document"``: its document id is;
            ``"answer"``: its text contains one of ``answers[qid]`` (:func:`has_answer`).
        gold: Query id → gold passage (or document) ids, for ``by="passage"``/``"document"``.
        answers: Query id → answer strings, for ``by="answer"``.

    Raises:
        ValueError: ``by`` is unknown, its mapping is missing, or a cut-off is < 1.

    """
    if by not in ("passage", "answer", "document"):
        raise ValueError(f"by must be 'passage', 'answer' or 'document', got {by!r}")
    if any(k < 1 for k in ks):
        raise ValueError(f"every cut-off in ks must be >= 1, got {list(ks)}")
    table = answers if by == "answer" else gold
    if table is None:
        raise ValueError(f"by={by!r} needs {'answers' if by == 'answer' else 'gold'}")
    if not results:
        return {f"top{k}": 0.0 for k in ks}
    firsts: list[int | None] = []
    for qid, hits in results.items():
        wanted = list(table.get(qid, ()))
        first = None
        for i, h in enumerate(hits):
            if by == "answer":
                ok = has_answer(h.text, wanted)
            else:
                ok = (h.passage_id if by == "passage" else h.doc_id) in wanted
            if ok:
                first = i
                break
        firsts.append(first)
    n = len(firsts)
    return {f"top{k}": sum(1 for f in firsts if f is not None and f < k) / n for k in ks}
