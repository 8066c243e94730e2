"""The search path's fast read: hits built from rows of exactly their fields, JSON decoded on first access."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.index import IndexConfig
from rag_hier.retrieval import DenseRetriever, Hit
from rag_hier.store.records import new_hit

DIM = 8


def _store(tmp_path, kind: str = "flat") -> tuple[HierStore, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    passages = [
        Passage(
            f"d{i // 4}#{i % 4}",
            f"d{i // 4}",
            i % 4,
            f"text {i}",
            title_path=(f"T{i // 4}", "S") if i % 2 else (),
            meta={"i": i, "tags": ["a", "b"]} if i % 3 else {},
            extra={"node": {"k": i}} if i % 5 == 0 else {},
        )
        for i in range(40)
    ]
    store = HierStore.create(tmp_path / kind, model=None, dimension=DIM, index=IndexConfig(kind=kind, train_min=20))
    store.add_passages(passages, x)
    return store, x


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_hits_equal_the_stored_records(tmp_path, kind: str) -> None:
    store, x = _store(tmp_path, kind)
    results = DenseRetriever(store).search_vectors(x[:5], top_k=40)
    for row in results:
        assert len(row) == 40 and [h.rank for h in row] == list(range(1, 41))
        records = store.records([h.rowid for h in row])
        for h in row:
            rec = records[h.rowid]
            assert (h.passage_id, h.doc_id, h.text, h.position) == (rec.passage_id, rec.doc_id, rec.text, rec.position)
            assert h.title_path == rec.title_path and isinstance(h.title_path, tuple)
            assert h.meta == rec.meta and h.extra == rec.extra and h.scores == {}
    store.close()


def test_lazy_hit_behaves_like_a_plain_one() -> None:
    row = (7, "d#0", "d", "hello", '["A", "B"]', '{"x": 1}', 2, '{"node": {"k": 3}}')
    lazy = new_hit(row, 0.5, 1)
    plain = Hit("d#0", "d", "hello", ("A", "B"), {"x": 1}, 0.5, 1, 2, {}, 7, {"node": {"k": 3}})
    assert lazy == plain and repr(lazy) == repr(plain)
    assert dataclasses.asdict(new_hit(row, 0.5, 1)) == dataclasses.asdict(plain)
    assert new_hit(row, 0.5, 1).with_rank(3) == dataclasses.replace(plain, rank=3)
    assert pickle.loads(pickle.dumps(new_hit(row, 0.5, 1))) == plain
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lazy.nope  # noqa: B018 - the attribute access is the test
    with pytest.raises(dataclasses.FrozenInstanceError):
        lazy.text = "x"  # type: ignore[misc]


def test_lazy_decoding_is_thread_safe() -> None:
    row = (1, "p", "d", "t", '["A"]', '{"x": [1, 2]}', 0, "{}")
    for _ in range(50):
        hit = new_hit(row, 1.0, 1)
        seen: list[object] = []
        threads = [threading.Thread(target=lambda h=hit, s=seen: s.append(h.meta)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == [{"x": [1, 2]}] * 4


_OTHER_PROCESS = """
import sys
import numpy as np
from rag_hier import HierStore, Passage
store = HierStore.open(sys.argv[1])
store.delete_passages(["d0#0"])
store.add_passages([Passage("new", "dnew", 0, "new text")], np.load(sys.argv[2], allow_pickle=False))
store.close()
"""


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_dense_search_is_one_statement_and_sees_other_processes_commits(tmp_path, kind: str) -> None:
    store, x = _store(tmp_path, kind)
    path = store.path
    store.close()
    reader = HierStore.open(path, read_only=True)
    retriever = DenseRetriever(reader)
    statements: list[str] = []
    reader._core.db.set_trace_callback(statements.append)
    try:
        first = retriever.search_vectors(x[:1], top_k=3)[0]
        assert first[0].passage_id == "d0#0" and first[0].text == "text 0"
        assert "BEGIN" in statements  # the first search of a generation: a read transaction, keeping the state
        statements.clear()
        assert retriever.search_vectors(x[:1], top_k=3)[0] == first
        assert len(statements) == 1 and "key='manifest') =" in statements[0], statements  # no read transaction

        np.save(tmp_path / "q.npy", x[:1], allow_pickle=False)
        subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(path), str(tmp_path / "q.npy")], check=True)
        statements.clear()
        after = retriever.search_vectors(x[:1], top_k=3)[0]
        assert after[0].passage_id == "new" and after[0].text == "new text"
        assert "d0#0" not in {h.passage_id for h in after}
        assert "BEGIN" in statements  # the generation check failed: searched again within a read transaction

        statements.clear()
        assert [h.passage_id for h in retriever.search_vectors(x[:1], top_k=3)[0]] == [h.passage_id for h in after]
        assert len(statements) == 1  # this handle holds the new generation now

        statements.clear()
        with reader.reading():  # inside a read block: the block's transaction, no check of its own
            assert [h.passage_id for h in retriever.search_vectors(x[:1], top_k=3)[0]] == [h.passage_id for h in after]
        assert statements[0] == "BEGIN" and not any("key='manifest') =" in s for s in statements), statements
    finally:
        reader._core.db.set_trace_callback(None)
        reader.close()


def test_after_a_write_in_this_process_the_next_search_sees_it_then_is_one_statement_again(tmp_path) -> None:
    store, x = _store(tmp_path)
    retriever = DenseRetriever(store)
    retriever.search_vectors(x[:1], top_k=3)
    statements: list[str] = []
    store._core.db.set_trace_callback(statements.append)
    try:
        retriever.search_vectors(x[:1], top_k=3)
        assert len(statements) == 1
        store.add_passages([Passage("same", "dsame", 0, "same vector")], x[:1] * 2)  # scores twice d0#0's
        statements.clear()
        assert retriever.search_vectors(x[:1], top_k=3)[0][0].passage_id == "same"
        assert "BEGIN" in statements  # a new generation: read once within a transaction
        statements.clear()
        assert retriever.search_vectors(x[:1], top_k=3)[0][0].passage_id == "same"
        assert len(statements) == 1
    finally:
        store._core.db.set_trace_callback(None)
        store.close()
