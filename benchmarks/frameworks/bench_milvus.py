"""Milvus Lite vs the local store (SQLite + FAISS) vs raw FAISS on the same vectors, in one run.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.frameworks.bench_milvus --n 1000000 --kinds flat,ivf,hnsw --queries 50

For each index kind, N unit-normalised 384-d vectors (a Gaussian mixture, as in ``bench_dense.py``; 10
passages per document) go into (a) a raw FAISS index with the store's parameters (the anchor: ids only),
(b) a local :class:`~rag_hier.store.HierStore` directory and (c) a Milvus collection
(``HierStore.create(uri=...)``), the last two with no encoder, through ``add_passages`` in one batch.
Milvus is Milvus Lite run as a **separate server process** (``python -m milvus_lite server``, reached over
``http://127.0.0.1:PORT``, the production code path) so that its memory can be measured apart from the
client's; ``--embedded`` uses a Milvus Lite file in-process instead.

Reported per backend: build time, recall@10 against exact search (numpy), single-query latency (median and
p95, one query per ``run`` call, the backends interleaved query by query so machine noise hits all alike),
batched time per query (all queries in one call), filtered search at 1 %, 10 % and 50 % selectivity
(``meta.bucket``, a JSON metadata key; the store and Milvus only: raw FAISS has no metadata): median latency,
recall@10 against exact filtered search, and whether every query got ``top_k`` hits. Memory: resident set of
a fresh process that opens the raw index / the local store and runs the queries, minus that of a process
that only imported the same modules; for Milvus, the server process' resident set after the run minus its
resident set when idle. DHR (``--dhr``, Flat only): the ``hierarchical`` strategy (mean document vectors,
k1 = 100) on the local store and on Milvus, latency and top-10 agreement between the two.

Results go to ``--out`` (default ``benchmarks/out/milvus-<N>.json``); everything else lives in a temporary
directory removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import out_path, write_json
from benchmarks.common.timing import interleaved, summary
from benchmarks.common.vectors import mixture

SELECTIVITY = {"1%": 1, "10%": 10, "50%": 50}
"""Filter ``meta.bucket < b`` with ``bucket = i % 100``."""

PER_DOC = 10


def passages(start: int, stop: int) -> list[Any]:
    from rag_hier.corpus import Passage

    return [
        Passage(
            id=f"doc{i // PER_DOC}#{i % PER_DOC}",
            doc_id=f"doc{i // PER_DOC}",
            position=i % PER_DOC,
            text=f"p{i}",
            meta={"bucket": i % 100},
        )
        for i in range(start, stop)
    ]


def exact(x: np.ndarray, q: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    out = np.empty((q.shape[0], k), dtype=np.int64)
    for i in range(q.shape[0]):
        s = x @ q[i]
        if mask is not None:
            s[~mask] = -np.inf
        top = np.argpartition(-s, k)[:k]
        out[i] = top[np.argsort(-s[top], kind="stable")]
    return out


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t.tolist())) / k for f, t in zip(found, truth, strict=True)]))


def index_config(kind: str, n: int) -> dict[str, Any]:
    from rag_hier.index.dense import IndexConfig

    cfg = IndexConfig(kind=kind)
    if kind == "ivf":
        nlist = int(min(4 * np.sqrt(n), n / 39))
        return {"kind": "ivf", "nlist": nlist, "nprobe": cfg.nprobe}
    return {"kind": kind}


def build_raw(kind: str, x: np.ndarray, cfg: dict[str, Any]) -> tuple[Any, float]:
    import faiss

    from rag_hier.index.dense import IndexConfig

    full = IndexConfig.from_dict(cfg)
    d = x.shape[1]
    t0 = time.perf_counter()
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "ivf":
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, cfg["nlist"], faiss.METRIC_INNER_PRODUCT)
        index.train(x[np.random.default_rng(0).permutation(x.shape[0])[: 256 * cfg["nlist"]]])
        index.nprobe = full.nprobe
    else:
        index = faiss.IndexHNSWFlat(d, full.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = full.ef_construction
        index.hnsw.efSearch = full.ef_search
    for s in range(0, x.shape[0], 100_000):
        index.add(x[s : s + 100_000])
    return index, time.perf_counter() - t0


def build_store(location: dict[str, Any], cfg: dict[str, Any], x: np.ndarray) -> tuple[Any, float]:
    from rag_hier.store import HierStore

    t0 = time.perf_counter()
    store = HierStore.create(**location, model=None, dimension=x.shape[1], index=cfg)
    with store.batch():
        for start in range(0, x.shape[0], 10_000):
            stop = min(start + 10_000, x.shape[0])
            store.add_passages(passages(start, stop), x[start:stop])
    return store, time.perf_counter() - t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def milvus_server(data_dir: Path) -> Iterator[tuple[str, int]]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "milvus_lite",
            "server",
            "--data-dir",
            str(data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError("Milvus Lite server did not start")
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def listening_pid(uri: str) -> int | None:
    """The process listening on ``uri``'s port on this machine (``None`` when it is elsewhere or unknown)."""
    import psutil

    port = int(uri.rsplit(":", 1)[1].split("/")[0])
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    return None


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


MEMORY_PROBE = r"""
import json, sys, resource
import numpy as np
import faiss
import rag_hier.store, rag_hier.retrieval
from rag_hier.retrieval import Queries, build_retriever
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20
what, path, qpath = sys.argv[1], sys.argv[2], sys.argv[3]
q = np.load(qpath, allow_pickle=False)
base = rss()
if what == 'raw':
    index = faiss.read_index(path)
    for i in range(q.shape[0]):
        index.search(q[i:i+1], 10)
elif what == 'store':
    store = rag_hier.store.HierStore.open(path, read_only=True)
    r = build_retriever('dense', store)
    for i in range(q.shape[0]):
        r.run(Queries(vectors=q[i:i+1]), top_k=10)
print(json.dumps({'base_mb': base, 'after_mb': rss()}))
"""


def memory_probe(what: str, path: Path, qpath: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, what, str(path), str(qpath)], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"rss_mb": round(got["after_mb"] - got["base_mb"], 1)}


def raw_search(index: Any, q: np.ndarray) -> Any:
    """Query ``i`` on a raw FAISS index: the row numbers of its top 10."""
    return lambda i: index.search(q[i : i + 1], 10)[1][0].tolist()


def dense_search(retriever: Any, q: np.ndarray, row: Any, filters: Any = None) -> Any:
    """Query ``i`` through a rag-hier retriever: the row numbers of its top-10 hits."""
    from rag_hier.retrieval import Queries

    return lambda i: [row(h) for h in retriever.run(Queries(vectors=q[i : i + 1]), top_k=10, filters=filters)[0].hits]


def latency(seconds: list[float]) -> dict[str, float]:
    """Median and p95 in milliseconds (3 decimals), and the count."""
    return summary(seconds, digits=3)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument(
        "--filter-queries", type=int, default=None, help="queries per filtered setting (default: --queries)"
    )
    ap.add_argument("--kinds", default="flat,ivf,hnsw")
    ap.add_argument("--dhr", action="store_true", help="also DHR (hierarchical strategy) on the Flat stores")
    ap.add_argument("--embedded", action="store_true", help="Milvus Lite in this process (no memory figure)")
    ap.add_argument(
        "--milvus-uri",
        default=None,
        help="an already running Milvus server (http://host:port) instead of a Milvus Lite server process; "
        "its memory is measured when it listens on this machine",
    )
    ap.add_argument("--out", default=None, help="the JSON file (default benchmarks/out/milvus-<N>.json)")
    args = ap.parse_args(argv)

    import faiss

    from rag_hier.retrieval import Queries, build_retriever

    # a terminated run still stops its Milvus Lite server process (the `finally` of milvus_server runs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    faiss.omp_set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    t0 = time.perf_counter()
    x = mixture(args.n, args.dim, seed=1)
    q = mixture(args.queries, args.dim, seed=99)
    bucket = np.arange(args.n) % 100
    truth = exact(x, q, 10)
    nf = args.filter_queries or args.queries
    truth_f = {name: exact(x, q[:nf], 10, bucket < b) for name, b in SELECTIVITY.items()}
    print(f"data + exact truth in {time.perf_counter() - t0:.1f}s", flush=True)
    results: dict[str, Any] = {
        "n": args.n,
        "dim": args.dim,
        "queries": args.queries,
        "filter_queries": nf,
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_start": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "milvus": args.milvus_uri
        or ("Milvus Lite, embedded (in-process)" if args.embedded else "Milvus Lite server process over gRPC"),
        "kinds": {},
    }

    def row(hit: Any) -> int:
        return int(hit.doc_id[3:]) * PER_DOC + int(hit.position)

    with tempfile.TemporaryDirectory(prefix="bench-milvus-") as tmp_s:
        tmp = Path(tmp_s)
        qpath = tmp / "q.npy"
        np.save(qpath, q, allow_pickle=False)
        if args.milvus_uri:
            server: Any = contextlib.nullcontext((args.milvus_uri, listening_pid(args.milvus_uri)))
        elif args.embedded:
            server = contextlib.nullcontext(None)
        else:
            server = milvus_server(tmp / "milvus-data")
        with server as srv:
            if srv is not None:
                uri, server_pid = srv
                idle = rss_mb(server_pid) if server_pid else 0.0
            for kind in args.kinds.split(","):
                cfg = index_config(kind, args.n)
                out: dict[str, Any] = {"index": cfg}
                raw, t_raw = build_raw(kind, x, cfg)
                out["raw-faiss"] = {"build_s": round(t_raw, 2)}
                print(f"{kind} raw-faiss: built in {t_raw:.1f}s", flush=True)
                milvus_loc = {"uri": f"{uri}#bench_{kind}"} if srv else {"uri": f"{tmp / 'milvus.db'}#bench_{kind}"}
                stores = {}
                for name, location in {"local": {"path": tmp / f"local-{kind}"}, "milvus": milvus_loc}.items():
                    stores[name], t_build = build_store(location, cfg, x)
                    out[name] = {"build_s": round(t_build, 2)}
                    print(f"{kind} {name}: built in {t_build:.1f}s", flush=True)
                retrievers = {name: build_retriever("dense", s) for name, s in stores.items()}

                # unfiltered: raw FAISS, the store and Milvus interleaved query by query
                searches = {"raw-faiss": raw_search(raw, q)} | {
                    n: dense_search(r, q, row) for n, r in retrievers.items()
                }
                run = interleaved(searches, args.queries)
                lat, found = run.seconds, run.results
                for name in lat:
                    out[name]["single"] = latency(lat[name]) | {"recall@10": round(recall(found[name], truth), 4)}
                    print(f"{kind} {name}: {out[name]['single']}", flush=True)
                for name in ("raw-faiss", *stores):
                    t = time.perf_counter()
                    if name == "raw-faiss":
                        raw.search(q, 10)
                    else:
                        retrievers[name].run(Queries(vectors=q), top_k=10)
                    out[name]["batched_ms_per_query"] = round(1000 * (time.perf_counter() - t) / args.queries, 3)
                    print(f"{kind} {name}: batched {out[name]['batched_ms_per_query']} ms/query", flush=True)
                for filt_name, b in SELECTIVITY.items():
                    filters = {"field": "meta.bucket", "operator": "<", "value": b}
                    frun = interleaved({n: dense_search(r, q, row, filters) for n, r in retrievers.items()}, nf)
                    flat_ms, ffound = frun.seconds, frun.results
                    for name in stores:
                        entry = latency(flat_ms[name]) | {
                            "recall@10": round(recall(ffound[name], truth_f[filt_name]), 4),
                            "always_top_k": all(len(rows) == 10 for rows in ffound[name]),
                        }
                        out[name][f"filter_{filt_name}"] = entry
                        print(f"{kind} {name} filter={filt_name}: {entry}", flush=True)
                if args.dhr and kind == "flat":
                    out["dhr"] = dhr(stores, q, row)
                # memory
                raw_path = tmp / f"raw-{kind}.faiss"
                faiss.write_index(raw, str(raw_path))
                del raw
                out["raw-faiss"]["memory"] = memory_probe("raw", raw_path, qpath)
                raw_path.unlink()
                stores["local"].close()
                out["local"]["memory"] = memory_probe("store", tmp / f"local-{kind}", qpath)
                if srv is not None and server_pid:
                    out["milvus"]["memory"] = {"rss_mb": round(rss_mb(server_pid) - idle, 1)}
                print(
                    f"{kind} memory: " + json.dumps({n: out[n].get("memory") for n in ("raw-faiss", *stores)}),
                    flush=True,
                )
                stores["milvus"].drop()
                if srv is not None and server_pid:
                    idle = rss_mb(server_pid)
                results["kinds"][kind] = out
                results["vectors_mb"] = round(x.nbytes / 2**20, 1)
                path = Path(args.out or out_path(f"milvus-{args.n}.json"))
                write_json(path, results, indent=2)  # after every kind: a long run keeps its figures
    results["load_avg_end"] = os.getloadavg()
    write_json(path, results, indent=2)
    print(f"wrote {path}")


def dhr(stores: dict[str, Any], q: np.ndarray, row: Any) -> dict[str, Any]:
    from rag_hier.retrieval import build_retriever

    out: dict[str, Any] = {}
    retrievers = {}
    for name, store in stores.items():
        t = time.perf_counter()
        store.ensure_extension("doc-index")
        out[name] = {"doc_index_build_s": round(time.perf_counter() - t, 2)}
        retrievers[name] = build_retriever("hierarchical", store, k1=100)
    run = interleaved({name: dense_search(r, q, row) for name, r in retrievers.items()}, q.shape[0])
    lat, found = run.seconds, run.results
    for name in stores:
        out[name] |= latency(lat[name])
    out["same_top10"] = float(np.mean([a == b for a, b in zip(found["local"], found["milvus"], strict=True)]))
    print(f"dhr: {out}", flush=True)
    return out


if __name__ == "__main__":
    main()
