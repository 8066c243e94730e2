"""SciFact (BEIR) test set: dense MiniLM baseline through HierStore, and BM25 via bm25s.

Usage::

    python -m benchmarks.retrieval.bench_scifact [--data ../shared/data] [--out benchmarks/out/scifact.json]

What it measures (document level, 300 test queries of ``qrels/test.tsv``):

* ``store``: the corpus indexed into a fresh flat :class:`~rag_hier.store.HierStore` with the default
  offline all-MiniLM-L6-v2, documents kept whole (``max_passage_words=0``: title + text as one
  passage, encoded as ``Passage.embedding_text`` = ``"<title>, <text>"``), searched with
  ``DenseRetriever.search(..., aggregate="doc")``.
* ``raw-comma``: the same texts encoded with the same model outside the store and searched with a bare
  ``faiss.IndexFlatIP`` (a check that the store adds nothing to quality, and the raw encode time).
* ``raw-space``: BEIR's own sentence-transformers convention, ``(title + " " + text).strip()``, raw FAISS.
* ``bm25``: bm25s (Lucene variant, k1=1.5, b=0.75) over ``title + " " + text``, English stopwords, the
  PyStemmer English stemmer when installed.

Metrics: nDCG@10, Recall@10, Recall@100, MRR@10 through :func:`rag_hier.eval.evaluate` (pytrec_eval).
The published MiniLM-L6-v2 SciFact nDCG@10 is 0.645.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common.data import add_data_argument, load_scifact, scifact_dir
from benchmarks.common.report import out_path, write_json

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
PUBLISHED_NDCG10 = 0.645


def _fmt(metrics: dict[str, float]) -> str:
    return "  ".join(f"{k}={v:.4f}" for k, v in metrics.items())


def _run_from_scores(qids: list[str], doc_ids: list[str], scores: np.ndarray, ids: np.ndarray) -> dict:
    run: dict[str, dict[str, float]] = {}
    for qid, srow, irow in zip(qids, scores, ids, strict=True):
        run[qid] = {doc_ids[int(i)]: float(s) for s, i in zip(srow, irow, strict=True) if i >= 0}
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--out", type=Path, default=out_path("scifact.json"), help="JSON results file")
    parser.add_argument("--model", default=None, help="the dense model (default: the offline all-MiniLM-L6-v2)")
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2, help="torch and FAISS threads")
    parser.add_argument("--skip-dense", action="store_true", help="BM25 only")
    parser.add_argument("--text-only", action="store_true", help="also encode text without title (one more pass)")
    parser.add_argument(
        "--timing-only",
        type=int,
        default=0,
        metavar="N",
        help="only time store indexing against raw encoding of the first N documents, interleaved (2 rounds)",
    )
    args = parser.parse_args(argv)

    data = scifact_dir(args.data)
    if not (data / "qrels" / "test.tsv").is_file() or not any(
        (data / n).is_file() for n in ("corpus.jsonl", "corpus.jsonl.gz")
    ):
        print(f"SKIP: SciFact not found at {data} (need corpus.jsonl[.gz], queries.jsonl, qrels/test.tsv)")
        return 0

    import faiss
    import torch

    from rag_hier.encoders import DEFAULT_MODEL, DenseEncoder
    from rag_hier.eval import evaluate, hits_to_run
    from rag_hier.retrieval import DenseRetriever
    from rag_hier.store import HierStore

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)

    scifact = load_scifact(args.data)
    docs, queries_all, qrels = scifact.documents, scifact.queries, scifact.qrels
    model_name = args.model or DEFAULT_MODEL
    qids = [q for q in qrels if q in queries_all]
    qtexts = [queries_all[q] for q in qids]
    doc_ids = [d.doc_id for d in docs]
    print(f"corpus {len(docs)} docs, {len(qids)} test queries, {sum(map(len, qrels.values()))} judgements")

    results: dict = {
        "benchmark": "scifact",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "torch_threads": args.threads,
            "faiss": faiss.__version__,
            "torch": torch.__version__,
        },
        "corpus_docs": len(docs),
        "queries": len(qids),
        "published_minilm_ndcg@10": PUBLISHED_NDCG10,
        "runs": {},
        "timings_s": {},
    }

    if args.timing_only:
        results["timing_subset"] = _timing_subset(docs[: args.timing_only], model_name)
        write_json(args.out, results, indent=2)
        print(f"wrote {args.out}")
        return 0

    if not args.skip_dense:
        import sentence_transformers

        results["machine"]["sentence_transformers"] = sentence_transformers.__version__
        encoder = DenseEncoder(model_name, device="cpu")
        model = encoder.model  # load once, outside every timing
        results["model"] = {
            "name": model_name,
            "max_seq_length": int(model.max_seq_length),
            "normalize": encoder.normalize_embeddings,
        }
        # warm-up (first forward passes allocate)
        encoder.encode_documents(["warm up"] * 8)

        # 1) through the store: encode + SQLite + FAISS + commit
        with tempfile.TemporaryDirectory(prefix="bench-scifact-") as tmp:
            t0 = time.perf_counter()
            store = HierStore.create(
                Path(tmp) / "store", encoder=encoder, index="flat", corpus={"format": "beir", "max_passage_words": 0}
            )
            summary = store.add_documents(docs, max_passage_words=0)
            t_index = time.perf_counter() - t0
            assert summary.passages_added == len(docs), summary
            t0 = time.perf_counter()
            hits = DenseRetriever(store).search(qtexts, top_k=args.top_k, aggregate="doc")
            t_search = time.perf_counter() - t0
            run_store = hits_to_run(qids, hits, level="doc")
            # the texts the store encoded, for the raw twin below
            from rag_hier.corpus.model import split_document

            comma_texts = [split_document(d, 0)[0].embedding_text for d in docs]
            store_vecs = np.stack(store.get_embeddings([f"{d.doc_id}#0" for d in docs]))
            store.close()
        m_store = evaluate(run_store, qrels, METRICS)
        results["runs"]["store (title, text)"] = m_store
        results["timings_s"]["store_index_total"] = t_index
        results["timings_s"]["store_search_300_queries_incl_encode"] = t_search
        print(f"store  index {t_index:.1f}s  search {t_search:.2f}s  {_fmt(m_store)}")

        # 2) the same texts, raw sentence-transformers + raw FAISS
        t0 = time.perf_counter()
        comma_vecs = encoder.encode_documents(comma_texts)
        t_enc = time.perf_counter() - t0
        results["timings_s"]["raw_encode_comma"] = t_enc
        results["store_vs_raw_vectors_max_abs_diff"] = float(np.abs(comma_vecs - store_vecs).max())
        qv = encoder.encode_queries(qtexts)
        flat = faiss.IndexFlatIP(comma_vecs.shape[1])
        flat.add(comma_vecs)
        s, i = flat.search(qv, args.top_k)
        m_comma = evaluate(_run_from_scores(qids, doc_ids, s, i), qrels, METRICS)
        results["runs"]["raw (title, text)"] = m_comma
        print(f"raw encode {t_enc:.1f}s (store index/raw encode = {t_index / t_enc:.3f}x)  {_fmt(m_comma)}")

        # 3) BEIR's sentence-transformers convention: title + " " + text
        space_texts = [(d.title + " " + d.text).strip() for d in docs]
        t0 = time.perf_counter()
        space_vecs = encoder.encode_documents(space_texts)
        t_enc2 = time.perf_counter() - t0
        results["timings_s"]["raw_encode_space"] = t_enc2
        flat = faiss.IndexFlatIP(space_vecs.shape[1])
        flat.add(space_vecs)
        s, i = flat.search(qv, args.top_k)
        m_space = evaluate(_run_from_scores(qids, doc_ids, s, i), qrels, METRICS)
        results["runs"]["raw (title + ' ' + text), BEIR"] = m_space
        print(f"raw BEIR join encode {t_enc2:.1f}s  {_fmt(m_space)}")

        # 4) text only (no title), to show how much the title carries
        if args.text_only:
            _text_only(encoder, docs, doc_ids, qids, qv, qrels, args.top_k, results)

        results["tokens"] = _token_stats(model, comma_texts)
        results["tokens_space_join"] = _token_stats(model, space_texts)

    # BM25 via bm25s
    import bm25s

    stemmer = None
    stemmer_name = "none (PyStemmer not installed)"
    try:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        stemmer_name = f"PyStemmer english (snowball), PyStemmer {_dist_version('PyStemmer')}"
    except ImportError:
        pass
    corpus_texts = [(d.title + " " + d.text).strip() for d in docs]
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(corpus_texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25()  # method="lucene", k1=1.5, b=0.75
    retriever.index(tokens, show_progress=False)
    t_bm25_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    q_tokens = bm25s.tokenize(qtexts, stopwords="en", stemmer=stemmer, show_progress=False)
    res, sc = retriever.retrieve(q_tokens, k=args.top_k, show_progress=False, n_threads=1)
    t_bm25_search = time.perf_counter() - t0
    m_bm25 = evaluate(_run_from_scores(qids, doc_ids, sc, res), qrels, METRICS)
    results["runs"]["bm25s"] = m_bm25
    results["bm25"] = {
        "version": bm25s.__version__,
        "method": retriever.method,
        "k1": retriever.k1,
        "b": retriever.b,
        "stopwords": "en",
        "stemmer": stemmer_name,
    }
    results["timings_s"]["bm25_index"] = t_bm25_index
    results["timings_s"]["bm25_search_300"] = t_bm25_search
    print(f"bm25s ({stemmer_name}) index {t_bm25_index:.2f}s  {_fmt(m_bm25)}")

    write_json(args.out, results, indent=2)
    print(f"wrote {args.out}")
    return 0


def _timing_subset(docs, model: str, rounds: int = 2) -> dict:
    """Store indexing (encode + SQLite + FAISS + commit) vs raw encoding of the same texts, interleaved."""
    from rag_hier.corpus.model import split_document
    from rag_hier.encoders import DenseEncoder
    from rag_hier.store import HierStore

    encoder = DenseEncoder(model, device="cpu")
    encoder.encode_documents(["warm up"] * 8)
    texts = [split_document(d, 0)[0].embedding_text for d in docs]
    raw_t, store_t = [], []
    for r in range(rounds):
        for which in ("raw", "store") if r % 2 == 0 else ("store", "raw"):
            t0 = time.perf_counter()
            if which == "raw":
                encoder.encode_documents(texts)
                raw_t.append(time.perf_counter() - t0)
            else:
                with tempfile.TemporaryDirectory(prefix="bench-scifact-") as tmp:
                    store = HierStore.create(Path(tmp) / "s", encoder=encoder, index="flat")
                    store.add_documents(docs, max_passage_words=0)
                    store.close()
                store_t.append(time.perf_counter() - t0)
            print(f"  round {r} {which}: {(raw_t if which == 'raw' else store_t)[-1]:.1f}s", flush=True)
    out = {
        "docs": len(docs),
        "raw_encode_s": raw_t,
        "store_index_s": store_t,
        "ratio_store_over_raw": [s / r for s, r in zip(store_t, raw_t, strict=True)],
    }
    print(f"timing subset: {out}")
    return out


def _text_only(encoder, docs, doc_ids, qids, qv, qrels, top_k, results) -> None:
    import faiss

    from rag_hier.eval import evaluate

    text_vecs = encoder.encode_documents([d.text for d in docs])
    flat = faiss.IndexFlatIP(text_vecs.shape[1])
    flat.add(text_vecs)
    s, i = flat.search(qv, top_k)
    m_text = evaluate(_run_from_scores(qids, doc_ids, s, i), qrels, METRICS)
    results["runs"]["raw (text only)"] = m_text
    print(f"raw text only  {_fmt(m_text)}")


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _token_stats(model, texts: list[str]) -> dict:
    """How many documents the model's max_seq_length truncates."""
    tok = model.tokenizer
    lengths = np.array([len(ids) for ids in tok(texts, add_special_tokens=True)["input_ids"]])
    limit = int(model.max_seq_length)
    return {
        "median_tokens": float(np.median(lengths)),
        "truncated_fraction": float((lengths > limit).mean()),
        "max_seq_length": limit,
    }


if __name__ == "__main__":
    sys.exit(main())
