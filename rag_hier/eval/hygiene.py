"""Qrels hygiene: what in a set of relevance judgements cannot be answered, or is not what it seems.

Public sets have flaws that silently lower every system's score: judged documents absent from the corpus
(one of BEIR's sets names five), queries whose every relevant document is missing, judgements repeated,
queries judged but absent from the queries file. :func:`check_qrels` counts them so that ``rag-hier
eval`` can say so (warnings, and a ``qrels_hygiene`` block in its JSON). Nothing is dropped: the
figures stay comparable with BEIR's and MTEB's, which score such queries as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass

__all__ = ["QrelsHygiene", "check_qrels"]

_EXAMPLES = 5


@dataclass(frozen=True)
class QrelsHygiene:
    """Counts (and the first few examples) of what is odd in a set of judgements.

    Attributes:
        judged_queries: Queries with at least one judgement.
        judgements: Distinct (query, id) judgements.
        zero_grade: Judgements with grade <= 0 (kept, as non-relevant, as BEIR and trec_eval do).
        duplicate_rows: Rows that repeat an earlier (query, id, grade) row (read once).
        duplicate_examples: ``"query id doc id (line N, first on line M)"`` for the first few.
        missing_ids: Distinct judged ids that the store does not hold (``None``: not checked).
        missing_examples: The first few of them.
        queries_unanswerable: Judged queries none of whose relevant (grade > 0) ids is in the store; they
            score 0 whatever the system does (``None``: not checked).
        unanswerable_examples: The first few of them.
        queries_without_text: Judged queries absent from the queries file; they are not searched and not
            scored (``None``: not checked).
        without_text_examples: The first few of them.

    """

    judged_queries: int
    judgements: int
    zero_grade: int
    duplicate_rows: int = 0
    duplicate_examples: tuple[str, ...] = ()
    missing_ids: int | None = None
    missing_examples: tuple[str, ...] = ()
    queries_unanswerable: int | None = None
    unanswerable_examples: tuple[str, ...] = ()
    queries_without_text: int | None = None
    without_text_examples: tuple[str, ...] = ()

    def warnings(self, *, level: str = "doc") -> list[str]:
        """One line per problem found (none when the judgements are clean)."""
        what = "documents" if level == "doc" else "passages"
        out = []
        if self.missing_ids:
            out.append(
                f"{self.missing_ids} judged {what} are not in the store (e.g. {', '.join(self.missing_examples)})"
            )
        if self.queries_unanswerable:
            out.append(
                f"{self.queries_unanswerable} judged queries have no relevant {what[:-1]} in the store and score 0 "
                f"(e.g. {', '.join(self.unanswerable_examples)})"
            )
        if self.queries_without_text:
            out.append(
                f"{self.queries_without_text} judged queries are not in the queries file and are not scored "
                f"(e.g. {', '.join(self.without_text_examples)})"
            )
        if self.duplicate_rows:
            out.append(
                f"{self.duplicate_rows} qrels rows repeat an earlier row and were read once "
                f"(e.g. {'; '.join(self.duplicate_examples)})"
            )
        return out

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (examples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def check_qrels(
    qrels: Mapping[str, Mapping[str, int]],
    *,
    known_ids: Collection[str] | None = None,
    queries: Collection[str] | None = None,
    duplicates: Sequence[tuple[str, str, int, int]] = (),
) -> QrelsHygiene:
    """Count what is odd in ``qrels``.

    Args:
        qrels: Query id → {id → grade}.
        known_ids: The ids the store holds at the level judged (document or passage ids); ``None`` skips
            the checks that need them. Only membership is tested, so a set is best.
        queries: The query ids that have text; ``None`` skips that check.
        duplicates: Repeated rows as listed by :func:`rag_hier.corpus.read_qrels_file`.

    """
    judged = {q: rel for q, rel in qrels.items() if rel}
    judgements = sum(len(rel) for rel in judged.values())
    zero = sum(1 for rel in judged.values() for g in rel.values() if g <= 0)
    dup_examples = tuple(
        f"{q} {d} (line {line}, first on line {first})" for q, d, line, first in duplicates[:_EXAMPLES]
    )
    fields: dict[str, object] = {}
    if known_ids is not None:
        missing: dict[str, None] = {}
        unanswerable = []
        for q, rel in judged.items():
            for d in rel:
                if d not in known_ids:
                    missing.setdefault(d)
            if not any(g > 0 and d in known_ids for d, g in rel.items()):
                unanswerable.append(q)
        fields.update(
            missing_ids=len(missing),
            missing_examples=tuple(list(missing)[:_EXAMPLES]),
            queries_unanswerable=len(unanswerable),
            unanswerable_examples=tuple(unanswerable[:_EXAMPLES]),
        )
    if queries is not None:
        no_text = [q for q in judged if q not in queries]
        fields.update(queries_without_text=len(no_text), without_text_examples=tuple(no_text[:_EXAMPLES]))
    return QrelsHygiene(
        judged_queries=len(judged),
        judgements=judgements,
        zero_grade=zero,
        duplicate_rows=len(duplicates),
        duplicate_examples=dup_examples,
        **fields,  # type: ignore[arg-type]
    )
