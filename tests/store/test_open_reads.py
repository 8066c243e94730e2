"""Opening a store reads the rowids of the passages with a vector from an index, not from the passages table."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.errors import StoreCorruptedError
from rag_hier.retrieval.dense import DenseRetriever
from rag_hier.store.files import sha256_file

D = 8
TEXT = "word " * 400  # 2 kB a passage: the table is much larger than its indexes


def _store(path: Path, n: int = 400, kind: str = "flat") -> None:
    rng = np.random.default_rng(0)
    with HierStore.create(path, model=None, dimension=D, index={"kind": kind}) as store:
        passages = [Passage(f"p{i}", f"d{i // 4}", i % 4, f"{i} {TEXT}") for i in range(n)]
        store.add_passages(passages, rng.standard_normal((n, D)).astype(np.float32))


def _plan(path: Path, sql: str) -> str:
    db = sqlite3.connect(path / "store.sqlite")
    try:
        return " ".join(str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN " + sql))
    finally:
        db.close()


def test_the_rowids_of_passages_with_vectors_come_from_a_covering_index(tmp_path: Path) -> None:
    _store(tmp_path / "s")
    plan = _plan(tmp_path / "s", "SELECT id FROM passages WHERE has_vector=1 ORDER BY id")
    assert "COVERING INDEX passages_with_vector" in plan
    assert "COVERING INDEX passages_with_vector" in _plan(
        tmp_path / "s", "SELECT count(*) FROM passages WHERE has_vector=1"
    )
    # the index is never taken for a lookup by document or by passage id (their own indexes are)
    assert "passages_by_doc" in _plan(tmp_path / "s", "SELECT id FROM passages WHERE has_vector=1 AND doc_id IN ('d1')")
    assert "passages_with_vector" not in _plan(
        tmp_path / "s", "SELECT id FROM passages WHERE has_vector=1 AND passage_id IN ('p1', 'p2')"
    )


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="reads are counted through /proc/self/io (Linux)")
def test_open_without_checksums_reads_far_less_than_the_database(tmp_path: Path) -> None:
    # what a process reads from files while opening: dense.faiss whole, then a few pages of store.sqlite (schema,
    # state, counts, the rowid index), not its passages table (the old open scanned it twice)
    path = tmp_path / "s"
    _store(path, n=2000)
    probe = (
        "import json\nfrom rag_hier import HierStore\nimport faiss\n"
        "def rchar():\n"
        "    return int(dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())['rchar'])\n"
        f"before = rchar()\nstore = HierStore.open({str(path)!r}, verify_checksums=False)\n"
        "print(json.dumps([rchar() - before, store.count_passages()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    read, count = json.loads(out.stdout.strip().splitlines()[-1])
    database, index = os.path.getsize(path / "store.sqlite"), os.path.getsize(path / "dense.faiss")
    assert count == 2000 and database > 4 * index
    assert read < index + database / 4, (read, index, database)


def _drop_rowid_index(path: Path) -> None:
    """The store as a rag-hier without the rowid index wrote it (the manifest's record of the database follows)."""
    db = sqlite3.connect(path / "store.sqlite")
    db.execute("DROP INDEX passages_with_vector")
    db.commit()
    db.execute("VACUUM")
    db.close()
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["store.sqlite"] = {
        "bytes": (path / "store.sqlite").stat().st_size,
        "sha256": sha256_file(path / "store.sqlite"),
    }
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_a_store_without_the_rowid_index_opens_and_gets_it_with_its_next_write(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store(path, n=50)
    _drop_rowid_index(path)
    assert "passages_with_vector" not in _plan(path, "SELECT id FROM passages WHERE has_vector=1 ORDER BY id")
    with HierStore.open(path) as store:
        assert store.count_passages() == 50
        store.add_passages([Passage("new", "dn", 0, "new")], np.ones((1, D), np.float32))
    assert "COVERING INDEX passages_with_vector" in _plan(
        path, "SELECT id FROM passages WHERE has_vector=1 ORDER BY id"
    )
    with HierStore.open(path) as store:
        assert store.count_passages() == 51


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_open_still_finds_deleted_and_missing_vectors(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "s"
    _store(path, n=60, kind=kind)
    with HierStore.open(path) as store:
        store.delete_passages(["p3"])
    with HierStore.open(path) as store:  # a deleted passage's vector is never a hit after reopening
        q = np.random.default_rng(1).standard_normal((5, D)).astype(np.float32)
        hits = DenseRetriever(store).search_vectors(q, top_k=60)
        assert all("p3" not in {h.passage_id for h in row} for row in hits)
        assert {len(row) for row in hits} == {59}
    # a passage whose rowid the index does not hold (the counts unchanged): refused at open
    db = sqlite3.connect(path / "store.sqlite")
    db.execute("UPDATE passages SET id=99999 WHERE passage_id='p4'")
    db.commit()
    db.close()
    with pytest.raises(StoreCorruptedError):
        HierStore.open(path, verify_checksums=False)
