"""The passage splitter: sentence-aware cuts (``split_document``) against the former word blocks.

Usage::

    python -m benchmarks.retrieval.bench_splitter [--data ../shared/data] [--max-words 100] [--eval]
        [--out benchmarks/out/splitter.json]

What it measures, on BEIR SciFact (5,183 abstracts) and XQuAD-en (48 documents, 240 paragraphs):

* passage counts and sizes (words) for the former splitter (each section's words cut into the fewest
  balanced blocks of at most ``--max-words``: ``_balanced_blocks`` on the joined section) and the
  sentence-aware one, without and with overlap;
* the share of passages that end at a sentence end (last character ``.``, ``!`` or ``?``, optionally
  followed by a closing quote or bracket) and that start a sentence (first word not lower case);
* the share of passages whose text is unchanged (so their content hash, and their vector in a store, stay);
* split time (median of 3) against the former splitter, in the same run;
* with ``--eval``: SciFact document-level retrieval (MaxP over passages, the offline all-MiniLM-L6-v2,
  exact inner product) on the train queries (dev) and the test queries, for each splitter.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from pathlib import Path

from benchmarks.common.data import add_data_argument, scifact_dir, xquad_dir
from benchmarks.common.report import out_path, write_json
from rag_hier.corpus import Document, read_corpus, read_qrels, read_queries, split_document
from rag_hier.corpus.model import _balanced_blocks

SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


def old_split(document: Document, max_words: int) -> list[str]:
    """The former splitter: every section's words cut into balanced blocks, ignoring sentences."""
    groups: dict[int, list[str]] = {}
    for section, _, paragraph in document.iter_paragraphs():
        groups.setdefault(section, []).append(paragraph)
    out: list[str] = []
    for paragraphs in groups.values():
        words = " ".join(paragraphs).split()
        if words:
            out.extend(" ".join(b) for b in _balanced_blocks(words, max_words))
    return out


def new_split(document: Document, max_words: int, overlap: int = 0) -> list[str]:
    return [p.text for p in split_document(document, max_words, overlap=overlap)]


def stats(passages: list[list[str]], reference: list[list[str]] | None = None) -> dict[str, float]:
    flat = [p for doc in passages for p in doc]
    sizes = [len(p.split()) for p in flat]
    out = {
        "passages": len(flat),
        "mean_words": round(statistics.mean(sizes), 1),
        "min_words": min(sizes),
        "p10_words": sorted(sizes)[len(sizes) // 10],
        "max_words": max(sizes),
        "end_at_sentence_end": round(sum(bool(SENTENCE_END.search(p)) for p in flat) / len(flat), 4),
        "start_a_sentence": round(sum(not p[0].islower() for p in flat) / len(flat), 4),
    }
    if reference is not None:
        ref = {p for doc in reference for p in doc}
        out["unchanged_texts"] = round(sum(p in ref for p in flat) / len(flat), 4)
    return out


def timed(fn, documents: list[Document]) -> tuple[list[list[str]], float]:
    times = []
    result: list[list[str]] = []
    for _ in range(3):
        t0 = time.perf_counter()
        result = [fn(d) for d in documents]
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def evaluate_scifact(
    data: Path, variants: dict[str, list[list[str]]], documents: list[Document], model: str | None = None
) -> dict:
    import numpy as np
    import torch

    from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
    from rag_hier.eval.metrics import evaluate

    torch.set_num_threads(1)
    encoder = DenseEncoder(model or DEFAULT_MODEL, device="cpu", batch_size=64, show_progress_bar=False)
    cache: dict[str, np.ndarray] = {}
    results: dict[str, dict] = {}
    queries = read_queries(data / "queries.jsonl")
    splits = {name: read_qrels(data / "qrels" / f"{name}.tsv") for name in ("train", "test")}
    qids = sorted({q for qrels in splits.values() for q in qrels})
    q_vectors = np.asarray(encoder.encode_queries([queries[q] for q in qids]), dtype=np.float32)
    for name, passages in variants.items():
        texts, owners = [], []
        for doc, doc_passages in zip(documents, passages, strict=True):
            for text in doc_passages:
                texts.append(f"{doc.title}, {text}" if doc.title else text)
                owners.append(doc.doc_id)
        missing = sorted({t for t in texts if t not in cache})
        t0 = time.perf_counter()
        if missing:
            vectors = np.asarray(encoder.encode_documents(missing), dtype=np.float32)
            cache.update(zip(missing, vectors, strict=True))
        encode_s = time.perf_counter() - t0
        matrix = np.stack([cache[t] for t in texts])
        scores = q_vectors @ matrix.T
        run: dict[str, dict[str, float]] = {}
        for row, qid in enumerate(qids):
            best: dict[str, float] = {}
            for col in np.argsort(-scores[row])[:1000]:
                owner = owners[int(col)]
                if owner not in best:
                    best[owner] = float(scores[row, col])
                if len(best) >= 100:
                    break
            run[qid] = best
        results[name] = {
            split: {k: round(v, 4) for k, v in evaluate(run, qrels, ("ndcg@10", "recall@100")).items()}
            for split, qrels in splits.items()
        } | {"passages": len(texts), "encoded_new_texts": len(missing), "encode_seconds": round(encode_s, 1)}
        print(name, json.dumps(results[name]), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    parser.add_argument("--max-words", type=int, default=100)
    parser.add_argument("--overlap", type=int, default=20)
    parser.add_argument("--eval", action="store_true", help="also run SciFact retrieval for each splitter")
    parser.add_argument(
        "--eval-variants",
        default="word_blocks,sentences,overlap",
        help="comma-separated splitters to evaluate with --eval (word_blocks, sentences, overlap)",
    )
    parser.add_argument("--out", type=Path, default=out_path("splitter.json"))
    parser.add_argument("--model", default=None, help="--eval: the model (default: the offline all-MiniLM-L6-v2)")
    args = parser.parse_args(argv)
    report: dict = {"max_words": args.max_words, "overlap": args.overlap, "corpora": {}}
    corpora = {"scifact": scifact_dir(args.data), "xquad_en": xquad_dir(args.data)}
    scifact_variants: dict[str, list[list[str]]] = {}
    scifact_docs: list[Document] = []
    for name, path in corpora.items():
        documents = read_corpus(path)
        old, t_old = timed(lambda d: old_split(d, args.max_words), documents)
        new, t_new = timed(lambda d: new_split(d, args.max_words), documents)
        over, t_over = timed(lambda d: new_split(d, args.max_words, args.overlap), documents)
        report["corpora"][name] = {
            "documents": len(documents),
            "words": sum(len(d.text.split()) for d in documents),
            "word_blocks (former)": stats(old) | {"seconds": round(t_old, 3)},
            "sentences": stats(new, old) | {"seconds": round(t_new, 3)},
            f"sentences, overlap {args.overlap}": stats(over, old) | {"seconds": round(t_over, 3)},
        }
        print(name, json.dumps(report["corpora"][name], indent=1), flush=True)
        if name == "scifact":
            scifact_docs = documents
            wanted = set(args.eval_variants.split(","))
            all_variants = {"word_blocks": old, "sentences": new, "overlap": over}
            scifact_variants = {
                (f"sentences+overlap{args.overlap}" if k == "overlap" else k): v
                for k, v in all_variants.items()
                if k in wanted
            }
    if args.eval:
        report["scifact_retrieval"] = evaluate_scifact(corpora["scifact"], scifact_variants, scifact_docs, args.model)
    write_json(args.out, report, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
