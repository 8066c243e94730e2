"""DHR on XQuAD-en: document representations, flat vs hierarchical retrieval, before and after DHR training.

Split (held out by document): the 48 documents are shuffled with ``random.Random(0)`` and halved; DHR is
trained on the questions of the first half over a corpus of those 24 documents only, and every number
below the "test" line is measured on the questions of the other 24 documents, retrieving from all 48
documents (240 paragraphs, one passage each: ``--max-passage-words 0``). No test document, paragraph or
question is seen in training.

Measured per encoder:
  * document level (doc top-1/3/5/10/20 by gold document) for each document representation: title only,
    title + first paragraph, DHR summary (title + abstract ≤100 words + TOC; XQuAD has no sections), mean
    and max pooling of passage vectors, MaxP (a document scored by its best passage: a full passage search);
  * passage level, top-1/5/20 by gold paragraph and by answer string (in the passage text only): flat dense
    search vs the engine's HierarchicalRetriever (serial, k1 x λ grid; parallel) with the same encoder.

Usage:
    python benchmarks/bench_dhr_xquad.py --train it1,it2,separate   # train what is missing, then evaluate
    python benchmarks/bench_dhr_xquad.py                            # evaluate what is there
Results: benchmarks/out/dhr_xquad/results.json and results.md (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rag_hier import DenseRetriever, HierStore
from rag_hier.corpus.model import Document
from rag_hier.corpus.readers import QAQuestion, read_qa_documents, read_qa_questions
from rag_hier.corpus.summary import summarize_document
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.eval.qa import top_k_accuracy
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.retrieval.hierarchical import HierarchicalRetriever
from rag_hier.training.dhr import DHRTrainer, DHRTrainingConfig, examples_from_questions

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "xquad_en"
OUT = ROOT / "benchmarks" / "out" / "dhr_xquad"
KS = (1, 5, 20)
K1S = (1, 3, 5, 10, 20)
LAMBDAS = (0.0, 0.5, 1.0)

log = logging.getLogger("bench_dhr_xquad")


def split(documents: list[Document], seed: int = 0) -> tuple[set[str], set[str]]:
    ids = sorted(d.doc_id for d in documents)
    random.Random(seed).shuffle(ids)
    half = len(ids) // 2
    return set(ids[:half]), set(ids[half:])


def write_split(out: Path, documents: list[Document], questions: list[QAQuestion], train_ids: set[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "documents.train.jsonl").open("w", encoding="utf-8") as f:
        for d in documents:
            if d.doc_id in train_ids:
                f.write(json.dumps({"doc_id": d.doc_id, "title": d.title, "paragraphs": list(d.paragraphs)}) + "\n")
    for name, keep in (("train", True), ("test", False)):
        with (out / f"questions.{name}.jsonl").open("w", encoding="utf-8") as f:
            for q in questions:
                if (q.doc_id in train_ids) == keep:
                    row = {"qid": q.qid, "question": q.question, "answers": list(q.answers), "doc_id": q.doc_id}
                    f.write(json.dumps({**row, "paragraph_index": q.paragraph_index}) + "\n")


STAGES = ("it1", "it2", "separate")


def train_models(out: Path, documents, questions, train_ids: set[str], epochs: int, stages) -> None:
    """Train in stages that each save a model (so an interrupted run keeps what it finished).

    it1: one shared encoder, document + passage level, BM25 / In-Sec (In-Doc fallback) / in-batch negatives;
    it2: the same from the base model again, negatives mined with it1 (DHR's second iteration);
    separate: a document and a passage encoder (DHR-D / DHR-P), first iteration.
    All use the cached (GradCache) loss in mini-batches of 16 texts to bound memory on a shared machine.
    """
    docs = [d for d in documents if d.doc_id in train_ids]
    examples = examples_from_questions([q for q in questions if q.doc_id in train_ids], docs, max_passage_words=0)
    m = out / "models"
    common = {"max_passage_words": 0, "epochs": epochs, "device": "cpu", "mini_batch_size": 16}
    plans = {
        "it1": (m / "dhr-shared-it1", DHRTrainingConfig(**common)),
        "it2": (m / "dhr-shared-it2", DHRTrainingConfig(negatives_model=str(m / "dhr-shared-it1"), **common)),
        "separate": (m / "dhr-separate", DHRTrainingConfig(shared_encoder=False, **common)),
    }
    for stage in stages:
        target, cfg = plans[stage]
        if (target / "dhr_training.json").exists():
            log.info("%s: already trained (%s)", stage, target)
            continue
        t0 = time.perf_counter()
        result = DHRTrainer(cfg).train(docs, examples, target)
        log.info("%s trained in %.0fs: rows %s, losses %s", stage, time.perf_counter() - t0, result.rows, result.losses)


def encoders(out: Path) -> list[tuple[str, str, str | None]]:
    """(label, passage model, distinct document model or None)."""
    found = [("untrained all-MiniLM-L6-v2", DEFAULT_MODEL, None)]
    m = out / "models"
    if (m / "dhr-shared-it1" / "modules.json").exists():
        found.append(("DHR shared encoder, iteration 1", str(m / "dhr-shared-it1"), None))
    if (m / "dhr-shared-it2" / "modules.json").exists():
        found.append(
            ("DHR shared encoder, iteration 2 (negatives mined by iteration 1)", str(m / "dhr-shared-it2"), None)
        )
    if (m / "dhr-separate" / "passage" / "modules.json").exists():
        found.append(
            (
                "DHR separate D/P encoders, iteration 1",
                str(m / "dhr-separate" / "passage"),
                str(m / "dhr-separate" / "document"),
            )
        )
    return found


def doc_accuracy(scores: np.ndarray, gold: np.ndarray, ks=(1, 3, 5, 10, 20)) -> dict[str, float]:
    rank = (scores > scores[np.arange(len(gold)), gold][:, None]).sum(1)
    return {f"top{k}": float((rank < k).mean()) for k in ks}


def evaluate_encoder(label: str, passage_model: str, doc_model: str | None, documents, questions, test_ids) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        enc = DenseEncoder(passage_model, device="cpu", batch_size=32)
        store = HierStore.create(Path(tmp) / "store", encoder=enc, corpus={"max_passage_words": 0})
        store.add_documents(documents, max_passage_words=0)
        doc_enc = DenseEncoder(doc_model, device="cpu", batch_size=32) if doc_model else enc
        all_q = [q.question for q in questions]
        pq = enc.encode_queries(all_q)
        dq = doc_enc.encode_queries(all_q) if doc_model else pq
        test = np.array([q.doc_id in test_ids for q in questions])
        # ---- document representations (numpy over the same vectors the store holds) ----
        doc_ids = [d.doc_id for d in documents]
        di = {d: i for i, d in enumerate(doc_ids)}
        rowids = store.rowids_of()
        owner = store.doc_ids_for_rowids(rowids.tolist())
        pdoc = np.array([di[owner[r]] for r in rowids.tolist()])
        pvec = store.index.reconstruct(rowids)
        gold_doc = np.array([di[q.doc_id] for q in questions])

        def norm(x):
            return x / np.linalg.norm(x, axis=1, keepdims=True)

        mean = norm(np.stack([pvec[pdoc == i].mean(0) for i in range(len(doc_ids))]))
        mx = norm(np.stack([pvec[pdoc == i].max(0) for i in range(len(doc_ids))]))
        sp = pq @ pvec.T
        maxp = np.stack([sp[:, pdoc == i].max(1) for i in range(len(doc_ids))], 1)
        title = doc_enc.encode_documents([d.title for d in documents])
        lead = doc_enc.encode_documents([f"{d.title}, {d.paragraphs[0]}" for d in documents])
        summ = doc_enc.encode_documents([summarize_document(d) for d in documents])
        reps = {
            "title": dq @ title.T,
            "title + first paragraph": dq @ lead.T,
            "DHR summary (title + abstract<=100 words + TOC)": dq @ summ.T,
            "mean of passage vectors": pq @ mean.T,
            "max-pool of passage vectors": pq @ mx.T,
            "MaxP (best passage; full search)": maxp,
        }
        doc_level = {
            name: {
                "all": doc_accuracy(s, gold_doc),
                "test": doc_accuracy(s[test], gold_doc[test]),
            }
            for name, s in reps.items()
        }
        # ---- passage level through the engine (test questions) ----
        tq = [q for q in questions if q.doc_id in test_ids]
        tpq, tdq = pq[test], dq[test]
        gold = {q.qid: [f"{q.doc_id}#{q.paragraph_index}"] for q in tq}
        answers = {q.qid: list(q.answers) for q in tq}

        def score(results: list) -> dict:
            res = {q.qid: h for q, h in zip(tq, results, strict=True)}
            return {
                "paragraph": top_k_accuracy(res, ks=KS, by="passage", gold=gold),
                "answer": top_k_accuracy(res, ks=KS, by="answer", answers=answers),
            }

        rows = []
        t = time.perf_counter()
        flat = DenseRetriever(store).search_vectors(tpq, top_k=max(KS))
        rows.append({"method": "flat dense", "seconds": time.perf_counter() - t, **score(flat)})
        representations = ["mean", "summary"]
        for rep in representations:
            ext = DocumentIndex(rep, model=doc_model) if rep == "summary" and doc_model else DocumentIndex(rep)
            store.add_extension(ext, replace=True)
            qd = tdq if rep == "summary" else tpq
            for k1 in K1S:
                for lam in LAMBDAS:
                    r = HierarchicalRetriever(store, k1=k1, lambda_=lam)
                    t = time.perf_counter()
                    res = r.search_vectors(tpq, top_k=max(KS), doc_vectors=qd)
                    rows.append(
                        {
                            "method": f"hierarchical serial, doc={rep}, k1={k1}, λ={lam}",
                            "seconds": time.perf_counter() - t,
                            **score(res),
                        }
                    )
            for lam in (0.5, 1.0):
                r = HierarchicalRetriever(store, lambda_=lam, mode="parallel")
                res = r.search_vectors(tpq, top_k=max(KS), doc_vectors=qd)
                rows.append({"method": f"hierarchical parallel, doc={rep}, λ={lam}", **score(res)})
        store.close()
    log.info("%s evaluated in %.0fs", label, time.perf_counter() - t0)
    return {
        "encoder": label,
        "passage_model": passage_model,
        "document_model": doc_model,
        "doc_level": doc_level,
        "passage_level": rows,
    }


def _cells(values: list[float]) -> str:
    return " | ".join(f"{v:.3f}" for v in values)


def to_markdown(results: list[dict], n_all: int, n_test: int) -> str:
    lines = [
        f"Questions: {n_all} (all), {n_test} (test split: 24 held-out documents); corpus 48 docs / 240 paragraphs.",
        "",
    ]
    for r in results:
        lines += [f"### {r['encoder']}", "", "Document level (gold document in top k):", ""]
        lines += [
            "| representation | all top1 | all top5 | all top10 | test top1 | test top5 | test top10 | test top20 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, v in r["doc_level"].items():
            a, t = v["all"], v["test"]
            cells = _cells([a["top1"], a["top5"], a["top10"], t["top1"], t["top5"], t["top10"], t["top20"]])
            lines.append(f"| {name} | {cells} |")
        lines += ["", "Passage level, test questions (top-k accuracy by gold paragraph / by answer string):", ""]
        lines += ["| method | para@1 | para@5 | para@20 | ans@1 | ans@5 | ans@20 |", "|---|---|---|---|---|---|---|"]
        for row in r["passage_level"]:
            p, a = row["paragraph"], row["answer"]
            cells = _cells([p["top1"], p["top5"], p["top20"], a["top1"], a["top5"], a["top20"]])
            lines.append(f"| {row['method']} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--train",
        default="",
        help=f"comma-separated stages to train first ({','.join(STAGES)}); stages already trained are skipped",
    )
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--only-untrained", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("sentence_transformers", "transformers", "httpx", "faiss", "bm25s", "rag_hier.corpus.readers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if not args.data.is_dir():
        print(f"no XQuAD data at {args.data}", file=sys.stderr)
        return 1
    documents = read_qa_documents(args.data)
    questions = read_qa_questions(args.data)
    train_ids, test_ids = split(documents)
    write_split(args.out, documents, questions, train_ids)
    stages = [x for x in args.train.split(",") if x]
    if any(x not in STAGES for x in stages):
        parser.error(f"--train stages are {', '.join(STAGES)}")
    if stages:
        train_models(args.out, documents, questions, train_ids, args.epochs, stages)
    found = encoders(args.out)[: 1 if args.only_untrained else None]
    results = [evaluate_encoder(label, pm, dm, documents, questions, test_ids) for label, pm, dm in found]
    n_test = sum(q.doc_id in test_ids for q in questions)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md = to_markdown(results, len(questions), n_test)
    (args.out / "results.md").write_text(md + "\n", encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
