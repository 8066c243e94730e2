"""The same dense collection on Milvus Lite and on the local store (SQLite + FAISS), in one run.

Usage::

    python benchmarks/bench_milvus.py --n 20000 --kinds flat,hnsw --queries 100

For each index kind, N unit-normalised 384-d vectors (a Gaussian mixture, as in ``bench_dense.py``) go into
(a) a local :class:`~rag_hier.store.HierStore` directory and (b) a Milvus Lite collection
(``HierStore.create(uri=...)``), both with no encoder, through ``add_passages`` in one batch. Reported per
backend: build time, recall@10 against exact search (numpy), single-query latency (median and p95, one
query per ``run`` call, the two backends interleaved so machine noise hits both alike), batched time per
query (all queries in one call), and filtered search at 1 %, 10 % and 50 % selectivity (``meta.bucket``, a
JSON metadata key): median latency, recall@10 against exact filtered search, and whether every query got
``top_k`` hits. Memory is not reported: Milvus Lite runs its server in this process, so the process' RSS
does not separate the two.

Results go to ``benchmarks/out/milvus-<N>.json``. Everything lives in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SELECTIVITY = {"1%": 1, "10%": 10, "50%": 50}
"""Filter ``meta.bucket < b`` with ``bucket = i % 100``."""


def mixture(n: int, dim: int, seed: int, centers: int = 1000, noise: float = 0.05) -> np.ndarray:
    crng = np.random.default_rng(7)
    c = crng.standard_normal((centers, dim)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    x = c[rng.integers(centers, size=n)] + noise * rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def passages(n: int) -> list[Any]:
    from rag_hier.corpus import Passage

    return [
        Passage(
            id=f"doc{i // 10}#{i % 10}", doc_id=f"doc{i // 10}", position=i % 10, text=f"p{i}", meta={"bucket": i % 100}
        )
        for i in range(n)
    ]


def exact(x: np.ndarray, q: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    s = q @ x.T
    if mask is not None:
        s[:, ~mask] = -np.inf
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t.tolist())) / k for f, t in zip(found, truth, strict=True)]))


def build(location: dict[str, Any], kind: str, x: np.ndarray) -> tuple[Any, float]:
    from rag_hier.store import HierStore

    items = passages(x.shape[0])
    t0 = time.perf_counter()
    store = HierStore.create(**location, model=None, dimension=x.shape[1], index={"kind": kind})
    with store.batch():
        for start in range(0, x.shape[0], 10_000):
            store.add_passages(items[start : start + 10_000], x[start : start + 10_000])
    return store, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--kinds", default="flat,hnsw")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from rag_hier.retrieval import Queries, build_retriever

    x = mixture(args.n, args.dim, seed=1)
    q = mixture(args.queries, args.dim, seed=99)
    bucket = np.arange(args.n) % 100
    truth = exact(x, q, 10)
    truth_f = {name: exact(x, q, 10, bucket < b) for name, b in SELECTIVITY.items()}
    results: dict[str, Any] = {
        "n": args.n,
        "dim": args.dim,
        "queries": args.queries,
        "machine": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
        "kinds": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-milvus-") as tmp:
        for kind in args.kinds.split(","):
            backends = {
                "local": {"path": Path(tmp) / f"local-{kind}"},
                "milvus-lite": {"uri": f"{Path(tmp) / 'milvus.db'}#bench_{kind}"},
            }
            stores, out = {}, {}
            for name, location in backends.items():
                stores[name], t_build = build(location, kind, x)
                out[name] = {"build_s": round(t_build, 2)}
                print(f"{kind} {name}: built {args.n} in {t_build:.1f}s", flush=True)
            retrievers = {name: build_retriever("dense", s) for name, s in stores.items()}

            def row(hit: Any) -> int:
                return int(hit.doc_id[3:]) * 10 + int(hit.position)

            for filt_name, b in [("none", None), *SELECTIVITY.items()]:
                filters = None if b is None else {"field": "meta.bucket", "operator": "<", "value": b}
                want = truth if b is None else truth_f[filt_name]
                lat: dict[str, list[float]] = {name: [] for name in stores}
                found: dict[str, list[list[int]]] = {name: [] for name in stores}
                full = dict.fromkeys(stores, True)
                for i in range(args.queries):
                    for name, r in retrievers.items():
                        t0 = time.perf_counter()
                        (res,) = r.run(Queries(vectors=q[i : i + 1]), top_k=10, filters=filters)
                        lat[name].append(time.perf_counter() - t0)
                        found[name].append([row(h) for h in res.hits])
                        full[name] &= len(res.hits) == 10
                for name in stores:
                    entry = {
                        "median_ms": round(1000 * statistics.median(lat[name]), 2),
                        "p95_ms": round(1000 * float(np.percentile(lat[name], 95)), 2),
                        "recall@10": round(recall(found[name], want), 4),
                        "always_top_k": full[name],
                    }
                    out[name][f"filter_{filt_name}"] = entry
                    print(f"{kind} {name} filter={filt_name}: {entry}", flush=True)
            for name, r in retrievers.items():
                t0 = time.perf_counter()
                r.run(Queries(vectors=q), top_k=10)
                out[name]["batched_ms_per_query"] = round(1000 * (time.perf_counter() - t0) / args.queries, 2)
                print(f"{kind} {name}: batched {out[name]['batched_ms_per_query']} ms/query", flush=True)
            stores["milvus-lite"].drop()
            stores["local"].close()
            results["kinds"][kind] = out
    path = Path(args.out or Path(__file__).parent / "out" / f"milvus-{args.n}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
