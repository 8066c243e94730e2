"""How long a writer waits for readers in other processes: commit latency while `rag-hier eval` runs beside it.

A copy of a SciFact store is read by `rag-hier eval` (every test query, one strategy) in a loop in another
process while this process commits one small document every 0.2 s and times each commit. Two reader modes
run interleaved: ``groups`` (the library: each read covers 64 queries) and ``whole`` (every query of the
run in one read, as the reader would hold it without grouping). A third phase holds ``store.reading()``
open for ``--hold`` seconds in another process: the commit waits for it and then succeeds.

    python -m benchmarks.stress.bench_writer_wait [--data ../shared/data] [--store STORE] [--rounds 3]

``--store``: an existing SciFact store (e.g. the base store ``bench_tune.py`` builds); without it one is
built under ``benchmarks/out/writer-wait/`` with the default model (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common.data import add_data_argument, scifact_dir
from benchmarks.common.report import out_path, write_json
from benchmarks.common.vectors import unit_vectors

READER = """
import sys
from rag_hier.cli.main import main
from rag_hier.retrieval import base
if sys.argv[1] == "whole":
    base.READ_BLOCK_QUERIES = 10**9
stop = sys.argv[2]
import os
runs = 0
while not os.path.exists(stop):
    code = main(sys.argv[3:])
    if code != 0:
        sys.exit(code)
    runs += 1
print(runs)
"""

HOLD = """
import sys, time
from pathlib import Path
from rag_hier import HierStore
store = HierStore.open(sys.argv[1], read_only=True)
with store.reading():
    store.count_passages()
    Path(sys.argv[2]).touch()
    time.sleep(float(sys.argv[3]))
"""


def _build(scifact: Path, out: Path, model: str | None) -> Path:
    store = out / "store"
    if not (store / "manifest.json").exists():
        cmd = [sys.executable, "-m", "rag_hier", "index", str(scifact / "corpus.jsonl.gz"), "--store", str(store)]
        subprocess.run([*cmd, "--no-progress", *(["--model", model] if model else [])], check=True)
    return store


def _commits(store_path: Path, seconds: float, stop: threading.Event | None = None) -> list[float]:
    """Commit one passage every 0.2 s for ``seconds``; the latency of each commit."""
    from rag_hier import HierStore, Passage

    store = HierStore.open(store_path)
    dim = int(store.dimension or 384)
    rng = np.random.default_rng(0)
    times: list[float] = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        v = unit_vectors(rng, 1, dim)
        t0 = time.perf_counter()
        store.add_passages([Passage(f"w{os.getpid()}-{n}", f"w{n}", 0, f"written {n}")], v)
        times.append(time.perf_counter() - t0)
        n += 1
        time.sleep(0.2)
    store.close()
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(ap)
    ap.add_argument("--store", type=Path, default=None, help="an existing SciFact store (copied, never written)")
    ap.add_argument("--model", default=None, help="the model of the store built without --store (default: MiniLM)")
    ap.add_argument("--out", type=Path, default=out_path("writer-wait"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0, help="writing time per round and mode")
    ap.add_argument("--strategy", default="dense")
    ap.add_argument("--hold", type=float, default=20.0, help="seconds a reader holds store.reading() open")
    ap.add_argument("--settle", type=float, default=8.0, help="seconds the reader gets to load before the writes")
    ap.add_argument(
        "--modes", default="groups,whole", help="reader modes, comma-separated (groups: the library's; whole)"
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    scifact = scifact_dir(args.data)
    source = args.store or _build(scifact, args.out, args.model)
    queries = scifact / "queries.jsonl"
    qrels = scifact / "qrels" / "test.tsv"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - {"groups", "whole"}:
        ap.error(f"--modes: unknown {sorted(unknown)} (groups, whole)")
    results: dict[str, list[float]] = {m: [] for m in modes}
    runs: dict[str, int] = dict.fromkeys(modes, 0)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else modes[::-1]:
                store = Path(tmp) / f"s-{mode}-{r}"
                shutil.copytree(source, store)
                stop = Path(tmp) / f"stop-{mode}-{r}"
                cmd = ["eval", "--store", str(store), "--queries", str(queries), "--qrels", str(qrels)]
                cmd += ["--strategy", args.strategy, "--no-progress"]
                reader = subprocess.Popen(
                    [sys.executable, "-c", READER, mode, str(stop), *cmd],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                time.sleep(args.settle)  # the reader has loaded its model and is searching
                results[mode] += _commits(store, args.seconds)
                stop.touch()
                out, _ = reader.communicate(timeout=600)
                if reader.returncode != 0:
                    raise SystemExit(f"the reader failed ({mode}, round {r}): exit {reader.returncode}")
                runs[mode] += int(out.strip().splitlines()[-1])
                shutil.rmtree(store)
        # a reader that holds a read open for --hold seconds: the commit waits, then succeeds
        store = Path(tmp) / "s-hold"
        shutil.copytree(source, store)
        started = Path(tmp) / "started"
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store), str(started), str(args.hold)], env=env)
        while not started.exists():
            time.sleep(0.05)
        t0 = time.perf_counter()
        held = _commits(store, 0.01)
        holder.wait(timeout=600)
        hold_wait = time.perf_counter() - t0
    report = {
        "strategy": args.strategy,
        "rounds": args.rounds,
        "eval_runs": runs,
        "commits": {m: len(v) for m, v in results.items()},
        "commit_s": {
            m: {
                "median": statistics.median(v),
                "p99": float(np.quantile(v, 0.99)),
                "max": max(v),
            }
            for m, v in results.items()
            if v
        },
        "hold_s": args.hold,
        "commit_during_hold_s": hold_wait,
        "commit_during_hold_ok": len(held) == 1,
    }
    print(json.dumps(report, indent=2))
    write_json(args.out / f"writer-wait-{args.strategy}.json", report, indent=2)


if __name__ == "__main__":
    main()
