"""SVDR on SciFact (BEIR test: 5,183 docs, 300 queries): binary token index vs dense index, and search quality.

Usage::

    S="python -m benchmarks.retrieval.bench_svdr"
    $S --phase build       # index build time and bytes: token index vs MiniLM/FAISS
    $S --phase untrained   # alpha, beta, beta+rerank(20/100), full, lexical, BM25
    $S --phase train       # train on SciFact train (qrels/train.tsv) within a budget
    $S --phase trained     # the same evaluation with the trained encoder
    $S --phase latency     # beta+rerank with on-the-fly encoding (no cache)

SciFact comes from the data folder (``--data``, see ``benchmarks/README.md``). Results are merged into ``--out``
(default ``benchmarks/out/svdr.json``); encodings are cached under ``--cache`` (default ``benchmarks/out/svdr-cache/``;
delete it to recompute). Documents are kept whole and indexed as
``Passage.embedding_text`` (``"<title>, <text>"``), the store's convention; every run is document level.

Evaluation goes through the library's own path: a store with no dense vectors, a ``token-index``
extension, the passages' E(d) written into its ``svdr-vectors`` extension, and
:class:`~rag_hier.retrieval.svdr.SvdrRetriever` in each mode. β+rerank there reads E(d) from the store;
since pooling ignores padding, vectors computed on the fly are the same up to float rounding (the
``latency`` phase re-ranks some queries on the fly and reports how many rankings are identical).
"""

from __future__ import annotations

import argparse
import atexit
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common.data import add_data_argument, load_scifact, scifact_dir
from benchmarks.common.report import machine as common_machine
from benchmarks.common.report import out_path, write_json

CACHE = out_path("svdr-cache")
METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _scratch(prefix: str) -> Path:
    """A temporary folder, removed when the script exits."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, tmp, True)
    return tmp


def load_results(path: Path) -> dict:
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return {"benchmark": "svdr-scifact", "phases": {}}


def save_results(path: Path, results: dict) -> None:
    write_json(path, results, indent=2)


def machine(threads: int) -> dict:
    return common_machine(torch_threads=threads)


def data_files(data: Path | None):
    from rag_hier.corpus.model import split_document

    scifact = load_scifact(data)
    docs, queries, qrels = scifact.documents, scifact.queries, scifact.qrels
    qids = [q for q in qrels if q in queries]
    texts = [split_document(d, 0)[0].embedding_text for d in docs]
    return docs, texts, queries, qrels, qids


# --------------------------------------------------------------------------------------------------------
# build: token index vs dense index
# --------------------------------------------------------------------------------------------------------
def phase_build(args, results: dict) -> None:
    import faiss
    import scipy.sparse as sp

    from rag_hier.encoders import DenseEncoder
    from rag_hier.encoders.binarizer import TokenBinarizer
    from rag_hier.index.token import TokenIndex

    docs, texts, _, _, _ = data_files(args.data)
    out: dict = {"machine": machine(args.threads), "docs": len(docs)}
    tmp = _scratch("bench-svdr-")

    # token index: tokenizer load, tokenization + CSR, write
    t0 = time.perf_counter()
    binarizer = TokenBinarizer(args.model, max_length=256)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = TokenIndex(binarizer)
    index.add_texts(np.arange(1, len(texts) + 1), texts)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.save(tmp / "tokens.npz")
    t_write = time.perf_counter() - t0
    size = (tmp / "tokens.npz").stat().st_size
    ids, csr = index.rows.matrix()
    with (tmp / "tokens-plain-csr.npz").open("wb") as f:  # the reference layout: int32 indices, int64 indptr
        np.savez(f, indices=csr.indices.astype(np.int32), indptr=csr.indptr.astype(np.int64), ids=ids)
    with (tmp / "tokens-plain-csr-compressed.npz").open("wb") as f:
        np.savez_compressed(f, indices=csr.indices.astype(np.int32), indptr=csr.indptr.astype(np.int64), ids=ids)
    out["token_index"] = {
        "tokenizer_load_s": t_load,
        "build_s": t_build,
        "write_s": t_write,
        "total_s": t_build + t_write,
        "bytes": size,
        "bytes_plain_csr_npz": (tmp / "tokens-plain-csr.npz").stat().st_size,
        "bytes_plain_csr_npz_compressed": (tmp / "tokens-plain-csr-compressed.npz").stat().st_size,
        "nnz": int(csr.nnz),
        "tokens_per_doc": float(csr.nnz / len(texts)),
        "max_length": 256,
    }
    log(f"token index: build {t_build:.2f}s write {t_write:.2f}s, {size} bytes, {csr.nnz / len(texts):.1f} tokens/doc")

    # does a second process pay? The fast tokenizer already runs in Rust threads; compare with two worker
    # processes (tokenizer loaded and warmed up in each before timing, Rust threads off in the workers).
    import multiprocessing as mp

    half = len(texts) // 2
    with mp.get_context("spawn").Pool(2, initializer=_init_worker, initargs=(args.model,)) as pool:
        pool.map(_transform_chunk, [texts[:8], texts[8:16]])
        t0 = time.perf_counter()
        parts = pool.map(_transform_chunk, [texts[:half], texts[half:]])
        t_mp = time.perf_counter() - t0
    assert sp.vstack(parts).nnz == csr.nnz
    out["token_index"]["tokenize_2_processes_s"] = t_mp
    t0 = time.perf_counter()
    binarizer.transform(texts)
    out["token_index"]["tokenize_1_process_s"] = time.perf_counter() - t0
    log(f"tokenize + CSR: 2 processes {t_mp:.2f}s, 1 process {out['token_index']['tokenize_1_process_s']:.2f}s")

    # dense index: model load, encode, FAISS add, write
    cache_vecs = CACHE / "dense-minilm.npy"
    t0 = time.perf_counter()
    encoder = DenseEncoder(args.model, device="cpu", batch_size=32)
    encoder.encode_documents(["warm up"])
    t_mload = time.perf_counter() - t0
    t0 = time.perf_counter()
    vecs = encoder.encode_documents(texts)
    t_enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    flat = faiss.IndexIDMap2(faiss.IndexFlatIP(vecs.shape[1]))
    flat.add_with_ids(vecs, np.arange(1, len(texts) + 1, dtype=np.int64))
    faiss.write_index(flat, str(tmp / "dense.faiss"))
    t_fw = time.perf_counter() - t0
    dsize = (tmp / "dense.faiss").stat().st_size
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(cache_vecs, vecs, allow_pickle=False)
    out["dense_index"] = {
        "model": args.model,
        "model_load_s": t_mload,
        "encode_s": t_enc,
        "faiss_add_write_s": t_fw,
        "total_s": t_enc + t_fw,
        "bytes": dsize,
        "dimension": int(vecs.shape[1]),
    }
    log(f"dense index: encode {t_enc:.1f}s add+write {t_fw:.2f}s, {dsize} bytes")
    ti, di = out["token_index"], out["dense_index"]
    out["ratios"] = {
        "build_speedup": di["total_s"] / ti["total_s"],
        "bytes_fraction": ti["bytes"] / di["bytes"],
        "bytes_fraction_plain_csr": ti["bytes_plain_csr_npz"] / di["bytes"],
    }
    log(
        f"token index is {out['ratios']['build_speedup']:.0f}x faster and "
        f"{100 * out['ratios']['bytes_fraction']:.1f}% of the bytes"
    )

    # store-level: a no-dense store with a token index (what `rag-hier index --token-index --no-dense` does)
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.store import HierStore

    t0 = time.perf_counter()
    store = HierStore.create(tmp / "store", model=None, corpus={"format": "beir", "max_passage_words": 0})
    store.add_extension(TokenIndexExtension(args.model))
    store.add_documents(docs, max_passage_words=0, encode=False)
    t_store = time.perf_counter() - t0
    files = {p.name: p.stat().st_size for p in (tmp / "store").iterdir()}
    store.close()
    out["token_store"] = {"total_s": t_store, "files": files}
    log(f"no-dense store with token index: {t_store:.1f}s, files {files}")
    results["phases"]["build"] = out


_WORKER: dict = {}


def _init_worker(model: str) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from rag_hier.encoders.binarizer import TokenBinarizer

    _WORKER["binarizer"] = TokenBinarizer(model, max_length=256)


def _transform_chunk(texts: list[str]):
    return _WORKER["binarizer"].transform(texts)


# --------------------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------------------
def _cached_rows(path: Path, compute):
    from rag_hier.index.sparse import SparseRowIndex

    if path.is_file():
        index = SparseRowIndex.load(path)
        return index.rows(np.arange(index.n_rows)), 0.0
    t0 = time.perf_counter()
    mat = compute()
    elapsed = time.perf_counter() - t0
    index = SparseRowIndex(mat.shape[1], binary=False)
    index.add(np.arange(mat.shape[0]), mat)
    path.parent.mkdir(parents=True, exist_ok=True)
    index.save(path)
    (path.with_suffix(".seconds")).write_text(f"{elapsed}\n")
    return mat, elapsed


def _bm25(docs, qids, queries, qrels, top_k=100) -> dict:
    import bm25s

    from rag_hier.eval import evaluate

    try:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    except ImportError:
        stemmer = None
    corpus = [(d.title + " " + d.text).strip() for d in docs]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    res, sc = retriever.retrieve(
        bm25s.tokenize([queries[q] for q in qids], stopwords="en", stemmer=stemmer, show_progress=False),
        k=min(top_k, len(corpus)),
        show_progress=False,
        n_threads=1,
    )
    run = {
        q: {docs[int(i)].doc_id: float(s) for s, i in zip(srow, irow, strict=True)}
        for q, srow, irow in zip(qids, sc, res, strict=True)
    }
    return evaluate(run, qrels, METRICS) | {"stemmer": "PyStemmer english" if stemmer else "none", "stopwords": "en"}


def phase_eval(args, results: dict, tag: str, model: str) -> None:
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.eval import evaluate, hits_to_run
    from rag_hier.retrieval.svdr import SvdrRetriever, save_vectors
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.store import HierStore

    docs, texts, queries, qrels, qids = data_files(args.data)
    qtexts = [queries[q] for q in qids]
    out: dict = {"machine": machine(args.threads), "model": model}
    encoder = VocabEncoder(model, device="cpu", batch_size=args.batch_size, selection_precision="float32")
    out["encoder"] = encoder.config.to_dict()
    log(f"[{tag}] encoder {encoder!r} {encoder.config}")
    t0 = time.perf_counter()
    eq = encoder.encode_queries(qtexts)
    out["query_encode_s"] = time.perf_counter() - t0
    log(f"[{tag}] E(q) of {len(qtexts)} queries in {out['query_encode_s']:.1f}s, {eq.nnz / eq.shape[0]:.0f} dims/query")
    ed, t_ed = _cached_rows(CACHE / f"{tag}-ed.npz", lambda: encoder.encode_documents(texts, show_progress_bar=True))
    if t_ed:
        out["corpus_encode_s"] = t_ed
    elif (CACHE / f"{tag}-ed.seconds").is_file():
        out["corpus_encode_s"] = float((CACHE / f"{tag}-ed.seconds").read_text())
    out["ed_dims_per_doc"] = float(ed.nnz / ed.shape[0])
    log(
        f"[{tag}] E(D): {ed.shape[0]} docs, {out['ed_dims_per_doc']:.0f} dims/doc "
        f"({out.get('corpus_encode_s', 0):.0f}s)"
    )

    tmp = _scratch(f"bench-svdr-{tag}-")
    store = HierStore.create(tmp / "store", model=None, corpus={"format": "beir", "max_passage_words": 0})
    store.add_extension(TokenIndexExtension(model))
    store.add_documents(docs, max_passage_words=0, encode=False)
    rec = store.records(store.passage_rowids().tolist())
    rowid_of = {r["doc_id"]: rid for rid, r in rec.items()}
    rowids = np.asarray([rowid_of[d.doc_id] for d in docs], dtype=np.int64)
    save_vectors(store, encoder, rowids, ed)
    out["svdr_vectors_bytes"] = (store.path / "svdr_vectors.npz").stat().st_size
    tq = encoder.token_vectors(qtexts, "query")

    runs: dict = {}
    timings: dict = {}
    for name, mode, m, qv in (
        ("alpha", "alpha", 100, tq),
        ("beta", "beta", 100, eq),
        ("beta+rerank(20)", "beta-rerank", 20, eq),
        ("beta+rerank(100)", "beta-rerank", 100, eq),
        ("full", "full", 100, eq),
        ("lexical (idf token overlap)", "lexical", 100, None),
    ):
        retriever = SvdrRetriever(store, mode, encoder=encoder, rerank_m=m, encode_missing=False)
        if qv is None:
            qv = retriever.query_vectors(qtexts)
        t0 = time.perf_counter()
        hits = retriever.search_vectors(qv, top_k=100)
        timings[name] = time.perf_counter() - t0
        runs[name] = evaluate(hits_to_run(qids, hits, level="doc"), qrels, METRICS)
        log(
            f"[{tag}] {name:<30} search {timings[name]:.2f}s  "
            + "  ".join(f"{k}={v:.4f}" for k, v in runs[name].items())
        )

    # sparse product strategies (same results; cost differs)
    tok = TokenIndexExtension.of(store).index
    from rag_hier.index.sparse import SparseRowIndex

    vec_index = SparseRowIndex(ed.shape[1])
    vec_index.add(rowids, ed)
    methods: dict = {}
    for label, index, qv in (
        ("beta: E(q) x T(D)", tok.rows, eq),
        ("alpha: T(q) x E(D)", vec_index, tq),
        ("full: E(q) x E(D)", vec_index, eq),
    ):
        row: dict = {}
        ref = None
        for method in ("matmul", "inverted", "auto"):
            t0 = time.perf_counter()
            s, i = index.search(qv, 100, method=method)
            row[method] = time.perf_counter() - t0
            if ref is None:
                ref = i
            row[f"{method}_same_ids"] = bool(np.array_equal(ref, i))
        methods[label] = row
        log(
            f"[{tag}] {label}: "
            + "  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
        )
    out["search_methods_s_300_queries"] = methods

    if "bm25s" not in results:
        results["bm25s"] = _bm25(docs, qids, queries, qrels)
        log(f"bm25s {results['bm25s']}")
    dense_cache = CACHE / "dense-minilm.npy"
    if dense_cache.is_file() and "dense MiniLM (reference)" not in results:
        import faiss

        from rag_hier.encoders import DenseEncoder

        vecs = np.load(dense_cache, allow_pickle=False)
        qv = DenseEncoder(args.model, device="cpu").encode_queries(qtexts)
        flat = faiss.IndexFlatIP(vecs.shape[1])
        flat.add(vecs)
        s, i = flat.search(qv, 100)
        run = {
            q: {docs[int(j)].doc_id: float(x) for x, j in zip(srow, irow, strict=True)}
            for q, srow, irow in zip(qids, s, i, strict=True)
        }
        results["dense MiniLM (reference)"] = evaluate(run, qrels, METRICS)
        log(f"dense MiniLM {results['dense MiniLM (reference)']}")
    out["runs"] = runs
    out["search_s_300_queries"] = timings
    full = runs["full"]["ndcg@10"]
    out["beta_rerank100_vs_full_ndcg10"] = runs["beta+rerank(100)"]["ndcg@10"] / full if full else None
    out["beta_rerank20_vs_full_ndcg10"] = runs["beta+rerank(20)"]["ndcg@10"] / full if full else None
    store.close()
    results["phases"][tag] = out


def phase_latency(args, results: dict, tag: str, model: str) -> None:
    """β+rerank with nothing cached: E(d) of the top m encoded per query, on the fly."""
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.index.sparse import SparseRowIndex
    from rag_hier.retrieval.svdr import SvdrRetriever
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.store import HierStore

    docs, _, queries, _, qids = data_files(args.data)
    encoder = VocabEncoder(model, device="cpu", batch_size=args.batch_size, selection_precision="float32")
    ed_path = CACHE / f"{tag}-ed.npz"
    tmp = _scratch("bench-svdr-latency-")
    store = HierStore.create(tmp / "store", model=None, corpus={"format": "beir", "max_passage_words": 0})
    store.add_extension(TokenIndexExtension(model))
    store.add_documents(docs, max_passage_words=0, encode=False)
    rec = store.records(store.passage_rowids().tolist())
    doc_pos = {d.doc_id: i for i, d in enumerate(docs)}
    cached = SparseRowIndex.load(ed_path) if ed_path.is_file() else None
    out: dict = {}
    for m, n in ((20, args.latency_queries), (100, max(1, args.latency_queries // 2))):
        sample = qids[:n]
        retriever = SvdrRetriever(store, "beta-rerank", encoder=encoder, rerank_m=m, cache=False)
        qv = encoder.encode_queries([queries[q] for q in sample])
        t0 = time.perf_counter()
        fly = retriever.search_vectors(qv, top_k=m)
        elapsed = time.perf_counter() - t0
        same = None
        if cached is not None:
            # the same queries re-ranked with the cached E(d) (computed in other batches)
            ref = SvdrRetriever(store, "beta-rerank", encoder=encoder, rerank_m=m, cache=False)
            mem = ref._memory_index(encoder.fingerprint)
            need = [rid for rid, r in rec.items()]
            mem.add(np.asarray(need), cached.rows([doc_pos[rec[r]["doc_id"]] for r in need]))
            ref_hits = ref.search_vectors(qv, top_k=m)
            same = sum(
                [h.passage_id for h in a] == [h.passage_id for h in b] for a, b in zip(fly, ref_hits, strict=True)
            )
        out[f"m={m}"] = {"queries": n, "seconds_per_query": elapsed / n, "identical_rankings_vs_cached": same}
        log(
            f"[{tag}] beta+rerank(m={m}) on the fly: {elapsed / n:.1f}s/query over {n} queries; "
            f"identical to cached: {same}"
        )
    store.close()
    results["phases"][f"latency-{tag}"] = out


def phase_train(args, results: dict) -> None:
    import logging

    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    scifact = load_scifact(args.data)
    docs, queries, qrels = scifact.documents, scifact.queries, scifact.train_qrels
    encoder = VocabEncoder(args.model, device="cpu", selection_precision=args.train_selection_precision)
    config = SvdrTrainingConfig(
        epochs=args.train_epochs,
        batch_size=args.train_batch_size,
        learning_rate=args.train_lr,
        hard_negatives=1,
        negative_depth=args.train_negative_depth,
        negative_schedule=args.train_negative_schedule,
        temperature=args.train_temperature,
        max_seconds=args.train_minutes * 60,
        max_steps=args.train_steps,
        seed=0,
        log_every=5,
    )
    trainer = SvdrTrainer.from_documents(encoder, docs, queries, qrels, config=config)
    log(
        f"train: {len(trainer.examples)} pairs, {len(trainer.relevant)} queries, "
        f"{len(trainer.texts)} passages; {config}"
    )
    result = trainer.train()
    out_dir = trainer.save(args.model_dir)
    log(
        f"trained: {result.steps} steps, {result.epochs_completed} epochs, {result.seconds:.0f}s "
        f"({result.stopped_by}); saved {out_dir}"
    )
    results["phases"]["train"] = {
        "machine": machine(args.threads),
        "config": config.__dict__,
        "selection_precision": args.train_selection_precision,
        "result": result.to_dict(),
        "model_dir": str(out_dir),
    }


def main(argv: list[str] | None = None) -> int:
    global CACHE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--out", type=Path, default=out_path("svdr.json"))
    parser.add_argument("--cache", type=Path, default=CACHE, help="encodings cache directory")
    parser.add_argument("--model", default=None, help="the base model (default: the offline all-MiniLM-L6-v2)")
    parser.add_argument(
        "--model-dir", type=Path, default=out_path("svdr-scifact-model"), help="trained model directory"
    )
    parser.add_argument("--phase", choices=("build", "untrained", "train", "trained", "latency", "all"), default="all")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--latency-queries", type=int, default=6)
    parser.add_argument("--train-minutes", type=float, default=18.0)
    parser.add_argument("--train-epochs", type=int, default=1)
    parser.add_argument("--train-steps", type=int, default=None, help="stop after this many steps (and the minutes)")
    parser.add_argument("--train-batch-size", type=int, default=16)
    parser.add_argument("--train-lr", type=float, default=2e-5)
    parser.add_argument("--train-temperature", type=float, default=1.0)
    parser.add_argument(
        "--train-negative-schedule",
        choices=("paper", "beta"),
        default="paper",
        help="paper: BM25 negatives for the first half, then beta search; beta: beta search throughout (0.1.0)",
    )
    parser.add_argument(
        "--train-negative-depth", type=int, default=20, help="hard negatives from the top N (paper 20; 0.1.0: 30)"
    )
    parser.add_argument("--train-selection-precision", choices=("float32", "bfloat16"), default="bfloat16")
    parser.add_argument(
        "--trained-tag", default="trained", help="label (and E(d) cache name) of the trained model's evaluation"
    )
    args = parser.parse_args(argv)
    if not (scifact_dir(args.data) / "qrels" / "test.tsv").is_file():
        print(f"SKIP: SciFact not found at {scifact_dir(args.data)}")
        return 0
    import torch

    CACHE = args.cache
    torch.set_num_threads(args.threads)
    results = load_results(args.out)
    results["date"] = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    from rag_hier.encoders import DEFAULT_MODEL

    args.model = args.model or DEFAULT_MODEL
    trained = str(args.model_dir)
    phases = ["build", "untrained", "train", "trained"] if args.phase == "all" else [args.phase]
    for phase in phases:
        log(f"phase {phase}")
        if phase == "build":
            phase_build(args, results)
        elif phase == "untrained":
            phase_eval(args, results, "untrained", args.model)
        elif phase == "train":
            phase_train(args, results)
        elif phase == "trained":
            phase_eval(args, results, args.trained_tag, trained)
        elif phase == "latency":
            phase_latency(args, results, "untrained", args.model)
        save_results(args.out, results)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
