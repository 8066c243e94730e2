"""How often does `tune`'s adoption rule adopt a candidate that cannot be better? Shuffled judgements, many seeds.

A small judged collection (40 documents of five words, five queries each, queries in another vocabulary that
translates word for word into the documents', as in the test suite) on the tiny random model. With the true
judgements, a few seconds of training make the candidate far better and it is adopted. With the judgements
shuffled (every query judged against a random document), the training signal is noise and the dev judgements
are noise too: base and candidate are equally (un)able to find the judged documents, so any adoption is a false
adoption. Each seed reshuffles the judgements and reseeds the split, the sampling and the bootstrap.

``--queries N`` draws N of the 200 queries per seed (seeded): below 200 usable judged queries ``tune``
cross-fits (every query scored by a candidate trained on the other folds), so ``--queries 60`` measures the
small-set path.

Usage:
    python -m benchmarks.training.bench_tune_null [--seeds 40] [--out benchmarks/out/tune/null.json]
    python -m benchmarks.training.bench_tune_null --queries 60 --seeds 30 --out benchmarks/out/tune/null-60.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.report import out_path, write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--epochs", type=float, default=3.0, help="tune's training epochs")
    parser.add_argument("--queries", type=int, default=None, help="judged queries drawn per seed (default: all 200)")
    parser.add_argument("--out", type=Path, default=out_path("tune", "null.json"))
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    from rag_hier import Document, HierStore
    from rag_hier.testing import build_tiny_model, translation_collection

    work = Path(tempfile.mkdtemp(prefix="tune-null-"))
    model = str(build_tiny_model(work / "model"))
    corpus, queries, qrels = translation_collection()
    settings = {
        "epochs": args.epochs,
        "learning_rate": 5e-3,
        "batch_size": 16,
        "num_negatives": 1,
        "show_progress_bar": False,
        "device": "cpu",
    }
    rows = []
    t0 = time.perf_counter()
    for case in ("true", "shuffled"):
        for seed in range(args.seeds if case == "shuffled" else min(args.seeds, 5)):
            path = work / f"{case}-{seed}"
            store = HierStore.create(path, model=model, corpus={"format": "beir", "max_passage_words": 0})
            store.add_documents([Document(doc_id=d, paragraphs=(t,)) for d, t in corpus.items()], max_passage_words=0)
            judged = qrels
            asked = queries
            if args.queries is not None:
                keep = sorted(queries)
                random.Random(2000 + seed).shuffle(keep)
                asked = {q: queries[q] for q in keep[: args.queries]}
                judged = {q: qrels[q] for q in asked}
            if case == "shuffled":
                rng = random.Random(1000 + seed)
                docs = list(corpus)
                judged = {q: {rng.choice(docs): 1} for q in asked}
            report = store.tune(asked, judged, seed=seed, **settings)
            d = report.difference["ndcg@10"]
            rows.append(
                {
                    "case": case,
                    "seed": seed,
                    "adopted": report.adopted,
                    "evaluation": report.details.get("evaluation"),
                    **{k: d[k] for k in ("delta", "ci_low")},
                }
            )
            store.close()
            print(json.dumps(rows[-1]), flush=True)
    summary = {
        case: {
            "runs": sum(1 for r in rows if r["case"] == case),
            "adopted": sum(1 for r in rows if r["case"] == case and r["adopted"]),
            "mean_delta": round(
                sum(r["delta"] for r in rows if r["case"] == case) / max(1, sum(1 for r in rows if r["case"] == case)),
                4,
            ),
        }
        for case in ("true", "shuffled")
    }
    out = {"summary": summary, "rows": rows, "seconds": round(time.perf_counter() - t0, 1)}
    write_json(args.out, out, indent=2)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
