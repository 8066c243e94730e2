"""Dense search through HierStore versus raw FAISS, on synthetic clustered 384-d vectors.

Usage::

    python -m benchmarks.retrieval.bench_dense --sizes 100000,1000000 --kinds flat,ivf,hnsw

For each size N and index kind (flat, ivf, hnsw) it builds

* (a) raw FAISS: ``IndexFlatIP`` / ``IndexIVFFlat`` / ``IndexHNSWFlat``, built directly;
* (b) a fresh :class:`~rag_hier.store.HierStore` (no encoder) fed with ``add_passages(passages, vectors)``
  (short texts ``"passage k of doc j"``), searched with ``DenseRetriever(store).search_vectors``, which
  returns :class:`~rag_hier.retrieval.Hit` objects with their text read from SQLite;

and reports build time (the store's includes SQLite writes, FAISS file write, checksums and commit),
single-query latency (median, p95; one query per call, raw / store calls interleaved so that machine
noise hits both alike), batched throughput (all queries in one call), recall@10 against exact search,
the store/raw latency ratio, and resident memory (``--memory``: a fresh subprocess opens the saved
index/store and runs queries; RSS after minus RSS before opening, divided by the raw float32 bytes
N*dim*4).

Data: a unit-normalised Gaussian mixture (``--centers`` centres on the unit sphere plus Gaussian noise
of ``--noise`` per dimension); queries are fresh points of the same mixture. IVF uses
nlist = 4*sqrt(N) and the smallest nprobe whose recall@10 on the raw index is >= ``--target``; HNSW uses
M=32, efConstruction ``--ef-construction`` (the engine default, 80, on both sides) and the smallest
efSearch reaching the target. FAISS threads are set with ``faiss.omp_set_num_threads`` for both sides.

Results go to ``<out-dir>/dense-<N>.json`` (default ``benchmarks/out``) (merged across re-runs of single kinds). Store
directories live in a temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import REPO
from benchmarks.common.report import OUT
from benchmarks.common.texts import passage_texts
from benchmarks.common.timing import interleaved, loadavg, percentile, summary
from benchmarks.common.vectors import mixture, normalize

NPROBES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
EF_SEARCHES = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


# ---------------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------------
def recall_at(found: np.ndarray, truth: np.ndarray, k: int = 10) -> float:
    hits = 0
    for f, t in zip(found[:, :k], truth[:, :k], strict=True):
        hits += len(set(f.tolist()) & set(t.tolist()))
    return hits / (truth.shape[0] * k)


def rss_bytes() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        with Path("/proc/self/status").open(encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    raise RuntimeError("cannot read RSS")


# ---------------------------------------------------------------------------------------------------
# raw FAISS
# ---------------------------------------------------------------------------------------------------
def build_raw(kind: str, x: np.ndarray, nlist: int, m: int, ef_c: int, ivf_train: int | None = None):
    import faiss

    d = x.shape[1]
    t0 = time.perf_counter()
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
        index.add(x)
    elif kind == "ivf":
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = 1234
        train = x
        if ivf_train is not None and ivf_train < x.shape[0]:
            train = x[:ivf_train]  # the store trains on the first vectors it receives (see build_store)
        elif x.shape[0] > 256 * nlist:  # what FAISS (and the engine) would sample anyway
            rng = np.random.default_rng(1234)
            train = x[np.sort(rng.choice(x.shape[0], size=256 * nlist, replace=False))]
        index.train(train)
        index.add(x)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = ef_c
        index.add(x)
    else:
        raise ValueError(kind)
    return index, time.perf_counter() - t0


def raw_params(kind: str, value: int | None):
    import faiss

    if kind == "ivf":
        return faiss.SearchParametersIVF(nprobe=int(value))
    if kind == "hnsw":
        return faiss.SearchParametersHNSW(efSearch=int(value))
    return None


def set_raw_param(index, kind: str, value: int | None) -> None:
    if kind == "ivf":
        index.nprobe = int(value)
    elif kind == "hnsw":
        index.hnsw.efSearch = int(value)


def tune(index, kind: str, q: np.ndarray, truth: np.ndarray, target: float) -> tuple[int | None, list[dict]]:
    """Smallest nprobe / efSearch whose recall@10 reaches ``target`` (on the raw index)."""
    if kind == "flat":
        return None, []
    grid = NPROBES if kind == "ivf" else EF_SEARCHES
    sweep = []
    chosen = None
    for v in grid:
        if kind == "ivf" and v > index.nlist:
            break
        set_raw_param(index, kind, v)
        t0 = time.perf_counter()
        _, ids = index.search(q, 10)
        dt = time.perf_counter() - t0
        r = recall_at(ids, truth)
        sweep.append({"param": v, "recall@10": r, "batch_ms_per_query": 1000 * dt / q.shape[0]})
        print(f"    tune {kind} {'nprobe' if kind == 'ivf' else 'efSearch'}={v}: recall@10={r:.4f}", flush=True)
        if r >= target:
            chosen = v
            break
    if chosen is None:
        chosen = grid[-1] if kind == "hnsw" else min(grid[-1], index.nlist)
    set_raw_param(index, kind, chosen)
    return chosen, sweep


# ---------------------------------------------------------------------------------------------------
# store
# ---------------------------------------------------------------------------------------------------
def make_passages(n: int, per_doc: int = 10, words: int = 0):
    """``n`` passages, ``per_doc`` per document; texts of ``words`` words (0: short texts "passage i of doc j")."""
    from rag_hier.corpus import Passage

    texts = passage_texts(n, words) if words else None
    return [
        Passage(
            id=f"doc{i // per_doc}#{i % per_doc}",
            doc_id=f"doc{i // per_doc}",
            position=i % per_doc,
            text=texts[i] if texts is not None else f"passage {i % per_doc} of doc {i // per_doc}",
        )
        for i in range(n)
    ]


def hit_index(h, per_doc: int = 10) -> int:
    return int(h.doc_id[3:]) * per_doc + int(h.position)


def build_store(
    path: Path, kind: str, x: np.ndarray, nlist: int, m: int, ef_c: int, param: int | None, ivf_train: int | None
):
    from rag_hier.index import IndexConfig
    from rag_hier.store import HierStore

    cfg: dict[str, Any] = {"kind": kind, "hnsw_m": m, "ef_construction": ef_c}
    chunk = x.shape[0] if x.shape[0] < 500_000 else 100_000  # big inputs: 100k passages per call, one commit
    if kind == "ivf":
        if ivf_train is not None and ivf_train < x.shape[0]:
            # add in chunks inside one batch (one commit): the index trains itself on the first chunk
            chunk = ivf_train
            cfg.update(nlist=nlist, nprobe=int(param), train_min=ivf_train)
        else:
            cfg.update(nlist=nlist, nprobe=int(param), train_min=min(x.shape[0], 39 * nlist))
    if kind == "hnsw":
        cfg.update(ef_search=int(param))
    t0 = time.perf_counter()
    passages = make_passages(x.shape[0])
    t_passages = time.perf_counter() - t0
    t0 = time.perf_counter()
    store = HierStore.create(path, model=None, dimension=x.shape[1], index=IndexConfig(**cfg))
    with store.batch():
        for start in range(0, x.shape[0], chunk):
            store.add_passages(passages[start : start + chunk], x[start : start + chunk])
    t_build = time.perf_counter() - t0
    del passages
    if kind == "ivf":
        assert store.index.is_ivf_trained, "the store's IVF index did not train"
    return store, t_build, t_passages


# ---------------------------------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------------------------------
def latency(raw, store, kind: str, q: np.ndarray, n_single: int, k: int = 10) -> dict[str, Any]:
    """Interleaved single-query loops: raw FAISS, the store's DenseIndex, the full retriever (hits)."""
    from rag_hier.retrieval import DenseRetriever

    retriever = DenseRetriever(store)
    dindex = store.index
    for i in range(min(20, q.shape[0])):  # warm-up
        raw.search(q[i : i + 1], k)
        retriever.search_vectors(q[i : i + 1], top_k=k)
    timed = interleaved(
        {
            "raw": lambda i: raw.search(q[i : i + 1], k),
            "index": lambda i: dindex.search(q[i : i + 1], k),
            "store": lambda i: retriever.search_vectors(q[i : i + 1], top_k=k),
        },
        n_single,
    )
    for hits in timed.results["store"]:
        assert hits[0] and hits[0][0].text.startswith("passage "), hits
    t_raw, t_idx, t_store = (timed.seconds[name] for name in ("raw", "index", "store"))
    # batched: all queries in one call, best of 3, interleaved
    b_raw, b_store = [], []
    store_ids = None
    pc = time.perf_counter
    for _ in range(3):
        t0 = pc()
        _, raw_ids = raw.search(q, k)
        b_raw.append(pc() - t0)
        t0 = pc()
        res = retriever.search_vectors(q, top_k=k)
        b_store.append(pc() - t0)
        store_ids = np.array([[hit_index(h) for h in hs] + [-1] * (k - len(hs)) for hs in res])
    ms = 1000.0
    out = {
        "single_queries": n_single,
        "raw_median_ms": ms * float(np.median(t_raw)),
        "raw_p95_ms": ms * percentile(t_raw, 95),
        "store_index_median_ms": ms * float(np.median(t_idx)),
        "store_index_p95_ms": ms * percentile(t_idx, 95),
        "store_median_ms": ms * float(np.median(t_store)),
        "store_p95_ms": ms * percentile(t_store, 95),
        "ratio_median": float(np.median(t_store) / np.median(t_raw)),
        "ratio_p95": float(percentile(t_store, 95) / percentile(t_raw, 95)),
        "batch_queries": int(q.shape[0]),
        "raw_batch_qps": q.shape[0] / min(b_raw),
        "store_batch_qps": q.shape[0] / min(b_store),
        "batch_ratio": float(min(b_store) / min(b_raw)),
    }
    return out, raw_ids, store_ids


def profile_store(store, q: np.ndarray, n: int, path: Path, k: int = 10) -> str:
    """cProfile of the store's single-query loop; returns the top of the cumulative table."""
    import cProfile
    import io
    import pstats

    from rag_hier.retrieval import DenseRetriever

    retriever = DenseRetriever(store)
    prof = cProfile.Profile()
    prof.enable()
    for i in range(n):
        retriever.search_vectors(q[i : i + 1], top_k=k)
    prof.disable()
    prof.dump_stats(str(path))
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------------
# memory (child process)
# ---------------------------------------------------------------------------------------------------
def memory_child(mode: str, path: str, n: int, dim: int, threads: int) -> None:
    """Run in a fresh interpreter: RSS before/after opening ``path`` and searching."""
    import faiss

    faiss.omp_set_num_threads(threads)
    from rag_hier.retrieval import DenseRetriever
    from rag_hier.store import HierStore

    q = mixture(200, dim, seed=99)
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    if mode == "raw":
        index = faiss.read_index(path)
        for i in range(q.shape[0]):
            index.search(q[i : i + 1], 10)
        index.search(q, 10)
    elif mode == "store":
        store = HierStore.open(path, read_only=True)
        retriever = DenseRetriever(store)
        for i in range(q.shape[0]):
            retriever.search_vectors(q[i : i + 1], top_k=10)
        retriever.search_vectors(q, top_k=10)
    else:
        raise SystemExit(f"unknown memory mode {mode!r}")
    t_open = time.perf_counter() - t0
    gc.collect()
    after = rss_bytes()
    print(json.dumps({"rss_before": before, "rss_after": after, "seconds": t_open}))


def haystack_child(n: int, dim: int) -> None:
    """Haystack InMemoryDocumentStore holding n Documents with embeddings (lists of floats)."""
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    x = mixture(n, dim, seed=1)
    q = mixture(5, dim, seed=99)
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    store = InMemoryDocumentStore(shared=False)
    docs = [
        Document(id=f"doc{i // 10}#{i % 10}", content=f"passage {i % 10} of doc {i // 10}", embedding=x[i].tolist())
        for i in range(n)
    ]
    store.write_documents(docs)
    del docs
    t_write = time.perf_counter() - t0
    gc.collect()
    after = rss_bytes()
    t0 = time.perf_counter()
    for i in range(q.shape[0]):
        res = store.embedding_retrieval(query_embedding=q[i].tolist(), top_k=10)
    t_q = (time.perf_counter() - t0) / q.shape[0]
    assert len(res) == 10
    print(json.dumps({"rss_before": before, "rss_after": after, "seconds": t_write, "query_ms": 1000 * t_q}))


def run_child(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.retrieval.bench_dense", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------
# writes, filtered search, bulk build
# ---------------------------------------------------------------------------------------------------
def store_config(kind: str, n: int, nprobe: int = 8, ef_search: int = 64, hnsw_m: int = 32, ef_c: int = 80):
    from rag_hier.index import IndexConfig

    cfg: dict[str, Any] = {"kind": kind, "hnsw_m": hnsw_m, "ef_construction": ef_c, "ef_search": ef_search}
    if kind == "ivf":
        nlist = int(4 * math.sqrt(n))
        cfg.update(nlist=nlist, nprobe=nprobe, train_min=min(n, 256 * nlist, 200_000))
    return IndexConfig(**cfg)


def bulk_store(path: Path, kind: str, x: np.ndarray, passages: list, config=None, chunk: int = 200_000):
    """A store holding ``passages`` with vectors ``x``, written in one commit (chunks inside one batch)."""
    from rag_hier.store import HierStore

    store = HierStore.create(path, model=None, dimension=x.shape[1], index=config or store_config(kind, len(x)))
    with store.batch():
        for start in range(0, x.shape[0], chunk):
            store.add_passages(passages[start : start + chunk], x[start : start + chunk])
    return store


def run_writes(a, sizes: list[int], kind: str, tmp_root: Path) -> None:
    """One-document commits (add a 5-passage document; delete a stored document) into stores of each size.

    The stores are open side by side and the commits interleaved (the size order rotates every round), so
    machine noise hits every size alike; ratios are to the smallest size.
    """
    from rag_hier.corpus import Passage

    extensions = [e for e in (a.extensions or "").split(",") if e]
    suffix = ("-" + "+".join(extensions) if extensions else "") + (f"-{a.label}" if a.label else "")
    out_file = a.out_dir / f"dense-writes-{kind}{suffix}.json"
    rec: dict[str, Any] = {
        "kind": kind,
        "sizes": sizes,
        "dim": a.dim,
        "writes": a.writes,
        "extensions": extensions,
        "label": a.label,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_before": loadavg(),
        "build_s": {},
    }
    stores = {}
    for n in sizes:
        print(f"-- writes {kind}: building a {n}-vector store", flush=True)
        x = mixture(n, a.dim, centers=a.centers, noise=a.noise, seed=1)
        passages = make_passages(n)
        t0 = time.perf_counter()
        stores[n] = bulk_store(tmp_root / f"writes-{kind}-{n}", kind, x, passages)
        rec["build_s"][str(n)] = time.perf_counter() - t0
        print(f"   built in {rec['build_s'][str(n)]:.1f}s", flush=True)
        for name in extensions:  # extensions whose files grow with the corpus (token index, document index)
            t0 = time.perf_counter()
            stores[n].ensure_extension(name)
            rec.setdefault("extension_build_s", {})[f"{name}@{n}"] = time.perf_counter() - t0
            print(f"   {name} built in {time.perf_counter() - t0:.1f}s", flush=True)
        del x, passages
        gc.collect()
    new = mixture(a.writes * 5, a.dim, centers=a.centers, noise=a.noise, seed=5)
    times: dict[str, dict[int, list[float]]] = {"add": {n: [] for n in sizes}, "delete": {n: [] for n in sizes}}
    rec["load_during"] = loadavg()
    for w in range(a.writes):
        order = sizes[w % len(sizes) :] + sizes[: w % len(sizes)]
        for n in order:
            store = stores[n]
            passages = [Passage(f"w{w}#{k}", f"w{w}", k, f"written {w} part {k}") for k in range(5)]
            t0 = time.perf_counter()
            store.add_passages(passages, new[5 * w : 5 * w + 5])
            times["add"][n].append(time.perf_counter() - t0)
            victim = f"doc{(w * 7919) % (n // 10)}"
            t0 = time.perf_counter()
            removed = store.delete_documents([victim])
            times["delete"][n].append(time.perf_counter() - t0)
            assert removed == 10, (victim, removed)
        if w % 5 == 4:
            print(
                f"   {w + 1} rounds: add median "
                + ", ".join(f"{n}: {1000 * np.median(times['add'][n]):.1f} ms" for n in sizes),
                flush=True,
            )
    rec["load_after"] = loadavg()
    rec["segments"] = {str(n): stores[n].manifest["indexes"]["dense"].get("segments") for n in sizes}
    rec["extension_segments"] = {
        str(n): {k: v.get("segments") for k, v in stores[n].manifest.get("extensions", {}).items()} for n in sizes
    }
    rec["optimize_s"] = {}
    for n in sizes:  # what the merge that small writes put off costs (once per 10 % of the index changed)
        t0 = time.perf_counter()
        stores[n].optimize()
        rec["optimize_s"][str(n)] = time.perf_counter() - t0
    print("   optimize() s: " + ", ".join(f"{n}: {rec['optimize_s'][str(n)]:.2f}" for n in sizes), flush=True)
    base = sizes[0]
    for op in ("add", "delete"):
        rec[op] = {str(n): summary(times[op][n]) for n in sizes}
        for n in sizes:
            rec[op][str(n)]["ratio_to_smallest"] = float(np.median(times[op][n]) / np.median(times[op][base]))
    for n, store in stores.items():
        rec.setdefault("files", {})[str(n)] = {
            f.name: f.stat().st_size for f in sorted((tmp_root / f"writes-{kind}-{n}").iterdir())
        }
        store.close()
        shutil.rmtree(tmp_root / f"writes-{kind}-{n}", ignore_errors=True)
    for op in ("add", "delete"):
        print(
            f"   {kind} {op}: "
            + "; ".join(
                f"{n}: median {rec[op][str(n)]['median_ms']:.1f} ms p95 {rec[op][str(n)]['p95_ms']:.1f} ms "
                f"({rec[op][str(n)]['ratio_to_smallest']:.2f}x)"
                for n in sizes
            ),
            flush=True,
        )
    out_file.write_text(json.dumps(rec, indent=2) + "\n")
    print(f"wrote {out_file} (load {rec['load_before']} -> {rec['load_after']})", flush=True)


FILTERS = {
    "1%": {"field": "meta.bucket", "operator": "<", "value": 1},
    "10%": {"field": "meta.bucket", "operator": "<", "value": 10},
    "50%": {"field": "meta.bucket", "operator": "<", "value": 50},
    "10% (doc_id in)": None,  # filled per store: the doc_ids of 10 % of the documents
}


def run_filtered(a, n: int, kind: str, tmp_root: Path) -> None:
    """Filtered search at 1 %, 10 %, 50 % selectivity against unfiltered search, interleaved; and the first
    filtered query after a write."""
    from rag_hier.corpus import Passage
    from rag_hier.retrieval import DenseRetriever

    suffix = "-indexed" if a.meta_index else ""
    out_file = a.out_dir / f"dense-filtered-{kind}-{n}{suffix}.json"
    print(f"-- filtered {kind} N={n}: building", flush=True)
    x = mixture(n, a.dim, centers=a.centers, noise=a.noise, seed=1)
    passages = [
        Passage(
            id=f"doc{i // 10}#{i % 10}",
            doc_id=f"doc{i // 10}",
            position=i % 10,
            text=f"passage {i % 10} of doc {i // 10}",
            meta={"bucket": (i * 37) % 100},
        )
        for i in range(n)
    ]
    t0 = time.perf_counter()
    store = bulk_store(tmp_root / f"filtered-{kind}-{n}", kind, x, passages)
    t_build = time.perf_counter() - t0
    t_index = None
    if a.meta_index:  # filters on meta.bucket then look their passages up through the metadata index
        t0 = time.perf_counter()
        store.index_meta_field("bucket")
        t_index = time.perf_counter() - t0
        print(f"   index_meta_field('bucket'): {t_index:.2f} s", flush=True)
    del passages
    buckets = (np.arange(n) * 37) % 100
    q = mixture(a.queries, a.dim, centers=a.centers, noise=a.noise, seed=2)
    filters = dict(FILTERS)
    filters["10% (doc_id in)"] = {
        "field": "doc_id",
        "operator": "in",
        "value": [f"doc{d}" for d in range(0, n // 10, 10)],
    }
    truth_ids = {}
    import faiss

    for name, f in filters.items():
        mask = (np.arange(n) // 10) % 10 == 0 if name.startswith("10% (doc") else buckets < f["value"]
        allowed = np.nonzero(mask)[0]
        _, pos = faiss.knn(q, x[allowed], 10, metric=faiss.METRIC_INNER_PRODUCT)
        truth_ids[name] = allowed[pos]
    del x
    gc.collect()
    retriever = DenseRetriever(store)
    variants: dict[str, Any] = {"unfiltered": None, **filters}
    for name, f in variants.items():  # warm-up, and the filter checked
        hits = retriever.search_vectors(q[:1], top_k=10, filters=f)[0]
        assert len(hits) == 10, (name, len(hits))
    times: dict[str, list[float]] = {name: [] for name in variants}
    found: dict[str, list[list[int]]] = {name: [] for name in variants}
    names = list(variants)
    load_before = loadavg()
    for i in range(a.queries):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            t0 = time.perf_counter()
            hits = retriever.search_vectors(q[i : i + 1], top_k=10, filters=variants[name])[0]
            times[name].append(time.perf_counter() - t0)
            found[name].append([hit_index(h) for h in hits])
    load_after = loadavg()
    rec: dict[str, Any] = {
        "n": n,
        "kind": kind,
        "queries": a.queries,
        "build_s": t_build,
        "meta_index_s": t_index,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_before": load_before,
        "load_after": load_after,
        "variants": {},
    }
    base = float(np.median(times["unfiltered"]))
    for name in names:
        r = summary(times[name])
        r["ratio_to_unfiltered"] = float(np.median(times[name])) / base
        if name in truth_ids:
            r["recall@10"] = recall_at(np.asarray(found[name]), truth_ids[name])
        rec["variants"][name] = r
        print(
            f"   {name}: median {r['median_ms']:.3f} ms p95 {r['p95_ms']:.3f} ms ({r['ratio_to_unfiltered']:.2f}x)"
            + (f" recall@10 {r['recall@10']:.4f}" if "recall@10" in r else ""),
            flush=True,
        )
    # the first filtered query after a write, against a second one (same query, same generation)
    first, second = [], []
    rng = np.random.default_rng(3)
    for w in range(min(20, a.queries)):
        store.add_passages(
            [Passage(f"fw{w}", f"fw{w}", 0, "written", meta={"bucket": 5})],
            normalize(rng.standard_normal((1, a.dim), dtype=np.float32)),
        )
        for bucket in (first, second):
            t0 = time.perf_counter()
            retriever.search_vectors(q[w : w + 1], top_k=10, filters=filters["10%"])
            bucket.append(time.perf_counter() - t0)
    rec["after_write"] = {"first": summary(first), "second": summary(second)}
    print(
        f"   first filtered query after a write: median {1000 * np.median(first):.2f} ms, "
        f"the next one {1000 * np.median(second):.2f} ms",
        flush=True,
    )
    store.close()
    shutil.rmtree(tmp_root / f"filtered-{kind}-{n}", ignore_errors=True)
    out_file.write_text(json.dumps(rec, indent=2) + "\n")
    print(f"wrote {out_file} (load {load_before} -> {load_after})", flush=True)


def sqlite_rows(passages: list):
    """The rows the store writes for ``passages`` (same columns and values), as a generator."""
    import hashlib

    for p in passages:
        yield (
            p.id,
            p.doc_id,
            int(p.position),
            int(p.section),
            json.dumps(list(p.title_path), separators=(",", ":")),
            p.text,
            json.dumps(dict(p.meta), separators=(",", ":")),
            json.dumps(dict(p.extra), separators=(",", ":")),
            hashlib.sha1(p.embedding_text.encode("utf-8"), usedforsecurity=False).hexdigest(),
            1,
            None,
        )


def bare_sqlite(path: Path, passages: list) -> float:
    """Seconds to bulk-insert the same rows into a bare SQLite file with the store's schema, in one transaction."""
    import sqlite3

    from rag_hier.store.schema import SCHEMA

    t0 = time.perf_counter()
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(SCHEMA)
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO documents(doc_id, title) VALUES (?, '') ON CONFLICT(doc_id) DO NOTHING",
        ((p.doc_id,) for p in passages),
    )
    db.executemany(
        "INSERT INTO passages(passage_id, doc_id, position, section, title_path, text, meta, extra,"
        " content_hash, has_vector, exact_embedding) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        sqlite_rows(passages),
    )
    db.execute("COMMIT")
    db.close()
    return time.perf_counter() - t0


def run_build(a, n: int, tmp_root: Path) -> None:
    """A Flat store built by one ``add_passages`` call against raw FAISS ``add`` + a bare SQLite bulk insert."""
    import faiss

    out_file = a.out_dir / f"dense-build-{n}.json"
    x = mixture(n, a.dim, centers=a.centers, noise=a.noise, seed=1)
    passages = make_passages(n)  # the caller's objects: made once, outside every timing
    rounds = []
    load_before = loadavg()
    for r in range(a.rounds):
        gc.collect()
        t0 = time.perf_counter()
        index = faiss.IndexFlatIP(a.dim)
        index.add(x)
        t_faiss = time.perf_counter() - t0
        del index
        gc.collect()
        t_sql = bare_sqlite(tmp_root / f"bare-{r}.sqlite", passages)
        (tmp_root / f"bare-{r}.sqlite").unlink()
        gc.collect()
        path = tmp_root / f"build-{r}"
        from rag_hier.store import HierStore

        t0 = time.perf_counter()
        store = HierStore.create(path, model=None, dimension=a.dim, index="flat")
        store.add_passages(passages, x)
        t_store = time.perf_counter() - t0
        store.close()
        shutil.rmtree(path, ignore_errors=True)
        row = {
            "faiss_add_s": t_faiss,
            "bare_sqlite_s": t_sql,
            "store_s": t_store,
            "ratio": t_store / (t_faiss + t_sql),
            "load": loadavg(),
        }
        rounds.append(row)
        print(
            f"   build N={n} round {r}: faiss add {t_faiss:.1f}s + bare SQLite {t_sql:.1f}s; store {t_store:.1f}s "
            f"({row['ratio']:.2f}x)",
            flush=True,
        )
    rec = {
        "n": n,
        "dim": a.dim,
        "rounds": rounds,
        "median_ratio": float(np.median([r["ratio"] for r in rounds])),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_before": load_before,
        "load_after": loadavg(),
    }
    out_file.write_text(json.dumps(rec, indent=2) + "\n")
    print(f"wrote {out_file}", flush=True)


# ---------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--kinds", default="flat,ivf,hnsw")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--centers", type=int, default=1000)
    p.add_argument("--noise", type=float, default=0.05, help="per-dimension noise std around a centre")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument(
        "--flat-single-queries",
        type=int,
        default=300,
        help="single-query loop length for flat (each query scans everything)",
    )
    p.add_argument("--target", type=float, default=0.99, help="recall@10 to reach when tuning")
    p.add_argument("--hnsw-m", type=int, default=32)
    p.add_argument("--ef-construction", type=int, default=80)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--ivf-train",
        type=int,
        default=None,
        help="IVF training vectors (default: all, at most 256*nlist); the store gets them as its first chunk",
    )
    p.add_argument(
        "--low-memory-from",
        type=int,
        default=500_000,
        help="from this N on, the raw index waits on disk while the store builds",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the resident-memory subprocesses")
    p.add_argument("--haystack", action="store_true", help="also measure Haystack InMemoryDocumentStore memory")
    p.add_argument("--profile", action="store_true", help="cProfile the store single-query loop")
    p.add_argument(
        "--suite",
        default="search",
        choices=("search", "writes", "filtered", "build"),
        help="search: store vs raw FAISS (default); writes: one-document commits into stores of --sizes; "
        "filtered: filtered vs unfiltered search; build: 1M-style bulk build vs raw FAISS add + bare SQLite insert",
    )
    p.add_argument("--writes", type=int, default=30, help="writes suite: commits per store (interleaved)")
    p.add_argument(
        "--extensions",
        default="",
        help="writes suite: store extensions to attach first, comma-separated (e.g. token-index,doc-index)",
    )
    p.add_argument("--label", default="", help="writes suite: a tag for the output file (e.g. before/after)")
    p.add_argument(
        "--meta-index", action="store_true", help="filtered suite: index meta.bucket (store.index_meta_field) first"
    )
    p.add_argument("--rounds", type=int, default=2, help="build suite: alternating repetitions")
    p.add_argument("--out-dir", type=Path, default=OUT)
    p.add_argument("--tmp", default=None, help="parent directory for the temporary stores")
    # child modes
    p.add_argument("--memory-child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    p.add_argument("--haystack-child", type=int, metavar="N", help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.memory_child:
        memory_child(a.memory_child[0], a.memory_child[1], 0, a.dim, a.threads)
        return 0
    if a.haystack_child:
        haystack_child(a.haystack_child, a.dim)
        return 0

    import faiss

    faiss.omp_set_num_threads(a.threads)
    sizes = [int(s) for s in a.sizes.split(",") if s]
    kinds = [k for k in a.kinds.split(",") if k]
    a.out_dir.mkdir(parents=True, exist_ok=True)
    tmp_root = Path(tempfile.mkdtemp(prefix="bench-dense-", dir=a.tmp))
    try:
        if a.suite == "writes":
            for kind in kinds:
                run_writes(a, sizes, kind, tmp_root)
        elif a.suite == "filtered":
            for n in sizes:
                for kind in kinds:
                    run_filtered(a, n, kind, tmp_root)
        elif a.suite == "build":
            for n in sizes:
                run_build(a, n, tmp_root)
        else:
            for n in sizes:
                run_size(a, n, kinds, tmp_root)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return 0


def run_size(a, n: int, kinds: list[str], tmp_root: Path) -> None:
    import faiss

    out_file = a.out_dir / f"dense-{n}.json"
    result: dict[str, Any] = {}
    if out_file.exists():
        with contextlib.suppress(json.JSONDecodeError):
            result = json.loads(out_file.read_text())
    result.update(
        {
            "n": n,
            "dim": a.dim,
            "centers": a.centers,
            "noise": a.noise,
            "queries": a.queries,
            "target_recall@10": a.target,
            "threads": a.threads,
            "faiss": faiss.__version__,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0]},
        }
    )
    result.setdefault("kinds", {})
    raw_bytes = n * a.dim * 4
    print(f"== N={n}: generating data", flush=True)
    t0 = time.perf_counter()
    x = mixture(n, a.dim, centers=a.centers, noise=a.noise, seed=1)
    q = mixture(a.queries, a.dim, centers=a.centers, noise=a.noise, seed=2)
    print(f"   data {time.perf_counter() - t0:.1f}s; exact ground truth", flush=True)
    t0 = time.perf_counter()
    _, truth = faiss.knn(q, x, 10, metric=faiss.METRIC_INNER_PRODUCT)
    print(f"   ground truth {time.perf_counter() - t0:.1f}s", flush=True)
    nlist = int(4 * math.sqrt(n))

    if not a.no_memory and a.haystack and n <= 200_000:
        print("   haystack InMemoryDocumentStore memory", flush=True)
        hs = run_child(["--haystack-child", str(n), "--dim", str(a.dim)])
        hs["ratio_to_raw_f32"] = (hs["rss_after"] - hs["rss_before"]) / raw_bytes
        result["haystack_inmemory"] = hs
        print(f"   haystack: {hs['ratio_to_raw_f32']:.2f}x raw float32, {hs['query_ms']:.1f} ms/query", flush=True)
        out_file.write_text(json.dumps(result, indent=2) + "\n")

    for kind in kinds:
        rec: dict[str, Any] = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}
        print(f"-- {kind} N={n}: raw build", flush=True)
        raw, t_raw = build_raw(kind, x, nlist, a.hnsw_m, a.ef_construction, a.ivf_train)
        rec["raw_build_s"] = t_raw
        print(f"   raw build {t_raw:.1f}s", flush=True)
        param, sweep = tune(raw, kind, q, truth, a.target)
        rec["ivf_train"] = a.ivf_train if kind == "ivf" else None
        rec["param"] = {
            "ivf": {"nlist": nlist, "nprobe": param},
            "hnsw": {"M": a.hnsw_m, "efConstruction": a.ef_construction, "efSearch": param},
        }.get(kind, {})
        rec["tuning"] = sweep
        gc.collect()
        print(f"   store build (param {param})", flush=True)
        path = tmp_root / f"store-{kind}-{n}"
        raw_path = tmp_root / f"raw-{kind}-{n}.faiss"
        low_memory = n >= a.low_memory_from
        if low_memory:  # keep only one index in memory while the store builds
            faiss.write_index(raw, str(raw_path))
            del raw
            gc.collect()
        store, t_store, t_passages = build_store(path, kind, x, nlist, a.hnsw_m, a.ef_construction, param, a.ivf_train)
        if low_memory:
            raw = faiss.read_index(str(raw_path))
            set_raw_param(raw, kind, param)
        rec["store_build_s"] = t_store
        rec["passage_objects_s"] = t_passages
        rec["build_ratio"] = t_store / t_raw
        print(
            f"   store build {t_store:.1f}s (+{t_passages:.1f}s making Passage objects); ratio {t_store / t_raw:.2f}",
            flush=True,
        )
        n_single = min(a.queries, a.flat_single_queries) if kind == "flat" else a.queries
        lat, raw_ids, store_ids = latency(raw, store, kind, q, n_single)
        lat["raw_recall@10"] = recall_at(raw_ids, truth)
        lat["store_recall@10"] = recall_at(store_ids, truth)
        rec.update(lat)
        print(
            f"   single: raw {lat['raw_median_ms']:.3f} ms (p95 {lat['raw_p95_ms']:.3f}), store "
            f"{lat['store_median_ms']:.3f} ms (p95 {lat['store_p95_ms']:.3f}; index layer only "
            f"{lat['store_index_median_ms']:.3f}), ratio {lat['ratio_median']:.2f}; batch qps raw "
            f"{lat['raw_batch_qps']:.0f} store {lat['store_batch_qps']:.0f}; recall raw "
            f"{lat['raw_recall@10']:.4f} store {lat['store_recall@10']:.4f}",
            flush=True,
        )
        if a.profile:
            prof_path = a.out_dir / f"profile-{kind}-{n}.prof"
            rec["profile_top"] = profile_store(store, q, min(n_single, 500), prof_path)
            print(rec["profile_top"], flush=True)
        store.close()
        if not a.no_memory:
            if not raw_path.exists():
                faiss.write_index(raw, str(raw_path))
            del raw
            gc.collect()
            m_raw = run_child(
                ["--memory-child", "raw", str(raw_path), "--dim", str(a.dim), "--threads", str(a.threads)]
            )
            m_store = run_child(
                ["--memory-child", "store", str(path), "--dim", str(a.dim), "--threads", str(a.threads)]
            )
            raw_path.unlink()
            for m in (m_raw, m_store):
                m["delta_bytes"] = m["rss_after"] - m["rss_before"]
                m["ratio_to_raw_f32"] = m["delta_bytes"] / raw_bytes
            rec["memory"] = {"raw": m_raw, "store": m_store, "raw_f32_bytes": raw_bytes}
            print(
                f"   memory: raw {m_raw['ratio_to_raw_f32']:.3f}x, store {m_store['ratio_to_raw_f32']:.3f}x "
                f"of N*dim*4 = {raw_bytes / 2**20:.0f} MiB (store open+query {m_store['seconds']:.1f}s)",
                flush=True,
            )
        else:
            del raw
            raw_path.unlink(missing_ok=True)
        rec["store_disk_bytes"] = sum(f.stat().st_size for f in path.iterdir())
        shutil.rmtree(path, ignore_errors=True)
        gc.collect()
        result["kinds"][kind] = rec
        out_file.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out_file}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
