"""Tests for the corpus model and the in-section splitter."""

from __future__ import annotations

import datetime
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_hier.corpus import Document, Passage, Section, passage_id, split_document, split_documents
from rag_hier.corpus.model import _balanced_blocks
from rag_hier.corpus.sentences import split_sentences
from rag_hier.errors import InvalidInputError, RagHierError


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


# ----------------------------------------------------------------------------------------------------------
# validation: wrong types and bad ids give the library's own error
# ----------------------------------------------------------------------------------------------------------


def nested_list(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_invalid_input_error_is_a_library_value_and_type_error() -> None:
    assert issubclass(InvalidInputError, RagHierError)
    assert issubclass(InvalidInputError, ValueError)
    assert issubclass(InvalidInputError, TypeError)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"doc_id": None}, "doc_id must be a string, got None"),
        ({"doc_id": 7}, "doc_id must be a string, got int"),
        ({"doc_id": ""}, "doc_id must not be empty"),
        ({"doc_id": "  "}, "doc_id must not be empty"),
        ({"doc_id": "d", "title": None}, "title must be a string, got None"),
        ({"doc_id": "d", "paragraphs": "one string"}, "paragraphs must be a list or tuple of strings, got str"),
        ({"doc_id": "d", "paragraphs": ("ok", 3)}, "paragraphs[1] must be a string, got int"),
        ({"doc_id": "d", "sections": ({"title": "S"},)}, "sections[0] must be a Section, got dict"),
        ({"doc_id": "d", "metadata": ["a"]}, "metadata must be a mapping"),
        ({"doc_id": "d", "metadata": {"when": datetime.date(2021, 1, 1)}}, "metadata['when'] must hold JSON values"),
        ({"doc_id": "d", "metadata": {"tags": {"a", "b"}}}, "got set"),
        ({"doc_id": "d", "metadata": {"n": [1, object()]}}, "metadata['n'][1] must hold JSON values"),
        ({"doc_id": "d", "metadata": {1: "x"}}, "key that is not a string: 1"),
        ({"doc_id": "d", "metadata": {"deep": nested_list(400)}}, "more than 100 levels deep"),
        ({"doc_id": "d", "metadata": {"deep": nested_list(5000)}}, "more than 100 levels deep"),
    ],
)
def test_document_rejects_wrong_types(kwargs: dict, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        Document(**kwargs)
    assert fragment in str(info.value)


@pytest.mark.parametrize("char", ["\t", "\n", "\r", "\x00", "\x1f", "\x7f", "\x85", "\u2028", "\u2029"])
def test_document_id_with_a_control_character_is_rejected(char: str) -> None:
    with pytest.raises(InvalidInputError, match="control character"):
        Document(f"a{char}b", paragraphs=("x",))


def test_ids_with_spaces_and_unicode_are_fine() -> None:
    assert Document("my notes/été #1", paragraphs=("x",)).doc_id == "my notes/été #1"


def test_section_rejects_wrong_types() -> None:
    with pytest.raises(InvalidInputError, match=r"Section.title must be a string, got None"):
        Section(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"Section.subsections\[0\] must be a Section, got str"):
        Section("S", subsections=("child",))  # type: ignore[arg-type]


def test_lists_are_accepted_and_stored_as_tuples() -> None:
    doc = Document("d", paragraphs=["a", "b"], sections=[Section("S", ["x"], [Section("T")])])  # type: ignore[arg-type]
    assert doc.paragraphs == ("a", "b")
    assert doc.sections == (Section("S", ("x",), (Section("T"),)),)
    assert isinstance(doc.sections[0].paragraphs, tuple)


def test_metadata_at_the_depth_limit_is_accepted() -> None:
    Document("d", metadata={"deep": nested_list(99)})  # the dict is level 1: 100 in all
    with pytest.raises(InvalidInputError):
        Document("d", metadata={"deep": nested_list(100)})


def test_sections_nested_too_deep_are_rejected() -> None:
    section = Section("leaf", ("x",))
    for _ in range(100):
        section = Section("s", subsections=(section,))
    with pytest.raises(InvalidInputError, match="sections nest more than 100 levels"):
        Document("d", sections=(section,))


def test_section_from_dict_keeps_sections_and_subsections() -> None:
    data = {"title": "S", "sections": [{"title": "A"}], "subsections": [{"title": "B"}]}
    assert [s.title for s in Section.from_dict(data).subsections] == ["A", "B"]
    data = {"title": "S", "subsections": [{"title": "B"}], "sections": [{"title": "A"}]}
    assert [s.title for s in Section.from_dict(data).subsections] == ["B", "A"]
    with pytest.raises(InvalidInputError, match="takes a mapping, got str"):
        Section.from_dict({"title": "S", "sections": ["not a section"]})


def test_has_text() -> None:
    assert Document("d", paragraphs=("x",)).has_text
    assert Document("d", sections=(Section("S", subsections=(Section("T", ("deep",)),)),)).has_text
    assert not Document("d", title="Only a title").has_text
    assert not Document("d", paragraphs=("", "  \n\t"), sections=(Section("Empty"),)).has_text


def test_split_document_argument_errors() -> None:
    doc = Document("d", paragraphs=("x",))
    with pytest.raises(InvalidInputError, match="takes a Document, got str"):
        split_document("d")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="max_words must be an integer, got str"):
        split_document(doc, "100")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="overlap must be >= 0"):
        split_document(doc, 10, overlap=-1)
    with pytest.raises(InvalidInputError, match="overlap must be smaller than max_words"):
        split_document(doc, 10, overlap=10)
    with pytest.raises(InvalidInputError, match="keeps paragraphs whole"):
        split_document(doc, 0, overlap=1)


def test_document_without_text_yields_no_passage_silently(caplog: pytest.LogCaptureFixture) -> None:
    # the splitter only cuts: the readers warn (naming file and line), the store counts (documents_empty)
    with caplog.at_level(logging.WARNING, logger="rag_hier.corpus.model"):
        assert split_document(Document("empty", title="T", paragraphs=("  ",)), 100) == []
        assert split_document(Document("empty0", paragraphs=("",)), 0) == []
        assert len(split_document(Document("full", paragraphs=("x",)), 100)) == 1
    assert caplog.records == []


# ----------------------------------------------------------------------------------------------------------
# the sentence-aware splitter
# ----------------------------------------------------------------------------------------------------------


def sentences(n: int, length: int, prefix: str = "s") -> list[str]:
    """``n`` sentences of ``length`` words each: ``"S0w1 s0w2 ... s0w<length>."``."""
    out = []
    for i in range(n):
        body = " ".join(f"{prefix}{i}w{j}" for j in range(1, length))
        out.append(f"{prefix.upper()}{i}w0 {body}.")
    return out


def test_split_sentences_keeps_every_word_and_cuts_only_at_whitespace() -> None:
    text = "Dr. Smith saw 3.5 mg/kg i.v. doses.  Histone H2A.X was phosphorylated!\nWas it? Yes."
    got = split_sentences(text)
    assert got == ["Dr. Smith saw 3.5 mg/kg i.v. doses.", "Histone H2A.X was phosphorylated!", "Was it?", "Yes."]
    assert split_sentences("") == []
    assert split_sentences(" \n\t ") == []


@given(st.text(alphabet=st.sampled_from("ab .!?\n\t\u00a0\u3002Dr"), max_size=80))
@settings(max_examples=200, deadline=None)
def test_split_sentences_loses_nothing(text: str) -> None:
    got = split_sentences(text)
    assert " ".join(got) == " ".join(text.split())
    assert all(s and s == s.strip() for s in got)


def test_passages_end_at_sentence_ends() -> None:
    text = " ".join(sentences(10, 7))
    passages = split_document(Document("d", paragraphs=(text,)), max_words=20)
    assert [len(p.text.split()) for p in passages] == [14] * 5
    assert all(p.text.endswith(".") for p in passages)
    assert " ".join(p.text for p in passages) == text
    assert [p.id for p in passages] == [f"d#{n}" for n in range(5)]


def test_passages_are_as_even_as_sentence_ends_allow() -> None:
    # greedy packing would give 36 + 9 words and 28 + 28 + 14; the splitter spreads the sentences evenly
    text = " ".join(sentences(5, 9))
    passages = split_document(Document("d", paragraphs=(text,)), max_words=40)
    assert [len(p.text.split()) for p in passages] == [27, 18]
    text = " ".join(sentences(10, 7))
    passages = split_document(Document("d", paragraphs=(text,)), max_words=30)
    assert [len(p.text.split()) for p in passages] == [21, 28, 21]


@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    max_words=st.integers(1, 60),
    overlap=st.integers(0, 59),
)
@settings(max_examples=150, deadline=None)
def test_splitter_properties(lengths: list[int], max_words: int, overlap: int) -> None:
    sents = [" ".join([f"S{i}w0", *(f"s{i}w{j}" for j in range(1, n))]) + "." for i, n in enumerate(lengths)]
    text = " ".join(sents)
    overlap = overlap % max_words
    passages = split_document(Document("d", paragraphs=(text,)), max_words=max_words, overlap=overlap)
    words = text.split()
    assert [p.id for p in passages] == [f"d#{n}" for n in range(len(passages))]
    assert all(0 < len(p.text.split()) <= max_words for p in passages)
    if len(words) <= max_words:
        assert [p.text for p in passages] == [text]
    if not overlap:
        assert " ".join(p.text for p in passages) == text
        # the fewest passages: greedy packing of the same units
        units = [len(b) for s in sents for b in _balanced_blocks(s.split(), max_words)]
        fewest, used = 0, max_words
        for n in units:
            fewest, used = (fewest + 1, n) if used + n > max_words else (fewest, used + n)
        assert len(passages) == fewest
        # cuts at sentence ends, unless a sentence is longer than max_words
        for p in passages[:-1]:
            assert p.text.endswith(".") or any(n > max_words for n in lengths)
    else:
        # runs of consecutive words, each starting inside (or right after) the one before
        previous_start, position = 0, 0
        for p in passages:
            piece = p.text.split()
            start = words.index(piece[0])
            assert words[start : start + len(piece)] == piece
            assert previous_start <= start <= position
            previous_start, position = start, start + len(piece)
        assert position == len(words)


def test_overlap_never_crosses_sections() -> None:
    a = sentences(3, 3, "a")
    doc = Document("d", sections=(Section("A", (" ".join(a),)), Section("B", ("b1 b2 b3.",))))
    passages = split_document(doc, max_words=7, overlap=3)
    assert [p.text for p in passages] == [a[0], f"{a[0]} {a[1]}", f"{a[1]} {a[2]}", "b1 b2 b3."]


def test_splitting_is_deterministic() -> None:
    text = " ".join(sentences(30, 11))
    doc = Document("d", title="T", sections=(Section("S", (text, text)),))
    first = split_document(doc, max_words=50, overlap=12)
    again = split_document(Document("d", title="T", sections=(Section("S", (text, text)),)), 50, overlap=12)
    assert first == again


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"text": None}, "Passage 'd#0'.text must be a string, got None"),
        ({"text": "a\ud800b"}, "Passage 'd#0'.text holds a lone surrogate '\\ud800' at character 1"),
        ({"title_path": ("T", "\udc80")}, "Passage 'd#0'.title_path[1] holds a lone surrogate"),
        ({"meta": {1: "x"}}, "Passage 'd#0'.meta has a key that is not a string: 1"),
        ({"meta": {"k": float("nan")}}, "Passage 'd#0'.meta['k'] is nan: not a finite number"),
        ({"meta": {"k": [1.0, float("inf")]}}, "Passage 'd#0'.meta['k'][1] is inf"),
        ({"extra": {"e": {"v": -float("inf")}}}, "Passage 'd#0'.extra['e']['v'] is -inf"),
        ({"meta": "year=2001"}, "Passage 'd#0'.meta must be a mapping"),
    ],
)
def test_passage_refuses_what_the_store_could_not_keep(kwargs: dict, fragment: str) -> None:
    fields = {"id": "d#0", "doc_id": "d", "position": 0, "text": "x", **kwargs}
    with pytest.raises(InvalidInputError) as exc:
        Passage(**fields)
    assert fragment in str(exc.value)


def test_document_text_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"Document.paragraphs\[1\] holds a lone surrogate"):
        Document("d", "T", ("fine", "bad \udfff here"))
    with pytest.raises(InvalidInputError, match=r"Section.paragraphs\[0\] holds a lone surrogate"):
        Section("S", ("\ud834",))
    with pytest.raises(InvalidInputError, match=r"Document.metadata\['k'\] is nan"):
        Document("d", "T", ("x",), metadata={"k": float("nan")})
    assert Passage("d#0", "d", 0, "ok", title_path=["T"]).title_path == ("T",)  # a list is kept as a tuple
