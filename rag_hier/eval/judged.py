"""Judged queries read for a store: queries, their judgements at the store's level, and their hygiene.

One reader for everything that scores a store against judgements (``rag-hier eval``, ``rag-hier tune``):

- ``--beir DIR [--split S]`` → ``DIR/queries.jsonl`` and ``DIR/qrels/S.tsv`` (:func:`judged_files`);
- BEIR ``queries.jsonl`` + qrels (TSV or TREC), or QA ``questions.jsonl`` whose gold document / paragraph
  gives the judgements when no qrels are given (paragraph level needs paragraphs kept whole);
- qrels hygiene against the store (judged ids it lacks, unanswerable queries, repeated rows), reported as
  warnings, never dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rag_hier.errors import RagHierError
from rag_hier.eval.hygiene import QrelsHygiene, check_qrels

__all__ = ["JudgedQueries", "default_level", "judged_files", "judged_from_mappings", "load_judged"]


def default_level(store: Any, requested: str | None = None) -> str:
    """``requested``, else the store's natural level: documents for a BEIR corpus, passages otherwise."""
    if requested:
        return requested
    return "doc" if store.corpus_info.get("format") == "beir" else "passage"


def judged_files(
    queries: str | Path | None, qrels: str | Path | None, beir: str | Path | None, split: str
) -> tuple[Path, Path | None]:
    """The queries file and the qrels file (``None``: judgements derived from QA questions)."""
    from rag_hier.corpus.readers import beir_split_files

    if beir:
        if queries or qrels:
            raise RagHierError("--beir reads the queries and qrels from its folder; drop --queries/--qrels")
        return beir_split_files(beir, split)
    if not queries:
        raise RagHierError("give --queries (and --qrels), or a BEIR folder with --beir DIR")
    return Path(queries), Path(qrels) if qrels else None


@dataclass(frozen=True)
class JudgedQueries:
    """Queries with judgements, read for one store.

    Attributes:
        queries: Query id → text, for the judged queries that have text (file order).
        qrels: Query id → {id → grade} for those queries, at ``level``.
        level: ``"doc"`` (ids are document ids) or ``"passage"``.
        hygiene: What is odd in the judgements (counted on the whole file).
        queries_path: The queries file.
        qrels_path: The qrels file (``None``: derived from QA questions).
        known: The judged ids and query ids that the store holds at ``level`` (for the identical-id rule).
        doc_of: For passage-level judgements, the document of each judged passage the store holds.

    """

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    level: str
    hygiene: QrelsHygiene
    queries_path: Path
    qrels_path: Path | None
    known: frozenset[str]
    doc_of: dict[str, str]

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def source(self) -> Path:
        """The file the judgements come from (for messages)."""
        return self.qrels_path if self.qrels_path is not None else self.queries_path

    def warnings(self) -> list[str]:
        """Hygiene warnings, each prefixed with the judgement file's name."""
        return [f"{self.source}: {line}" for line in self.hygiene.warnings(level=self.level)]

    def subset(self, qids: Iterable[str]) -> JudgedQueries:
        """The same judgements for ``qids`` only (in the given order)."""
        keep = [q for q in qids if q in self.queries]
        return replace(self, queries={q: self.queries[q] for q in keep}, qrels={q: self.qrels[q] for q in keep})

    def documents_of(self, qid: str) -> set[str]:
        """The documents a query's relevant (grade > 0) judgements belong to (when known)."""
        ids = [d for d, g in self.qrels.get(qid, {}).items() if g > 0]
        if self.level == "doc":
            return set(ids)
        return {self.doc_of.get(d, d.split("#", 1)[0]) for d in ids}


def _qa_qrels(queries_path: Path, level: str, store: Any) -> dict[str, dict[str, int]]:
    from rag_hier.corpus.readers import qa_qrels, read_qa_questions

    try:
        questions = read_qa_questions(queries_path)
    except Exception as exc:
        raise RagHierError(f"--qrels is required unless --queries is a QA questions.jsonl ({exc})") from exc
    if level != "doc":
        # Paragraph judgements name "<doc_id>#<paragraph index>", which are passage ids only when
        # paragraphs were kept whole; otherwise every score would silently be wrong.
        max_words = store.corpus_info.get("max_passage_words")
        if max_words != 0:
            raise RagHierError(
                f"paragraph-level judgements from {queries_path} need a store indexed with "
                f"--max-passage-words 0 (this one used {max_words}); pass --aggregate doc or --qrels"
            )
    return qa_qrels(questions, "doc" if level == "doc" else "paragraph")


def _known_ids(store: Any, level: str, candidates: Collection[str]) -> tuple[set[str], dict[str, str]]:
    """The ids among ``candidates`` that the store holds at ``level`` (and, for passages, their documents)."""
    if level == "doc":
        return set(candidates) & set(store.document_ids()), {}
    found = store.get_passages(sorted(candidates))
    return {p.id for p in found}, {p.id: p.doc_id for p in found}


def _check_level(store: Any, level: str, judged_ids: set[str], known: set[str], source: Any) -> None:
    """Refuse passage-level scoring of judgements that name the store's documents and none of its passages.

    Scoring them would give 0 for every query (and ``tune`` nothing to train on); the flag that fixes it is named.
    """
    if level != "passage" or known & judged_ids:
        return
    documents = judged_ids & set(store.document_ids())
    if documents:
        example = sorted(documents)[0]
        raise RagHierError(
            f"the judgements of {source} name document ids of this store ({len(documents)} of them, e.g. "
            f"{example!r}), not passage ids: score them at document level with --aggregate doc (Python: "
            "level='doc')"
        )


def load_judged(store: Any, queries_path: Path, qrels_path: Path | None, level: str) -> JudgedQueries:
    """Read queries and judgements as ``rag-hier eval`` does, for ``store`` at ``level``.

    Raises:
        RagHierError: A file that cannot be read (with its line), no query with both text and judgements, or
            passage-level judgements that name the store's document ids (the message names ``--aggregate doc``).

    """
    from rag_hier.corpus.readers import read_qrels_file, read_queries

    queries = read_queries(queries_path)
    qrels_file = read_qrels_file(qrels_path) if qrels_path is not None else None
    qrels = qrels_file.qrels if qrels_file is not None else _qa_qrels(queries_path, level, store)
    qids = [q for q in queries if qrels.get(q)]
    if not qids:
        source = qrels_path if qrels_path is not None else queries_path
        raise RagHierError(
            f"the qrels {source} and the queries {queries_path} share no query id: no query has judgements"
        )
    judged_ids = {d for rel in qrels.values() for d in rel}
    known, doc_of = _known_ids(store, level, judged_ids | set(qids))
    _check_level(store, level, judged_ids, known, qrels_path if qrels_path is not None else queries_path)
    hygiene = check_qrels(
        qrels,
        known_ids=known,
        queries=queries.keys(),
        duplicates=qrels_file.duplicates if qrels_file is not None else (),
    )
    return JudgedQueries(
        queries={q: queries[q] for q in qids},
        qrels={q: dict(qrels[q]) for q in qids},
        level=level,
        hygiene=hygiene,
        queries_path=Path(queries_path),
        qrels_path=Path(qrels_path) if qrels_path is not None else None,
        known=frozenset(known),
        doc_of=doc_of,
    )


def judged_from_mappings(
    store: Any, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], level: str
) -> JudgedQueries:
    """:func:`load_judged` for queries and judgements already in memory (``{qid: text}``, ``{qid: {id: grade}}``).

    Raises:
        RagHierError: Not mappings of strings, or no query with both text and judgements.

    """
    if not isinstance(queries, Mapping) or not isinstance(qrels, Mapping):
        raise RagHierError("queries must be {query id: text} and qrels {query id: {id: grade}}")
    for qid, text in queries.items():
        if not isinstance(qid, str) or not isinstance(text, str):
            raise RagHierError(f"queries: query {qid!r} must map a string id to a string text, got {text!r}")
    clean: dict[str, dict[str, int]] = {}
    for qid, rel in qrels.items():
        if not isinstance(rel, Mapping):
            raise RagHierError(f"qrels: query {qid!r} must map to {{id: grade}}, got {rel!r}")
        for d, g in rel.items():
            if not isinstance(d, str) or isinstance(g, bool) or not isinstance(g, int):
                raise RagHierError(f"qrels: query {qid!r}: {d!r} must map a string id to an integer grade, got {g!r}")
        clean[str(qid)] = dict(rel)
    qids = [q for q in queries if clean.get(q)]
    if not qids:
        raise RagHierError("the queries and the qrels share no query id: no query has judgements")
    judged_ids = {d for rel in clean.values() for d in rel}
    known, doc_of = _known_ids(store, level, judged_ids | set(qids))
    _check_level(store, level, judged_ids, known, "the qrels given")
    hygiene = check_qrels(clean, known_ids=known, queries=queries.keys())
    return JudgedQueries(
        queries={q: queries[q] for q in qids},
        qrels={q: clean[q] for q in qids},
        level=level,
        hygiene=hygiene,
        queries_path=Path("<queries>"),
        qrels_path=Path("<qrels>"),
        known=frozenset(known),
        doc_of=doc_of,
    )
