"""`rag-hier tune` as a user runs it: index, tune with defaults, evaluate before and after on held-out queries.

Two cases (data location is an argument; nothing is copied into the repository):

* ``scifact``: a store of BEIR SciFact (documents kept whole, the offline all-MiniLM-L6-v2 at 128 tokens, the
  protocol of docs/hce.md); ``rag-hier tune --beir DATA/scifact --split train`` with defaults (its own dev part
  is 20 % of the training queries); then ``rag-hier eval`` on ``qrels/test.tsv`` before and after and
  ``rag-hier compare`` of the two per-query files.
* ``xquad``: XQuAD-en (240 paragraphs kept whole): the 48 documents are shuffled (``random.Random(0)``) and
  halved; ``tune`` sees the questions of the first half only, and the questions of the other half are the test.

Every step is a subprocess of the ``rag-hier`` command line; wall time and peak memory (of the tune process) are
measured around it. ``--steps`` caps training (``--max-steps``) for a quick check; the figures in
docs/benchmarks.md use the defaults.

The XQuAD-en halves here shuffle the documents in file order (``documents.jsonl``), not sorted by id as
:func:`benchmarks.common.halves` does, so they differ from the other benchmarks' halves; the figures in
docs/benchmarks.md were measured with these.

Usage (the data folder as in ``benchmarks/README.md``)::

    python -m benchmarks.training.bench_tune scifact [--data ../shared/data] [--out benchmarks/out/tune]
    python -m benchmarks.training.bench_tune xquad [--data ../shared/data]

Results: ``<out>/<case>/result.json`` (and the tune report, eval JSONs, per-query files).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common.data import add_data_argument, data_dir
from benchmarks.common.report import out_path, write_json

CLI = [sys.executable, "-m", "rag_hier"]


def run(cmd: list[str], log: Path) -> tuple[float, float]:
    """Run a command (output to ``log``); returns (seconds, peak resident MB of the children so far)."""
    t0 = time.perf_counter()
    with log.open("a", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}; see {log}")
    return elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def build_scifact(data: Path, store: Path, max_seq_length: int, model: str | None = None) -> None:
    """The SciFact store: documents kept whole, MiniLM at ``max_seq_length`` tokens (recorded in the store)."""
    from rag_hier import DenseEncoder, HierStore
    from rag_hier.corpus import read_corpus

    docs = read_corpus(data / "scifact", "beir")
    s = HierStore.create(
        store,
        encoder=DenseEncoder(*([model] if model else []), max_seq_length=max_seq_length, show_progress_bar=True),
        corpus={"format": "beir", "max_passage_words": 0},
    )
    s.add_documents(docs, max_passage_words=0, show_progress_bar=True)
    s.close()


def build_xquad(data: Path, work: Path, store: Path, model: str | None = None) -> tuple[Path, Path]:
    """The XQuAD-en store (all 48 documents) and the train / test question files (split by document)."""
    docs = [json.loads(line) for line in (data / "xquad_en" / "documents.jsonl").read_text().splitlines() if line]
    ids = [d["doc_id"] for d in docs]
    random.Random(0).shuffle(ids)
    train_docs = set(ids[: len(ids) // 2])
    lines = [line for line in (data / "xquad_en" / "questions.jsonl").read_text().splitlines() if line]
    train, test = work / "questions-train.jsonl", work / "questions-test.jsonl"
    train.write_text("".join(x + "\n" for x in lines if json.loads(x)["doc_id"] in train_docs))
    test.write_text("".join(x + "\n" for x in lines if json.loads(x)["doc_id"] not in train_docs))
    if not store.exists():
        index = [*CLI, "index", str(data / "xquad_en" / "documents.jsonl"), "--store", str(store)]
        run([*index, *(["--model", model] if model else [])], work / "log.txt")
    return train, test


def test_subsets(args: argparse.Namespace, before: Path, after: Path) -> dict[str, dict[str, float]]:
    """Test nDCG@10 before and after, for test queries about documents some training query is about, and the rest."""
    from rag_hier.eval.compare import paired_difference
    from rag_hier.eval.perquery import read_per_query

    b, a = read_per_query(before)["ndcg@10"], read_per_query(after)["ndcg@10"]
    if args.case == "scifact":

        def rel(split: str) -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for line in (args.data / "scifact" / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]:
                q, d, _ = line.split("\t")
                out.setdefault(q, set()).add(d)
            return out

        train_docs = set().union(*rel("train").values())
        seen = {q for q, ds in rel("test").items() if ds & train_docs}
    else:  # XQuAD: the test documents are the other half, never trained on
        seen = set()
    out = {}
    for name, qids in (
        ("seen_documents", sorted(q for q in b if q in seen)),
        ("unseen_documents", sorted(q for q in b if q not in seen)),
    ):
        if len(qids) >= 2:
            d = paired_difference([b[q] for q in qids], [a[q] for q in qids], seed=42)
            out[name] = {
                "queries": len(qids),
                "before": d["mean_baseline"],
                "after": d["mean_system"],
                "delta": d["delta"],
                "ci_low": d["ci_low"],
                "ci_high": d["ci_high"],
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", choices=("scifact", "xquad"))
    add_data_argument(parser)
    parser.add_argument("--out", type=Path, default=out_path("tune"))
    parser.add_argument("--model", default=None, help="the store's model (default: the offline all-MiniLM-L6-v2)")
    parser.add_argument("--steps", type=int, default=None, help="cap training steps (quick check)")
    parser.add_argument("--max-seq-length", type=int, default=128, help="SciFact store's token limit (128)")
    parser.add_argument("--fresh", action="store_true", help="rebuild the store")
    parser.add_argument("--dev-split", choices=("grouped", "random"), default=None, help="tune's --dev-split")
    parser.add_argument(
        "--tune-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument for rag-hier tune (repeat; e.g. --tune-arg=--method --tune-arg=hce-s)",
    )
    parser.add_argument(
        "--no-test", action="store_true", help="stop after tune (dev figures only: for choosing settings)"
    )
    parser.add_argument("--tag", default="", help="suffix of the results folder (several settings side by side)")
    args = parser.parse_args(argv)
    args.data = data_dir(args.data)
    work = args.out / f"{args.case}{args.tag}"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    store = work / "store"
    pristine = args.out / args.case / "store-base"  # one base store per case, shared by every tag
    if args.fresh:
        shutil.rmtree(pristine, ignore_errors=True)
    t0 = time.perf_counter()
    if args.case == "scifact":
        if not pristine.exists():
            build_scifact(args.data, pristine, args.max_seq_length, args.model)
        tune_inputs = ["--beir", str(args.data / "scifact"), "--split", "train"]
        test_inputs = ["--beir", str(args.data / "scifact"), "--split", "test"]
    else:
        train_q, test_q = build_xquad(args.data, work, pristine, args.model)
        tune_inputs = ["--queries", str(train_q)]
        test_inputs = ["--queries", str(test_q)]
    build_seconds = time.perf_counter() - t0
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(pristine, store)
    before_pq, after_pq = work / "before.tsv", work / "after.tsv"
    t_eval_before = 0.0
    if not args.no_test:
        t_eval_before, _ = run(
            [
                *CLI,
                "eval",
                "--store",
                str(store),
                *test_inputs,
                "--per-query",
                str(before_pq),
                "--output",
                str(work / "eval-before.json"),
                "--no-progress",
            ],
            log,
        )
    tune_cmd = [*CLI, "tune", "--store", str(store), *tune_inputs, "--report", str(work / "tune.json"), "--no-progress"]
    if args.steps:
        tune_cmd += ["--max-steps", str(args.steps)]
    if args.dev_split:
        tune_cmd += ["--dev-split", args.dev_split]
    tune_cmd += args.tune_arg
    t_tune, peak = run(tune_cmd, log)
    if args.no_test:
        report = json.loads((work / "tune.json").read_text())
        keep = ("method", "adopted", "reason", "dev_queries", "difference", "dev_subsets", "seconds", "details")
        summary = {"case": args.case, "tune_args": args.tune_arg, "tune_seconds": t_tune, "peak_mb": peak}
        summary.update({k: report.get(k) for k in keep})
        write_json(work / "dev.json", summary, indent=2)
        print(json.dumps(summary, indent=2))
        return 0
    t_eval_after, _ = run(
        [
            *CLI,
            "eval",
            "--store",
            str(store),
            *test_inputs,
            "--per-query",
            str(after_pq),
            "--output",
            str(work / "eval-after.json"),
            "--no-progress",
        ],
        log,
    )
    run(
        [
            *CLI,
            "compare",
            str(before_pq),
            str(after_pq),
            "--names",
            "base,tuned",
            "--metrics",
            "ndcg@10,recall@100",
            "--output",
            str(work / "compare.json"),
        ],
        log,
    )
    tune_report = json.loads((work / "tune.json").read_text())
    subsets = test_subsets(args, before_pq, after_pq)
    result = {
        "case": args.case,
        "build_seconds": round(build_seconds, 1),
        "tune_seconds": round(t_tune, 1),
        "tune_peak_rss_mb": round(peak, 1),
        "eval_seconds": [round(t_eval_before, 1), round(t_eval_after, 1)],
        "tune": {
            k: tune_report[k]
            for k in (
                "method",
                "adopted",
                "reason",
                "steps",
                "planned_steps",
                "seconds",
                "estimate_seconds",
                "peak_memory_mb",
                "train_queries",
                "dev_queries",
                "base",
                "candidate",
                "difference",
                "dev_subsets",
            )
        },
        "test_before": json.loads((work / "eval-before.json").read_text())["metrics"],
        "test_after": json.loads((work / "eval-after.json").read_text())["metrics"],
        "test_compare": json.loads((work / "compare.json").read_text()),
        "test_subsets": subsets,
    }
    write_json(work / "result.json", result, indent=2)
    print(json.dumps({k: result[k] for k in ("tune_seconds", "tune_peak_rss_mb", "test_before", "test_after")}))
    print(result["tune"]["reason"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
