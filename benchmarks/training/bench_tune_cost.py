"""`tune` against the ten-line recipe, in one run: gain on held-out test queries and cost, phase by phase.

The **anchor** is what a user writes by hand with sentence-transformers: ``MultipleNegativesRankingLoss`` (in-batch
negatives), one pass over every (query, positive) pair of the tuning queries, batch 32 without duplicates, the
trainer's own defaults otherwise (learning rate 5e-5, no warm-up), then the corpus encoded once with the new model.
**tune** is ``store.tune(...)`` with its defaults (or ``--set KEY=VALUE`` overrides) on a copy of the same store.
Both start from the store's model and see the same judged queries; both are scored on the test queries with the
store's own search (``rag-hier eval``'s conventions); each figure is paired with the base per test query.

Cost: wall and CPU seconds of each phase (the anchor: training, encoding; tune: everything ``tune`` does), one
process, torch on ``--threads`` threads (CPU seconds are the robust figure on a shared machine). ``--repeats N``
alternates anchor and tune N times (seeds differ per repeat) for the spread of the ratios.

Cases (data location is an argument):

* ``scifact``: BEIR SciFact, documents kept whole, MiniLM at 128 tokens; tune on ``qrels/train.tsv``, test on
  ``qrels/test.tsv``.
* ``scifact-small``: the same store, tune on ``--small N`` (default 60) queries drawn (seeded) from the training
  queries; test on ``qrels/test.tsv``. ``--shuffle`` judges each drawn query against a random document of the
  pool of relevant documents (the null study: nothing true to learn), tune only.
* ``xquad``: XQuAD-en, paragraphs kept whole, the documents halved as ``bench_tune`` halves them.

Usage::

    B="python -m benchmarks.training.bench_tune_cost"
    $B scifact --data ../shared/data
    $B scifact-small --data ../shared/data --small 60 --seed 1
    $B scifact-small --data ../shared/data --small 60 --shuffle --seeds 20 --no-anchor   # null study
    $B scifact --data ../shared/data --set epochs=3 --set refit=true --tag three-passes

Results: ``<out>/<case><tag>/result.json`` (``--out``, default ``benchmarks/out/tune-cost``).
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
from typing import Any

import numpy as np

from benchmarks.common.data import add_data_argument, data_dir
from benchmarks.common.report import machine, out_path, write_json


class Clock:
    """Wall and CPU seconds of a block (CPU: this process, every thread)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._w
        self.cpu = time.process_time() - self._c


def _judged(store: Any, data: Path, case: str, split: str, work: Path) -> Any:
    from rag_hier.eval.judged import load_judged

    if case.startswith("scifact"):
        return load_judged(
            store, data / "scifact" / "queries.jsonl", data / "scifact" / "qrels" / f"{split}.tsv", "doc"
        )
    return load_judged(store, work / f"questions-{split}.jsonl", None, "passage")


def _store(args: argparse.Namespace, work: Path) -> Path:
    """The base store of the case (built once, shared by every tag)."""
    from benchmarks.training.bench_tune import build_scifact, build_xquad

    root = args.out / ("scifact" if args.case.startswith("scifact") else "xquad")
    root.mkdir(parents=True, exist_ok=True)
    pristine = root / "store-base"
    if args.case.startswith("scifact"):
        if not pristine.exists():
            build_scifact(args.data, pristine, 128, args.model)
    else:
        build_xquad(args.data, root, pristine, args.model)
        for part in ("train", "test"):
            if root.resolve() != work.resolve():
                shutil.copyfile(root / f"questions-{part}.jsonl", work / f"questions-{part}.jsonl")
    return pristine


def _small(judged: Any, n: int, seed: int, shuffle: bool) -> Any:
    """``n`` queries drawn from ``judged`` (seeded); ``shuffle``: each judged against a random relevant document."""
    from dataclasses import replace

    rng = random.Random(seed)
    qids = sorted(judged.queries)
    rng.shuffle(qids)
    sub = judged.subset(qids[:n])
    if not shuffle:
        return sub
    pool = sorted({d for q in judged.queries for d, g in judged.qrels[q].items() if g > 0})
    return replace(sub, qrels={q: {rng.choice(pool): 1} for q in sub.queries})


def _test_values(store: Any, test: Any) -> dict[str, dict[str, float]]:
    from rag_hier.tuning.scoring import score_queries

    q = store.encoder.encode_queries(list(test.queries.values()))
    return score_queries(store, test, q, ("ndcg@10", "recall@100"))


def _paired(base: dict[str, float], other: dict[str, float]) -> dict[str, float]:
    from rag_hier.eval.compare import paired_difference

    qids = sorted(base)
    d = paired_difference([base[q] for q in qids], [other[q] for q in qids], seed=42)
    return {k: round(float(d[k]), 4) for k in ("mean_baseline", "mean_system", "delta", "ci_low", "ci_high")}


def anchor(store_dir: Path, judged: Any, test: Any, seed: int, base_test: dict[str, float]) -> dict[str, Any]:
    """Plain MNRL, one pass over every (query, positive) pair, then the corpus encoded once; test figures."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    from rag_hier import HierStore
    from rag_hier.encoders.identity import resolve_model_path
    from rag_hier.store.encoder_switch import encode_passages
    from rag_hier.tuning.scoring import candidate_index, score_queries

    store = HierStore.open(store_dir, read_only=True)
    try:
        # the positive passage texts as the store encodes them (a document's first passage; SciFact: the document)
        rel = sorted({d for q in judged.queries for d, g in judged.qrels[q].items() if g > 0})
        rows = store.rowids_of(doc_ids=rel) if judged.level == "doc" else store.rowids_of(passage_ids=rel)
        recs = store.records(rows.tolist())
        text_of: dict[str, str] = {}
        for r in sorted(recs):
            key = recs[r].doc_id if judged.level == "doc" else recs[r].passage_id
            text_of.setdefault(key, recs[r].to_passage().embedding_text)
        anchors, positives = [], []
        for q, text in judged.queries.items():
            for d, g in judged.qrels[q].items():
                if g > 0 and d in text_of:
                    anchors.append(text)
                    positives.append(text_of[d])
        model = SentenceTransformer(str(resolve_model_path(store.encoder.model_name)), device="cpu")
        model.max_seq_length = store.encoder.max_seq_length or model.max_seq_length
        with tempfile.TemporaryDirectory() as tmp:
            args = SentenceTransformerTrainingArguments(
                output_dir=tmp,
                num_train_epochs=1,
                per_device_train_batch_size=32,
                batch_sampler=BatchSamplers.NO_DUPLICATES,
                seed=seed,
                save_strategy="no",
                logging_strategy="no",
                report_to="none",
                disable_tqdm=True,
                use_cpu=True,
            )
            trainer = SentenceTransformerTrainer(
                model=model,
                args=args,
                train_dataset=Dataset.from_dict({"anchor": anchors, "positive": positives}),
                loss=MultipleNegativesRankingLoss(model),
            )
            with Clock() as train:
                trainer.train()
            model.save(str(Path(tmp) / "model"))
            trained = store.encoder_for(Path(tmp) / "model", device="cpu")
            with Clock() as encode:
                encoded = encode_passages(store, trained, show_progress_bar=False)
            index = candidate_index(store, encoded)
            values = score_queries(
                store, test, trained.encode_queries(list(test.queries.values())), ("ndcg@10", "recall@100"), index=index
            )
    finally:
        store.close()
    return {
        "pairs": len(anchors),
        "steps": int(trainer.state.global_step),
        "wall": {"train": round(train.wall, 1), "encode": round(encode.wall, 1)},
        "cpu": {"train": round(train.cpu, 1), "encode": round(encode.cpu, 1)},
        "cost_wall": round(train.wall + encode.wall, 1),
        "cost_cpu": round(train.cpu + encode.cpu, 1),
        "test": _paired(base_test, values["ndcg@10"]),
    }


def tune_once(
    store_dir: Path, judged: Any, test: Any | None, overrides: dict[str, Any], base_test: dict[str, float] | None
) -> dict[str, Any]:
    """``store.tune`` with its defaults and ``overrides`` on a copy of the store; its report and test figures."""
    from rag_hier import HierStore, TuneConfig

    with tempfile.TemporaryDirectory(prefix="bench-tune-") as tmp:
        copy = Path(tmp) / "store"
        shutil.copytree(store_dir, copy)
        store = HierStore.open(copy)
        try:
            lines: list[str] = []
            cfg = TuneConfig(**{"show_progress_bar": False, "device": "cpu", **overrides})
            with Clock() as clock:
                report = store.tune(judged, config=cfg, say=lines.append)
            out: dict[str, Any] = {
                "wall": round(clock.wall, 1),
                "cpu": round(clock.cpu, 1),
                "adopted": report.adopted,
                "reason": report.reason,
                "steps": report.steps,
                "seconds": report.seconds,
                "estimate_seconds": report.estimate_seconds,
                "peak_memory_mb": report.peak_memory_mb,
                "dev": report.difference.get("ndcg@10"),
                "dev_subsets": report.dev_subsets,
                "resolution": report.resolution,
                "details": report.details,
                "lines": lines,
            }
            if test is not None and base_test is not None:
                out["test"] = _paired(base_test, _test_values(store, test)["ndcg@10"])
        finally:
            store.close()
    return out


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("case", choices=("scifact", "scifact-small", "xquad"))
    add_data_argument(parser)
    parser.add_argument("--out", type=Path, default=out_path("tune-cost"))
    parser.add_argument("--tag", default="")
    parser.add_argument("--model", default=None, help="the store's model (default: the offline all-MiniLM-L6-v2)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a TuneConfig override (JSON)")
    parser.add_argument("--repeats", type=int, default=1, help="anchor and tune alternated this many times")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--no-anchor", action="store_true", help="tune only")
    parser.add_argument("--small", type=int, default=60, help="scifact-small: judged queries drawn")
    parser.add_argument("--shuffle", action="store_true", help="scifact-small: shuffled judgements (null study)")
    parser.add_argument("--seeds", type=int, default=1, help="scifact-small: draws (seeds 1..N), tune once each")
    parser.add_argument("--seed", type=int, default=1, help="first seed")
    args = parser.parse_args(argv)
    args.data = data_dir(args.data)

    import torch

    from rag_hier import HierStore

    torch.set_num_threads(args.threads)
    overrides = {k: _value(v) for k, v in (s.split("=", 1) for s in args.set)}
    work = args.out / f"{args.case}{args.tag}"
    work.mkdir(parents=True, exist_ok=True)
    store_dir = _store(args, work)
    base = HierStore.open(store_dir, read_only=True)
    judged_all = _judged(base, args.data, args.case, "train", work)
    test = _judged(base, args.data, args.case, "test", work)
    base_values = _test_values(base, test)
    base.close()
    base_test = base_values["ndcg@10"]
    result: dict[str, Any] = {
        "case": args.case,
        "overrides": overrides,
        "threads": args.threads,
        "machine": machine(),
        "base_test_ndcg@10": round(float(np.mean(list(base_test.values()))), 4),
        "runs": [],
    }
    for i in range(args.seeds if args.case == "scifact-small" else args.repeats):
        seed = args.seed + i
        judged = judged_all
        if args.case == "scifact-small":
            judged = _small(judged_all, args.small, seed, args.shuffle)
        run: dict[str, Any] = {"seed": seed, "queries": len(judged)}
        order = ("anchor", "tune") if i % 2 == 0 else ("tune", "anchor")
        for part in order:
            if part == "anchor" and not args.no_anchor and not args.shuffle:
                run["anchor"] = anchor(store_dir, judged, test, seed, base_test)
                print(
                    "anchor", json.dumps({k: run["anchor"][k] for k in ("cost_cpu", "cost_wall", "test")}), flush=True
                )
            elif part == "tune":
                run["tune"] = tune_once(
                    store_dir, judged, None if args.shuffle else test, {"seed": seed, **overrides}, base_test
                )
                t = run["tune"]
                print("tune", json.dumps({k: t.get(k) for k in ("cpu", "wall", "adopted", "dev", "test")}), flush=True)
        if "anchor" in run and "tune" in run:
            a, t = run["anchor"], run["tune"]
            run["cost_ratio_cpu"] = round(t["cpu"] / a["cost_cpu"], 3)
            run["cost_ratio_wall"] = round(t["wall"] / a["cost_wall"], 3)
            if a["test"]["delta"] and "test" in t:
                run["gain_ratio"] = round(t["test"]["delta"] / a["test"]["delta"], 3)
            print({k: run.get(k) for k in ("cost_ratio_cpu", "cost_ratio_wall", "gain_ratio")}, flush=True)
        result["runs"].append(run)
        write_json(work / "result.json", result, indent=2)
    if args.shuffle:
        adopted = sum(1 for r in result["runs"] if r["tune"]["adopted"])
        result["null_adopted"] = f"{adopted} of {len(result['runs'])}"
        print("null study: adopted", result["null_adopted"])
    write_json(work / "result.json", result, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
