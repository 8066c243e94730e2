"""Tests for the corpus, queries and qrels readers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from rag_hier.corpus import (
    CORPUS_FORMATS,
    Document,
    QAQuestion,
    Section,
    detect_format,
    qa_qrels,
    read_beir_corpus,
    read_corpus,
    read_markdown,
    read_qa_documents,
    read_qa_questions,
    read_qrels,
    read_queries,
    read_text,
    split_document,
)
from rag_hier.errors import CorpusFormatError

# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------


def write_lines(path: Path, lines: list[str]) -> Path:
    """Write ``lines`` (one per line) to ``path``, gzipped when the name ends in ``.gz``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(f"{line}\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def write_jsonl(path: Path, records: list[Any]) -> Path:
    """Write JSONL: dicts/lists are dumped, strings are written verbatim (blank or malformed lines)."""
    return write_lines(path, [r if isinstance(r, str) else json.dumps(r) for r in records])


def raises_at(path: Path, line: int | None, *fragments: str) -> Any:
    """Context manager: a CorpusFormatError whose message names ``path`` (and ``line``) and ``fragments``."""

    class _Check:
        def __enter__(self) -> None:
            self._ctx = pytest.raises(CorpusFormatError)
            self.info = self._ctx.__enter__()

        def __exit__(self, *exc: Any) -> bool:
            handled = self._ctx.__exit__(*exc)
            message = str(self.info.value)
            where = f"{path}:{line}: " if line is not None else f"{path}: "
            assert message.startswith(where), message
            assert path.name in message
            for fragment in fragments:
                assert fragment in message, message
            assert self.info.value.path == str(path)
            assert self.info.value.line == line
            return bool(handled)

    return _Check()


BEIR_RECORDS = [
    {"_id": "d1", "title": "First", "text": "Alpha text.", "metadata": {"year": 2020}},
    {"_id": 2, "title": None, "text": "Beta text."},
    {"_id": "d3", "title": "Empty", "text": "", "metadata": None},
]


# ----------------------------------------------------------------------------------------------------------
# BEIR corpus
# ----------------------------------------------------------------------------------------------------------


def test_read_beir_corpus_maps_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", [BEIR_RECORDS[0], "", "   ", *BEIR_RECORDS[1:]])
    docs = read_beir_corpus(path)
    assert docs == [
        Document("d1", "First", ("Alpha text.",), metadata={"year": 2020}),
        Document("2", "", ("Beta text.",), metadata={}),
        Document("d3", "Empty", (), metadata={}),
    ]


@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.jsonl.gz"])
def test_read_beir_corpus_file_or_directory(tmp_path: Path, name: str) -> None:
    path = write_jsonl(tmp_path / name, BEIR_RECORDS)
    assert [d.doc_id for d in read_beir_corpus(path)] == ["d1", "2", "d3"]
    assert [d.doc_id for d in read_beir_corpus(tmp_path)] == ["d1", "2", "d3"]
    assert [d.doc_id for d in read_beir_corpus(str(tmp_path))] == ["d1", "2", "d3"]


def test_read_beir_corpus_directory_without_corpus(tmp_path: Path) -> None:
    with raises_at(tmp_path, None, "corpus.jsonl"):
        read_beir_corpus(tmp_path)


# ----------------------------------------------------------------------------------------------------------
# QA / structured documents
# ----------------------------------------------------------------------------------------------------------

QA_RECORDS = [
    {"doc_id": "flat", "title": "Flat", "paragraphs": ["p0", "p1", "p2"]},
    {
        "doc_id": "nested",
        "title": "Nested",
        "paragraphs": ["lead"],
        "sections": [
            {"title": "A", "paragraphs": ["a"], "sections": [{"title": "A1", "paragraphs": ["a1"]}]},
            {"title": "B", "paragraphs": ["b"]},
        ],
        "metadata": {"lang": "en"},
    },
    {"doc_id": "sections-only", "sections": [{"title": "S", "paragraphs": ["s"]}]},
]


def test_read_qa_documents(tmp_path: Path) -> None:
    docs = read_qa_documents(write_jsonl(tmp_path / "documents.jsonl", QA_RECORDS))
    flat, nested, sections_only = docs
    assert flat == Document("flat", "Flat", ("p0", "p1", "p2"))
    assert nested.sections == (Section("A", ("a",), (Section("A1", ("a1",)),)), Section("B", ("b",)))
    assert nested.paragraphs == ("lead",)
    assert nested.metadata == {"lang": "en"}
    assert nested.table_of_contents() == ["A", "A1", "B"]
    assert sections_only.title == ""
    assert sections_only.paragraphs == ()
    assert sections_only.sections == (Section("S", ("s",)),)
    # Paragraph i of a flat document is passage <doc_id>#i.
    assert [p.id for p in split_document(flat, max_words=0)] == ["flat#0", "flat#1", "flat#2"]


@pytest.mark.parametrize("name", ["documents.jsonl", "documents.jsonl.gz"])
def test_read_qa_documents_directory_and_gzip(tmp_path: Path, name: str) -> None:
    write_jsonl(tmp_path / name, QA_RECORDS)
    assert [d.doc_id for d in read_qa_documents(tmp_path)] == ["flat", "nested", "sections-only"]


# ----------------------------------------------------------------------------------------------------------
# JSONL errors (file name and line number in every message)
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reader",
    [
        read_beir_corpus,
        read_qa_documents,
        read_markdown,
        read_text,
        read_corpus,
        read_queries,
        read_qrels,
        read_qa_questions,
        detect_format,
    ],
)
def test_missing_path(tmp_path: Path, reader: Any) -> None:
    missing = tmp_path / "nope" / "corpus.jsonl"
    with raises_at(missing, None, "does not exist"):
        reader(missing)


def test_malformed_json_names_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", [BEIR_RECORDS[0], "", '{"_id": "x", "text": '])
    with raises_at(path, 3, "malformed JSON"):
        read_beir_corpus(path)


def test_malformed_json_in_gzip_names_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "documents.jsonl.gz", [QA_RECORDS[0], "not json"])
    with raises_at(path, 2, "malformed JSON"):
        read_qa_documents(path)


@pytest.mark.parametrize("value", ['["a", "b"]', '"text"', "3", "null"])
def test_record_not_an_object(tmp_path: Path, value: str) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", [BEIR_RECORDS[0], value])
    with raises_at(path, 2, "expected a JSON object"):
        read_beir_corpus(path)


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"title": "t", "text": "x"}, "'_id'"),
        ({"_id": None, "text": "x"}, "'_id'"),
        ({"_id": "a", "title": "t"}, "'text'"),
    ],
)
def test_beir_missing_field(tmp_path: Path, record: dict[str, Any], field: str) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", [BEIR_RECORDS[0], record])
    with raises_at(path, 2, "missing required field", field):
        read_beir_corpus(path)


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({"paragraphs": ["x"]}, "missing required field 'doc_id'"),
        ({"doc_id": "x", "title": "t"}, "missing required field 'paragraphs'"),
    ],
)
def test_qa_missing_field(tmp_path: Path, record: dict[str, Any], fragment: str) -> None:
    path = write_jsonl(tmp_path / "documents.jsonl", [QA_RECORDS[0], record])
    with raises_at(path, 2, fragment):
        read_qa_documents(path)


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({"_id": ["a"], "text": "x"}, "'_id' must be a string, got array"),
        ({"_id": True, "text": "x"}, "'_id' must be a string, got boolean"),
        ({"_id": " ", "text": "x"}, "'_id' must not be empty"),
        ({"_id": "a", "text": 5}, "'text' must be a string, got number"),
        ({"_id": "a", "text": "x", "title": 1}, "'title' must be a string"),
        ({"_id": "a", "text": "x", "metadata": [1]}, "'metadata' must be an object, got array"),
    ],
)
def test_beir_wrong_type(tmp_path: Path, record: dict[str, Any], fragment: str) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", ["", record])
    with raises_at(path, 2, fragment):
        read_beir_corpus(path)


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({"doc_id": "a", "paragraphs": "one string"}, "'paragraphs' must be a list of strings, got string"),
        (
            {"doc_id": "a", "paragraphs": ["ok", 3]},
            "'paragraphs' must be a list of strings, got number at index 1",
        ),
        ({"doc_id": "a", "sections": {"title": "x"}}, "'sections' must be a list, got object"),
        ({"doc_id": "a", "sections": ["x"]}, "'sections[0]' must be an object, got string"),
        ({"doc_id": "a", "sections": [{"title": 2}]}, "'sections[0].title' must be a string"),
        (
            {"doc_id": "a", "sections": [{"title": "A", "sections": [{"paragraphs": [None]}]}]},
            "'sections[0].sections[0].paragraphs' must be a list of strings, got null at index 0",
        ),
        ({"doc_id": "a", "sections": [{"subsections": "x"}]}, "'sections[0].subsections' must be a list"),
        ({"doc_id": "a", "paragraphs": [], "metadata": "x"}, "'metadata' must be an object"),
    ],
)
def test_qa_wrong_type(tmp_path: Path, record: dict[str, Any], fragment: str) -> None:
    path = write_jsonl(tmp_path / "documents.jsonl", [QA_RECORDS[0], QA_RECORDS[1], record])
    with raises_at(path, 3, fragment):
        read_qa_documents(path)


def test_duplicate_doc_id_names_both_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "corpus.jsonl", [BEIR_RECORDS[0], "", {"_id": "x", "text": "t"}, BEIR_RECORDS[0]])
    with raises_at(path, 4, "duplicate doc_id 'd1'", "line 1", "line 4"):
        read_beir_corpus(path)
    path = write_jsonl(tmp_path / "documents.jsonl", [QA_RECORDS[0], {"doc_id": "flat", "paragraphs": []}])
    with raises_at(path, 2, "duplicate doc_id 'flat'", "line 1", "line 2"):
        read_qa_documents(path)


@pytest.mark.parametrize("reader", [read_beir_corpus, read_qa_documents])
@pytest.mark.parametrize("content", [[], ["", "  "]])
def test_empty_corpus(tmp_path: Path, reader: Any, content: list[str]) -> None:
    path = write_lines(tmp_path / "corpus.jsonl", content)
    with raises_at(path, None, "no documents"):
        reader(path)


def test_invalid_utf8_names_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(json.dumps(BEIR_RECORDS[0]).encode() + b'\n{"_id": "\xff", "text": ""}\n')
    with raises_at(path, 2, "not valid UTF-8"):
        read_beir_corpus(path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl.gz"
    path.write_bytes(b"this is not gzip data")
    with pytest.raises(CorpusFormatError, match="cannot read file") as info:
        read_beir_corpus(path)
    assert str(path) in str(info.value)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl.gz"
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in BEIR_RECORDS * 50).encode())
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusFormatError, match="cannot read file") as info:
        read_beir_corpus(path)
    assert str(path) in str(info.value)


def test_utf8_bom_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(BEIR_RECORDS[0]).encode() + b"\r\n")
    assert read_beir_corpus(path)[0].doc_id == "d1"


# ----------------------------------------------------------------------------------------------------------
# Markdown
# ----------------------------------------------------------------------------------------------------------

MARKDOWN = """\
---
author: Ada
date: "2024-01-02"
# a comment
tags:
  - nested lists are kept
---
# Main Title

Lead paragraph one,
continued on a second line.

Lead paragraph two.

## Section A ##

Text of A.

```python
# not a heading
x = 1

y = 2
```

### Sub A1

Text of A1.

***

After a thematic break.

#### Deep

Deep text.

## Section B

Text of B.
#hashtag is not a heading

# Second Level One

Text under a second H1.
"""


def test_markdown_structure(tmp_path: Path) -> None:
    (doc,) = read_markdown(write_lines(tmp_path / "guide.md", [MARKDOWN]))
    assert doc.doc_id == "guide"
    assert doc.title == "Main Title"
    # YAML: quotes are stripped, comments skipped, nested lists kept as lists.
    assert doc.metadata == {
        "author": "Ada",
        "date": "2024-01-02",
        "tags": ["nested lists are kept"],
        "source": "guide.md",
    }
    assert doc.paragraphs == ("Lead paragraph one,\ncontinued on a second line.", "Lead paragraph two.")
    a, b, h1 = doc.sections
    assert a.title == "Section A"
    assert a.paragraphs == ("Text of A.", "# not a heading\nx = 1\n\ny = 2")
    (a1,) = a.subsections
    assert a1 == Section("Sub A1", ("Text of A1.", "After a thematic break."), (Section("Deep", ("Deep text.",)),))
    assert b == Section("Section B", ("Text of B.\n#hashtag is not a heading",))
    assert h1 == Section("Second Level One", ("Text under a second H1.",))
    assert doc.table_of_contents() == ["Section A", "Sub A1", "Deep", "Section B", "Second Level One"]
    passages = split_document(doc, max_words=0)
    assert passages[3].text.startswith("# not a heading")
    assert passages[4].title_path == ("Main Title", "Section A", "Sub A1")


def test_markdown_title_only_when_first(tmp_path: Path) -> None:
    text = "Some intro text.\n\n# Not The Title\n\nBody.\n"
    (doc,) = read_markdown(write_lines(tmp_path / "my_notes-file.md", [text]))
    assert doc.title == "my notes file"
    assert doc.paragraphs == ("Some intro text.",)
    assert doc.sections == (Section("Not The Title", ("Body.",)),)

    (doc,) = read_markdown(write_lines(tmp_path / "x" / "heading_first.md", ["## Sub\n\ntext\n\n# Late H1\n"]))
    assert doc.title == "heading first"
    assert doc.sections == (Section("Sub", ("text",)), Section("Late H1"))


def test_markdown_front_matter_title_is_a_fallback(tmp_path: Path) -> None:
    (doc,) = read_markdown(write_lines(tmp_path / "a.md", ["---\ntitle: 'From Front Matter'\n---\nBody."]))
    assert doc.title == "From Front Matter"
    assert doc.paragraphs == ("Body.",)
    (doc,) = read_markdown(write_lines(tmp_path / "b.md", ["---\ntitle: FM\n---\n# Heading Title\n"]))
    assert doc.title == "Heading Title"


def test_markdown_skipped_heading_levels_nest_relatively(tmp_path: Path) -> None:
    text = "# T\n\n### Deep first\n\nd\n\n## Two\n\n#### Four\n\nf\n\n### Three\n"
    (doc,) = read_markdown(write_lines(tmp_path / "t.md", [text]))
    assert doc.sections == (
        Section("Deep first", ("d",)),
        Section("Two", (), (Section("Four", ("f",)), Section("Three"))),
    )


def test_markdown_unclosed_front_matter_and_fence(tmp_path: Path) -> None:
    (doc,) = read_markdown(write_lines(tmp_path / "t.md", ["---\nnot: front matter\n\n~~~\ncode\n\n# inside"]))
    assert doc.metadata == {"source": "t.md"}
    assert doc.paragraphs == ("not: front matter", "code\n\n# inside")


def test_markdown_directory(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    write_lines(root / "zeta.md", ["# Zeta\n\nz"])
    write_lines(root / "alpha.markdown", ["# Alpha\n\na"])
    write_lines(root / "guide" / "intro.md", ["# Intro\n\ni"])
    write_lines(root / "guide" / "notes.txt", ["ignored"])
    write_lines(root / ".hidden" / "secret.md", ["# Hidden"])
    docs = read_markdown(root)
    assert [d.doc_id for d in docs] == ["alpha", "guide/intro", "zeta"]
    assert [d.metadata["source"] for d in docs] == ["alpha.markdown", "guide/intro.md", "zeta.md"]
    assert [d.title for d in docs] == ["Alpha", "Intro", "Zeta"]
    (single,) = read_markdown(root / "guide" / "intro.md")
    assert single.doc_id == "intro"
    assert single.metadata == {"source": "intro.md"}


def test_markdown_duplicate_doc_id(tmp_path: Path) -> None:
    write_lines(tmp_path / "a.md", ["x"])
    write_lines(tmp_path / "a.markdown", ["y"])
    with raises_at(tmp_path / "a.md", None, "duplicate doc_id 'a'", "a.markdown"):
        read_markdown(tmp_path)


def test_markdown_empty_directory(tmp_path: Path) -> None:
    write_lines(tmp_path / "only.txt", ["text"])
    with raises_at(tmp_path, None, "no documents", "*.md"):
        read_markdown(tmp_path)


def test_markdown_invalid_utf8_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.md"
    path.write_bytes(b"# T\n\nfine\n\xff broken\n")
    with raises_at(path, 4, "not valid UTF-8"):
        read_markdown(path)


# ----------------------------------------------------------------------------------------------------------
# Plain text
# ----------------------------------------------------------------------------------------------------------


def test_read_text(tmp_path: Path) -> None:
    root = tmp_path / "texts"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "field_notes-2024.txt").write_bytes(b"First para\r\nline two\r\n\r\n  \r\nSecond para\r\n")
    write_lines(root / "a.txt", [""])
    write_lines(root / "b.md", ["# not text"])
    docs = read_text(root)
    assert [d.doc_id for d in docs] == ["a", "sub/field_notes-2024"]
    empty, notes = docs
    assert empty.paragraphs == ()
    assert notes.title == "field notes 2024"
    assert notes.paragraphs == ("First para\nline two", "Second para")
    assert notes.metadata == {"source": "sub/field_notes-2024.txt"}
    (single,) = read_text(root / "a.txt")
    assert single == Document("a", "a", (), metadata={"source": "a.txt"})


def test_read_text_empty_directory(tmp_path: Path) -> None:
    with raises_at(tmp_path, None, "no documents", "*.txt"):
        read_text(tmp_path)


# ----------------------------------------------------------------------------------------------------------
# Format detection and read_corpus
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "target", "expected"),
    [
        ({"corpus.jsonl": BEIR_RECORDS}, ".", "beir"),
        ({"corpus.jsonl.gz": BEIR_RECORDS}, ".", "beir"),
        ({"documents.jsonl": QA_RECORDS}, ".", "qa-docs"),
        ({"documents.jsonl.gz": QA_RECORDS}, ".", "qa-docs"),
        ({"c.jsonl": BEIR_RECORDS}, "c.jsonl", "beir"),
        ({"c.jsonl.gz": BEIR_RECORDS}, "c.jsonl.gz", "beir"),
        ({"d.jsonl": ["", *QA_RECORDS]}, "d.jsonl", "qa-docs"),
        ({"a.md": "# A", "b.txt": "b"}, ".", "markdown"),
        ({"sub/a.markdown": "# A"}, ".", "markdown"),
        ({"sub/a.txt": "a", "b.txt": "b"}, ".", "text"),
        ({"a.md": "# A"}, "a.md", "markdown"),
        ({"a.txt": "a"}, "a.txt", "text"),
    ],
)
def test_detect_format_and_read_corpus(tmp_path: Path, files: dict[str, Any], target: str, expected: str) -> None:
    for name, content in files.items():
        if isinstance(content, list):
            write_jsonl(tmp_path / name, content)
        else:
            write_lines(tmp_path / name, [content])
    path = tmp_path / target
    assert detect_format(path) == expected
    assert read_corpus(path) == read_corpus(path, format=expected)
    assert read_corpus(path)


def test_read_corpus_explicit_format_overrides_detection(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "notes.md", ["# Title", "", "body"])
    (doc,) = read_corpus(path, format="text")
    assert doc.paragraphs == ("# Title", "body")


def test_read_corpus_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(CorpusFormatError) as info:
        read_corpus(tmp_path, format="csv")
    message = str(info.value)
    assert "'csv'" in message
    assert all(fmt in message for fmt in CORPUS_FORMATS)


def test_detect_format_failures(tmp_path: Path) -> None:
    with raises_at(tmp_path, None, "cannot detect"):
        detect_format(tmp_path)
    path = write_jsonl(tmp_path / "x.jsonl", ["", {"id": 1}])
    with raises_at(path, 2, "neither '_id' nor 'doc_id'"):
        detect_format(path)
    path = write_lines(tmp_path / "empty.jsonl", [""])
    with raises_at(path, None, "no records"):
        detect_format(path)
    path = write_lines(tmp_path / "data.csv", ["a,b"])
    with raises_at(path, None, "cannot detect", "format="):
        read_corpus(path)


# ----------------------------------------------------------------------------------------------------------
# Queries
# ----------------------------------------------------------------------------------------------------------


def test_read_queries_beir_preserves_order(tmp_path: Path) -> None:
    records = [
        {"_id": "q9", "text": "nine", "metadata": {}},
        "",
        {"_id": 1, "text": "one"},
        {"_id": "q5", "text": ""},
    ]
    queries = read_queries(write_jsonl(tmp_path / "queries.jsonl", records))
    assert list(queries.items()) == [("q9", "nine"), ("1", "one"), ("q5", "")]
    assert read_queries(tmp_path) == queries


def test_read_queries_qa_questions_gzip(tmp_path: Path) -> None:
    records = [{"qid": "b", "question": "Why?", "answers": ["x"]}, {"qid": "a", "question": "How?"}]
    path = write_jsonl(tmp_path / "questions.jsonl.gz", records)
    assert list(read_queries(path).items()) == [("b", "Why?"), ("a", "How?")]
    assert read_queries(tmp_path) == {"b": "Why?", "a": "How?"}


@pytest.mark.parametrize("header", [[], ["query-id\ttext"], ["qid\tquery"]])
def test_read_queries_tsv(tmp_path: Path, header: list[str]) -> None:
    path = write_lines(tmp_path / "queries.tsv", [*header, "q2\tsecond query", "", "q1\tfirst\twith a tab"])
    assert list(read_queries(path).items()) == [("q2", "second query"), ("q1", "first\twith a tab")]


def test_read_queries_errors(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "a"}, {"query": "b"}])
    with raises_at(path, 2, "missing required field", "'_id'", "'qid'"):
        read_queries(path)
    path = write_jsonl(tmp_path / "q2.jsonl", [{"qid": "q1"}])
    with raises_at(path, 1, "missing required field 'question'"):
        read_queries(path)
    path = write_jsonl(tmp_path / "q3.jsonl", [{"_id": "q1", "text": "a"}, {"_id": "q1", "text": "b"}])
    with raises_at(path, 2, "duplicate query id 'q1'", "line 1"):
        read_queries(path)
    path = write_lines(tmp_path / "q.tsv", ["q1\tok", "q2 no tab"])
    with raises_at(path, 2, "expected 2 tab-separated columns"):
        read_queries(path)
    path = write_lines(tmp_path / "empty.tsv", ["", ""])
    with raises_at(path, None, "no queries"):
        read_queries(path)


# ----------------------------------------------------------------------------------------------------------
# Qrels
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        ("qrels.tsv", ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q1\td2\t2", "", "q2\td1\t0"]),
        ("qrels.tsv", ["q1\td1\t1", "q1\td2\t2", "q2\td1\t0"]),
        ("qrels.tsv.gz", ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q1\td2\t2.0", "q2\td1\t0"]),
        ("qrels.txt", ["q1 0 d1 1", "q1\t0\td2\t2", "q2  Q0  d1  0"]),
        ("test.qrels", ["q1 0 d1 1", "q1 0 d2 2", "q1 0 d2 2", "q2 0 d1 0"]),
    ],
)
def test_read_qrels_layouts(tmp_path: Path, name: str, lines: list[str]) -> None:
    qrels = read_qrels(write_lines(tmp_path / name, lines))
    assert qrels == {"q1": {"d1": 1, "d2": 2}, "q2": {"d1": 0}}


@pytest.mark.parametrize(
    ("lines", "line", "fragment"),
    [
        (["q1\td1\t1", "q1\td2"], 2, "expected 3 columns"),
        (["q1\td1\t1", "q1 0 d2 1"], 2, "expected 3 columns (query-id, corpus-id, score), got 4"),
        (["q1\td1", "q1\td2\t1"], 1, "expected 3 columns (query-id, corpus-id, score) or 4"),
        (["query-id\tcorpus-id\tscore", "q1\td1\thigh"], 2, "score must be an integer, got 'high'"),
        (["q1\td1\t1", "q1\td2\t0.5"], 2, "score must be an integer"),
        (["q1\td1\t1", "q2\td1\t1", "q1\td1\t2"], 3, "'q1' and document 'd1': 1 on line 1, 2 on line 3"),
    ],
)
def test_read_qrels_errors(tmp_path: Path, lines: list[str], line: int, fragment: str) -> None:
    path = write_lines(tmp_path / "qrels.tsv", lines)
    with raises_at(path, line, fragment):
        read_qrels(path)


def test_read_qrels_empty(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "qrels.tsv", ["query-id\tcorpus-id\tscore"])
    with raises_at(path, None, "no relevance judgements"):
        read_qrels(path)


# ----------------------------------------------------------------------------------------------------------
# QA questions and their qrels
# ----------------------------------------------------------------------------------------------------------

QUESTIONS = [
    {
        "qid": "q1",
        "question": "Who?",
        "answers": ["Ada"],
        "answer_starts": [3],
        "doc_id": "D",
        "paragraph_index": 2,
    },
    {"qid": "q2", "question": "What?", "doc_id": "E"},
    {"qid": 3, "question": "When?", "answers": [], "doc_id": "D", "paragraph_index": 0},
]


def test_read_qa_questions(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)
    questions = read_qa_questions(path)
    assert questions == [
        QAQuestion("q1", "Who?", ("Ada",), "D", 2),
        QAQuestion("q2", "What?", (), "E", None),
        QAQuestion("3", "When?", (), "D", 0),
    ]
    assert read_qa_questions(tmp_path) == questions
    assert qa_qrels(questions, "doc") == {"q1": {"D": 1}, "q2": {"E": 1}, "3": {"D": 1}}
    with pytest.raises(CorpusFormatError, match="'q2' has no paragraph_index"):
        qa_qrels(questions, "paragraph")
    with_index = [q for q in questions if q.paragraph_index is not None]
    assert qa_qrels(with_index, "paragraph") == {"q1": {"D#2": 1}, "3": {"D#0": 1}}
    with pytest.raises(CorpusFormatError, match="'doc' or 'paragraph'"):
        qa_qrels(questions, "passage")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({"question": "x", "doc_id": "d"}, "missing required field 'qid'"),
        ({"qid": "a", "doc_id": "d"}, "missing required field 'question'"),
        ({"qid": "a", "question": "x"}, "missing required field 'doc_id'"),
        ({"qid": "a", "question": "x", "doc_id": "d", "answers": "y"}, "'answers' must be a list of strings"),
        ({"qid": "a", "question": "x", "doc_id": "d", "paragraph_index": "1"}, "'paragraph_index' must be"),
        ({"qid": "a", "question": "x", "doc_id": "d", "paragraph_index": -1}, "'paragraph_index' must be"),
        ({"qid": "q1", "question": "x", "doc_id": "d"}, "duplicate qid 'q1'"),
    ],
)
def test_read_qa_questions_errors(tmp_path: Path, record: dict[str, Any], fragment: str) -> None:
    path = write_jsonl(tmp_path / "questions.jsonl", [QUESTIONS[0], record])
    with raises_at(path, 2, fragment):
        read_qa_questions(path)


# ----------------------------------------------------------------------------------------------------------
# The shipped example corpus
# ----------------------------------------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_example_corpus_is_consistent() -> None:
    if not (EXAMPLES / "corpus").is_dir():
        pytest.skip("examples/corpus not present")
    docs = read_corpus(EXAMPLES / "corpus")
    assert 8 <= len(docs) <= 10
    for doc in docs:
        assert doc.title and len(doc.paragraphs) == 1
        assert 2 <= len(doc.sections) <= 4
        assert 250 <= len(doc.text.split()) <= 500
    queries = read_queries(EXAMPLES / "queries.jsonl")
    qrels = read_qrels(EXAMPLES / "qrels.tsv")
    assert len(queries) == 8
    assert set(qrels) == set(queries)
    ids = {d.doc_id for d in docs}
    assert all(doc_id in ids for judged in qrels.values() for doc_id in judged)


# ----------------------------------------------------------------------------------------------------------
# Real data (../shared/data), skipped when absent
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.data
def test_scifact(shared_data: Path) -> None:
    scifact = shared_data / "scifact"
    docs = read_corpus(scifact)
    assert detect_format(scifact) == "beir"
    assert len(docs) == 5183
    assert len({d.doc_id for d in docs}) == 5183
    assert all(d.title and len(d.paragraphs) == 1 for d in docs)
    queries = read_queries(scifact / "queries.jsonl")
    assert len(queries) == 1109
    qrels = read_qrels(scifact / "qrels" / "test.tsv")
    assert len(qrels) == 300
    assert set(qrels) <= set(queries)
    ids = {d.doc_id for d in docs}
    assert all(doc_id in ids for judged in qrels.values() for doc_id in judged)


@pytest.mark.data
def test_xquad_en(shared_data: Path) -> None:
    xquad = shared_data / "xquad_en"
    docs = read_corpus(xquad)
    assert detect_format(xquad) == "qa-docs"
    assert len(docs) == 48
    questions = read_qa_questions(xquad / "questions.jsonl")
    assert len(questions) == 1190
    assert len(read_queries(xquad / "questions.jsonl")) == 1190
    passage_ids = {p.id for d in docs for p in split_document(d, max_words=0)}
    paragraph_qrels = qa_qrels(questions, "paragraph")
    assert len(paragraph_qrels) == 1190
    assert all(pid in passage_ids for judged in paragraph_qrels.values() for pid in judged)
    doc_ids = {d.doc_id for d in docs}
    assert all(doc_id in doc_ids for judged in qa_qrels(questions, "doc").values() for doc_id in judged)
