"""DHR speed: hierarchical (top-k1 documents, then their passages) vs flat exact passage search, same vectors.

A synthetic corpus of unit vectors, no model: ``--docs`` document centres drawn uniformly on the sphere;
each document has ``--passages-per-doc`` passages ``normalize(centre + passage_noise * u)``; each query is
``normalize(p + query_noise * u)`` around one target passage ``p`` (``u``: independent random unit vectors).
The vectors go into a real HierStore (FAISS IndexFlatIP over SQLite rowids) with a ``doc-index``
extension (mean of passage vectors: no text, no model), and both strategies run through the engine's code:

* flat: ``DenseIndex.search`` over all passages (exact) / ``DenseRetriever.search_vectors`` for Hits;
* hierarchical: ``HierarchicalRetriever.rank`` / ``.search_vectors`` (serial mode) for several k1 and λ.

Reported per setting: latency per query (one query per call, the RAG case; and batches of 32), accuracy
(target passage at rank 1 / within top 10) and overlap of the top 10 with flat exact search, and the vectors
compared per query. Memory: one float32 copy of the passage vectors lives in FAISS (1M x 384 = 1.5 GB);
they are generated and written in chunks.

Usage (1M passages in 50k documents; run in the background):
    nohup python -m benchmarks.retrieval.bench_dhr_speed --docs 50000 --passages-per-doc 20 \\
        > benchmarks/out/dhr_speed_1m.log 2>&1 &
Results: ``<out>/dhr_speed_<passages>.json`` and ``.md`` (``--out``, default ``benchmarks/out``)
"""

from __future__ import annotations

import os

# One thread for BLAS and FAISS unless told otherwise: single-query search is single-threaded work, and on a
# shared machine multi-threaded regions wait for descheduled threads (measured: a 4000x384 GEMV took 20 ms
# with 2 OpenBLAS threads under load, 0.1 ms in FAISS with 1). Set RAG_HIER_BENCH_THREADS to change it.
_THREADS = os.environ.get("RAG_HIER_BENCH_THREADS", "1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, _THREADS)

import argparse  # noqa: E402 - after the thread settings above
import logging  # noqa: E402 - after the thread settings above
import resource  # noqa: E402 - after the thread settings above
import sys  # noqa: E402 - after the thread settings above
import tempfile  # noqa: E402 - after the thread settings above
import time  # noqa: E402 - after the thread settings above
from pathlib import Path  # noqa: E402 - after the thread settings above

import numpy as np  # noqa: E402 - after the thread settings above

from benchmarks.common.report import out_path, write_json  # noqa: E402 - after the thread settings above
from benchmarks.common.vectors import normalize, unit_vectors  # noqa: E402 - after the thread settings above
from rag_hier import DenseRetriever, HierStore, Passage  # noqa: E402 - after the thread settings above
from rag_hier.retrieval.hierarchical import DualQueries, HierarchicalRetriever  # noqa: E402 - after the thread settings above
from rag_hier.store.extensions.doc_index import DocumentIndex  # noqa: E402 - after the thread settings above

OUT = out_path()
log = logging.getLogger("bench_dhr_speed")


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def build(args, root: Path) -> tuple[HierStore, np.ndarray, np.ndarray]:
    """Write the synthetic corpus into a store; returns (store, query vectors, target passage rowids)."""
    rng = np.random.default_rng(args.seed)
    d, per = args.dim, args.passages_per_doc
    n = args.docs * per
    targets = np.sort(rng.choice(n, size=args.queries, replace=False))
    target_vecs = np.zeros((args.queries, d), np.float32)
    store = HierStore.create(root / "store", model=None, dimension=d, corpus={"synthetic": True})
    t0 = time.perf_counter()
    chunk_docs = max(1, args.chunk // per)
    with store.batch():
        for start in range(0, args.docs, chunk_docs):
            stop = min(args.docs, start + chunk_docs)
            centres = unit_vectors(rng, stop - start, d)
            noise = unit_vectors(rng, (stop - start) * per, d)
            vecs = normalize(np.repeat(centres, per, axis=0) + args.passage_noise * noise)
            first = start * per
            sel = (targets >= first) & (targets < first + len(vecs))
            target_vecs[sel] = vecs[targets[sel] - first]
            passages = [
                Passage(f"d{i}#{j}", f"d{i}", j, "", title_path=(f"d{i}",))
                for i in range(start, stop)
                for j in range(per)
            ]
            store.add_passages(passages, vecs)
            log.info(
                "wrote %d/%d documents (%.0fs, max RSS %.1f GB)", stop, args.docs, time.perf_counter() - t0, rss_gb()
            )
        t1 = time.perf_counter()
        doc_index = {"kind": args.doc_index, "ef_search": args.doc_ef_search}
        store.add_extension(DocumentIndex("mean", index=doc_index))
        log.info("document index built in %.1fs", time.perf_counter() - t1)
    log.info("store committed: %d passages, %d documents (%.0fs total)", n, args.docs, time.perf_counter() - t0)
    queries = normalize(target_vecs + args.query_noise * unit_vectors(rng, *target_vecs.shape))
    # passage rowids are assigned in insertion order from 1
    return store, queries, targets.astype(np.int64) + 1


def accuracy(ids: list[np.ndarray], targets: np.ndarray) -> dict[str, float]:
    top1 = np.mean([len(r) > 0 and r[0] == t for r, t in zip(ids, targets, strict=True)])
    top10 = np.mean([t in r[:10] for r, t in zip(ids, targets, strict=True)])
    return {"top1": float(top1), "top10": float(top10)}


def overlap(ids: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return float(
        np.mean([len(set(a[:10].tolist()) & set(b[:10].tolist())) / 10 for a, b in zip(ids, ref, strict=True)])
    )


def timed_single(fn, queries: np.ndarray) -> tuple[list[np.ndarray], float]:
    out: list[np.ndarray] = []
    t0 = time.perf_counter()
    for i in range(queries.shape[0]):
        out.append(fn(queries[i : i + 1])[0])
    return out, (time.perf_counter() - t0) / queries.shape[0] * 1000


def timed_batched(fn, queries: np.ndarray, batch: int = 32) -> float:
    t0 = time.perf_counter()
    for i in range(0, queries.shape[0], batch):
        fn(queries[i : i + batch])
    return (time.perf_counter() - t0) / queries.shape[0] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--passages-per-doc", type=int, default=20)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passage-noise", type=float, default=1.0)
    parser.add_argument("--query-noise", type=float, default=3.0)
    parser.add_argument("--k1", default="50,100,200,500,1000")
    parser.add_argument("--lambdas", default="0,0.5,1")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=50_000, help="passages generated and written per step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--doc-index", choices=("flat", "hnsw"), default="flat", help="document index kind")
    parser.add_argument("--doc-ef-search", type=int, default=64, help="HNSW search beam of the document index")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("faiss").setLevel(logging.ERROR)
    import faiss

    faiss.omp_set_num_threads(int(_THREADS))
    n = args.docs * args.passages_per_doc
    log.info(
        "%d passages in %d documents, dim %d, %d queries; faiss %s, %d OpenMP threads",
        n,
        args.docs,
        args.dim,
        args.queries,
        faiss.__version__,
        faiss.omp_get_max_threads(),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out, prefix="dhr-speed-") as tmp:
        store, queries, targets = build(args, Path(tmp))
        index = store.index
        k = args.top_k
        dense = DenseRetriever(store)
        configs = [
            (k1, lam)
            for k1 in (int(x) for x in args.k1.split(","))
            for lam in (float(x) for x in args.lambdas.split(","))
        ]
        retrievers = {c: HierarchicalRetriever(store, k1=c[0], lambda_=c[1]) for c in configs}

        # warm-up, then every query through every method in turn, so that load changes on a shared machine
        # hit all methods alike; median and mean of the per-query latencies are reported
        def rank(r: HierarchicalRetriever, q: np.ndarray) -> list:
            return r.rank(DualQueries(q, q), k, None)  # one encoder: the same vectors at both levels

        index.search(queries[:2], k)
        for r in retrievers.values():
            rank(r, queries[:2])
        names = ["flat", *configs]
        lat: dict = {c: [] for c in names}
        ids: dict = {c: [] for c in names}
        scored: dict = {c: [] for c in configs}
        for i in range(queries.shape[0]):
            q = queries[i : i + 1]
            t0 = time.perf_counter()
            ids["flat"].append(index.search(q, k)[1][0])
            lat["flat"].append(time.perf_counter() - t0)
            for c, r in retrievers.items():
                t0 = time.perf_counter()
                (res,) = rank(r, q)
                lat[c].append(time.perf_counter() - t0)
                ids[c].append(res.rowids)
                scored[c].append(res.stats["passages_scored"])
            if (i + 1) % 50 == 0:
                log.info("%d/%d queries timed", i + 1, queries.shape[0])
        batch = {"flat": timed_batched(lambda q: index.search(q, k), queries)}
        for c, r in retrievers.items():
            batch[c] = timed_batched(lambda q, r=r: rank(r, q), queries)
        hits = {"flat": timed_single(lambda q: [None for _ in dense.search_vectors(q, top_k=k)], queries[:50])[1]}
        for c, r in retrievers.items():
            hits[c] = timed_single(lambda q, r=r: [None for _ in r.search_vectors(q, top_k=k)], queries[:50])[1]
        flat_ms = float(np.median(lat["flat"])) * 1000
        rows = []
        for c in names:
            ms = float(np.median(lat[c])) * 1000
            rows.append(
                {
                    "method": "flat exact" if c == "flat" else "hierarchical serial",
                    "k1": None if c == "flat" else c[0],
                    "lambda": None if c == "flat" else c[1],
                    "ms_per_query": ms,
                    "ms_per_query_mean": float(np.mean(lat[c])) * 1000,
                    "ms_per_query_batch32": batch[c],
                    "ms_per_query_hits": hits[c],
                    "vectors_compared": n if c == "flat" else args.docs + float(np.mean(scored[c])),
                    **accuracy(ids[c], targets),
                    "overlap@10_with_flat": overlap(ids[c], ids["flat"]),
                    "speedup_single": flat_ms / ms,
                }
            )
            log.info("%s", rows[-1])
        store.close()
    result = {
        "passages": n,
        "documents": args.docs,
        "dim": args.dim,
        "queries": args.queries,
        "passage_noise": args.passage_noise,
        "query_noise": args.query_noise,
        "faiss_threads": faiss.omp_get_max_threads(),
        "max_rss_gb": rss_gb(),
        "doc_index": args.doc_index,
        "rows": rows,
    }
    flat_ms = rows[0]["ms_per_query"]
    kind = args.doc_index if args.doc_index == "flat" else f"hnsw_ef{args.doc_ef_search}"
    stem = args.out / f"dhr_speed_{n}_{kind}"
    write_json(stem.with_suffix(".json"), result)
    lines = [
        f"{n} passages / {args.docs} documents ({kind} document index), dim {args.dim}, "
        f"{args.queries} queries, passage noise "
        f"{args.passage_noise}, query noise {args.query_noise}, faiss threads {faiss.omp_get_max_threads()}",
        "",
        "| method | k1 | λ | median ms/query (1 per call) | speed-up | mean ms/query | ms/query (batch 32) "
        "| ms/query with Hits | vectors compared | top1 | top10 | overlap@10 vs flat |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['k1'] or ''} | {'' if r['lambda'] is None else r['lambda']} | "
            f"{r['ms_per_query']:.2f} | "
            f"{r['speedup_single']:.1f}x | {r['ms_per_query_mean']:.2f} | {r['ms_per_query_batch32']:.2f} | "
            f"{r['ms_per_query_hits']:.2f} | "
            f"{r['vectors_compared']:.0f} | {r['top1']:.3f} | {r['top10']:.3f} | {r['overlap@10_with_flat']:.3f} |"
        )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
