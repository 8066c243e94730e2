"""``hit_rows="memory"``: the rows of dense hits kept in memory, one committed generation at a time.

The hits must equal those read from SQLite (``hit_rows="sqlite"``, the oracle) after every kind of write, in this
process and in another one; a search that finds its generation current reads no table; a reader searching while
another process (or thread) commits sees every result of one generation and never a deleted row.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.index import IndexConfig
from rag_hier.retrieval import DenseRetriever
from rag_hier.store import hit_table
from rag_hier.store.factory import create_store, open_store
from rag_hier.store.session import StoreSession

DIM = 8


def _passages(n: int, start: int = 0) -> list[Passage]:
    return [
        Passage(
            f"d{i // 4}#{i % 4}",
            f"d{i // 4}",
            i % 4,
            f"text {i}",
            title_path=(f"T{i // 4}", "S") if i % 2 else (),
            meta={"i": i} if i % 3 else {},
            extra={"node": {"k": i}} if i % 5 == 0 else {},
        )
        for i in range(start, start + n)
    ]


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _make(path: Path, kind: str = "flat", n: int = 40) -> np.ndarray:
    x = _vectors(n)
    store = HierStore.create(path, model=None, dimension=DIM, index=IndexConfig(kind=kind, train_min=20))
    store.add_passages(_passages(n), x)
    store.close()
    return x


def _view(hits: list) -> list[tuple]:
    return [(h.rowid, h.passage_id, h.doc_id, h.text, h.title_path, h.meta, h.position, h.extra, h.rank) for h in hits]


def _same_hits(store: HierStore, queries: np.ndarray, top_k: int = 50) -> None:
    """The hits of a search from the table equal those of the same search with rows read from SQLite."""
    got = DenseRetriever(store).search_vectors(queries, top_k=top_k)
    core = store._core
    core.hit_table, table = None, core.hit_table  # every handle on the core uses the table: take it away
    try:
        want = DenseRetriever(store).search_vectors(queries, top_k=top_k)
    finally:
        core.hit_table = table
    assert [_view(row) for row in got] == [_view(row) for row in want]


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_memory_hits_equal_sqlite_hits_after_every_kind_of_write(tmp_path: Path, kind: str) -> None:
    x = _make(tmp_path / "s", kind)
    store = HierStore.open(tmp_path / "s", hit_rows="memory")
    assert store.hit_rows_mode == "memory"
    q = np.concatenate([x[:6], _vectors(4, seed=9)])
    table = store._core.hit_table
    assert table is not None and table.generation is None  # built by the first search, not by opening
    _same_hits(store, q)
    assert table.rebuilds == 1 and len(table) == 40

    def same() -> None:
        _same_hits(store, q)

    store.add_passages(_passages(8, start=40), _vectors(8, seed=3))  # new rows: read by rowid range
    same()
    store.delete_passages(["d0#0", "d1#2"])  # deleted rows: dropped
    same()
    assert "d0#0" not in {h.passage_id for row in DenseRetriever(store).search_vectors(q, top_k=50) for h in row}
    store.update_meta(["d2#1", "d3#3"], {"new": True})  # rewritten in place
    same()
    changed = _passages(4, start=16)  # document d4 again: one passage changed, three kept (rewritten in place)
    changed[1] = Passage(changed[1].id, "d4", 1, "another text", meta={"x": 1})
    changed[2] = Passage(changed[2].id, "d4", 2, changed[2].text, title_path=changed[2].title_path, meta={"y": 2})
    store.add_passages(changed, _vectors(4, seed=5), policy="upsert")
    same()
    with store.batch():  # several writes, one commit
        store.delete_documents(["d5"])
        store.update_meta(["d6#0"], {"z": 3}, merge=False)
        store.add_passages([Passage("solo", "dsolo", 0, "solo text", meta={"s": 1})], _vectors(1, seed=7))
    same()
    store.add_passages([Passage("novec", "dnovec", 0, "no vector")])  # a passage without a vector: not a hit
    same()
    assert table.rebuilds == 1 and table.updates >= 5  # every generation since: by the log, not read again
    assert len(table) == store.manifest["counts"]["vectors"]
    store.close()


def test_a_current_search_reads_no_table_and_the_fast_path_is_one_pread(tmp_path: Path) -> None:
    x = _make(tmp_path / "s")
    store = HierStore.open(tmp_path / "s", read_only=True, hit_rows="memory")
    retriever = DenseRetriever(store)
    statements: list[str] = []
    store._core.db.set_trace_callback(statements.append)
    try:
        first = retriever.search_vectors(x[:2], top_k=5)
        assert "BEGIN" in statements  # the first search: a read transaction, the table built within it
        statements.clear()
        assert retriever.search_vectors(x[:2], top_k=5) == first
        assert statements == []  # no SQL at all: the header says no commit happened
        rowids = [h.rowid for h in first[0]]
        rows = store.hit_rows(rowids)  # the contract's read of hit rows answers from the table too
        assert list(rows) == rowids and [rows[r][1] for r in rowids] == [h.passage_id for h in first[0]]
    finally:
        store._core.db.set_trace_callback(None)
        store.close()


_OTHER_PROCESS = """
import sys
import numpy as np
from rag_hier import HierStore, Passage
from rag_hier.store import hit_table
if sys.argv[3] == "no-log":  # a writer that keeps no log (an older rag-hier)
    import rag_hier.store.core as core
    core.record_changes = lambda db, generation, changed: None
store = HierStore.open(sys.argv[1])
v = np.load(sys.argv[2], allow_pickle=False)
store.delete_passages(["d0#0"])
store.add_passages([Passage("new", "dnew", 0, "new text", meta={"n": 1})], v)
store.update_meta(["d1#1"], {"other": "process"})
store.close()
"""


@pytest.mark.parametrize("writer", ["log", "no-log"])
def test_other_processes_commits_are_seen_at_the_next_search(tmp_path: Path, writer: str) -> None:
    x = _make(tmp_path / "s", "hnsw")
    reader = HierStore.open(tmp_path / "s", read_only=True, hit_rows="memory")
    retriever = DenseRetriever(reader)
    first = retriever.search_vectors(x[:1], top_k=3)[0]
    assert first[0].passage_id == "d0#0"
    np.save(tmp_path / "q.npy", x[:1], allow_pickle=False)
    subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(tmp_path / "s"), str(tmp_path / "q.npy"), writer], check=True
    )
    after = retriever.search_vectors(x[:1], top_k=50)[0]
    assert after[0].passage_id == "new" and after[0].meta == {"n": 1}
    assert "d0#0" not in {h.passage_id for h in after}
    assert {h.passage_id: h.meta for h in after}["d1#1"] == {"i": 5, "other": "process"}
    table = reader._core.hit_table
    assert table is not None
    # three commits in the other process: one catch-up, by the log when the writer kept it, else every row read
    assert (table.rebuilds, table.updates) == ((1, 1) if writer == "log" else (2, 0))
    _same_hits(reader, np.concatenate([x[:4], _vectors(4, seed=9)]))
    reader.close()


def test_a_change_larger_than_the_log_reads_every_row_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hit_table, "LOG_MAX", 3)
    x = _make(tmp_path / "s")
    store = HierStore.open(tmp_path / "s", hit_rows="memory")
    retriever = DenseRetriever(store)
    retriever.search_vectors(x[:1], top_k=3)
    table = store._core.hit_table
    assert table is not None and table.rebuilds == 1
    store.update_meta(["d0#0", "d0#1"], {"a": 1})  # two rowids: the log holds them
    assert retriever.search_vectors(x[:1], top_k=1)[0][0].meta == {"a": 1}
    assert (table.rebuilds, table.updates) == (1, 1)
    store.update_meta(["d0#0", "d0#1", "d0#2", "d0#3"], {"b": 2})  # four: more than the log keeps
    assert retriever.search_vectors(x[:1], top_k=1)[0][0].meta == {"a": 1, "b": 2}
    assert (table.rebuilds, table.updates) == (2, 1)
    store.close()


def test_the_log_is_the_union_of_consecutive_commits(tmp_path: Path) -> None:
    _make(tmp_path / "s")
    store = HierStore.open(tmp_path / "s")
    db = store._core.db
    store.update_meta(["d0#0"], {"a": 1})
    store.update_meta(["d1#0"], {"a": 1})
    log = json.loads(db.execute("SELECT value FROM state WHERE key='hit_rows_log'").fetchone()[0])
    gen = store.generation
    assert log["generation"] == gen and log["since"] <= gen - 2 and log["rowids"] == [1, 5]
    store.delete_passages(["d2#0"])
    log = json.loads(db.execute("SELECT value FROM state WHERE key='hit_rows_log'").fetchone()[0])
    assert log["generation"] == gen + 1 and log["rowids"] == [1, 5, 9]
    store.close()


def test_the_table_goes_with_the_last_handle_that_asked_for_it(tmp_path: Path) -> None:
    x = _make(tmp_path / "s")
    plain = HierStore.open(tmp_path / "s", read_only=True)
    a = HierStore.open(tmp_path / "s", read_only=True, hit_rows="memory")
    b = HierStore.open(tmp_path / "s", read_only=True, hit_rows="memory")
    DenseRetriever(a).search_vectors(x[:1], top_k=3)
    assert plain._core.hit_table is not None and len(plain._core.hit_table) == 40
    a.close()
    assert plain._core.hit_table is not None
    b.close()
    assert plain._core.hit_table is None
    assert DenseRetriever(plain).search_vectors(x[:1], top_k=1)[0][0].passage_id == "d0#0"
    plain.close()


def test_the_option_is_checked_and_local_only(tmp_path: Path) -> None:
    _make(tmp_path / "s")
    with pytest.raises(ValueError, match=r"hit_rows must be 'sqlite' or 'memory', got 'disk'"):
        HierStore.open(tmp_path / "s", hit_rows="disk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hit_rows must be"):
        HierStore.create(tmp_path / "t", model=None, dimension=DIM, hit_rows=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"hit_rows='memory' is an option of a local store"):
        open_store(uri=str(tmp_path / "m.db"), hit_rows="memory")
    with pytest.raises(ValueError, match=r"hit_rows='memory' is an option of a local store"):
        create_store(uri=str(tmp_path / "m.db"), model=None, dimension=DIM, hit_rows="memory")
    with pytest.raises(ValueError, match=r"hit_rows='memory' is an option of a local store"):
        StoreSession(uri=str(tmp_path / "m.db"), hit_rows="memory")
    created = create_store(tmp_path / "u", model=None, dimension=DIM, hit_rows="memory")
    assert created.hit_rows_mode == "memory"  # type: ignore[union-attr]
    created.close()
    opened = open_store(tmp_path / "s", read_only=True, hit_rows="memory")
    assert opened.hit_rows_mode == "memory"  # type: ignore[union-attr]
    opened.close()


def test_a_session_opens_and_creates_its_handles_with_the_option(tmp_path: Path) -> None:
    x = _make(tmp_path / "s")
    session = StoreSession(tmp_path / "s", hit_rows="memory", reads_use_writer=False)
    reader = session.reader()
    assert reader.hit_rows_mode == "memory"  # type: ignore[attr-defined]
    writer = session.writer()
    assert writer.hit_rows_mode == "memory"  # type: ignore[attr-defined]
    writer.delete_passages(["d0#0"])
    assert DenseRetriever(reader).search_vectors(x[:1], top_k=1)[0][0].passage_id != "d0#0"
    session.close()
    new = StoreSession(tmp_path / "new", hit_rows="memory")
    assert new.writer().hit_rows_mode == "memory"  # type: ignore[attr-defined]
    new.close()
    assert StoreSession(tmp_path / "s").hit_rows == "sqlite"


# ------------------------------------------------------------------------------------------------------
# readers during writes: every result of one generation, never a deleted row
# ------------------------------------------------------------------------------------------------------
_QUERY = np.eye(DIM, dtype=np.float32)[0]


def _generational_store(path: Path, kind: str) -> None:
    """Background passages, document ``m`` (two passages near the query) and document ``cur0`` (nearest)."""
    rng = np.random.default_rng(1)
    back = rng.standard_normal((60, DIM)).astype(np.float32)
    back[:, 0] = -np.abs(back[:, 0])  # far from the query
    store = HierStore.create(path, model=None, dimension=DIM, index=IndexConfig(kind=kind, train_min=20))
    passages = [Passage(f"b{i}", f"b{i}", 0, f"background {i}") for i in range(60)]
    passages += [Passage(f"m#{k}", "m", k, f"m {k}", meta={"v": 0}) for k in range(2)]
    passages += [Passage(f"cur0#{k}", "cur0", k, f"cur 0 {k}") for k in range(2)]
    near = [_QUERY * 0.9 + 0.01 * k for k in range(2)] + [_QUERY * 1.0 + 0.01 * k for k in range(2)]
    store.add_passages(passages, np.concatenate([back, np.stack(near)]))
    store.close()


def generation_writer(path: str, n: int) -> None:
    """Commit ``n`` generations: each deletes ``cur<i-1>``, adds ``cur<i>`` and sets ``m``'s metadata to ``v=i``."""
    store = HierStore.open(path)
    for i in range(1, n + 1):
        with store.batch():
            store.delete_documents([f"cur{i - 1}"])
            store.add_passages(
                [Passage(f"cur{i}#{k}", f"cur{i}", k, f"cur {i} {k}") for k in range(2)],
                np.stack([_QUERY * 1.0 + 0.01 * k for k in range(2)]),
            )
            store.update_meta(["m#0", "m#1"], {"v": i})
    store.close()


def _check_one_generation(hits: list, last: int) -> int:
    """The four nearest hits are ``cur<i>`` (both passages) and ``m`` with ``v == i``: one generation ``i``."""
    assert len(hits) == 4, [h.passage_id for h in hits]
    docs = sorted({h.doc_id for h in hits})
    assert len(docs) == 2 and docs[1] == "m", docs
    i = int(docs[0][3:])
    assert sorted(h.passage_id for h in hits if h.doc_id != "m") == [f"cur{i}#0", f"cur{i}#1"]
    assert [h.meta for h in hits if h.doc_id == "m"] == [{"v": i}, {"v": i}], (i, [h.meta for h in hits])
    assert i >= last  # never back to an older generation
    return i


_READER = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
import numpy as np
from rag_hier import HierStore
from rag_hier.retrieval import DenseRetriever
from test_hit_rows_memory import _QUERY, _check_one_generation
store = HierStore.open(sys.argv[1], read_only=True, hit_rows=sys.argv[4])
retriever = DenseRetriever(store)
last, seen, searches = 0, set(), 0
stop = sys.argv[2] + ".stop"
import os
while not os.path.exists(stop) or searches < 50:
    last = _check_one_generation(retriever.search_vectors(_QUERY[None, :], top_k=4)[0], last)
    seen.add(last)
    searches += 1
last = _check_one_generation(retriever.search_vectors(_QUERY[None, :], top_k=4)[0], last)
table = store._core.hit_table
report = {"searches": searches, "generations": len(seen), "last": last,
          "rebuilds": table.rebuilds if table else None, "updates": table.updates if table else None}
json.dump(report, open(sys.argv[2], "w"))
store.close()
"""


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
@pytest.mark.parametrize("mode", ["memory", "sqlite"])
def test_a_reader_process_sees_one_generation_while_another_process_commits(
    tmp_path: Path, kind: str, mode: str
) -> None:
    path = tmp_path / "s"
    _generational_store(path, kind)
    out = tmp_path / "reader.json"
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(path), str(out), str(Path(__file__).parent), mode],
        stderr=subprocess.PIPE,
        text=True,
    )
    n = 60
    here = str(Path(__file__).parent)
    code = (
        f"import sys; sys.path.insert(0, {here!r}); import test_hit_rows_memory as t; "
        f"t.generation_writer({str(path)!r}, {n})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    Path(str(out) + ".stop").touch()
    _, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, err
    report = json.loads(out.read_text())
    assert report["last"] == n  # the reader saw the last commit
    assert report["generations"] > 1, report  # and searched while the writer committed
    if mode == "memory":
        assert report["rebuilds"] == 1, report  # every later generation by the log


def test_a_reader_thread_sees_one_generation_while_another_handle_commits(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _generational_store(path, "hnsw")
    store = HierStore.open(path, read_only=True, hit_rows="memory")
    retriever = DenseRetriever(store)
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        last = 0
        try:
            while not done.is_set():
                last = _check_one_generation(retriever.search_vectors(_QUERY[None, :], top_k=4)[0], last)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        generation_writer(str(path), 30)
    finally:
        done.set()
        thread.join()
    assert not errors, errors[0]
    assert _check_one_generation(retriever.search_vectors(_QUERY[None, :], top_k=4)[0], 0) == 30
    store.close()


def test_lookups_by_list_and_by_dict_agree(tmp_path: Path) -> None:
    x = _make(tmp_path / "s")
    store = HierStore.open(tmp_path / "s", hit_rows="memory")
    DenseRetriever(store).search_vectors(x[:1], top_k=3)
    table = store._core.hit_table
    assert table is not None and table._slots is not None  # dense rowids: the list
    store.delete_passages(["d0#1"])
    DenseRetriever(store).search_vectors(x[:1], top_k=3)
    asked = [1, 2, 3, 40, 41, 10_000, -1]  # 2: deleted; 41 and 10,000: never written; -1: FAISS padding
    by_list = table.get_many(asked)
    table._slots = None  # what a table over sparse rowids uses
    assert table.get_many(asked) == by_list and sorted(by_list) == [1, 3, 40]
    store.close()
