"""SVDR β search and tree beam search on Milvus Lite: extensions as files searched in the client vs Milvus fields.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.frameworks.bench_milvus_fields --n 3000 --queries 20

The first N SciFact abstracts (from the data folder, ``--data``; see ``benchmarks/README.md``) go, with random 64-d
vectors (a Gaussian mixture: the tree needs vectors; their quality does not matter here), into

- ``local``: a local store directory (the reference: token index and tree in memory);
- ``milvus-files``: a Milvus Lite collection in the file layout (token index and tree as files
  in ``C__files``, no leaf fields: β runs in the client over the loaded token index, the tree's leaves reach
  Milvus as a ``rowid in [...]`` list) — made by switching the field layout off while attaching;
- ``milvus-fields``: the same collection as this version lays it out (the token rows a sparse vector field
  searched by Milvus, the tree leaf a passage field: ``tree_leaf in [...]``).

Per backend, interleaved query by query: β search (E(q) by the offline all-MiniLM-L6-v2 vocabulary encoder,
computed once outside the timing; ``SvdrRetriever.search_vectors``, top 10), tree search (beam 2, top 10), and
opening a fresh read-only handle plus its first β query (the file layout loads ``tokens.npz`` into the client
there); then three writes of 10 passages on each Milvus collection (the file layout rewrites ``tokens.npz``
and the tree files whole; the field layout inserts the new rows) and the first β query of the read handle after
each (the file layout reloads the token index). Checks that the three return the same passages.
Results: ``<out>/milvus-fields-<N>.json`` (``--out``, default ``benchmarks/out``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import add_data_argument, scifact_dir
from benchmarks.common.report import OUT, write_json
from benchmarks.common.timing import interleaved, summary
from benchmarks.common.vectors import mixture as common_mixture


def mixture(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Clustered unit vectors (50 centres): the tree needs vectors, their quality does not matter here."""
    return common_mixture(n, dim, centers=50, noise=0.04, seed=seed, center_seed=seed)


def read_corpus(root: Path, n: int, q: int) -> tuple[list[Any], list[str]]:
    """The first ``n`` abstracts of the BEIR folder ``root`` as passages, and the first ``q`` query texts."""
    from rag_hier.corpus import Passage

    out = []
    with gzip.open(root / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            i = len(out)
            out.append(Passage(id=f"p{i}", doc_id=f"d{i}", position=0, text=f"{row.get('title', '')}. {row['text']}"))
            if len(out) >= n:
                break
    queries = []
    with (root / "queries.jsonl").open(encoding="utf-8") as f:
        for line in f:
            queries.append(json.loads(line)["text"])
            if len(queries) >= q:
                break
    return out, queries


def build(kind: str, tmp: Path, passages: list[Any], vectors: np.ndarray, model: str) -> Any:
    from rag_hier import HierStore
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.extensions.tree import TreeExtension
    from rag_hier.store.milvus import store as milvus_store

    saved = milvus_store.FIELD_KINDS
    if kind == "milvus-files":  # the file layout: extensions as files, no leaf fields
        milvus_store.FIELD_KINDS = frozenset()
    try:
        if kind == "local":
            store = HierStore.create(tmp / "local", model=None, dimension=vectors.shape[1])
        else:
            store = HierStore.create(
                uri=f"{tmp / 'm.db'}#{kind.replace('-', '_')}", model=None, dimension=vectors.shape[1]
            )
        t0 = time.perf_counter()
        store.add_passages(passages, vectors)
        store.add_extension(TokenIndexExtension(model=model))
        store.add_extension(TreeExtension(branching=8, seed=1))
        return store, time.perf_counter() - t0
    finally:
        milvus_store.FIELD_KINDS = saved


def reopen(kind: str, store: Any) -> Any:
    from rag_hier.store.milvus import store as milvus_store

    saved = milvus_store.FIELD_KINDS
    if kind == "milvus-files":
        milvus_store.FIELD_KINDS = frozenset({"sparse-rows"})
    try:
        return store.reopen(read_only=True)
    finally:
        milvus_store.FIELD_KINDS = saved


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=20)
    add_data_argument(ap)
    ap.add_argument("--model", default=None, help="the vocabulary encoder's model (default: the offline MiniLM)")
    ap.add_argument("--out", type=Path, default=OUT, help="where milvus-fields-<N>.json goes")
    args = ap.parse_args(argv)

    from rag_hier.encoders.dense import DEFAULT_MODEL, resolve_model_path
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.retrieval import Queries
    from rag_hier.retrieval.svdr import SvdrRetriever
    from rag_hier.retrieval.tree import TreeRetriever

    model = str(resolve_model_path(args.model or DEFAULT_MODEL))
    passages, texts = read_corpus(scifact_dir(args.data), args.n, args.queries)
    vectors = mixture(len(passages), 64)
    qvec = mixture(len(texts), 64, seed=9)
    encoder = VocabEncoder(model, device="cpu")
    q = encoder.encode_queries(texts)
    kinds = ["local", "milvus-files", "milvus-fields"]
    report: dict[str, Any] = {
        "n": len(passages),
        "queries": len(texts),
        "machine": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
        "backends": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-milvus-fields-") as tmp_name:
        tmp = Path(tmp_name)
        stores, times = {}, {}
        for kind in kinds:
            stores[kind], build_s = build(kind, tmp, passages, vectors, model)
            report["backends"][kind] = {"build_s": round(build_s, 2)}
        handles = {k: reopen(k, s) if k != "local" else s for k, s in stores.items()}
        beta = {k: SvdrRetriever(h, mode="beta", encoder=encoder) for k, h in handles.items()}
        tree = {k: TreeRetriever(h, beam=2) for k, h in handles.items()}
        for k in kinds:  # warm: the file layout loads the token index here
            beta[k].search_vectors(q[:1], top_k=10)
            tree[k].run(Queries(vectors=qvec[:1]), top_k=10)
        calls = {}
        for k in kinds:  # per query, every backend in turn (the order rotating), β then tree
            calls[f"beta {k}"] = lambda i, k=k: [
                h.passage_id for h in beta[k].search_vectors(q[i : i + 1], top_k=10)[0]
            ]
            calls[f"tree {k}"] = lambda i, k=k: [
                h.passage_id for h in tree[k].run(Queries(vectors=qvec[i : i + 1]), top_k=10)[0].hits
            ]
        run = interleaved(calls, len(texts))
        times = {k: {what: run.seconds[f"{what} {k}"] for what in ("beta", "tree")} for k in kinds}
        hits = {k: {what: run.results[f"{what} {k}"] for what in ("beta", "tree")} for k in kinds}
        for k in kinds:
            r = report["backends"][k]
            for what in ("beta", "tree"):
                stats = summary(times[k][what], digits=2)
                r[f"{what}_median_ms"], r[f"{what}_p95_ms"] = stats["median_ms"], stats["p95_ms"]
                r[f"{what}_same_as_local"] = hits[k][what] == hits["local"][what]
            if k != "local":
                t0 = time.perf_counter()
                fresh = reopen(k, stores[k])
                SvdrRetriever(fresh, mode="beta", encoder=encoder).search_vectors(q[:1], top_k=10)
                r["open_and_first_beta_s"] = round(time.perf_counter() - t0, 2)
                tok = fresh.extension("token-index")
                held = tok.index.held_rows()
                r["token_rows_in_client"] = 0 if held is None else len(held)
                files = fresh.manifest["extensions"]["token-index"]["files"]
                r["token_file_bytes"] = sum(int(f["bytes"]) for f in files.values())
                fresh.close()
        # a small write (10 passages) on a collection of N: what the commit writes, and what a reader then reloads
        from rag_hier.corpus import Passage

        for k in ("milvus-files", "milvus-fields"):
            writes, catch_up = [], []
            for w in range(3):
                extra = [Passage(id=f"w{w}-{j}", doc_id=f"w{w}", position=j, text=passages[j].text) for j in range(10)]
                t0 = time.perf_counter()
                stores[k].add_passages(extra, mixture(10, vectors.shape[1], seed=100 + w))
                writes.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                beta[k].search_vectors(q[:1], top_k=10)  # the read handle picks up the new generation
                catch_up.append(time.perf_counter() - t0)
            r = report["backends"][k]
            r["write_10_median_s"] = round(statistics.median(writes), 2)
            r["reader_first_beta_after_write_median_s"] = round(statistics.median(catch_up), 2)
        for k in ("milvus-files", "milvus-fields"):
            handles[k].close()
            stores[k].close()
        stores["local"].close()
    write_json(args.out / f"milvus-fields-{args.n}.json", report, indent=2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
