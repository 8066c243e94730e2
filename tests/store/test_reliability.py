"""Rough edges of the store found by trying it as users and busy systems would."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from rag_hier import Document, HierStore, Passage, Section
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import DimensionMismatchError, DuplicateIdError, InvalidInputError, StoreError
from rag_hier.store.extensions.doc_index import DocumentIndex


def test_updating_a_document_keeps_its_row_and_metadata(tmp_path: Path, tiny_encoder: DenseEncoder) -> None:
    store = HierStore.create(tmp_path / "s", encoder=tiny_encoder)
    store.add_extension(DocumentIndex())
    first = Document("d1", "Old title", ("first text",), (Section("S", ("more",)),), metadata={"year": 2001})
    store.add_documents([first, Document("d2", "Other", ("other text",))], max_passage_words=0)
    edited = Document("d1", "New title", ("first text, edited",), (Section("S2", ("more",)),), metadata={"year": 2002})
    summary = store.add_documents([edited], max_passage_words=0)
    assert summary.documents_updated == 1
    doc = store.get_document("d1")
    assert doc is not None and doc["title"] == "New title" and doc["meta"] == {"year": 2002}
    assert doc["toc"] == ["S2"]  # the new table of contents
    assert store.count_documents() == 2 and "d1" in store.document_ids()
    assert sorted(store.extension("doc-index").doc_ids()) == ["d1", "d2"]  # type: ignore[union-attr]
    # every passage changed: still one row for the document
    store.add_documents([Document("d1", "Newer", ("completely different",))], max_passage_words=0)
    assert store.get_document("d1")["title"] == "Newer"  # type: ignore[index]
    assert store.count_documents() == 2
    store.close()


def test_a_passage_id_taken_by_another_document_is_a_clear_error(tmp_path: Path, tiny_encoder) -> None:
    store = HierStore.create(tmp_path / "s", encoder=tiny_encoder)
    store.add_passages([Passage("d1#0", "x", 0, "written by an adapter")])
    with pytest.raises(
        DuplicateIdError, match="'d1#0' of document 'd1' is already stored as a passage of document 'x'"
    ):
        store.add_documents([Document("d1", "", ("a later document",))])
    assert store.count_passages() == 1 and store.get_document("d1") is None
    # add_passages refuses it too: the passage would move and its document 'x' would disappear
    with pytest.raises(DuplicateIdError, match="'d1#0' of document 'y' is already stored as a passage of document 'x'"):
        store.add_passages([Passage("d1#0", "y", 0, "another document's passage")])
    assert store.document_ids() == ["x"] and store.get_passages(["d1#0"])[0].text == "written by an adapter"
    store.close()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (np.full((1, 4), np.nan), "NaN"),
        (np.array([[1 + 2j, 0, 0, 0]]), "complex"),
        ([[1e39, 0, 0, 0]], "float32"),
        ([["a", "b", "c", "d"]], "numbers"),
        ([[]], "non-empty"),
    ],
)
def test_bad_vectors_are_refused(tmp_path: Path, bad, message: str) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    with pytest.raises(ValueError, match=message):
        store.add_passages([Passage("p", "d", 0, "x")], bad)
    assert store.count_passages() == 0
    store.close()


@pytest.mark.parametrize("bad_id", ["tab\there", "new\nline", "", "nul\x00"])
def test_ids_with_control_characters_are_refused(tmp_path: Path, bad_id: str) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    with pytest.raises(StoreError, match="id"):
        store.add_passages([Passage(bad_id, "d", 0, "x")], np.ones((1, 4)))
    with pytest.raises(StoreError, match="document id of passage"):
        store.add_passages([Passage("p", bad_id, 0, "x")], np.ones((1, 4)))
    # a Document checks its own id when it is built, before it can reach any store
    with pytest.raises(InvalidInputError, match=r"Document\.doc_id"):
        store.add_documents([Document(bad_id, "", ("x",))], encode=False)
    assert store.count_passages() == 0 and store.count_documents() == 0
    store.close()


def test_wrong_types_are_refused_before_anything_changes(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    store.add_passages([Passage("d1#0", "d1", 0, "x"), Passage("d", "d", 0, "y")], np.ones((2, 4)))
    with pytest.raises(TypeError, match="list of ids"):
        store.delete_passages("d1#0")  # would delete 'd', '1', '#', '0' one character at a time
    with pytest.raises(TypeError, match="list of ids"):
        store.delete_documents("d")
    with pytest.raises(TypeError, match="Document"):
        store.add_documents([{"doc_id": "x"}])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match=r"Document\.doc_id must be a string, got None"):
        store.add_documents([Document(None, "", ("x",))], encode=False)  # type: ignore[arg-type]
    assert store.count_passages() == 2
    store.close()


def test_metadata_nested_too_deeply_is_a_clear_error(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(InvalidInputError, match="nested"):
        store.add_passages([Passage("p", "d", 0, "x", meta=deep)], np.ones((1, 4)))
    assert store.count_passages() == 0
    store.close()


def test_threads_sharing_a_store(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None, dimension=4)
    store.add_passages([Passage(f"p{i}", f"d{i}", 0, "x", meta={"i": i}) for i in range(50)], np.ones((50, 4)))
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            for i in range(60):
                store.add_passages([Passage(f"w{i}", f"w{i}", 0, "y", meta={"i": i})], np.ones((1, 4)))
        except BaseException as exc:  # pragma: no cover - a finding
            errors.append(exc)
        finally:
            stop.set()

    def reader() -> None:
        try:
            while not stop.is_set():
                from rag_hier.retrieval import DenseRetriever

                hits = DenseRetriever(store).search_vectors(
                    np.ones((1, 4)), top_k=5, filters={"field": "meta.i", "operator": "<", "value": 10}
                )[0]
                assert len(hits) == 5
                assert store.count_passages() >= 50
        except BaseException as exc:  # pragma: no cover - a finding
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert store.count_passages() == 110
    store.close()


def test_two_writer_processes_interleave_without_losing_anything(tmp_path: Path) -> None:
    path = tmp_path / "s"
    HierStore.create(path, model=None, dimension=4).close()
    child = textwrap.dedent(
        """
        import sys, numpy as np
        from rag_hier import HierStore, Passage
        tag, path = sys.argv[1], sys.argv[2]
        store = HierStore.open(path)
        for i in range(40):
            store.add_passages([Passage(f"{tag}{i}", f"{tag}{i}", 0, "x")], np.ones((1, 4)))
        store.close()
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", child, tag, str(path)], stderr=subprocess.PIPE, text=True)
        for tag in "ab"
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    store = HierStore.open(path)
    assert store.count_passages() == 80
    store.close()
    assert not [p.name for p in path.iterdir() if ".tmp" in p.name]


def test_dimension_of_an_existing_store_cannot_change(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    store.add_passages([Passage("a", "d", 0, "x")], np.ones((1, 4)))
    with pytest.raises(DimensionMismatchError):
        store.add_passages([Passage("b", "d", 1, "y")], np.ones((1, 5)))
    store.close()


def test_a_reader_racing_the_rename_of_the_index_it_opens_looks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in the reader stress run: a reader located ``dense.faiss.gN.tmp``, the writer renamed it, FAISS failed."""
    from rag_hier.store import core

    store = HierStore.create(tmp_path / "s", model=None, dimension=4)
    store.add_passages([Passage("d1#0", "d1", 0, "text")], np.ones((1, 4), dtype=np.float32))
    store.close()
    real = core.committed_path
    calls: list[str] = []

    def renamed_under_us(root: Path, name: str, info: dict, *, verify: bool) -> Path:
        calls.append(name)
        if len(calls) == 1:
            return root / f"{name}.g99.tmp"  # existed when looked at, gone when FAISS opens it
        return real(root, name, info, verify=verify)

    monkeypatch.setattr(core, "committed_path", renamed_under_us)
    reader = HierStore.open(tmp_path / "s", read_only=True)
    assert reader.count_vectors() == 1 and calls.count("dense.faiss") >= 2
    reader.close()


def test_a_document_without_text_is_stored_and_counted(tmp_path: Path) -> None:
    store = HierStore.create(tmp_path / "s", model=None)
    summary = store.add_documents(
        [Document("empty", "Only a title", ("  ",), metadata={"k": 1}), Document("full", "", ("x",))], encode=False
    )
    assert summary.documents_empty == 1 and summary.documents_added == 2 and summary.passages_added == 1
    empty = store.get_document("empty")
    assert empty is not None and empty["title"] == "Only a title" and empty["meta"] == {"k": 1}
    assert empty["passage_ids"] == []
    store.close()


def test_an_unknown_keyword_is_a_type_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"HierStore.create\(\) got unexpected keyword argument\(s\) 'modle'"):
        HierStore.create(tmp_path / "s", modle="x")
    assert not (tmp_path / "s").exists()
    HierStore.create(tmp_path / "s", model=None, dimension=4).close()
    with pytest.raises(TypeError, match=r"HierStore.open\(\) got unexpected keyword argument\(s\) 'verify'"):
        HierStore.open(tmp_path / "s", verify=True)
    with pytest.raises(ValueError, match="not both"):
        HierStore.open(tmp_path / "s", uri=str(tmp_path / "m.db"))
