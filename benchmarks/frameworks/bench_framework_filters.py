"""Filtered retrieval through the framework adapters: the filter pushed down (``Refined``) vs the predicate alone.

Usage::

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.frameworks.bench_framework_filters [--n 100000] [--dim 128] \\
        [--queries 20] [--threads 1]

Setup (one run, one process): one local store of ``n`` passages written by the engine (random unit vectors of
``dim`` dimensions, flat index, ``meta = {"bucket": "b<i % 10>", "n": i}``), read by both adapters:
``RagHierDocumentStore.embedding_retrieval`` (Haystack) and ``RagHierVectorStore.query`` (LlamaIndex), top 10.

Rows, per adapter, timed interleaved query by query (the same random query vectors for every variant, after
2 warm-up queries each):

* ``unfiltered``: the anchor of the ratios;
* ``bucket == "b3"`` (10 % of the passages), **before**: the adapter's filter as a plain predicate (the coarse
  translation switched off: the predicate runs over every passage's record, as for a filter without a
  translation);
* the same filter, **after**: the adapter's coarse translation pushed down to SQLite (``Refined``), the
  predicate run on the rows it selects;
* ``count`` (Haystack ``count_documents_by_filter``) before and after, for a filter without a search.

With ``--milvus`` the store is a Milvus Lite collection (the coarse filter becomes a Milvus expression; no
indexed phase). The rows are measured without and then with ``store.index_meta_field("bucket")``, each
time also with every query (retrieval only, ``--after-write-queries``) the first after a one-passage write
(untimed; a passage of bucket ``b9``, so the answers do not change), which makes the predicate-only path
re-read every passage's record. Each answer of the "after" variant is checked to equal the "before" one.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from benchmarks.common.report import out_path, write_json
from benchmarks.common.timing import interleaved
from benchmarks.common.vectors import unit_vectors


def _build(path: Path | str, n: int, dim: int, seed: int) -> None:
    from rag_hier import HierStore
    from rag_hier.corpus.model import Passage

    rng = np.random.default_rng(seed)
    if isinstance(path, str):  # a Milvus Lite collection
        store = HierStore.create(uri=path, model=None, dimension=dim, similarity="dot_product")
    else:
        store = HierStore.create(path, model=None, dimension=dim, similarity="dot_product")
    batch = 10_000
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        vecs = unit_vectors(rng, stop - start, dim)
        passages = [
            Passage(f"p{i}", f"d{i // 10}", i % 10, f"passage {i}", meta={"bucket": f"b{i % 10}", "n": i})
            for i in range(start, stop)
        ]
        store.add_passages(passages, embeddings=list(vecs))
    store.close()


def _interleaved(
    variants: dict[str, Callable[[list[float]], Any]],
    queries: np.ndarray,
    warmup: int = 2,
    prepare: Callable[[], None] | None = None,
) -> dict:
    """Each variant on each query, interleaved (the order rotating); ``prepare`` runs (untimed) before every call.

    Returns the milliseconds of every call and every answer, per variant.
    """
    vecs = [q.tolist() for q in queries]
    run = interleaved(
        {name: (lambda i, fn=fn: fn(vecs[i])) for name, fn in variants.items()},
        len(vecs),
        warmup=min(warmup, len(vecs)),
        prepare=prepare,
    )
    return {"times": {k: [1000.0 * t for t in v] for k, v in run.seconds.items()}, "answers": run.results}


def _no_pushdown(target: Any, name: str) -> Any:
    return mock.patch.object(target, name, lambda *a, **k: (None, False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="passages")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--after-write-queries", type=int, default=5, help="queries each after a one-passage write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="FAISS OpenMP threads (default: FAISS's)")
    parser.add_argument("--dir", type=Path, default=None, help="store directory (default: a temporary one)")
    parser.add_argument(
        "--milvus", action="store_true", help="a Milvus Lite collection (in a temporary file) instead of a directory"
    )
    parser.add_argument("--out", type=Path, default=out_path("framework_filters.json"), help="JSON results")
    args = parser.parse_args(argv)

    import faiss
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore
    from haystack_integrations.document_stores.rag_hier import document_store as haystack_module
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters, VectorStoreQuery
    from llama_index.vector_stores.rag_hier import RagHierVectorStore
    from llama_index.vector_stores.rag_hier import _filters as llama_filters

    from rag_hier import HierStore
    from rag_hier.corpus.model import Passage

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory(prefix="bench-framework-filters-")
    path: Path | str = args.dir or Path(tmp.name) / "store"
    if args.milvus:
        path = f"{Path(tmp.name) / 'm.db'}#filters"
    t0 = time.perf_counter()
    _build(path, args.n, args.dim, args.seed)
    build_s = time.perf_counter() - t0
    print(f"built {args.n} passages in {build_s:.1f} s at {path}", flush=True)

    rng = np.random.default_rng(args.seed + 1)
    queries = unit_vectors(rng, args.queries, args.dim)

    haystack = RagHierDocumentStore(uri=path) if args.milvus else RagHierDocumentStore(path=str(path))
    llama = RagHierVectorStore(uri=path) if args.milvus else RagHierVectorStore(path)
    hs_filter = {"field": "meta.bucket", "operator": "==", "value": "b3"}
    li_filter = MetadataFilters(filters=[MetadataFilter(key="bucket", value="b3")])

    def hs_search(filters: Any) -> Callable[[list[float]], Any]:
        return lambda q: [d.id for d in haystack.embedding_retrieval(q, filters, top_k=10)]

    def li_search(filters: Any) -> Callable[[list[float]], Any]:
        return lambda q: list(
            llama.query(VectorStoreQuery(query_embedding=q, similarity_top_k=10, filters=filters)).ids
        )

    def before(fn: Callable[[list[float]], Any], target: Any) -> Callable[[list[float]], Any]:
        name = "translate_filter" if target is haystack_module else "translate_filters"

        def run(q: list[float]) -> Any:
            with _no_pushdown(target, name):
                return fn(q)

        return run

    variants = {
        "haystack unfiltered": hs_search(None),
        "haystack bucket == b3 (10 %), before": before(hs_search(hs_filter), haystack_module),
        "haystack bucket == b3 (10 %), after": hs_search(hs_filter),
        "haystack count bucket == b3, before": before(
            lambda q: haystack.count_documents_by_filter(hs_filter), haystack_module
        ),
        "haystack count bucket == b3, after": lambda q: haystack.count_documents_by_filter(hs_filter),
        "llama-index unfiltered": li_search(None),
        "llama-index bucket == b3 (10 %), before": before(li_search(li_filter), llama_filters),
        "llama-index bucket == b3 (10 %), after": li_search(li_filter),
    }
    after_write = {k: v for k, v in variants.items() if "count" not in k}
    writer = HierStore.open(uri=path) if isinstance(path, str) else HierStore.open(path)
    written = [0]
    wvec = queries[0].tolist()

    def write_one() -> None:  # a passage outside bucket b3: the answers stay the same
        k = written[0] = written[0] + 1
        writer.add_passages([Passage(f"w{k}", "dw", k, "written", meta={"bucket": "b9", "n": -k})], embeddings=[wvec])

    results: dict[str, Any] = {}
    phases = [
        ("no index", False),
        ("no index, each query the first after a one-passage write", True),
        ("meta.bucket indexed", False),
        ("meta.bucket indexed, each query the first after a one-passage write", True),
    ]
    if args.milvus:  # Milvus has no metadata index of ours (its own JSON path index is not used)
        phases = phases[:2]
    for phase, after in phases:
        if phase == "meta.bucket indexed":
            t0 = time.perf_counter()
            writer.index_meta_field("bucket")
            print(f"index_meta_field('bucket'): {time.perf_counter() - t0:.2f} s", flush=True)
        if after:
            run = _interleaved(after_write, queries[: args.after_write_queries], warmup=1, prepare=write_one)
        else:
            run = _interleaved(variants, queries)
        for kind in ("haystack", "llama-index"):
            for what in ("bucket == b3 (10 %)", "count bucket == b3"):
                b, a = f"{kind} {what}, before", f"{kind} {what}, after"
                if b in run["answers"]:
                    assert run["answers"][a] == run["answers"][b], f"{a}: different answers"
        rows = {}
        for name, times in run["times"].items():
            kind = name.split(" ", 1)[0]
            anchor = statistics.median(run["times"][f"{kind} unfiltered"])
            med = statistics.median(times)
            rows[name] = {
                "median_ms": round(med, 3),
                "p95_ms": round(float(np.percentile(times, 95)), 3),
                "vs_unfiltered": round(med / anchor, 2),
            }
        for kind in ("haystack", "llama-index"):
            for what in ("bucket == b3 (10 %)", "count bucket == b3"):
                b, a = f"{kind} {what}, before", f"{kind} {what}, after"
                if b in rows:
                    rows[a]["after_vs_before"] = round(rows[a]["median_ms"] / rows[b]["median_ms"], 4)
        results[phase] = rows
        print(f"\n## {phase}\n")
        print("| query | median ms | p95 ms | vs unfiltered | after / before |")
        print("|---|---:|---:|---:|---:|")
        for name, r in rows.items():
            ratio = f"**{r['after_vs_before']:.3f}x**" if "after_vs_before" in r else ""
            print(f"| {name} | {r['median_ms']:.2f} | {r['p95_ms']:.2f} | {r['vs_unfiltered']:.2f}x | {ratio} |")
    haystack.close()
    llama.close()
    writer.close()
    meta = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "n": args.n,
        "backend": "Milvus Lite" if args.milvus else "local",
        "dim": args.dim,
        "queries": args.queries,
        "build_s": round(build_s, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {faiss.omp_get_max_threads()} FAISS threads",
        "load": os.getloadavg(),
    }
    print(f"\n{meta}")
    write_json(args.out, {"meta": meta, "results": results}, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
