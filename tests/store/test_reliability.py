"""Rough edges of the store found by trying it as users and busy systems would (those every backend shares: bad
vectors, ids, types and metadata, passages of another document, empty documents — are in tests/store/contract)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage


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


def test_an_unknown_keyword_is_a_type_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"HierStore.create\(\) got unexpected keyword argument\(s\) 'modle'"):
        HierStore.create(tmp_path / "s", modle="x")
    assert not (tmp_path / "s").exists()
    HierStore.create(tmp_path / "s", model=None, dimension=4).close()
    with pytest.raises(TypeError, match=r"HierStore.open\(\) got unexpected keyword argument\(s\) 'verify'"):
        HierStore.open(tmp_path / "s", verify=True)
    with pytest.raises(ValueError, match="not both"):
        HierStore.open(tmp_path / "s", uri=str(tmp_path / "m.db"))
