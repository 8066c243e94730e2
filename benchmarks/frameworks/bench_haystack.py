"""Query latency of Haystack embedding retrievers: RagHierEmbeddingRetriever vs InMemoryEmbeddingRetriever.

Usage::

    python -m benchmarks.frameworks.bench_haystack                       # 100k documents, 384-d, 30 queries
    python -m benchmarks.frameworks.bench_haystack --n 20000 --queries 50
    PYTHONPATH=DIR python -m benchmarks.frameworks.bench_haystack   # also faiss-haystack, installed in DIR
    python -m benchmarks.frameworks.bench_haystack --no-in-memory   # without InMemory (about 18 s per query at 100k)
    python -m benchmarks.frameworks.bench_haystack --index '{"kind": "hnsw", "ef_search": 128}'   # our store on HNSW
    python -m benchmarks.frameworks.bench_haystack --hit-rows memory     # hit rows kept in memory, not read by SQL

Both stores receive the same N documents (``--words`` words of text each, 100 by default; random unit vectors held
as float32 values, as an embedder produces) in one ``write_documents`` call; every retriever then answers the same
queries (fresh random unit vectors) through its component's ``run(query_embedding=..., top_k=...)``, one query per
call, the retrievers interleaved per query (which goes first rotates, so that none always meets caches the others
left cold) so that machine noise hits all alike. One warm-up query each is not timed. ``--threads`` sets FAISS's
OpenMP threads (both FAISS-based retrievers); on a shared, loaded machine one thread avoids OpenMP spin-waiting,
which can cost more than the search itself. Reported: write time, median and p95 latency per query, the ratio to
rag-hier's median, and the overlap of each top-k with rag-hier's (exact search everywhere, so it should be 1.0).
With faiss-haystack, also the ratio of the medians and the median of the per-query differences (the same query,
moments apart: what rag-hier costs beyond faiss-haystack, less exposed to the machine's drift than either median).

faiss-haystack is timed when it is importable. It pins numpy<2; to include it without touching your environment,
install it without its dependencies into a separate folder (``pip install --no-deps --target DIR faiss-haystack``)
and put that folder on the interpreter's path for the run (``PYTHONPATH=DIR``; its runtime works with numpy 2). It
uses an L2 ``Flat`` index, which ranks unit vectors like inner product.

The markdown table goes to stdout; progress goes to stderr. The rag-hier store lives in a temporary
directory removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.texts import passage_texts
from benchmarks.common.timing import interleaved, percentile
from benchmarks.common.vectors import mixture, unit_vectors


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="documents")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension")
    parser.add_argument("--queries", type=int, default=30, help="timed queries (same for every retriever)")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--words", type=int, default=100, help="words per document text (0: short texts such as 'passage 17')"
    )
    parser.add_argument("--threads", type=int, help="FAISS OpenMP threads (default: FAISS's own choice)")
    parser.add_argument(
        "--vectors",
        choices=["random", "mixture"],
        default="random",
        help="random unit vectors, or bench_dense.py's Gaussian mixture (1,000 centres, noise 0.05)",
    )
    parser.add_argument(
        "--index",
        default="flat",
        help='the rag-hier store\'s index: a kind, or JSON such as \'{"kind": "hnsw", "ef_search": 128}\' '
        "(the overlap column is then its recall@10 against the exact retrievers)",
    )
    parser.add_argument(
        "--faiss-haystack-index",
        default="Flat",
        help="faiss-haystack's FAISS index factory string (e.g. HNSW32: M 32, FAISS's efConstruction 40 and "
        "efSearch 16; match them in --index for a like-for-like HNSW comparison)",
    )
    parser.add_argument(
        "--hit-rows",
        choices=["sqlite", "memory"],
        default="sqlite",
        help="where the rag-hier store reads its hits' rows (RagHierDocumentStore(hit_rows=...))",
    )
    parser.add_argument(
        "--no-in-memory",
        action="store_true",
        help="leave out InMemoryEmbeddingRetriever (a brute-force Python scan: about 18 s per query at 100k)",
    )
    args = parser.parse_args(argv)

    import faiss
    import haystack

    if args.threads:
        faiss.omp_set_num_threads(args.threads)
    from haystack import Document
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack_integrations.components.retrievers.rag_hier import RagHierEmbeddingRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    rng = np.random.default_rng(args.seed)
    if args.vectors == "mixture":  # bench_dense.py's clustered data, on which approximate indexes reach high recall
        vectors = mixture(args.n, args.dim, seed=args.seed + 1)
        queries = mixture(args.queries + 1, args.dim, seed=args.seed + 2)
    else:
        vectors = unit_vectors(rng, args.n, args.dim)
        queries = unit_vectors(rng, args.queries + 1, args.dim)
    log(f"building {args.n} documents ({args.dim}-d, {args.words} words each)")
    texts = passage_texts(args.n, args.words, seed=args.seed)
    documents = [
        Document(
            id=f"p{i}",
            content=texts[i],
            meta={"doc": i // 10},
            embedding=vectors[i].tolist(),
        )
        for i in range(args.n)
    ]
    del vectors, texts
    gc.collect()

    retrievers: dict[str, Callable[[list[float]], list[Any]]] = {}
    write_seconds: dict[str, float] = {}
    tmp = tempfile.TemporaryDirectory()

    def build(name: str, store: Any, retriever: Any) -> None:
        log(f"writing to {name}")
        started = time.perf_counter()
        store.write_documents(documents)
        write_seconds[name] = time.perf_counter() - started
        retrievers[name] = lambda q: retriever.run(query_embedding=q, top_k=args.top_k)["documents"]

    index = json.loads(args.index) if args.index.lstrip().startswith("{") else args.index
    ours = RagHierDocumentStore(path=str(Path(tmp.name) / "store"), index=index, hit_rows=args.hit_rows)
    kind = index if isinstance(index, str) else json.dumps(index)
    build(f"RagHierEmbeddingRetriever ({kind})", ours, RagHierEmbeddingRetriever(document_store=ours))
    if not args.no_in_memory:
        in_memory = InMemoryDocumentStore(shared=False, embedding_similarity_function="dot_product")
        build("InMemoryEmbeddingRetriever", in_memory, InMemoryEmbeddingRetriever(document_store=in_memory))
    fh_version = None
    try:
        from importlib.metadata import version

        from haystack_integrations.components.retrievers.faiss import FAISSEmbeddingRetriever
        from haystack_integrations.document_stores.faiss import FAISSDocumentStore

        try:
            fh_version = version("faiss-haystack")
        except Exception:
            fh_version = "installed"
        fh_store = FAISSDocumentStore(embedding_dim=args.dim, index_string=args.faiss_haystack_index)
        build(
            f"FAISSEmbeddingRetriever (faiss-haystack, {args.faiss_haystack_index})",
            fh_store,
            FAISSEmbeddingRetriever(document_store=fh_store),
        )
    except ImportError:
        log("faiss-haystack not importable; skipping it (install it into DIR and run with PYTHONPATH=DIR)")

    names = list(retrievers)
    query_lists = [q.tolist() for q in queries]
    for name in names:  # warm-up
        retrievers[name](query_lists[0])
    timed = query_lists[1:]
    run = interleaved({name: (lambda i, r=retrievers[name]: r(timed[i])) for name in names}, len(timed))
    times = {name: [1000 * t for t in run.seconds[name]] for name in names}  # who goes first rotates per query
    overlap: dict[str, list[float]] = {name: [] for name in names}
    for i in range(len(timed)):
        reference = {d.id for d in run.results[names[0]][i]}
        for name in names:
            overlap[name].append(len(reference & {d.id for d in run.results[name][i]}) / args.top_k)

    base = statistics.median(times[names[0]])
    print(
        f"Haystack embedding retrievers, {args.n:,} documents, {args.dim}-d random unit vectors, "
        f"top_k={args.top_k}, {args.queries} queries (one per call), same run; "
        f"haystack-ai {haystack.__version__}, faiss {faiss.__version__}"
        + (f", faiss-haystack {fh_version}" if fh_version else "")
        + f"; {platform.processor() or platform.machine()}, {faiss.omp_get_max_threads()} FAISS threads, "
        f"RagHierDocumentStore hit_rows={args.hit_rows!r}."
    )
    print()
    print(
        "| retriever | write N docs (s) | median ms/query | p95 ms/query | median vs rag-hier "
        "| top-k overlap with rag-hier |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        median = statistics.median(times[name])
        print(
            f"| {name} | {write_seconds[name]:.1f} | {median:.2f} | {percentile(times[name], 95):.2f} | "
            f"{median / base:.1f}x | {statistics.mean(overlap[name]):.2f} |"
        )
    fh_name = f"FAISSEmbeddingRetriever (faiss-haystack, {args.faiss_haystack_index})"
    if fh_name in times:
        print()
        print(f"rag-hier / faiss-haystack (medians): {base / statistics.median(times[fh_name]):.3f}x")
        paired = statistics.median(a - b for a, b in zip(times[names[0]], times[fh_name], strict=True))
        print(f"rag-hier - faiss-haystack (median of the per-query differences): {1000 * paired:+.0f} us")
    ours.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()
