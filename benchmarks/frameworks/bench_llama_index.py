"""Query latency of RagHierVectorStore vs LlamaIndex's SimpleVectorStore and FaissVectorStore.

Usage::

    python -m benchmarks.frameworks.bench_llama_index [--n 100000] [--dim 384] [--queries 50] [--threads N]

Setup (one run, one process): ``n`` synthetic random unit vectors of ``dim`` dimensions, each a
``TextNode`` (``"node <i>: "`` then ``--words`` words, 100 by default; metadata ``{"cat": i % 10}``,
SOURCE = one of ``n/10`` documents), added to

* ``RagHierVectorStore`` (flat index, cosine; a store directory on disk, every write committed) in
  batches of 2,048 nodes, as ``VectorStoreIndex`` inserts them;
* ``SimpleVectorStore`` (llama-index-core; in memory, a Python loop per query);
* ``FaissVectorStore`` (llama-index-vector-stores-faiss; a bare ``faiss.IndexFlatIP``, in memory).

The same query vectors (random unit vectors) go to every store through ``store.query(VectorStoreQuery(
query_embedding=..., similarity_top_k=10))``, after 3 warm-up queries, every case on every query (which goes
first rotates). Latency is wall time per query, median and p95 in milliseconds, and the ratio to
RagHierVectorStore. Note what each store returns: RagHierVectorStore returns the nodes themselves
(``stores_text=True``: SQLite fetch + node rebuild included); the other two return ids only, which
``VectorStoreIndex`` then looks up in its docstore. The "VectorStoreIndex retriever" rows compare like with
like: ``index.as_retriever().retrieve(QueryBundle(embedding=...))`` over RagHierVectorStore and over a
FaissVectorStore whose index keeps the nodes in its docstore, both returning nodes.

Filtered rows: a metadata filter ``cat == 3`` (10% of the nodes; FaissVectorStore has no filters) and a
``doc_ids`` restriction to 10 documents (100 nodes; SimpleVectorStore ignores ``doc_ids``).
RagHierVectorStore runs metadata filters in SQLite (pushed down; see docs/llama_index.md); the last row
times a filtered query right after a write (one node added, not timed).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import out_path, write_json
from benchmarks.common.texts import passage_texts
from benchmarks.common.timing import interleaved
from benchmarks.common.timing import percentile as _percentile
from benchmarks.common.vectors import unit_vectors


def _time_interleaved(
    fns: list[Callable[[list[float]], object]], queries: np.ndarray, warmup: int = 3
) -> list[list[float]]:
    """Milliseconds per query of each function, all of them on every query, the first of them rotating."""
    vecs = [q.tolist() for q in queries]
    run = interleaved({str(j): (lambda i, fn=fn: fn(vecs[i])) for j, fn in enumerate(fns)}, len(vecs), warmup=warmup)
    return [[1000.0 * t for t in run.seconds[str(j)]] for j in range(len(fns))]


def make_nodes(n: int, dim: int, n_queries: int, words: int, seed: int) -> tuple[list[Any], np.ndarray]:
    """The benchmark's ``n`` ``TextNode`` s (random unit embeddings, ``words`` words of text, ``{"cat": i % 10}``,
    SOURCE = one of ``n / 10`` documents) and ``n_queries`` random unit query vectors, all from ``seed``."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    rng = np.random.default_rng(seed)
    data = unit_vectors(rng, n, dim)
    queries = unit_vectors(rng, n_queries, dim)
    texts = passage_texts(n, words, seed=seed, prefix="node")
    nodes = [
        TextNode(
            text=texts[i],
            id_=f"n{i}",
            embedding=data[i].tolist(),
            metadata={"cat": i % 10},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"d{i // 10}")},
        )
        for i in range(n)
    ]
    return nodes, queries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="nodes")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--after-write-queries", type=int, default=5, help="filtered queries each after a write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words", type=int, default=100, help="words per node text (0: short texts such as 'node 17')")
    parser.add_argument("--threads", type=int, default=None, help="FAISS OpenMP threads (default: FAISS's)")
    parser.add_argument(
        "--no-simple",
        action="store_true",
        help="leave out SimpleVectorStore (a Python scan: seconds per query at 100k)",
    )
    parser.add_argument(
        "--index",
        default="flat",
        help="RagHierVectorStore's index: a kind, or JSON such as "
        """'{"kind": "hnsw", "hnsw_m": 32, "ef_construction": 40, "ef_search": 16}'""",
    )
    parser.add_argument(
        "--faiss-index",
        default="Flat",
        help="FaissVectorStore's FAISS index factory string, inner product (e.g. HNSW32: M 32, FAISS's "
        "efConstruction 40 and efSearch 16; match them in --index for a like-for-like HNSW comparison)",
    )
    parser.add_argument(
        "--hit-rows",
        choices=["sqlite", "memory"],
        default="sqlite",
        help="where RagHierVectorStore reads its hits' rows (RagHierVectorStore(hit_rows=...))",
    )
    parser.add_argument("--out", type=Path, default=out_path("llama_index.json"), help="JSON results file")
    args = parser.parse_args(argv)

    import faiss
    import llama_index.core
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import QueryBundle, TextNode
    from llama_index.core.vector_stores import SimpleVectorStore
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters, VectorStoreQuery
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    try:  # the bench extra: llama-index-vector-stores-faiss
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ImportError:
        FaissVectorStore = None
        print("FaissVectorStore left out: llama-index-vector-stores-faiss is not installed (rag-hier[bench])")

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    t0 = time.perf_counter()
    nodes, queries = make_nodes(args.n, args.dim, args.queries, args.words, args.seed)
    print(f"built {args.n} nodes in {time.perf_counter() - t0:.1f}s")

    build: dict[str, float] = {}
    tmp = tempfile.TemporaryDirectory(prefix="bench-llama-index-")
    index_config = json.loads(args.index) if args.index.lstrip().startswith("{") else args.index
    rag = RagHierVectorStore(Path(tmp.name) / "store", index=index_config, hit_rows=args.hit_rows)
    t0 = time.perf_counter()
    for i in range(0, args.n, 2048):
        rag.add(nodes[i : i + 2048])
    build["RagHierVectorStore"] = time.perf_counter() - t0

    simple = SimpleVectorStore()
    if not args.no_simple:
        t0 = time.perf_counter()
        simple.add(nodes)
        build["SimpleVectorStore"] = time.perf_counter() - t0

    def faiss_index_of() -> Any:
        return faiss.index_factory(args.dim, args.faiss_index, faiss.METRIC_INNER_PRODUCT)

    fstore = None if FaissVectorStore is None else FaissVectorStore(faiss_index=faiss_index_of())
    if fstore is not None:
        t0 = time.perf_counter()
        for i in range(0, args.n, 2048):
            fstore.add(nodes[i : i + 2048])
        build["FaissVectorStore"] = time.perf_counter() - t0
    for name, secs in build.items():
        print(f"add {name}: {secs:.1f}s")
    # through VectorStoreIndex, where both return nodes: ours from its hits, FAISS's ids looked up in the docstore
    mock = MockEmbedding(embed_dim=args.dim)  # never called: every query brings its embedding
    rag_index = VectorStoreIndex.from_vector_store(rag, embed_model=mock)
    faiss_index = None
    if FaissVectorStore is not None:
        faiss_index = VectorStoreIndex(
            nodes,
            storage_context=StorageContext.from_defaults(vector_store=FaissVectorStore(faiss_index=faiss_index_of())),
            embed_model=mock,
            insert_batch_size=2048,
        )

    def via_index(index):
        retriever = index.as_retriever(similarity_top_k=args.top_k)
        return lambda v: retriever.retrieve(QueryBundle(query_str="", embedding=v))

    k = args.top_k
    cat3 = MetadataFilters(filters=[MetadataFilter(key="cat", value=3)])
    docs10 = [f"d{j}" for j in range(0, args.n // 10, max(1, args.n // 100))][:10]

    def q(store, **kw):
        return lambda v: store.query(VectorStoreQuery(query_embedding=v, similarity_top_k=k, **kw))

    # sanity: every store finds the same nearest node for the first query (exact indexes only)
    v0 = queries[0].tolist()
    exact = args.index == "flat" and args.faiss_index == "Flat"
    stores = (rag,) if args.no_simple else (rag, simple)
    first = [s.query(VectorStoreQuery(query_embedding=v0, similarity_top_k=k)).ids[0] for s in stores]
    assert len(set(first)) == 1 or not exact, first
    if exact and fstore is not None and faiss_index is not None:
        faiss_first = fstore.query(VectorStoreQuery(query_embedding=v0, similarity_top_k=k)).ids[0]
        assert set(first) == {f"n{faiss_first}"}, (first, faiss_first)
        ours = [n.node.node_id for n in via_index(rag_index)(v0)]
        assert ours == [n.node.node_id for n in via_index(faiss_index)(v0)]

    cases: list[tuple[str, str, Callable[[list[float]], object]]] = [
        ("unfiltered", "RagHierVectorStore", q(rag)),
        ("unfiltered", "SimpleVectorStore", q(simple)),
        ("unfiltered", "FaissVectorStore", q(fstore) if fstore is not None else None),
        ("unfiltered, VectorStoreIndex retriever (nodes)", "RagHierVectorStore", via_index(rag_index)),
        ("unfiltered, VectorStoreIndex retriever (nodes)", "FaissVectorStore", faiss_index and via_index(faiss_index)),
        ("filter cat == 3 (10%)", "RagHierVectorStore", q(rag, filters=cat3)),
        ("filter cat == 3 (10%)", "SimpleVectorStore", q(simple, filters=cat3)),
        ("doc_ids: 10 documents", "RagHierVectorStore", q(rag, doc_ids=docs10)),
    ]
    if args.no_simple:
        cases = [c for c in cases if c[1] != "SimpleVectorStore"]
    if fstore is None:
        cases = [c for c in cases if c[1] != "FaissVectorStore"]

    def after_a_write(v: list[float]) -> None:  # not timed: one write, so the filter view is stale
        node = TextNode(text="x", id_=f"w{len(write_times)}", embedding=v, metadata={"cat": 99})
        rag.add([node])
        t0 = time.perf_counter()
        rag.query(VectorStoreQuery(query_embedding=v, similarity_top_k=k, filters=cat3))
        write_times.append((time.perf_counter() - t0) * 1000.0)

    write_times: list[float] = []
    rows = []
    all_times = _time_interleaved([fn for _, _, fn in cases], queries)
    for (case, name, _), times in zip(cases, all_times, strict=True):
        row = {
            "case": case,
            "store": name,
            "queries": len(times),
            "median_ms": statistics.median(times),
            "p95_ms": _percentile(times, 95),
        }
        rows.append(row)
        print(f"{case:<24} {name:<20} median {row['median_ms']:9.2f} ms   p95 {row['p95_ms']:9.2f} ms")

    for v in queries[: args.after_write_queries]:
        after_a_write(v.tolist())
    rows.append(
        {
            "case": "filter cat == 3, first query after a write",
            "store": "RagHierVectorStore",
            "queries": len(write_times),
            "median_ms": statistics.median(write_times),
            "p95_ms": _percentile(write_times, 95),
        }
    )
    print(f"{rows[-1]['case']:<24} RagHierVectorStore   median {rows[-1]['median_ms']:9.2f} ms")

    base = {r["case"]: r for r in rows if r["store"] == "RagHierVectorStore"}
    lines = [
        f"LlamaIndex vector stores, {args.n:,} nodes × {args.dim}-d, top_k={k}, {args.queries} queries "
        f"(llama-index-core {llama_index.core.__version__}, faiss {faiss.__version__}, "
        f"{os.cpu_count()} CPUs, {faiss.omp_get_max_threads()} FAISS threads, {platform.machine()}; "
        f"RagHierVectorStore index={args.index}, hit_rows={args.hit_rows!r}; FaissVectorStore {args.faiss_index})",
        "",
        "| query | store | median ms | p95 ms | median vs RagHier | add (s) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r["median_ms"] / base[r["case"]]["median_ms"]
        added = f"{build[r['store']]:.1f}" if r["case"] == "unfiltered" else ""
        ratio_txt = f"{ratio:.2f}×" if r["store"] != "RagHierVectorStore" else "1"
        lines.append(
            f"| {r['case']} | {r['store']} | {r['median_ms']:.2f} | {r['p95_ms']:.2f} | {ratio_txt} | {added} |"
        )
    table = "\n".join(lines)
    print()
    print(table)

    result = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "n": args.n,
        "dim": args.dim,
        "top_k": k,
        "queries": args.queries,
        "cpus": os.cpu_count(),
        "faiss_threads": faiss.omp_get_max_threads(),
        "hit_rows": args.hit_rows,
        "index": args.index,
        "faiss_index": args.faiss_index,
        "build_s": build,
        "rows": rows,
        "table_md": table,
    }
    write_json(args.out, result, indent=2)
    rag.close()
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
