"""Where the time of one store query goes: FAISS, the DenseIndex layer, SQLite, records, Hit objects.

Usage::

    python -m benchmarks.retrieval.profile_search_path [--n 100000] [--queries 2000] [--threads 2]

Builds (in a temporary directory) a store of N synthetic 384-d vectors with an IVF index (nlist
4*sqrt(N), nprobe 4) and a small HNSW store, then times, per single query and interleaved so machine noise
hits all alike:

* ``faiss``          the store's own FAISS index searched directly (``store.index._index.search``)
* ``dense_index``    ``DenseIndex.search`` (input checks, search parameters, short-result check)
* ``hit_rows``       ``HierStore.hit_rows``: the one ``SELECT`` of the 10 hits' fields, JSON undecoded
* ``records``        ``HierStore.records`` (typed records, JSON decoded)
* ``hits``           ``Retriever._hits`` (rows + ``Hit`` objects for one ranking)
* ``full``           ``DenseRetriever.search_vectors``

and an IndexIDMap2 experiment:

* IndexIDMap2 single-query cost with 1 and 2 OpenMP threads, against searching the inner index and
  translating positions to ids with a zero-copy numpy view of ``id_map``.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.timing import interleaved
from benchmarks.common.vectors import mixture
from benchmarks.retrieval.bench_dense import make_passages


def _us(ts: list[float]) -> str:
    a = np.asarray(ts) * 1e6
    return f"median {np.median(a):8.1f} us   p95 {np.percentile(a, 95):8.1f} us"


def timed(fns: dict[str, Callable[[np.ndarray], Any]], q: np.ndarray, n: int) -> dict[str, list[float]]:
    """Seconds of ``n`` single queries (the rows of ``q`` in turn, sliced beforehand) on every function, interleaved."""
    rows = [q[j : j + 1] for j in range(q.shape[0])]
    m = len(rows)
    return interleaved({name: (lambda i, fn=fn: fn(rows[i % m])) for name, fn in fns.items()}, n).seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)

    import faiss

    from rag_hier.index import IndexConfig
    from rag_hier.retrieval import DenseRetriever
    from rag_hier.retrieval.base import Ranking
    from rag_hier.store import HierStore

    faiss.omp_set_num_threads(a.threads)
    x = mixture(a.n, 384, seed=1)
    q = mixture(1000, 384, seed=2)
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        nlist = int(4 * math.sqrt(a.n))
        store = HierStore.create(
            tmp / "ivf", model=None, dimension=384, index=IndexConfig(kind="ivf", nlist=nlist, nprobe=4, train_min=a.n)
        )
        store.add_passages(make_passages(a.n), x)
        retriever = DenseRetriever(store)
        dindex = store.index
        fixed_ids = dindex.search(q[:1], 10)[1][0].tolist()
        fixed_scores, fixed_ids_arr = dindex.search(q[:1], 10)
        fns = {
            "faiss": lambda qi: dindex._index.search(qi, 10),
            "dense_index": lambda qi: dindex.search(qi, 10),
            "hit_rows": lambda qi: store.hit_rows(sorted(fixed_ids)),
            "records": lambda qi: store.records(fixed_ids),
            "hits": lambda qi: retriever._hits([Ranking(fixed_ids_arr[0], fixed_scores[0])], 10),
            "full": lambda qi: retriever.search_vectors(qi, top_k=10),
        }
        for _ in range(2):  # warm-up
            timed(fns, q, 100)
        times = timed(fns, q, a.queries)
        print(f"N={a.n} IVF nlist={nlist} nprobe=4, {a.queries} single queries, FAISS threads={a.threads}")
        for name, ts in times.items():
            print(f"  {name:13s} {_us(ts)}")
        store.close()

        # IndexIDMap2 wrapper (flat and hnsw stores) with 1 vs 2 OpenMP threads
        n_h = min(a.n, 20_000)
        h = faiss.IndexHNSWFlat(384, 32, faiss.METRIC_INNER_PRODUCT)
        idmap = faiss.IndexIDMap2(h)
        idmap.add_with_ids(x[:n_h], np.arange(1, n_h + 1, dtype=np.int64))
        params = faiss.SearchParametersHNSW(efSearch=32)

        def inner_then_numpy(qi):
            s, pos = h.search(qi, 10, params=params)
            idv = faiss.rev_swig_ptr(idmap.id_map.data(), idmap.id_map.size())
            return s, np.where(pos >= 0, idv[np.clip(pos, 0, None)], -1)

        fns2 = {
            "hnsw_inner": lambda qi: h.search(qi, 10, params=params),
            "idmap2_search": lambda qi: idmap.search(qi, 10, params=params),
            "inner+numpy_ids": inner_then_numpy,
        }
        a_ids = idmap.search(q[:50], 10, params=params)[1]
        b_ids = np.vstack([inner_then_numpy(q[i : i + 1])[1] for i in range(50)])
        assert (a_ids == b_ids).all()
        for threads in (1, a.threads):
            faiss.omp_set_num_threads(threads)
            timed(fns2, q, 100)
            t2 = timed(fns2, q, a.queries)
            print(f"HNSW N={n_h} efSearch=32 inside IndexIDMap2, FAISS threads={threads}")
            for name, ts in t2.items():
                print(f"  {name:16s} {_us(ts)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
