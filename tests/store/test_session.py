"""StoreSession on the local backend: lazy create-or-open, handle pairing, extensions, checks, closing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier.corpus.model import Passage
from rag_hier.errors import StoreError
from rag_hier.store import create_store, open_store
from rag_hier.store.contract import StoreBackend, StoreExtension
from rag_hier.store.session import CreateOptions, DimensionRequiredError, ExtensionSpec, StoreSession

CLOSED = (StoreError, sqlite3.ProgrammingError)
"""What using a closed local handle raises."""


def _files(root: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in root.iterdir()}


def _passages(*ids: str) -> list[Passage]:
    return [Passage(id=i, doc_id=f"d-{i}", position=0, text=f"text of {i} about bees") for i in ids]


def _vectors(n: int) -> np.ndarray:
    return np.eye(3, dtype=np.float32)[:n]


def _existing(root: Path, *ids: str) -> None:
    store = create_store(root, model=None, dimension=3)
    store.add_passages(_passages(*ids), _vectors(len(ids)))
    store.close()


def test_nothing_is_opened_or_created_until_a_handle_is_asked_for(tmp_path: Path) -> None:
    root = tmp_path / "store"
    session = StoreSession(root, create=CreateOptions(dimension=3))
    assert session.location == str(root) and not session.exists()
    assert session.open_reader is None and session.open_writer is None
    assert not root.exists()
    store = session.reader()  # nothing to read: creating is a write, and reads then use that handle
    assert session.exists() and not store.read_only
    assert session.open_writer is store and session.open_reader is None
    assert store.dimension == 3
    session.close()


def test_reads_use_a_read_only_handle_until_the_first_write(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _existing(root, "a", "b")
    before = _files(root)
    session = StoreSession(root)
    reader = session.reader()
    assert reader.read_only and session.open_writer is None
    assert reader.count_passages() == 2
    assert _files(root) == before, "a read changed the store directory"
    writer = session.writer()
    assert not writer.read_only and writer is not reader
    assert session.reader() is writer  # reads_use_writer: the instance reads what it wrote
    assert session.open_reader is reader
    writer.add_passages(_passages("c"), _vectors(1))
    assert reader.count_passages() == 3  # one engine behind both handles
    session.close()


def test_without_reads_use_writer_reads_stay_on_the_read_only_handle(tmp_path: Path) -> None:
    session = StoreSession(tmp_path / "store", create=CreateOptions(dimension=3), reads_use_writer=False)
    reader = session.reader()  # creates the store (a read-write handle), then opens a read-only one
    writer = session.open_writer
    assert writer is not None and not writer.read_only and reader.read_only
    writer.add_passages(_passages("a"), _vectors(1))
    assert session.reader() is reader and reader.count_passages() == 1
    session.close()


def test_create_options_are_what_the_new_store_records(tmp_path: Path) -> None:
    session = StoreSession(
        tmp_path / "store",
        create=CreateOptions(dimension=4, index="hnsw", similarity="cosine", corpus={"adapter": {"x": 1}}),
    )
    store = session.writer()
    assert store.dimension == 4 and store.similarity == "cosine" and store.index_config.kind == "hnsw"
    assert store.corpus_info["adapter"] == {"x": 1} and store.encoder is None
    session.close()


def test_the_created_store_lends_its_encoder_to_later_handles(tmp_path: Path, tiny_model_path: str) -> None:
    calls: list[int] = []

    def no_encoder(creating: bool) -> Any:
        calls.append(creating)
        return None

    session = StoreSession(
        tmp_path / "store", encoder=no_encoder, create=CreateOptions(model=tiny_model_path), reads_use_writer=False
    )
    writer = session.writer()
    reader = session.reader()
    assert writer.encoder is not None and reader.encoder is writer.encoder
    assert calls == [True]  # asked once, at creation; later handles take the created store's encoder
    session.close()


def test_a_local_store_learns_its_dimension_from_the_first_vectors(tmp_path: Path) -> None:
    # the dimension rule is Milvus's: a directory is created without one (and the hint is not used)
    session = StoreSession(tmp_path / "store")
    store = session.writer(dimension_hint=7)
    assert store.dimension is None
    store.add_passages(_passages("a"), _vectors(1))
    assert store.dimension == 3
    session.close()


def test_a_milvus_collection_without_dimension_or_model_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus")
    uri = f"{tmp_path / 'm.db'}#nodim"
    session = StoreSession(
        uri=uri, create=CreateOptions(dimension_why="it has no model", dimension_remedy="pass dimension=...")
    )
    with pytest.raises(DimensionRequiredError, match=r"fixes the vector dimension .* it has no model; pass dimension="):
        session.writer()
    assert isinstance(DimensionRequiredError("x"), StoreError) and isinstance(DimensionRequiredError("x"), ValueError)
    assert session.open_writer is None and not (tmp_path / "m.db").exists()


def test_configured_extensions_are_built_on_every_read_write_handle(tmp_path: Path) -> None:
    checked: list[tuple[str, bool]] = []

    def check(store: StoreBackend, ext: StoreExtension) -> None:
        checked.append((ext.name, store.read_only))

    spec = ExtensionSpec({"stopwords": None}, check)
    session = StoreSession(
        tmp_path / "store", create=CreateOptions(dimension=3), extensions={"bm25": spec}, configured=("bm25",)
    )
    store = session.writer()
    ext = store.extension("bm25")
    assert ext is not None and ext.config()["stopwords"] is None  # built with the spec's configuration
    assert checked == [("bm25", False)]
    session.close()
    session.writer()  # a new read-write handle ensures it again (kept as it is: the check sees it)
    assert checked == [("bm25", False), ("bm25", False)]
    session.close()


def test_ensure_configured_checks_present_extensions_on_the_reader_and_builds_missing_ones(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _existing(root, "a", "b")
    seen: list[tuple[str, bool]] = []

    def spec(config: dict[str, Any]) -> ExtensionSpec:
        return ExtensionSpec(config, lambda store, ext: seen.append((ext.name, store.read_only)))

    config = {"bm25": spec({}), "sparse-embeddings": spec({"key": ["x"]})}
    session = StoreSession(root, extensions=config, configured=("bm25",))
    session.ensure_configured()  # missing: the read-write handle is opened and builds it
    assert session.open_writer is not None and session.open_writer.extension("bm25") is not None
    assert ("bm25", False) in seen
    session.close()

    seen.clear()
    again = StoreSession(root, extensions=config, configured=("bm25",), reads_use_writer=False)
    again.ensure_configured()  # present: checked on the read-only handle, no read-write handle opened
    assert seen == [("bm25", True)] and again.open_writer is None
    again.writer()  # already ensured in this session: not ensured again
    assert seen == [("bm25", True)]
    ext = again.ensure_extension("sparse-embeddings")  # any extension, built through the read-write handle
    assert getattr(ext, "key", None) == ("x",) or list(getattr(ext, "key", [])) == ["x"]
    assert seen[-1] == ("sparse-embeddings", False)
    again.close()


def test_a_check_that_refuses_an_extension_propagates_and_leaves_no_writer(tmp_path: Path) -> None:
    def refuse(store: StoreBackend, ext: StoreExtension) -> None:
        raise StoreError(f"{ext.name} is not ours")

    session = StoreSession(
        tmp_path / "store",
        create=CreateOptions(dimension=3),
        extensions={"bm25": ExtensionSpec({}, refuse)},
        configured=("bm25",),
    )
    with pytest.raises(StoreError, match="bm25 is not ours"):
        session.writer()
    assert session.open_writer is None


def test_the_open_check_runs_on_opened_handles_only_and_closes_what_it_refuses(tmp_path: Path) -> None:
    root = tmp_path / "store"
    opened: list[StoreBackend] = []

    def check(store: StoreBackend) -> None:
        opened.append(store)
        if store.similarity != "cosine":
            raise StoreError(f"the store at {store.location} records {store.similarity}")

    created = StoreSession(root, create=CreateOptions(dimension=3), check=check)
    created.writer()
    assert opened == []  # the session created it: nothing to compare
    created.close()
    session = StoreSession(root, check=check)
    with pytest.raises(StoreError, match="records dot_product"):
        session.reader()
    assert session.open_reader is None and len(opened) == 1
    with pytest.raises(CLOSED):
        opened[0].count_passages()  # the refused handle was closed


def test_a_callers_handle_serves_reads_and_writes_and_stays_open(tmp_path: Path) -> None:
    _existing(tmp_path / "store", "a")
    handle = open_store(tmp_path / "store")
    session = StoreSession(handle=handle, reads_use_writer=False)
    assert session.path == tmp_path / "store" and session.exists()
    assert session.reader() is handle and session.writer() is handle
    session.close()
    assert handle.count_passages() == 1  # not closed by the session
    assert session.reader() is handle
    with pytest.raises(ValueError, match="one of path, uri and handle"):
        StoreSession(tmp_path, handle=handle)
    handle.close()


def test_closing_reopens_on_next_use_unless_final(tmp_path: Path) -> None:
    _existing(tmp_path / "store", "a")
    session = StoreSession(tmp_path / "store")
    first = session.reader()
    session.close()
    with pytest.raises(CLOSED):
        first.count_passages()
    second = session.reader()
    assert second is not first and second.count_passages() == 1
    session.close(final=True)
    with pytest.raises(StoreError, match="closed"):
        session.reader()
    with pytest.raises(StoreError, match="closed"):
        session.writer()


def test_path_or_uri_but_not_both(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither"):
        StoreSession()
    with pytest.raises(ValueError, match="both"):
        StoreSession(tmp_path, uri="x.db")


def test_connection_options_are_asked_at_each_open(tmp_path: Path) -> None:
    asked: list[int] = []

    def options() -> dict[str, Any]:
        asked.append(1)
        return {"token": "t"}

    assert StoreSession(tmp_path, connection=options).connection_options() == {}  # a directory has none
    assert asked == []
    session = StoreSession(uri="http://localhost:1#c", connection=options)
    assert session.connection_options() == {"token": "t"} and session.connection_options() == {"token": "t"}
    assert asked == [1, 1]
