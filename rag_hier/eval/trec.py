"""TREC run files: ``qid Q0 id rank score tag``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rag_hier.errors import CorpusFormatError
from rag_hier.retrieval.hit import Hit

__all__ = ["hits_to_run", "read_run", "write_run"]


def hits_to_run(
    query_ids: Sequence[str], results: Sequence[Sequence[Hit]], *, level: str = "passage"
) -> dict[str, dict[str, float]]:
    """Turn ranked hits into a run dict; ``level="doc"`` keys hits by document id."""
    run: dict[str, dict[str, float]] = {}
    for qid, hits in zip(query_ids, results, strict=True):
        ranked: dict[str, float] = {}
        for h in hits:
            key = h.doc_id if level == "doc" else h.passage_id
            if key not in ranked:
                ranked[key] = h.score
        run[qid] = ranked
    return run


def write_run(run: Mapping[str, Mapping[str, float]], path: str | Path, tag: str = "rag-hier") -> None:
    """Write a run in TREC format, ranks from 1 by descending score."""
    lines = []
    for qid, scores in run.items():
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
        for rank, (doc, score) in enumerate(ranked, start=1):
            lines.append(f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n")
    Path(path).write_text("".join(lines), encoding="utf-8")


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a TREC run file.

    Raises:
        CorpusFormatError: A missing file, a line without 6 columns, a score that is not a number, a
            (query, id) pair listed twice; the message names the file and line.

    """
    p = Path(path)
    if not p.is_file():
        raise CorpusFormatError("run file does not exist", path=str(p))
    run: dict[str, dict[str, float]] = {}
    first_line: dict[tuple[str, str], int] = {}
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise CorpusFormatError(
                    f"expected 6 columns 'qid Q0 id rank score tag', got {len(parts)}", path=str(p), line=n
                )
            try:
                score = float(parts[4])
            except ValueError as exc:
                raise CorpusFormatError(f"score {parts[4]!r} is not a number", path=str(p), line=n) from exc
            first = first_line.setdefault((parts[0], parts[2]), n)
            if first != n:
                raise CorpusFormatError(
                    f"query {parts[0]!r} ranks {parts[2]!r} twice (first on line {first}); a run lists each "
                    "(query, id) pair once",
                    path=str(p),
                    line=n,
                )
            run.setdefault(parts[0], {})[parts[2]] = score
    return run
