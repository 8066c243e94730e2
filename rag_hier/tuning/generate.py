"""Questions when the user has none: a generator writes questions for passages; each judges its own passage.

A generator is any callable ``(passage text) -> list[str]`` (the Haystack and LlamaIndex adapters wrap a
``ChatGenerator`` or an ``LLM`` into one, with a prompt, as LlamaIndex's ``generate_qa_embedding_pairs`` does).
Passages are sampled (seeded) up to ``max_passages``; what the generator writes is kept in the store's
``questions`` extension, committed every few passages, so an interrupted run resumes and a second run asks
nothing again (:mod:`rag_hier.store.extensions.questions`). The questions then go through the same split and
adoption rule as real ones.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rag_hier._logging import progress
from rag_hier.errors import RagHierError
from rag_hier.store.extensions.questions import GeneratedQuestions

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_PROMPT", "QuestionGenerator", "generated_judgements", "generator_name", "questions_from_reply"]

DEFAULT_PROMPT = (
    "Context information is below.\n---------------------\n{context}\n---------------------\n"
    "Given the context information and no prior knowledge, write {num_questions} questions that a reader could "
    "answer from this context alone, each on its own line. Write only the questions."
)
"""The prompt the framework adapters send an LLM for each passage (the shape of LlamaIndex's QA prompt)."""


def questions_from_reply(reply: str) -> list[str]:
    """The questions in an LLM's reply: one per line, list markers and numbering removed, empty lines dropped."""
    out = []
    for line in str(reply).splitlines():
        q = re.sub(r"^\s*(?:[-*\u2022]|\(?\d{1,3}[.):]|q\d{1,3}[.):])\s*", "", line, flags=re.IGNORECASE).strip()
        if q:
            out.append(q)
    return out


QuestionGenerator = Callable[[str], Any]
"""``(passage text) -> list[str]``: questions the passage answers."""

_COMMIT_EVERY = 25
"""Passages whose questions are committed together (the most an interrupt loses)."""
_COMMIT_SECONDS = 30.0
_MAX_QUESTION_CHARS = 2000


def generator_name(generator: Any) -> str:
    """A stable name for a generator: its ``name`` attribute, else its module and qualified name."""
    name = getattr(generator, "name", None)
    if isinstance(name, str) and name:
        return name
    func = getattr(generator, "func", generator)  # functools.partial
    module = getattr(func, "__module__", None) or type(func).__module__
    qual = getattr(func, "__qualname__", None) or type(func).__qualname__
    return f"{module}.{qual}"


def _questions(raw: Any, passage_id: str) -> list[str]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)):
        raise RagHierError(
            f"the question generator returned {type(raw).__name__} for passage {passage_id!r}; it must return a "
            "list of strings"
        )
    out = []
    for q in raw:
        if not isinstance(q, str):
            raise RagHierError(f"the question generator returned a {type(q).__name__} for passage {passage_id!r}")
        q = " ".join(q.split())
        if q:
            out.append(q[:_MAX_QUESTION_CHARS])
    return out[:64]


def generated_judgements(
    store: Any,
    generator: QuestionGenerator,
    *,
    level: str,
    max_passages: int = 1000,
    seed: int = 42,
    name: str | None = None,
    show_progress_bar: bool = False,
    say: Callable[[str], None] = logger.info,
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Queries and judgements from generated questions (asked only for passages without cached ones).

    Returns:
        ``(queries, qrels)``: ``gen-<rowid>-<n>`` → question, judged against its passage (``level="passage"``)
        or its document (``"doc"``).

    Raises:
        RagHierError: The generator raised, returned something other than strings, or no question at all.
            Questions generated before the failure stay cached.

    """
    if not callable(generator):
        raise RagHierError(
            f"a question generator must be callable (passage text -> list of questions), got {generator!r}"
        )
    gen_name = name or generator_name(generator)
    rowids = store.rowids_of()
    if rowids.size == 0:
        raise RagHierError(f"the store at {store.location} holds no passages to generate questions for")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(rowids, size=min(max_passages, rowids.size), replace=False)).tolist()
    records = store.records(chosen)
    hashes = store.content_hashes(chosen)
    ext = store.extension("questions")
    cached: dict[int, dict[str, Any]] = {}
    if isinstance(ext, GeneratedQuestions) and ext.generator == gen_name:
        cached = dict(ext.entries)
    todo = [r for r in chosen if r in records and (r not in cached or cached[r]["hash"] != hashes.get(r))]
    say(
        f"questions: {len(chosen) - len(todo)} of {len(chosen)} sampled passages already have questions from "
        f"{gen_name}; asking for {len(todo)}"
    )
    pending: dict[int, dict[str, Any]] = {}
    last = time.monotonic()

    def commit() -> None:
        nonlocal last
        if not pending:
            return
        with store.batch():
            current = store.extension("questions")
            if not isinstance(current, GeneratedQuestions) or current.generator != gen_name:
                current = GeneratedQuestions(gen_name)
                store.add_extension(current, replace=True)
            current.entries.update(pending)
            store.mark_extension_dirty("questions")
        cached.update(pending)
        pending.clear()
        last = time.monotonic()

    try:
        for r in progress(todo, show_progress_bar=show_progress_bar, desc="generating questions", unit="passage"):
            rec = records[r]
            try:
                raw = generator(rec.text)
            except Exception as exc:
                raise RagHierError(
                    f"the question generator {gen_name} failed on passage {rec.passage_id!r}: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            pending[r] = {"hash": hashes.get(r, ""), "questions": _questions(raw, rec.passage_id)}
            if len(pending) >= _COMMIT_EVERY or time.monotonic() - last > _COMMIT_SECONDS:
                commit()
    finally:
        commit()  # what was generated is kept, even when the generator failed or the run was interrupted
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for r in chosen:
        entry = cached.get(r)
        if entry is None or r not in records:
            continue
        target = records[r].doc_id if level == "doc" else records[r].passage_id
        for i, q in enumerate(entry["questions"]):
            qid = f"gen-{r}-{i}"
            queries[qid] = q
            qrels[qid] = {target: 1}
    if not queries:
        raise RagHierError(f"the question generator {gen_name} returned no question for any of {len(chosen)} passages")
    return queries, qrels
