"""Tests for the corpus model and the in-section splitter."""

from __future__ import annotations

import pytest

from rag_hier.corpus import Document, Passage, Section, passage_id, split_document, split_documents


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


@pytest.fixture
def nested_doc() -> Document:
    return Document(
        doc_id="doc",
        title="Title",
        paragraphs=("lead one", "lead two"),
        sections=(
            Section(
                "A",
                paragraphs=("a para",),
                subsections=(Section("A1", paragraphs=("a1 para",)), Section("A2", paragraphs=("a2 para",))),
            ),
            Section("B", paragraphs=("b para",)),
        ),
        metadata={"lang": "en"},
    )


def test_passage_id_format() -> None:
    assert passage_id("doc", 3) == "doc#3"
    assert passage_id("a/b", 0) == "a/b#0"


def test_iter_sections_and_toc_are_pre_order(nested_doc: Document) -> None:
    paths = [path for path, _ in nested_doc.iter_sections()]
    assert paths == [("A",), ("A", "A1"), ("A", "A2"), ("B",)]
    assert nested_doc.table_of_contents() == ["A", "A1", "A2", "B"]


def test_iter_paragraphs_numbers_sections_with_lead_as_zero(nested_doc: Document) -> None:
    got = [(i, path, p) for i, path, p in nested_doc.iter_paragraphs()]
    assert got == [
        (0, (), "lead one"),
        (0, (), "lead two"),
        (1, ("A",), "a para"),
        (2, ("A", "A1"), "a1 para"),
        (3, ("A", "A2"), "a2 para"),
        (4, ("B",), "b para"),
    ]
    assert nested_doc.text.split("\n\n") == [p for _, _, p in got]


def test_untitled_section_does_not_add_to_title_path() -> None:
    doc = Document("d", "T", sections=(Section("", subsections=(Section("Inner", ("x",)),)),))
    assert [path for path, _ in doc.iter_sections()] == [(), ("Inner",)]
    assert split_document(doc, 0)[0].title_path == ("T", "Inner")


def test_max_words_zero_keeps_paragraphs_whole(nested_doc: Document) -> None:
    long = Document("d", paragraphs=(words(500),))
    passages = split_document(long, max_words=0)
    assert len(passages) == 1
    assert passages[0].text == words(500)

    passages = split_document(nested_doc, max_words=0)
    assert [p.text for p in passages] == ["lead one", "lead two", "a para", "a1 para", "a2 para", "b para"]
    assert [p.position for p in passages] == list(range(6))
    assert [p.id for p in passages] == [f"doc#{n}" for n in range(6)]


def test_max_words_zero_counts_skipped_empty_paragraphs() -> None:
    doc = Document("d", paragraphs=("first", "", "   ", "fourth"), sections=(Section("S", ("", "sixth")),))
    passages = split_document(doc, max_words=0)
    assert [(p.id, p.text) for p in passages] == [("d#0", "first"), ("d#3", "fourth"), ("d#5", "sixth")]
    assert [p.position for p in passages] == [0, 3, 5]


def test_max_words_zero_normalises_whitespace() -> None:
    (passage,) = split_document(Document("d", paragraphs=("  a\n b\t c  ",)), max_words=0)
    assert passage.text == "a b c"


@pytest.mark.parametrize(("n_words", "max_words"), [(7, 3), (10, 4), (10, 3), (101, 100), (250, 100), (5, 5)])
def test_blocks_are_bounded_and_balanced(n_words: int, max_words: int) -> None:
    doc = Document("d", paragraphs=(words(n_words),))
    passages = split_document(doc, max_words=max_words)
    sizes = [len(p.text.split()) for p in passages]
    assert sum(sizes) == n_words
    assert max(sizes) <= max_words
    assert max(sizes) - min(sizes) <= 1
    assert len(passages) == -(-n_words // max_words)  # the fewest blocks that fit
    assert " ".join(p.text for p in passages) == words(n_words)  # consecutive, nothing lost or reordered


def test_blocks_never_cross_sections() -> None:
    doc = Document(
        "d",
        title="T",
        paragraphs=(words(3, "lead"),),
        sections=(
            Section("S1", paragraphs=(words(4, "s1a"), words(4, "s1b"))),
            Section("S2", paragraphs=(words(2, "s2"),), subsections=(Section("S2a", (words(5, "x"),)),)),
        ),
    )
    passages = split_document(doc, max_words=6)
    section_of_word = {w: i for i, _, paragraph in doc.iter_paragraphs() for w in paragraph.split()}
    for p in passages:
        assert {section_of_word[w] for w in p.text.split()} == {p.section}
        assert len(p.text.split()) <= 6
    by_section = {(p.section, p.title_path) for p in passages}
    assert by_section == {(0, ("T",)), (1, ("T", "S1")), (2, ("T", "S2")), (3, ("T", "S2", "S2a"))}
    # Paragraphs of one section are joined before cutting: 8 words of S1 -> 2 blocks of 4.
    s1 = [p for p in passages if p.section == 1]
    assert [len(p.text.split()) for p in s1] == [4, 4]
    assert s1[0].text == words(4, "s1a")
    # Passage numbering runs through the whole document.
    assert [p.id for p in passages] == [f"d#{n}" for n in range(len(passages))]


def test_sections_without_text_yield_no_passages() -> None:
    doc = Document("d", sections=(Section("Empty"), Section("Full", ("text",))))
    (passage,) = split_document(doc, max_words=10)
    assert passage.id == "d#0"
    assert passage.section == 2
    assert passage.title_path == ("Full",)


def test_title_paths_and_metadata(nested_doc: Document) -> None:
    passages = split_document(nested_doc, max_words=100)
    assert [p.title_path for p in passages] == [
        ("Title",),
        ("Title", "A"),
        ("Title", "A", "A1"),
        ("Title", "A", "A2"),
        ("Title", "B"),
    ]
    assert passages[0].text == "lead one lead two"
    assert all(p.doc_id == "doc" and p.meta == {"lang": "en"} for p in passages)


def test_untitled_document_has_section_only_title_path() -> None:
    doc = Document("d", paragraphs=("lead",), sections=(Section("S", ("x",)),))
    assert [p.title_path for p in split_document(doc)] == [(), ("S",)]


def test_negative_max_words_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_words"):
        split_document(Document("d", paragraphs=("x",)), max_words=-1)


def test_split_documents_concatenates_in_order() -> None:
    docs = [Document("a", paragraphs=("one",)), Document("b", paragraphs=("two", "three"))]
    assert [p.id for p in split_documents(docs, max_words=0)] == ["a#0", "b#0", "b#1"]


def test_embedding_text_prefixes_title_path() -> None:
    p = Passage(id="d#0", doc_id="d", position=0, text="body", title_path=("Doc", "Sec", ""))
    assert p.embedding_text == "Doc, Sec, body"
    assert Passage(id="d#0", doc_id="d", position=0, text="body").embedding_text == "body"


def test_section_dict_round_trip() -> None:
    section = Section("A", ("p1", "p2"), (Section("B", ("p3",)),))
    assert Section.from_dict(section.to_dict()) == section
    assert Section.from_dict({"title": "X", "subsections": [{"title": "Y"}]}) == Section("X", (), (Section("Y"),))
    assert Section.from_dict({"title": None, "paragraphs": None}) == Section("")
