"""One writer process and reader processes on one store, at full speed: nobody breaks anybody.

The writer commits documents (two passages each, so a torn state would show as a lone passage) and deletes some,
logging every write once it returned; two readers open, count, filter and search (dense, DHR, token index)
the whole time, with a long-lived handle and fresh ones, checking what must hold within one committed
generation (one reader keeps the hit rows of dense searches in memory, ``hit_rows="memory"``). Afterwards every
acknowledged write is there, the store opens cleanly and no temporary file is left. The figures of a longer run
are in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.store.extensions.token_index import TokenIndexExtension

WORKER = Path(__file__).with_name("_stress.py")
N_WRITES = int(os.environ.get("RAG_HIER_STRESS_WRITES", "200"))


def _make(path: Path) -> None:
    sys.path.insert(0, str(WORKER.parent))
    from _stress import vector

    store = HierStore.create(path, model=None, dimension=8)
    store.add_extension(TokenIndexExtension())
    store.add_extension(DocumentIndex())
    docs = range(100)
    passages = [
        Passage(f"d{d}#{k}", f"d{d}", k, f"word{d % 13} text {d} part {k}", meta={"g": d % 5, "doc": d})
        for d in docs
        for k in range(2)
    ]
    store.add_passages(passages, np.stack([vector(d, k) for d in docs for k in range(2)]))
    store.close()


@pytest.mark.slow
def test_writer_and_readers_in_separate_processes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    _make(path)
    stop = tmp_path / "stop"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    readers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "reader", str(path), str(tmp_path / f"r{i}.json"), str(stop), mode], env=env
        )
        for i, mode in enumerate(("sqlite", "memory"))
    ]
    time.sleep(1.0)  # the readers are running before the first write
    t0 = time.perf_counter()
    writer = subprocess.run(
        [sys.executable, str(WORKER), "writer", str(path), str(tmp_path / "w.log"), str(N_WRITES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    elapsed = time.perf_counter() - t0
    stop.touch()
    for r in readers:
        r.wait(timeout=300)
    assert writer.returncode == 0, writer.stderr
    assert json.loads((tmp_path / "w.log.errors.json").read_text()) == []
    reports = [json.loads((tmp_path / f"r{i}.json").read_text()) for i in range(2)]
    for report in reports:
        assert report["errors"] == [], report["errors"][0]
        assert report["ops"] > 0
    ops = [json.loads(line) for line in (tmp_path / "w.log").read_text().splitlines()]
    assert len(ops) == N_WRITES
    added = {o["doc"] for o in ops if o["op"] == "add"}
    deleted = {o["doc"] for o in ops if o["op"] == "delete"}
    store = HierStore.open(path)  # checksums, counts, schema
    stored = set(store.document_ids())
    assert {f"d{d}" for d in added - deleted} <= stored
    assert not {f"d{d}" for d in deleted} & stored
    assert store.count_passages() == 2 * store.count_documents() == 2 * (100 + len(added - deleted))
    store.close()
    assert not [p.name for p in path.iterdir() if ".tmp" in p.name]
    print(
        f"\n{N_WRITES} acknowledged writes in {elapsed:.1f}s against 2 readers "
        f"({', '.join(str(r['ops']) for r in reports)} checked reads): 0 lost, 0 errors"
    )


_HOLD_READ = """
import sys, time
from pathlib import Path
from rag_hier import HierStore
store = HierStore.open(sys.argv[1], read_only=True)
with store.reading():
    store.count_passages()
    Path(sys.argv[2]).touch()  # the read transaction is open
    time.sleep(float(sys.argv[3]))
store.close()
"""


def test_a_writer_waits_for_a_long_read_in_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from rag_hier.store import core

    monkeypatch.setattr(core, "_BUSY_TIMEOUT_S", 0.3)  # SQLite's wait per attempt: a read of 2 s outlasts several
    path = tmp_path / "store"
    _make(path)
    started = tmp_path / "started"
    reader = subprocess.Popen([sys.executable, "-c", _HOLD_READ, str(path), str(started), "2.0"])
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert reader.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        store = HierStore.open(path)
        t0 = time.perf_counter()
        with caplog.at_level(logging.INFO, logger="rag_hier.store.core"):
            store.add_passages([Passage("w#0", "w", 0, "written while a read was open")], np.ones((1, 8)))
        waited = time.perf_counter() - t0
        assert reader.wait(timeout=60) == 0
        assert "a commit waits for another process's transaction" in caplog.text
        assert 0.5 < waited < 30
        assert store.count_passages() == 201
        store.close()
    finally:
        reader.kill()
        reader.wait()
