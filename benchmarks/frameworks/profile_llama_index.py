"""Where a LlamaIndex retrieval's time goes: RagHierVectorStore against FaissVectorStore, part by part.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.frameworks.profile_llama_index [--n 30000] [--queries 300] \
        [--index '{"kind": "hnsw", "hnsw_m": 32, "ef_construction": 40, "ef_search": 16}'] [--faiss-index HNSW32] \
        [--hit-rows sqlite|memory]

The setup of ``bench_llama_index`` (``n`` random unit vectors, ``TextNode`` s of ``--words`` words with a SOURCE
document and ``{"cat": i % 10}``), both stores behind a ``VectorStoreIndex`` (FaissVectorStore's nodes in the
index's docstore), and ``index.as_retriever(similarity_top_k=10).retrieve(QueryBundle(embedding=...))`` on
each query for both, the one that goes first alternating, for ``--rounds`` passes over the queries. Each part
is timed by wrapping the method that does it (``time.perf_counter`` around the call; the wrappers cost well
under a microsecond each) and reported as the median microseconds per query:

* LlamaIndex's retriever: the whole ``retrieve``; ``_get_nodes_with_embeddings`` (the store query and the
  docstore); ``_determine_nodes_to_fetch`` (for a store that returns nodes: ``as_related_node_info()`` of each,
  a SHA-256 of its text and metadata); the docstore's ``get_nodes`` (FaissVectorStore only);
  ``_convert_nodes_to_scored_nodes``.
* the stores' ``query``; inside ours: ``query_vector`` (the query list checked, to float32, normalised),
  ``_dense_retriever``, ``DenseRetriever.search_vectors``, the store's ``search_dense_hits``,
  ``DenseIndex.search`` and the raw FAISS index search; ``_result`` (hits to nodes).
* FaissVectorStore's raw FAISS index search.

Each part runs where the benchmark runs it: right after the other store's query, so with cold caches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.frameworks.bench_llama_index import make_nodes

_ORDER = (
    "ours: _get_nodes_with_embeddings",
    "ours: store query",
    "ours:   query_vector",
    "ours:   _dense_retriever",
    "ours:   DenseRetriever.search_vectors",
    "ours:     search_dense_hits",
    "ours:       DenseIndex.search",
    "ours:         raw FAISS search",
    "ours:   _result (hits to nodes)",
    "ours: _determine_nodes_to_fetch",
    "ours: _convert_nodes_to_scored_nodes",
    "faiss: _get_nodes_with_embeddings",
    "faiss: store query",
    "faiss:   raw FAISS search",
    "faiss: docstore get_nodes",
    "faiss: _determine_nodes_to_fetch",
    "faiss: _convert_nodes_to_scored_nodes",
)
"""Every part, outermost first (the printed order)."""


class _Timed:
    """A FAISS index whose ``search`` is timed into ``parts[key]`` (everything else passes through)."""

    def __init__(self, index: Any, parts: dict[str, list[float]], key: str) -> None:
        self._index, self._parts, self._key = index, parts, key

    def search(self, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = self._index.search(*args, **kwargs)
        self._parts.setdefault(self._key, []).append(time.perf_counter() - t)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)


def _time(obj: Any, name: str, parts: dict[str, list[float]], key: str) -> None:
    """Replace ``obj.name`` (an instance's method) by a timed call (pydantic models too: set on the instance)."""
    fn: Callable[..., Any] = getattr(obj, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        parts.setdefault(key, []).append(time.perf_counter() - t)
        return out

    object.__setattr__(obj, name, timed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=30_000, help="nodes")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3, help="passes over the queries")
    p.add_argument("--words", type=int, default=100, help="words per node text")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--index",
        default='{"kind": "hnsw", "hnsw_m": 32, "ef_construction": 40, "ef_search": 16}',
        help="RagHierVectorStore's index: a kind, or JSON",
    )
    p.add_argument("--faiss-index", default="HNSW32", help="FaissVectorStore's FAISS index factory string")
    p.add_argument("--hit-rows", choices=["sqlite", "memory"], default="sqlite")
    p.add_argument("--out", type=Path, default=None, help="also write the medians (µs) as JSON here")
    args = p.parse_args(argv)

    import faiss
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import QueryBundle
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    try:  # the bench extra: llama-index-vector-stores-faiss
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ImportError:
        FaissVectorStore = None
        print("FaissVectorStore left out: llama-index-vector-stores-faiss is not installed (rag-hier[bench])")

    faiss.omp_set_num_threads(1)
    nodes, query_vectors = make_nodes(args.n, args.dim, args.queries, args.words, args.seed)
    queries = [q.tolist() for q in query_vectors]
    tmp = tempfile.TemporaryDirectory(prefix="profile-llama-index-")
    index_config = json.loads(args.index) if args.index.lstrip().startswith("{") else args.index
    rag = RagHierVectorStore(Path(tmp.name) / "store", index=index_config, hit_rows=args.hit_rows)
    for i in range(0, args.n, 2048):
        rag.add(nodes[i : i + 2048])
    mock = MockEmbedding(embed_dim=args.dim)  # never called: every query brings its embedding
    retrievers = {"ours": VectorStoreIndex.from_vector_store(rag, embed_model=mock).as_retriever(similarity_top_k=10)}
    faiss_index = None
    if FaissVectorStore is not None:
        store = FaissVectorStore(
            faiss_index=faiss.index_factory(args.dim, args.faiss_index, faiss.METRIC_INNER_PRODUCT)
        )
        faiss_index = VectorStoreIndex(
            nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=mock
        )
        retrievers["faiss"] = faiss_index.as_retriever(similarity_top_k=10)

    parts: dict[str, list[float]] = {key: [] for key in _ORDER}
    for side, retriever in retrievers.items():
        _time(retriever, "_get_nodes_with_embeddings", parts, f"{side}: _get_nodes_with_embeddings")
        _time(retriever, "_determine_nodes_to_fetch", parts, f"{side}: _determine_nodes_to_fetch")
        _time(retriever, "_convert_nodes_to_scored_nodes", parts, f"{side}: _convert_nodes_to_scored_nodes")
    _time(rag, "query", parts, "ours: store query")
    _time(rag, "query_vector", parts, "ours:   query_vector")
    _time(rag, "_dense_retriever", parts, "ours:   _dense_retriever")
    _time(rag, "_result", parts, "ours:   _result (hits to nodes)")
    dense = rag._dense_retriever()
    _time(dense, "search_vectors", parts, "ours:   DenseRetriever.search_vectors")
    reader = rag.reader
    _time(reader, "search_dense_hits", parts, "ours:     search_dense_hits")
    dense_index = reader._core.indexes["dense"]
    _time(dense_index, "search", parts, "ours:       DenseIndex.search")
    base, ext, ntotal = dense_index._fast_plan()
    dense_index._plan = (_Timed(base, parts, "ours:         raw FAISS search"), ext, ntotal)
    if faiss_index is not None:
        fstore = faiss_index.vector_store
        _time(fstore, "query", parts, "faiss: store query")
        fstore._faiss_index = _Timed(fstore._faiss_index, parts, "faiss:   raw FAISS search")
        _time(faiss_index.docstore, "get_nodes", parts, "faiss: docstore get_nodes")

    total: dict[str, list[float]] = {side: [] for side in retrievers}
    sides = list(retrievers)
    for _ in range(args.rounds):
        for i, v in enumerate(queries):
            for side in sides[i % len(sides) :] + sides[: i % len(sides)]:
                t = time.perf_counter()
                retrievers[side].retrieve(QueryBundle(query_str="", embedding=v))
                total[side].append(time.perf_counter() - t)

    medians = {f"{side}: retrieve (whole)": 1e6 * statistics.median(s) for side, s in total.items()}
    medians.update({key: 1e6 * statistics.median(s) for key, s in parts.items() if s})
    print(
        f"{args.n:,} nodes, index {args.index}, hit_rows={args.hit_rows!r}, FaissVectorStore {args.faiss_index}; "
        f"{args.queries} queries x {args.rounds} rounds, median µs per query"
    )
    print("| part | µs |\n|---|---:|")
    for side in sides:  # each side's whole retrieve, then its parts outermost first
        keys = [f"{side}: retrieve (whole)"] + [k for k in _ORDER if k.startswith(side + ":") and k in medians]
        for key in keys:
            print(f"| {key} | {medians[key]:.1f} |")
    if "faiss" in total:
        ratio = statistics.median(total["ours"]) / statistics.median(total["faiss"])
        print(f"ours / FaissVectorStore through VectorStoreIndex: {ratio:.3f}x")
        medians["ratio"] = ratio
    if args.out is not None:
        args.out.write_text(json.dumps(medians, indent=2), encoding="utf-8")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
