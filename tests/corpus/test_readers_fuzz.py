"""Fuzz the readers with Hypothesis: any bytes or JSON lines give documents or a CorpusFormatError that names
the file (and a line inside it), never another exception."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_hier.corpus import (
    read_beir_corpus,
    read_markdown,
    read_qa_documents,
    read_qa_questions,
    read_qrels,
    read_queries,
    read_text,
)
from rag_hier.errors import CorpusFormatError

READERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "beir": ("corpus.jsonl", read_beir_corpus),
    "qa-docs": ("documents.jsonl", read_qa_documents),
    "questions": ("questions.jsonl", read_qa_questions),
    "queries": ("queries.jsonl", read_queries),
    "queries-tsv": ("queries.tsv", read_queries),
    "qrels": ("qrels.tsv", read_qrels),
    "markdown": ("doc.md", read_markdown),
    "text": ("doc.txt", read_text),
}
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON values, including the field names and shapes the readers look for
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["title", "paragraphs", "sections", "subsections", "text", "x"]) | st.text(max_size=4),
            inner,
            max_size=3,
        )
    ),
    max_leaves=12,
)
FIELDS = ["_id", "doc_id", "qid", "title", "text", "question", "answers", "paragraph_index", "paragraphs",
          "sections", "subsections", "metadata"]  # fmt: skip
records = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
json_lines = st.lists(
    records.map(json.dumps) | st.text(max_size=20) | st.just("") | st.just("[" * 3000), min_size=1, max_size=5
)


def check(reader: Callable[[Path], Any], path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        reader(path)
    except CorpusFormatError as exc:
        message = str(exc)
        assert message.startswith(str(path)), message
        assert exc.path == str(path)
        if exc.line is not None:
            assert 1 <= exc.line <= data.count(b"\n") + 1, (exc.line, message)


@pytest.mark.parametrize("kind", list(READERS))
@FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes(kind: str, data: bytes) -> None:
    name, reader = READERS[kind]
    with tempfile.TemporaryDirectory() as tmp:
        check(reader, Path(tmp) / name, data)


@pytest.mark.parametrize("kind", ["beir", "qa-docs", "questions", "queries"])
@FUZZ
@given(lines=json_lines)
def test_random_json_lines(kind: str, lines: list[str]) -> None:
    name, reader = READERS[kind]
    with tempfile.TemporaryDirectory() as tmp:
        check(reader, Path(tmp) / name, "\n".join(lines).encode("utf-8", "surrogatepass"))


markdown_lines = st.lists(
    st.sampled_from(["---", "...", "# H", "## S", "===", "---", "```", "~~~", "> q", "- i", "    c", "", "text"])
    | st.text(alphabet=st.sampled_from("#-=:[]{}&*!|>`~ ax1\t"), max_size=12),
    max_size=12,
)


@FUZZ
@given(lines=markdown_lines)
def test_random_markdown_and_front_matter(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check(read_markdown, Path(tmp) / "doc.md", "\n".join(lines).encode("utf-8"))
