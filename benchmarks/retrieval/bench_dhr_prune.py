"""DHR's document stage where it prunes: SciFact abstracts cut into passages, hierarchical vs flat passage search.

Corpus (built from the BEIR SciFact files in the data folder, nothing else): every one of the 5,183 documents
(title + abstract, as ``read_beir_corpus`` reads them) is cut by the store's own splitter
(:func:`rag_hier.corpus.split_document`, ``--max-passage-words``, default 50): the abstract is packed sentence by
sentence into the fewest passages of at most 50 words, as even as sentence boundaries allow; every passage is
encoded with its title (the store's ``embedding_text``). So a document has several passages (the script prints
how many), and the document stage at ``k1`` keeps ``k1 / 5,183`` of the documents (k1 = 500, the default:
9.6 %).

Queries: SciFact's 300 test queries with their document judgements (nothing here is trained or tuned on them;
every k1 is reported). Both searches use the same model (the offline all-MiniLM-L6-v2) and the same passage
vectors in one store: flat = :class:`~rag_hier.DenseRetriever` over every passage; hierarchical =
:class:`~rag_hier.retrieval.hierarchical.HierarchicalRetriever` (serial: the top-``k1`` documents of the store's
``DocumentIndex("mean")``, then their passages, λ = 0, the defaults). Each passage ranking (top 1,000
passages) becomes a document ranking by each document's best passage; nDCG@10, Recall@10 and Recall@100 per
query by pytrec_eval; hierarchical minus flat with a paired bootstrap 95 % interval over queries (10,000
resamples, seed 0). ``passages scored`` is the measured share of passages the hierarchical search compared with
the query (the passages of its k1 documents) over all passages.

Usage::

    python -m benchmarks.retrieval.bench_dhr_prune --data DATA [--max-passage-words 50] [--k1 20 50 100 200 500]

Output: ``<out>/dhr_prune-<words>w.json`` (``--out``, default ``benchmarks/out``).
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common.data import add_data_argument, load_scifact
from benchmarks.common.report import out_path, paired_bootstrap

log = logging.getLogger("bench_dhr_prune")
METRICS = {"ndcg_cut.10", "recall.10,100"}
KEYS = (("ndcg@10", "ndcg_cut_10"), ("recall@10", "recall_10"), ("recall@100", "recall_100"))


def doc_run(hits_per_query: list[list], qids: list[str]) -> dict[str, dict[str, float]]:
    """Passage hits -> documents ranked by their best passage (the first hit of each document)."""
    run: dict[str, dict[str, float]] = {}
    for q, hits in zip(qids, hits_per_query, strict=True):
        docs: dict[str, float] = {}
        for h in hits:
            if h.doc_id not in docs:
                docs[h.doc_id] = 1000.0 - len(docs)  # rank order as a score
        run[q] = docs
    return run


def per_query(run: dict, qrels: dict, qids: list[str]) -> dict[str, np.ndarray]:
    import pytrec_eval

    got = pytrec_eval.RelevanceEvaluator(qrels, METRICS).evaluate(run)
    return {name: np.array([got[q][key] for q in qids]) for name, key in KEYS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(p)
    p.add_argument("--out", type=Path, default=out_path(""))
    p.add_argument("--max-passage-words", type=int, default=50)
    p.add_argument("--k1", type=int, nargs="+", default=[20, 50, 100, 200, 500, 1000])
    p.add_argument("--model", default=None, help="encoder (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--top-k", type=int, default=1000, help="passages retrieved per query before grouping")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import faiss
    import torch

    from rag_hier import DenseRetriever, HierStore
    from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
    from rag_hier.retrieval.hierarchical import HierarchicalRetriever
    from rag_hier.store.extensions.doc_index import DocumentIndex

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    data = load_scifact(args.data)
    qids = [q for q in data.qrels if q in data.queries]
    words = args.max_passage_words
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        enc = DenseEncoder(args.model or DEFAULT_MODEL, device="cpu", batch_size=64)
        store = HierStore.create(Path(tmp) / "store", encoder=enc, corpus={"max_passage_words": words})
        store.add_documents(data.documents, max_passage_words=words)
        doc_index = DocumentIndex("mean")
        store.add_extension(doc_index, replace=True)
        build_s = time.perf_counter() - t0
        rowids = store.rowids_of()
        owner = store.doc_ids_for_rowids(rowids.tolist())
        per_doc: dict[str, int] = {}
        for r in rowids.tolist():
            per_doc[owner[r]] = per_doc.get(owner[r], 0) + 1
        sizes = np.array(list(per_doc.values()))
        n_pass, n_docs = int(sizes.sum()), len(sizes)
        log.info("%d documents, %d passages (%.2f per document) in %.0fs", n_docs, n_pass, sizes.mean(), build_s)
        qv = enc.encode_queries([data.queries[q] for q in qids])
        flat_hits = DenseRetriever(store).search_vectors(qv, top_k=args.top_k)
        flat = per_query(doc_run(flat_hits, qids), data.qrels, qids)
        rows = []
        for k1 in args.k1:
            hier_hits = HierarchicalRetriever(store, k1=k1, lambda_=0.0).search_vectors(qv, top_k=args.top_k)
            hier = per_query(doc_run(hier_hits, qids), data.qrels, qids)
            # passages scored: those of the k1 documents the document stage keeps
            _, fids = doc_index.search(qv, k1)
            scored = [doc_index.passages_of(f[f >= 0].tolist())[0].size for f in fids]
            row = {
                "k1": k1,
                "documents_kept": round(min(k1, n_docs) / n_docs, 4),
                "passages_scored": round(float(np.mean(scored)) / n_pass, 4),
            }
            row.update({m: paired_bootstrap(flat[m], hier[m], ("flat", "hierarchical")) for m, _ in KEYS})
            rows.append(row)
            log.info("%s", row)
        store.close()
    result = {
        "corpus": {
            "source": "BEIR SciFact corpus.jsonl.gz (title + abstract)",
            "max_passage_words": words,
            "documents": n_docs,
            "passages": n_pass,
            "passages_per_document": {
                "mean": round(float(sizes.mean()), 2),
                "median": float(np.median(sizes)),
                "min": int(sizes.min()),
                "max": int(sizes.max()),
                "share_with_one": round(float((sizes == 1).mean()), 4),
            },
        },
        "queries": len(qids),
        "build_seconds": round(build_s, 1),
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"dhr_prune-{words}w.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    log.info("wrote %s", path)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
