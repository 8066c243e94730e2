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

Dev split (choosing defaults without the test documents): the 24 training documents are shuffled again
(``random.Random(1)``) into 16 dev-train and 8 dev documents; a variant is trained on the questions of the 16
and scored on the questions of the 8, retrieving from the 24 training documents only.

Usage (XQuAD-en from the data folder, see ``benchmarks/README.md``)::

    D="python -m benchmarks.retrieval.bench_dhr_xquad"
    $D --split dev --train e1-lr2e-5,e1-lr1e-4,e3-lr5e-5   # dev study
    $D --split test --train defaults,it2,separate            # test, once
    $D --split test                                         # evaluate what is there

Results (``--out``, default ``benchmarks/out/dhr_xquad``, git-ignored): <split>-results.json and .md, per-question
top-1 in <split>-perquery.json, paired bootstrap differences against the untrained model in <split>-paired.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common.data import add_data_argument, halves, load_xquad, xquad_dir
from benchmarks.common.report import out_path
from rag_hier import DenseRetriever, HierStore
from rag_hier.corpus.model import Document
from rag_hier.corpus.readers import QAQuestion
from rag_hier.corpus.summary import summarize_document
from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
from rag_hier.eval.qa import top_k_accuracy
from rag_hier.retrieval.hierarchical import HierarchicalRetriever
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.training.dhr import DHRTrainer, DHRTrainingConfig, examples_from_questions

OUT = out_path("dhr_xquad")
DEVICE = "cpu"  # --device
BASE_MODEL = DEFAULT_MODEL  # --base-model
KS = (1, 5, 20)
K1S = (1, 3, 5, 10, 20)
LAMBDAS = (0.0, 0.5, 1.0)

log = logging.getLogger("bench_dhr_xquad")


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


# trainer variants: DHRTrainingConfig overrides on top of the trainer's defaults (max_passage_words 0, CPU)
VARIANTS: dict[str, dict] = {
    "defaults": {},
    "e1-lr2e-5": {"epochs": 1, "learning_rate": 2e-5},
    "e1-lr1e-4": {"epochs": 1, "learning_rate": 1e-4},
    "e3-lr2e-5": {"epochs": 3, "learning_rate": 2e-5},
    "e3-lr5e-5": {"epochs": 3, "learning_rate": 5e-5},
    "it2": {"iterations": 2},
    "separate": {"shared_encoder": False},
    "it1-old": {"epochs": 1, "learning_rate": 2e-5, "in_doc_negatives": 0, "in_sec_negatives": 1},
    # passage level only: with the default document vector (the mean of passage vectors) the document-level rows
    # (question -> summary) train a representation the default search never uses, in the shared encoder
    "p-e1-lr2e-5": {"levels": ("passage",), "epochs": 1, "learning_rate": 2e-5},
    "p-e3-lr2e-5": {"levels": ("passage",), "epochs": 3, "learning_rate": 2e-5},
    # DHR's negatives against DPR-style ones at equal steps and equal texts per step: both train both levels with
    # two passage negatives per question; DHR's are 1 BM25 (other documents) + 1 In-Doc and document negatives
    # BM25-ranked on the summary ("Abstract"), DPR-style 2 BM25 from other documents and document negatives
    # BM25-ranked on the full text (the paper's Table 3 ablation pair)
    "dhr-negatives-s6": {"max_steps": 6},
    "dpr-negatives-s6": {
        "max_steps": 6,
        "bm25_negatives": 2,
        "in_doc_negatives": 0,
        "doc_negative_text": "full_text",
    },
    # five and ten times the default budget (benchmarks/device/dhr.py, on a GPU)
    "e5-lr2e-5": {"epochs": 5, "learning_rate": 2e-5},
    "e10-lr2e-5": {"epochs": 10, "learning_rate": 2e-5},
}


def train_models(out: Path, split: str, documents, questions, train_ids: set[str], variants) -> None:
    """Train each variant once (a finished one, with its ``dhr_training.json``, is skipped)."""
    docs = [d for d in documents if d.doc_id in train_ids]
    examples = examples_from_questions([q for q in questions if q.doc_id in train_ids], docs, max_passage_words=0)
    for name in variants:
        target = out / "models" / f"{split}-{name}"
        if (target / "dhr_training.json").exists():
            log.info("%s: already trained (%s)", name, target)
            continue
        cfg = DHRTrainingConfig(base_model=BASE_MODEL, max_passage_words=0, device=DEVICE, **VARIANTS[name])
        t0 = time.perf_counter()
        result = DHRTrainer(cfg).train(docs, target, examples=examples)
        log.info("%s trained in %.0fs: rows %s, losses %s", name, time.perf_counter() - t0, result.rows, result.losses)


def encoders(out: Path, split: str) -> list[tuple[str, str, str | None]]:
    """(label, passage model, distinct document model or None): the untrained model and every trained variant."""
    found = [("untrained", BASE_MODEL, None)]
    for name in VARIANTS:
        m = out / "models" / f"{split}-{name}"
        if (m / "passage" / "modules.json").exists():
            found.append((name, str(m / "passage"), str(m / "document")))
        elif (m / "modules.json").exists():
            found.append((name, str(m), None))
    return found


def doc_accuracy(scores: np.ndarray, gold: np.ndarray, ks=(1, 3, 5, 10, 20)) -> dict[str, float]:
    rank = (scores > scores[np.arange(len(gold)), gold][:, None]).sum(1)
    return {f"top{k}": float((rank < k).mean()) for k in ks}


def evaluate_encoder(label: str, passage_model: str, doc_model: str | None, documents, questions, test_ids) -> dict:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        enc = DenseEncoder(passage_model, device=DEVICE, batch_size=32)
        store = HierStore.create(Path(tmp) / "store", encoder=enc, corpus={"max_passage_words": 0})
        store.add_documents(documents, max_passage_words=0)
        doc_enc = DenseEncoder(doc_model, device=DEVICE, batch_size=32) if doc_model else enc
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
                "top1_per_question": [
                    int(bool(h) and h[0].passage_id in gold[q.qid]) for q, h in zip(tq, results, strict=True)
                ],
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


def to_markdown(results: list[dict], n_all: int, n_test: int, split: str = "test", n_docs: int = 48) -> str:
    lines = [
        f"Questions: {n_all} (all), {n_test} ({split} split: held-out documents); corpus {n_docs} docs.",
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


PAIRED_METHODS = (
    "flat dense",
    "hierarchical serial, doc=mean, k1=10, λ=0.0",
    "hierarchical serial, doc=mean, k1=20, λ=0.0",
)


def paired(results: list[dict], n_boot: int = 10_000, seed: int = 0, against: str = "untrained") -> list[dict]:
    """Paired bootstrap (over questions) of top-1 paragraph accuracy: every other encoder minus ``against``."""
    base = next(r for r in results if r["encoder"] == against)
    out = []
    for r in results:
        if r is base:
            continue
        for method in (
            "flat dense",
            "hierarchical serial, doc=mean, k1=10, λ=0.0",
            "hierarchical serial, doc=mean, k1=20, λ=0.0",
        ):
            a = next((np.asarray(x["top1_per_question"]) for x in base["passage_level"] if x["method"] == method), None)
            b = next((np.asarray(x["top1_per_question"]) for x in r["passage_level"] if x["method"] == method), None)
            if a is None or b is None:
                continue
            d = b - a
            rng = np.random.default_rng(seed)
            boots = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(1)
            out.append(
                {
                    "variant": r["encoder"],
                    "method": method,
                    "untrained": round(float(a.mean()), 4),
                    "trained": round(float(b.mean()), 4),
                    "delta": round(float(d.mean()), 4),
                    "ci95": [round(float(np.percentile(boots, 2.5)), 4), round(float(np.percentile(boots, 97.5)), 4)],
                    "better_worse": [int((d > 0).sum()), int((d < 0).sum())],
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    global DEVICE, BASE_MODEL
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(parser)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--split", choices=("dev", "test"), default="test")
    parser.add_argument("--train", default="", help=f"comma-separated variants to train first ({', '.join(VARIANTS)})")
    parser.add_argument("--only-untrained", action="store_true")
    parser.add_argument(
        "--against", default="untrained", help="the encoder the paired differences are taken against (a variant)"
    )
    parser.add_argument("--device", default="cpu", help="where models train and encode (cpu, cuda, ...)")
    parser.add_argument("--base-model", default=DEFAULT_MODEL, help="the model training starts from")
    args = parser.parse_args(argv)
    DEVICE, BASE_MODEL = args.device, args.base_model
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("sentence_transformers", "transformers", "httpx", "faiss", "bm25s", "rag_hier.corpus.readers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if not xquad_dir(args.data).is_dir():
        print(f"no XQuAD data at {xquad_dir(args.data)}", file=sys.stderr)
        return 1
    xquad = load_xquad(args.data)
    documents, questions = xquad.documents, xquad.questions
    train_ids, test_ids = halves(documents)
    write_split(args.out, documents, questions, train_ids)
    if args.split == "dev":  # never touches the test documents
        fit_ids, eval_ids = halves([d for d in documents if d.doc_id in train_ids], seed=1, fraction=2 / 3)
        documents = [d for d in documents if d.doc_id in train_ids]
        questions = [q for q in questions if q.doc_id in train_ids]
    else:
        fit_ids, eval_ids = train_ids, test_ids
    variants = [x for x in args.train.split(",") if x]
    if any(x not in VARIANTS for x in variants):
        parser.error(f"--train variants are {', '.join(VARIANTS)}")
    if variants:
        train_models(args.out, args.split, documents, questions, fit_ids, variants)
    found = encoders(args.out, args.split)[: 1 if args.only_untrained else None]
    results = [evaluate_encoder(label, pm, dm, documents, questions, eval_ids) for label, pm, dm in found]
    n_eval = sum(q.doc_id in eval_ids for q in questions)
    prefix = args.out / f"{args.split}-"
    (args.out / f"{args.split}-perquery.json").write_text(
        json.dumps(results, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    slim = [
        {**r, "passage_level": [{k: v for k, v in x.items() if k != "top1_per_question"} for x in r["passage_level"]]}
        for r in results
    ]
    Path(f"{prefix}results.json").write_text(json.dumps(slim, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md = to_markdown(slim, len(questions), n_eval, args.split, len(documents))
    Path(f"{prefix}results.md").write_text(md + "\n", encoding="utf-8")
    pairs = paired(results, against=args.against)
    lines = [
        f"| variant | method | {args.against} top1 | variant top1 | Δ | 95 % CI | better / worse |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in pairs:
        lines.append(
            f"| {r['variant']} | {r['method']} | {r['untrained']:.3f} | {r['trained']:.3f} | {r['delta']:+.3f} | "
            f"[{r['ci95'][0]:+.3f}, {r['ci95'][1]:+.3f}] | {r['better_worse'][0]} / {r['better_worse'][1]} |"
        )
    suffix = "" if args.against == "untrained" else f"-vs-{args.against}"
    Path(f"{prefix}paired{suffix}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(md)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
