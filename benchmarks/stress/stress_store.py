"""Store reliability under stress: kill -9 during writes, and a writer against reader processes.

Two experiments, each printing its figures (the numbers in docs/reliability.md come from here):

``kill``: N trials; in each, a writer process adds documents (two passages each) and deletes some, with a
document index and a token index attached, logging every write after it returned (fsync'd); it is killed
with SIGKILL at a random moment; the store is then opened read-write (recovery runs), and every acknowledged
write must be there, the write in flight all or nothing, the counts consistent and no temporary file left.

``readers``: one writer process commits N writes while two reader processes open, count, filter and search
(dense, DHR, token index) the whole time; zero errors allowed on either side, every acknowledged write
present afterwards (the workers are ``tests/store/_stress.py``).

    python -m benchmarks.stress.stress_store kill --trials 100 [--milvus]
    python -m benchmarks.stress.stress_store readers --writes 1000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from benchmarks.common.data import REPO
from benchmarks.common.report import write_json

STRESS_WORKERS = REPO / "tests" / "store" / "_stress.py"
"""The reader and writer processes of the ``readers`` experiment (shared with the test suite)."""

WRITER = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    from rag_hier import HierStore, Passage

    path, log_path, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = HierStore.open(uri=path) if path.endswith(".db") else HierStore.open(path)
    log = open(log_path, "a", encoding="utf-8")
    rng = np.random.default_rng(first)
    doc = first
    while True:
        if doc % 7 == 6:
            victim = doc - 3
            log.write(json.dumps({"op": "delete", "doc": victim, "state": "start"}) + "\\n"); log.flush()
            store.delete_documents([f"d{victim}"])
        else:
            log.write(json.dumps({"op": "add", "doc": doc, "state": "start"}) + "\\n"); log.flush()
            store.add_passages(
                [Passage(f"d{doc}#{k}", f"d{doc}", k, f"word{doc % 13} text {doc} part {k}") for k in range(2)],
                rng.standard_normal((2, 8)).astype("float32"),
            )
        log.write(json.dumps({"op": "ack", "doc": doc}) + "\\n"); log.flush(); os.fsync(log.fileno())
        doc += 1
    """
)


CHECK = textwrap.dedent(
    """
    import json, sys
    from rag_hier import HierStore

    path, pending = sys.argv[1], sys.argv[2]
    # opened read-write: recovery of the killed writer's commit, if it got that far
    store = HierStore.open(uri=path) if path.endswith(".db") else HierStore.open(path)
    out = {
        "stored": sorted(store.document_ids()),
        "passages": store.count_passages(),
        "documents": store.count_documents(),
        "pending_rows": int(store.rowids_of(doc_ids=[pending]).size) if pending else 0,
        "generation": store.generation,
    }
    store.close()
    print(json.dumps(out))
    """
)
"""Opens the store in a process of its own (Milvus Lite lets one process hold a database file at a time)."""


def _make_in_process(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "benchmarks.stress.stress_store", "make", str(path)], check=True, cwd=REPO)


def _stress_workers() -> object:
    """``tests/store/_stress.py`` loaded from its file (its ``vector`` makes the vectors the workers expect)."""
    spec = importlib.util.spec_from_file_location("rag_hier_stress_workers", STRESS_WORKERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _make(path: Path) -> None:
    from rag_hier import HierStore, Passage
    from rag_hier.store.extensions.doc_index import DocumentIndex
    from rag_hier.store.extensions.token_index import TokenIndexExtension

    if path.suffix == ".db":  # Milvus Lite: a collection with a token index
        store = HierStore.create(uri=str(path), model=None, dimension=8)
        store.add_extension(TokenIndexExtension())
    else:
        store = HierStore.create(path, model=None, dimension=8)
        store.add_extension(TokenIndexExtension())
        store.add_extension(DocumentIndex())
    rng = np.random.default_rng(0)
    store.add_passages(
        [Passage(f"d{d}#{k}", f"d{d}", k, f"word{d % 13} text {d} part {k}") for d in range(500) for k in range(2)],
        rng.standard_normal((1000, 8)).astype("float32"),
    )
    store.close()


def kill_trials(trials: int, seed: int, keep: Path | None = None, milvus: bool = False) -> dict[str, object]:
    rnd = random.Random(seed)
    acknowledged = inflight = lost = torn = stray = 0
    details: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("store.db" if milvus else "store")
        _make_in_process(path)
        log_path = Path(tmp) / "log.jsonl"
        first = 10_000
        present: dict[int, bool] = {d: True for d in range(500)}
        for trial in range(trials):
            log_path.write_text("")
            proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(log_path), str(first)])
            deadline = time.monotonic() + 120
            # the writer has finished its first write (imports and tokenizer loaded: a kill before that tests
            # nothing but process start-up) ...
            while b'"ack"' not in log_path.read_bytes() and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(rnd.uniform(0.0, 3.0))  # ... then a random moment of its writing
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            events = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
            log_path.write_text("")
            pending = None
            for e in events:
                if e.get("state") == "start":
                    pending = e
                elif e["op"] == "ack":
                    acknowledged += 1
                    op = pending
                    assert op is not None
                    present[op["doc"]] = op["op"] == "add"
                    pending = None
            pending_doc = f"d{pending['doc']}" if pending is not None else ""
            checked = subprocess.run(
                [sys.executable, "-c", CHECK, str(path), pending_doc], check=True, capture_output=True, text=True
            )
            view = json.loads(checked.stdout.strip().splitlines()[-1])
            stored = set(view["stored"])
            if view["passages"] != 2 * view["documents"]:
                torn += 1
            for d, there in present.items():
                if pending is not None and d == pending["doc"]:
                    continue  # the write in flight (e.g. a delete of an earlier document) is all-or-nothing, below
                if (f"d{d}" in stored) != there:
                    lost += 1
                    details.append(
                        {
                            "trial": trial,
                            "doc": d,
                            "acknowledged": "add" if there else "delete",
                            "in_flight": pending,
                            "generation": view["generation"],
                        }
                    )
                    if keep is not None:
                        shutil.copytree(path, keep / f"trial{trial}", dirs_exist_ok=True)
                        (keep / f"trial{trial}.json").write_text(json.dumps(events))
            if pending is not None:
                inflight += 1
                d = pending["doc"]
                if view["pending_rows"] not in (0, 2):
                    torn += 1
                present[d] = f"d{d}" in stored
            if path.is_dir():
                stray += len([p for p in path.iterdir() if ".tmp" in p.name])
            first = max([d for d in present] + [first]) + 1
    return {
        "backend": "milvus-lite" if milvus else "local",
        "trials": trials,
        "acknowledged_writes": acknowledged,
        "in_flight_writes": inflight,
        "lost": lost,
        "torn": torn,
        "stray_temporary_files": stray,
        "lost_details": details[:20],
    }


def reader_stress(writes: int) -> dict[str, float]:
    from rag_hier import HierStore, Passage
    from rag_hier.store.extensions.doc_index import DocumentIndex
    from rag_hier.store.extensions.token_index import TokenIndexExtension

    vector = _stress_workers().vector  # the workers' vectors
    worker = STRESS_WORKERS
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        path = tmp_path / "store"
        store = HierStore.create(path, model=None, dimension=8)
        store.add_extension(TokenIndexExtension())
        store.add_extension(DocumentIndex())
        store.add_passages(
            [
                Passage(f"d{d}#{k}", f"d{d}", k, f"word{d % 13} text {d} part {k}", meta={"g": d % 5, "doc": d})
                for d in range(100)
                for k in range(2)
            ],
            np.stack([vector(d, k) for d in range(100) for k in range(2)]),
        )
        store.close()
        stop = tmp_path / "stop"
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        readers = [
            subprocess.Popen(
                [sys.executable, str(worker), "reader", str(path), str(tmp_path / f"r{i}.json"), str(stop)], env=env
            )
            for i in range(2)
        ]
        time.sleep(2.0)
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, str(worker), "writer", str(path), str(tmp_path / "w.log"), str(writes)],
            env=env,
            check=True,
        )
        elapsed = time.perf_counter() - t0
        stop.touch()
        for r in readers:
            r.wait()
        reports = [json.loads((tmp_path / f"r{i}.json").read_text()) for i in range(2)]
        writer_errors = json.loads((tmp_path / "w.log.errors.json").read_text())
        ops = [json.loads(line) for line in (tmp_path / "w.log").read_text().splitlines()]
        added = {o["doc"] for o in ops if o["op"] == "add"}
        deleted = {o["doc"] for o in ops if o["op"] == "delete"}
        store = HierStore.open(path)
        stored = set(store.document_ids())
        lost = len({f"d{d}" for d in added - deleted} - stored) + len({f"d{d}" for d in deleted} & stored)
        store.close()
    return {
        "acknowledged_writes": len(ops),
        "writer_seconds": round(elapsed, 1),
        "reader_processes": 2,
        "reader_checked_reads": sum(r["ops"] for r in reports),
        "reader_errors": sum(len(r["errors"]) for r in reports),
        "reader_error_samples": [e for r in reports for e in r["errors"]][:5],
        "writer_errors": len(writer_errors),
        "lost": lost,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the figures to this JSON file")
    sub = parser.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kill")
    k.add_argument("--trials", type=int, default=100)
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--keep", type=Path, help="copy the store and log of a trial that lost a write here")
    k.add_argument("--milvus", action="store_true", help="a Milvus Lite collection instead of a store directory")
    m = sub.add_parser("make", help="(internal) create the store the kill trials write to")
    m.add_argument("path", type=Path)
    r = sub.add_parser("readers")
    r.add_argument("--writes", type=int, default=1000)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.cmd == "make":
        _make(args.path)
        return 0
    if args.cmd == "kill":
        result = kill_trials(args.trials, args.seed, args.keep, milvus=args.milvus)
    else:
        result = reader_stress(args.writes)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result, indent=2))
    if args.out:
        write_json(args.out, result, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
