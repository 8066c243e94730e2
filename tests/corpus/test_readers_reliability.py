"""Reader behaviour from the reliability issue: Markdown via markdown-it-py, typed YAML front matter, ids with
control characters, nesting limits, documents without text, QA ``sections`` + ``subsections``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rag_hier.corpus import (
    Section,
    read_beir_corpus,
    read_markdown,
    read_qa_documents,
    read_qa_questions,
    read_qrels,
    read_queries,
    read_text,
    split_document,
)
from rag_hier.errors import CorpusFormatError
from rag_hier.store.filters import compile_filter


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, records: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in records))


# ----------------------------------------------------------------------------------------------------------
# Markdown structure through markdown-it-py
# ----------------------------------------------------------------------------------------------------------


def test_setext_headings_make_the_title_and_sections(tmp_path: Path) -> None:
    text = (
        "The Title\n=========\n\nLead.\n\nFirst Part\n----------\n\nText one.\n\n### Detail\n\nDeep.\n\n"
        "Second Part\n-----------\n\nText two.\n"
    )
    (doc,) = read_markdown(write(tmp_path / "s.md", text))
    assert doc.title == "The Title"
    assert doc.paragraphs == ("Lead.",)
    assert doc.sections == (
        Section("First Part", ("Text one.",), (Section("Detail", ("Deep.",)),)),
        Section("Second Part", ("Text two.",)),
    )
    assert split_document(doc, 0)[2].title_path == ("The Title", "First Part", "Detail")


def test_heading_levels_nest_sections(tmp_path: Path) -> None:
    text = "# T\n\n## A\n\na\n\n### A1\n\na1\n\n#### A1x\n\nx\n\n### A2\n\na2\n\n## B\n\nb\n"
    (doc,) = read_markdown(write(tmp_path / "n.md", text))
    assert [path for path, _ in doc.iter_sections()] == [
        ("A",),
        ("A", "A1"),
        ("A", "A1", "A1x"),
        ("A", "A2"),
        ("B",),
    ]


def test_headings_inside_quotes_and_lists_are_text(tmp_path: Path) -> None:
    text = "# T\n\n> # Quoted\n> text\n\n- # Listed\n- item\n\nAfter.\n"
    (doc,) = read_markdown(write(tmp_path / "q.md", text))
    assert doc.sections == ()
    assert doc.paragraphs == ("> # Quoted\n> text", "- # Listed\n- item", "After.")


def test_paragraph_texts_are_the_source_lines(tmp_path: Path) -> None:
    # the text of a block is its source (markup kept), so passage texts and hashes stay as before the parser
    text = "Some *emphasis* and a [link](http://x).\nSecond line.\n\n- a\n\n- b\n\n    indented code\n\n***\n\nEnd.\n"
    (doc,) = read_markdown(write(tmp_path / "p.md", text))
    assert doc.paragraphs == (
        "Some *emphasis* and a [link](http://x).\nSecond line.",
        "- a",
        "- b",
        "indented code",
        "End.",
    )


# ----------------------------------------------------------------------------------------------------------
# YAML front matter
# ----------------------------------------------------------------------------------------------------------

FRONT_MATTER = """\
---
title: Typed
year: 2021
rating: 4.5
draft: false
date: 2021-03-04
updated: 2021-03-04 10:30:00+02:00
tags: [retrieval, rag]
authors:
  - name: Ada
    id: 1
empty:
quoted: "2021"
---
Body text.
"""


def test_front_matter_keeps_yaml_types(tmp_path: Path) -> None:
    (doc,) = read_markdown(write(tmp_path / "t.md", FRONT_MATTER))
    assert doc.title == "Typed"
    assert doc.metadata == {
        "title": "Typed",
        "year": 2021,
        "rating": 4.5,
        "draft": False,
        "date": "2021-03-04",
        "updated": "2021-03-04T10:30:00+02:00",
        "tags": ["retrieval", "rag"],
        "authors": [{"name": "Ada", "id": 1}],
        "empty": None,
        "quoted": "2021",
        "source": "t.md",
    }


def test_front_matter_values_work_in_filters(tmp_path: Path) -> None:
    # the README's own example: meta.year >= 2020 (it raised when year was the string "2021")
    (doc,) = read_markdown(write(tmp_path / "t.md", FRONT_MATTER))
    (passage,) = split_document(doc, 100)
    record = {"id": passage.id, "doc_id": passage.doc_id, "content": passage.text, "meta": dict(passage.meta)}

    def matches(filters: dict) -> bool:
        predicate = compile_filter(filters)
        assert predicate is not None
        return predicate(record)

    assert matches({"field": "meta.year", "operator": ">=", "value": 2020})
    assert not matches({"field": "meta.year", "operator": ">", "value": 2021})
    assert matches({"field": "meta.date", "operator": ">=", "value": "2021-01-01"})
    assert not matches({"field": "meta.date", "operator": "<", "value": "2021-03-04"})
    assert matches({"field": "meta.updated", "operator": "<", "value": "2021-03-04T09:00:00+00:00"})
    assert matches({"field": "meta.rating", "operator": ">", "value": 4})
    assert matches({"field": "meta.draft", "operator": "==", "value": False})


def test_front_matter_sets_and_odd_keys(tmp_path: Path) -> None:
    text = "---\nkinds: !!set {b, a}\n2021: year key\n2021-01-02: date key\ntrue: bool key\n---\nx\n"
    (doc,) = read_markdown(write(tmp_path / "k.md", text))
    assert doc.metadata["kinds"] == ["a", "b"]
    assert doc.metadata["2021"] == "year key"
    assert doc.metadata["2021-01-02"] == "date key"
    assert doc.metadata["true"] == "bool key"


def test_empty_front_matter_and_numeric_title(tmp_path: Path) -> None:
    (doc,) = read_markdown(write(tmp_path / "e.md", "---\n---\nBody.\n"))
    assert doc.metadata == {"source": "e.md"}
    assert doc.paragraphs == ("Body.",)
    (doc,) = read_markdown(write(tmp_path / "n.md", "---\ntitle: 1984\n---\nBody.\n"))
    assert doc.title == "1984"
    assert doc.metadata["title"] == 1984


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("---\ntitle: ok\ntags: [unclosed\n---\nx\n", 3, "front matter is not valid YAML"),
        ("---\na: b\n  c: d: e\n---\nx\n", 3, "front matter is not valid YAML: mapping values are not allowed"),
        ("---\n- a list\n- not a mapping\n---\nx\n", 1, "must be a YAML mapping of keys to values, got array"),
        ("---\njust text\n---\nx\n", 1, "must be a YAML mapping of keys to values, got string"),
        ("---\nblob: !!binary aGVsbG8=\n---\nx\n", 1, "is binary"),
        ("---\nobj: !!python/object:os.system {}\n---\nx\n", 2, "could not determine a constructor"),
        ("---\n[1, 2]: x\n---\nx\n", 2, "front matter is not valid YAML"),
        ("---\ndeep: " + "[" * 150 + "]" * 150 + "\n---\nx\n", 1, "more than 100 levels deep"),
        ("---\ndeep: " + "[" * 5000 + "]" * 5000 + "\n---\nx\n", 1, "nested too deeply"),
    ],
)
def test_bad_front_matter_names_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = write(tmp_path / "bad.md", text)
    with pytest.raises(CorpusFormatError) as info:
        read_markdown(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_front_matter_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["---", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghij"):
        previous = "abcdefghij"[i]
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 10) + "]")
    path = write(tmp_path / "bomb.md", "\n".join([*lines, "---", "x", ""]))
    with pytest.raises(CorpusFormatError, match="more than 10000 values"):
        read_markdown(path)


# ----------------------------------------------------------------------------------------------------------
# ids with control characters (they would break TREC run lines)
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("char", ["\t", "\n", "\r", "\x0b", "\x00", "\x7f", "\u2028"])
def test_corpus_ids_with_control_characters_are_refused(tmp_path: Path, char: str) -> None:
    path = jsonl(tmp_path / "corpus.jsonl", [{"_id": "ok", "text": "a"}, {"_id": f"bad{char}id", "text": "b"}])
    with pytest.raises(CorpusFormatError, match="control character") as info:
        read_beir_corpus(path)
    assert str(info.value).startswith(f"{path}:2: field '_id'")
    path = jsonl(tmp_path / "documents.jsonl", [{"doc_id": f"d{char}", "paragraphs": ["p"]}])
    with pytest.raises(CorpusFormatError, match=f"^{path}:1: field 'doc_id'.*control character"):
        read_qa_documents(path)


def test_query_and_question_ids_with_control_characters_are_refused(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "queries.jsonl", [{"_id": "q\t1", "text": "x"}])
    with pytest.raises(CorpusFormatError, match=f"^{path}:1: field '_id'.*control character"):
        read_queries(path)
    path = write(tmp_path / "queries.tsv", "q1\tfine\nq\x0b2\tnot fine\n")
    with pytest.raises(CorpusFormatError, match=f"^{path}:2: query id.*control character"):
        read_queries(path)
    path = jsonl(tmp_path / "questions.jsonl", [{"qid": "a", "question": "?", "doc_id": "d\n1"}])
    with pytest.raises(CorpusFormatError, match=f"^{path}:1: field 'doc_id'.*control character"):
        read_qa_questions(path)
    path = write(tmp_path / "qrels.tsv", "q1\td1\t1\nq1\td\x1f2\t1\n")
    with pytest.raises(CorpusFormatError, match=f"^{path}:2: document id.*control character"):
        read_qrels(path)


def test_file_names_with_control_characters_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "md" / "fine.md", "x")
    bad = write(tmp_path / "md" / "tab\there.md", "y")
    with pytest.raises(CorpusFormatError, match="control character") as info:
        read_markdown(tmp_path / "md")
    assert str(info.value).startswith(f"{bad}: doc_id (from the file name)")
    write(tmp_path / "txt" / "new\nline.txt", "z")
    with pytest.raises(CorpusFormatError, match="control character"):
        read_text(tmp_path / "txt")


# ----------------------------------------------------------------------------------------------------------
# nesting depth: never a RecursionError
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [101, 400, 5000])
def test_deeply_nested_records_are_refused_with_their_line(tmp_path: Path, depth: int) -> None:
    deep = "[" * depth + "]" * depth
    path = write(
        tmp_path / "corpus.jsonl",
        '{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y", "metadata": {"m": ' + deep + "}}\n",
    )
    with pytest.raises(CorpusFormatError, match=f"^{path}:2: .*more than 100 levels deep"):
        read_beir_corpus(path)
    path = write(tmp_path / "queries.jsonl", '{"_id": "q", "text": "x", "extra": ' + deep + "}\n")
    with pytest.raises(CorpusFormatError, match=f"^{path}:1: .*more than 100 levels deep"):
        read_queries(path)


def test_nesting_at_the_limit_is_read(tmp_path: Path) -> None:
    # record (1) > metadata (2) > 98 lists = 100 levels
    path = write(
        tmp_path / "corpus.jsonl", '{"_id": "a", "text": "x", "metadata": {"m": ' + "[" * 98 + "]" * 98 + "}}\n"
    )
    (doc,) = read_beir_corpus(path)
    assert doc.doc_id == "a"


def test_deeply_nested_qa_sections_are_refused(tmp_path: Path) -> None:
    section: dict = {"title": "leaf", "paragraphs": ["x"]}
    for _ in range(120):
        section = {"title": "s", "sections": [section]}
    path = jsonl(tmp_path / "documents.jsonl", [{"doc_id": "d", "sections": [section]}])
    with pytest.raises(CorpusFormatError, match=f"^{path}:1: .*more than 100 levels deep"):
        read_qa_documents(path)


# ----------------------------------------------------------------------------------------------------------
# documents without text are reported
# ----------------------------------------------------------------------------------------------------------


def test_documents_without_text_are_reported_with_their_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"_id": "a", "text": "x"},
            {"_id": "empty", "title": "Only a title", "text": ""},
            {"_id": "ws", "text": " \n"},
        ],
    )
    with caplog.at_level(logging.WARNING, logger="rag_hier.corpus.readers"):
        docs = read_beir_corpus(path)
    assert [d.doc_id for d in docs] == ["a", "empty", "ws"]  # read, not dropped
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"{path}: 2 document(s) have no text")
    assert "'empty' (line 2)" in message
    assert "'ws' (line 3)" in message


def test_markdown_and_text_files_without_text_are_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path / "md" / "full.md", "# T\n\ntext\n")
    write(tmp_path / "md" / "heading_only.md", "# Just A Heading\n\n## And A Section\n")
    write(tmp_path / "txt" / "blank.txt", "\n \n")
    with caplog.at_level(logging.WARNING, logger="rag_hier.corpus.readers"):
        read_markdown(tmp_path / "md")
        read_text(tmp_path / "txt")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "1 document(s) have no text" in messages[0] and "'heading_only'" in messages[0]
    assert "'blank'" in messages[1]


def test_many_documents_without_text_give_one_short_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = jsonl(tmp_path / "corpus.jsonl", [{"_id": f"e{i}", "text": ""} for i in range(40)])
    with caplog.at_level(logging.WARNING, logger="rag_hier.corpus.readers"):
        read_beir_corpus(path)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "40 document(s)" in message
    assert "and 35 more" in message


# ----------------------------------------------------------------------------------------------------------
# QA documents: sections and subsections
# ----------------------------------------------------------------------------------------------------------


def test_qa_document_keeps_sections_and_subsections(tmp_path: Path) -> None:
    record = {
        "doc_id": "d",
        "sections": [
            {
                "title": "A",
                "paragraphs": ["a"],
                "sections": [{"title": "A1", "paragraphs": ["a1"]}],
                "subsections": [{"title": "A2", "paragraphs": ["a2"]}],
            }
        ],
        "subsections": [{"title": "B", "paragraphs": ["b"]}],
    }
    (doc,) = read_qa_documents(jsonl(tmp_path / "documents.jsonl", [record]))
    assert doc.table_of_contents() == ["A", "A1", "A2", "B"]
    assert [p.text for p in split_document(doc, 0)] == ["a", "a1", "a2", "b"]


def test_qa_document_with_only_subsections(tmp_path: Path) -> None:
    (doc,) = read_qa_documents(
        jsonl(tmp_path / "documents.jsonl", [{"doc_id": "d", "subsections": [{"title": "S", "paragraphs": ["s"]}]}])
    )
    assert doc.sections == (Section("S", ("s",)),)


def test_qa_subsections_of_the_wrong_type(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "documents.jsonl", [{"doc_id": "d", "paragraphs": ["p"], "subsections": {"title": "S"}}])
    with pytest.raises(CorpusFormatError, match=f"^{path}:1: field 'subsections' must be a list, got object"):
        read_qa_documents(path)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ('{"_id": "d1", "text": "a", "text": "b"}', "the key 'text' appears twice in one object"),
        ('{"_id": "d1", "text": "a", "metadata": {"y": 1, "y": 2}}', "the key 'y' appears twice"),
        ('{"_id": "d1", "text": "a", "metadata": {"score": NaN}}', "NaN is not a JSON number"),
        ('{"_id": "d1", "text": "a", "metadata": {"score": -Infinity}}', "-Infinity is not a JSON number"),
    ],
)
def test_ambiguous_json_records_name_the_file_and_line(tmp_path: Path, line: str, fragment: str) -> None:
    path = write(tmp_path / "corpus.jsonl", '{"_id": "d0", "text": "fine"}\n' + line + "\n")
    with pytest.raises(CorpusFormatError) as info:
        read_beir_corpus(path)
    assert str(info.value).startswith(f"{path}:2: ") and fragment in str(info.value)
    queries = write(tmp_path / "queries.jsonl", '{"_id": "q1", "_id": "q2", "text": "x"}\n')
    with pytest.raises(CorpusFormatError, match="the key '_id' appears twice"):
        read_queries(queries)
