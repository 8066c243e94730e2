"""The store's search path at two versions of the engine, measured interleaved in one run.

Usage::

    python -m benchmarks.retrieval.bench_hit_path --anchor HEAD --n 100000 --kinds flat,ivf,hnsw --queries 600
    python -m benchmarks.retrieval.bench_hit_path --anchor HEAD --n 1000000 --kinds "" --stores ivf=DIR,hnsw=DIR --raw

The coordinator builds one store per index kind (N synthetic 384-d vectors, passage texts of ``--words`` words,
100 by default; built by
the working tree's engine, the store format being the same at both versions), then starts two worker
processes: the **anchor** imports ``rag_hier`` from ``git archive <anchor>`` unpacked into a temporary
directory, the **candidate** from the working tree. Both open the same stores read-only and answer, block
by block, ``DenseRetriever(store).search_vectors(q, top_k=10)`` for single queries (and one batch of
``--batch`` queries per block): blocks alternate between the two workers, and which goes first alternates
each round, so machine noise hits both alike. Each worker checks that its hits carry text. Reported:
median and p95 per query for each side, and the candidate/anchor ratio of the medians (and of the
batched time). FAISS runs on ``--threads`` threads in both workers. ``--stores`` opens stores built
beforehand (a 1M store takes minutes to build); ``--raw`` also times, in blocks interleaved with the
others, each store's own FAISS index searched directly (what raw FAISS with the same index returns: ids
and scores only) and the same search followed by a bare ``sqlite3`` fetch of the hit rows' columns from the
store's file (one ``SELECT ... WHERE id IN (...)`` on a read-only connection, no objects built: the floor of a
store that keeps its text on disk), and reports store / raw and store / (raw + fetch) for both sides.
``--fetch-mmap SIZE`` adds a second such floor, interleaved too, whose connection reads through a memory map
(``PRAGMA mmap_size=SIZE``; the store's own connection leaves SQLite's default, no memory map).

``--hit-rows memory`` opens the candidate's stores with ``hit_rows="memory"`` (the hit rows kept in memory;
``--anchor-hit-rows`` likewise for the anchor, whose engine must know the option): ``--anchor HEAD --hit-rows
memory`` compares the same engine with and without it.

Results go to ``<out>/hit-path-<N>.json`` (``--out``, default ``benchmarks/out``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import REPO
from benchmarks.common.report import OUT, write_json
from benchmarks.common.revision import extract_package
from benchmarks.common.timing import loadavg, summary
from benchmarks.common.vectors import mixture

ROOT = REPO


# ---------------------------------------------------------------------------------------------------
# worker: one engine version, commands on stdin, one JSON line per answer on stdout; it runs as the source of
# this function (``python -c``), importing nothing but NumPy, FAISS and the rag_hier on its PYTHONPATH
# ---------------------------------------------------------------------------------------------------
def worker(threads: int) -> None:
    import faiss

    import rag_hier
    from rag_hier.retrieval import DenseRetriever
    from rag_hier.store import HierStore

    faiss.omp_set_num_threads(threads)
    import sqlite3

    retrievers: dict[str, Any] = {}
    fetchers: dict[str, Any] = {}
    queries: np.ndarray | None = None
    print(json.dumps({"ready": rag_hier.__file__}), flush=True)
    pc = time.perf_counter
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "open":
            options = {"hit_rows": cmd["hit_rows"]} if cmd.get("hit_rows", "sqlite") != "sqlite" else {}
            store = HierStore.open(cmd["path"], **options)
            retrievers[cmd["kind"]] = DenseRetriever(store)
            queries = np.load(cmd["queries"], allow_pickle=False)
            answer: dict[str, Any] = {"ok": True}
        elif cmd["op"] == "single":
            assert queries is not None
            r = retrievers[cmd["kind"]]
            times = []
            for i in range(cmd["start"], cmd["start"] + cmd["count"]):
                qi = queries[i % len(queries)][None, :]
                t0 = pc()
                hits = r.search_vectors(qi, top_k=10)
                times.append(pc() - t0)
                if len(hits[0]) != 10 or not hits[0][0].text:
                    raise SystemExit(f"short or empty hits: {hits[0][:1]}")
            answer = {"times": times}
        elif cmd["op"] == "raw":  # the store's own FAISS index searched directly: raw FAISS, ids only
            assert queries is not None
            base = retrievers[cmd["kind"]].store.index._fast_plan()[0]
            times = []
            for i in range(cmd["start"], cmd["start"] + cmd["count"]):
                qi = queries[i % len(queries)][None, :]
                t0 = pc()
                base.search(qi, 10)
                times.append(pc() - t0)
            answer = {"times": times}
        elif cmd["op"] == "raw_fetch":  # raw FAISS, then a bare sqlite3 fetch of the same hit rows: the floor
            assert queries is not None
            index = retrievers[cmd["kind"]].store.index
            base, ext, _ = index._fast_plan()
            mmap_size = int(cmd.get("mmap_size", 0))
            db = fetchers.get((cmd["kind"], mmap_size))
            if db is None:
                db = fetchers[(cmd["kind"], mmap_size)] = sqlite3.connect(
                    f"file:{cmd['path']}/store.sqlite?mode=ro", uri=True, check_same_thread=False
                )
                if mmap_size:
                    db.execute(f"PRAGMA mmap_size={mmap_size}")
            sql = "SELECT id, passage_id, doc_id, text, title_path, meta, position, extra FROM passages WHERE id IN "
            times = []
            for i in range(cmd["start"], cmd["start"] + cmd["count"]):
                qi = queries[i % len(queries)][None, :]
                t0 = pc()
                _, ids = base.search(qi, 10)
                if ext is not None:
                    ids = ext[ids]
                wanted = ids[0].tolist()
                rows = db.execute(sql + "(" + ",".join("?" * len(wanted)) + ")", wanted).fetchall()
                times.append(pc() - t0)
                if len(rows) != len(wanted):
                    raise SystemExit(f"bare fetch found {len(rows)} of {len(wanted)} rows")
            answer = {"times": times}
        elif cmd["op"] == "batch":
            assert queries is not None
            r = retrievers[cmd["kind"]]
            qb = queries[: cmd["size"]]
            t0 = pc()
            hits = r.search_vectors(qb, top_k=10)
            answer = {"time": pc() - t0, "n": len(hits)}
        elif cmd["op"] == "ids":  # the ranking each side returns, to check both agree
            assert queries is not None
            hits = retrievers[cmd["kind"]].search_vectors(queries[: cmd["size"]], top_k=10)
            answer = {"ids": [[h.rowid for h in row] for row in hits]}
        else:
            break
        print(json.dumps(answer), flush=True)


class Worker:
    def __init__(self, name: str, pythonpath: str, threads: int) -> None:
        env = {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": str(threads)}
        self.name = name
        code = f"import json, sys, time\nimport numpy as np\n\n{inspect.getsource(worker)}\nworker({threads})\n"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tempfile.gettempdir(),  # so that the working tree is not on sys.path by accident
        )
        self.module = self._read()["ready"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name} worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        with_stdin = self.proc.stdin
        if with_stdin is not None:
            with_stdin.write(json.dumps({"op": "quit"}) + "\n")
            with_stdin.close()
        self.proc.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--anchor", default="HEAD", help="git revision of the anchor engine")
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--kinds", default="flat,ivf,hnsw")
    p.add_argument("--queries", type=int, default=600, help="single queries per side and kind")
    p.add_argument("--block", type=int, default=50, help="queries per interleaved block")
    p.add_argument("--batch", type=int, default=100, help="queries in the batched call of each round")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--words", type=int, default=100, help="words per passage text (0: short texts)")
    p.add_argument(
        "--stores",
        default="",
        help="KIND=PATH,... stores built beforehand (e.g. at 1M) to open instead of building those kinds",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="also time raw FAISS: each store's own index searched directly (ids only), interleaved",
    )
    p.add_argument(
        "--fetch-mmap",
        type=int,
        default=0,
        help="with --raw: also time the bare fetch on a connection with PRAGMA mmap_size=this (bytes)",
    )
    p.add_argument("--hit-rows", default="sqlite", choices=["sqlite", "memory"], help="the candidate's hit_rows=")
    p.add_argument("--anchor-hit-rows", default="sqlite", choices=["sqlite", "memory"], help="the anchor's hit_rows=")
    p.add_argument("--out", type=Path, default=OUT, help="where hit-path-<N>.json goes (default %(default)s)")
    a = p.parse_args(argv)

    from benchmarks.retrieval.bench_dense import make_passages, store_config
    from rag_hier.store import HierStore

    tmp = Path(tempfile.mkdtemp(prefix="bench-hit-path-"))
    workers: list[Worker] = []
    try:
        anchor_src = tmp / "anchor"
        commit = extract_package(a.anchor, anchor_src)
        candidate_rev = subprocess.run(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
        ).stdout.strip()

        q = mixture(max(a.batch, 1000), 384, seed=2)
        qpath = tmp / "queries.npy"
        np.save(qpath, q, allow_pickle=False)
        given = dict(item.split("=", 1) for item in a.stores.split(",") if item)
        paths: dict[str, Path] = {kind: Path(path) for kind, path in given.items()}
        kinds = [k for k in a.kinds.split(",") if k and k not in given] + list(given)
        to_build = [k for k in kinds if k not in given]
        x = mixture(a.n, 384, seed=1) if to_build else None
        passages = make_passages(a.n, words=a.words) if to_build else []
        for kind in to_build:
            t0 = time.perf_counter()
            path = tmp / kind
            store = HierStore.create(path, model=None, dimension=384, index=store_config(kind, a.n))
            store.add_passages(passages, x)
            store.close()
            paths[kind] = path
            print(f"built {kind} store of {a.n} in {time.perf_counter() - t0:.1f}s", flush=True)
        del x

        workers = [
            Worker("anchor", str(anchor_src), a.threads),
            Worker("candidate", str(ROOT), a.threads),
        ]
        assert workers[0].module.startswith(str(anchor_src)), workers[0].module
        assert workers[1].module.startswith(str(ROOT)), workers[1].module
        hit_rows = {"anchor": a.anchor_hit_rows, "candidate": a.hit_rows}
        for w in workers:
            for kind in kinds:
                w.ask(op="open", kind=kind, path=str(paths[kind]), queries=str(qpath), hit_rows=hit_rows[w.name])

        results: dict[str, Any] = {}
        load_before = loadavg()
        for kind in kinds:
            same = [w.ask(op="ids", kind=kind, size=50)["ids"] for w in workers]
            agree = same[0] == same[1]
            single: dict[str, list[float]] = {w.name: [] for w in workers}
            raw: list[float] = []
            raw_fetch: list[float] = []
            raw_fetch_mmap: list[float] = []
            batched: dict[str, list[float]] = {w.name: [] for w in workers}
            for w in workers:  # warm-up
                w.ask(op="single", kind=kind, start=0, count=a.block)
            rounds = math.ceil(a.queries / a.block)
            for r in range(rounds):
                order = workers if r % 2 == 0 else workers[::-1]
                for w in order:
                    single[w.name] += w.ask(op="single", kind=kind, start=r * a.block, count=a.block)["times"]
                if a.raw:
                    raw += workers[1].ask(op="raw", kind=kind, start=r * a.block, count=a.block)["times"]
                    raw_fetch += workers[1].ask(
                        op="raw_fetch", kind=kind, path=str(paths[kind]), start=r * a.block, count=a.block
                    )["times"]
                    if a.fetch_mmap:
                        raw_fetch_mmap += workers[1].ask(
                            op="raw_fetch",
                            kind=kind,
                            path=str(paths[kind]),
                            start=r * a.block,
                            count=a.block,
                            mmap_size=a.fetch_mmap,
                        )["times"]
                for w in order:
                    batched[w.name].append(w.ask(op="batch", kind=kind, size=a.batch)["time"])
            s = {name: summary(v) for name, v in single.items()}
            b = {name: float(np.median(v)) * 1e3 / a.batch for name, v in batched.items()}
            results[kind] = {
                "single": s,
                "batched_ms_per_query": b,
                "ratio_single_median": s["candidate"]["median_ms"] / s["anchor"]["median_ms"],
                "ratio_single_p95": s["candidate"]["p95_ms"] / s["anchor"]["p95_ms"],
                "ratio_batched": b["candidate"] / b["anchor"],
                "same_rankings": agree,
            }
            if raw:
                results[kind]["raw"] = summary(raw)
                results[kind]["store_over_raw"] = {
                    name: s[name]["median_ms"] / results[kind]["raw"]["median_ms"] for name in s
                }
                results[kind]["raw_fetch"] = summary(raw_fetch)
                results[kind]["store_over_raw_fetch"] = {
                    name: s[name]["median_ms"] / results[kind]["raw_fetch"]["median_ms"] for name in s
                }
            if raw_fetch_mmap:
                results[kind]["raw_fetch_mmap"] = summary(raw_fetch_mmap)
                results[kind]["store_over_raw_fetch_mmap"] = {
                    name: s[name]["median_ms"] / results[kind]["raw_fetch_mmap"]["median_ms"] for name in s
                }
            print(
                f"{kind:5s} single median anchor {s['anchor']['median_ms']:.3f} ms, candidate "
                f"{s['candidate']['median_ms']:.3f} ms, ratio {results[kind]['ratio_single_median']:.3f} "
                f"(p95 ratio {results[kind]['ratio_single_p95']:.3f}); batched ratio "
                f"{results[kind]['ratio_batched']:.3f}; same rankings: {agree}",
                flush=True,
            )
            if raw:
                over = results[kind]["store_over_raw"]
                fetch = results[kind]["store_over_raw_fetch"]
                print(
                    f"      raw FAISS median {results[kind]['raw']['median_ms']:.3f} ms; store / raw: anchor "
                    f"{over['anchor']:.3f}x, candidate {over['candidate']:.3f}x\n"
                    f"      raw FAISS + bare SQLite fetch median {results[kind]['raw_fetch']['median_ms']:.3f} ms; "
                    f"store / that: anchor {fetch['anchor']:.3f}x, candidate {fetch['candidate']:.3f}x",
                    flush=True,
                )
            if raw_fetch_mmap:
                fetch = results[kind]["store_over_raw_fetch_mmap"]
                print(
                    f"      raw FAISS + memory-mapped fetch median {results[kind]['raw_fetch_mmap']['median_ms']:.3f} "
                    f"ms; store / that: anchor {fetch['anchor']:.3f}x, candidate {fetch['candidate']:.3f}x",
                    flush=True,
                )
        report = {
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "anchor": {"rev": a.anchor, "commit": commit, "hit_rows": a.anchor_hit_rows},
            "candidate": {"rev": candidate_rev, "hit_rows": a.hit_rows},
            "n": a.n,
            "queries": a.queries,
            "block": a.block,
            "batch": a.batch,
            "threads": a.threads,
            "fetch_mmap": a.fetch_mmap,
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
            "results": results,
        }
        out = write_json(a.out / f"hit-path-{a.n}.json", report, indent=2)
        print(f"load average before {load_before}, after {report['loadavg_after']}; wrote {out}")
    finally:
        for w in workers:
            try:
                w.close()
            except Exception:  # best effort at exit
                w.proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
