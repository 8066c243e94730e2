"""HCE-S and HCE-J against hard-negative +CT at ten times the CPU step budget of docs/hce.md, on one GPU.

The protocol of docs/hce.md's SciFact table (``benchmarks/retrieval/bench_hce.py``: all-MiniLM-L6-v2, 128 tokens, batch
32, lr 1e-4, τ 0.01, 4 negatives per query, GradCache mini-batches of 32, seed 42, 300 test queries), with
``--steps`` optimizer steps instead of 87 (default 300), in this order while the deadline allows: base, +CT with
4 BM25 hard negatives, HCE-S and HCE-J (3 EM epochs), then the paired per-query comparison of what ran. The
figures go into one ``hce.json``; each trained model's test vectors (``corpus-<name>.npy``, ``queries-<name>.npy``,
float32, 8 MB for SciFact) are copied beside it, so runs made in separate calls are compared afterwards on any
machine with ``python -m benchmarks.retrieval.bench_hce compare --out DIR --compare base ct-bm25 hce-s hce-j``
(models stay in ``--work``).

Run (repository root)::

    python -m benchmarks.device.hce --data ../shared/data --out benchmarks/out/device
    python -m benchmarks.device.hce --smoke --out /tmp/smoke      # CPU, tiny model, seconds

Expected on one H100: 0.43 s per +CT step and 0.44 s per HCE-S step at batch 32 (measured there by
``gpu_check``); HCE-J, not measured there, about 0.9 s (its CPU run's seconds per step are 2.06 times HCE-S's:
3,060 s vs 1,489 s for 87 steps, docs/hce.md). Each training stage also loads, mines its negatives and encodes
SciFact (about 40 s, ``RESERVE``). So ``--only base ct-bm25 hce-s`` at 300 steps: 11 s + 2 × (130 s + 40 s) ≈ 6
minutes, and ``--only hce-j`` at 300 steps ≈ 5 minutes: each one call of ``run.sh ...:360``. A training stage is
capped (``max_minutes``) at its share of what is left, so a wrong estimate stops it early (``steps_done`` says
so) instead of losing the stages after it; every stage's figures are written as it finishes.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from collections.abc import Callable
from typing import Any

from benchmarks.device.common import (
    Deadline,
    add_common_arguments,
    add_training_arguments,
    machine,
    resolve,
    run_stages,
    share_minutes,
    work_dir,
    write_result,
)

logger = logging.getLogger("device.hce")

STEPS = 300
RESERVE = 40.0
"""Seconds a training stage needs besides its steps on the device: loading, BM25 or tree negatives, the evaluation."""

# (name, bench_hce stage, its extra options); the name is what `compare` reads back
RUNS = (
    ("base", "base", []),
    ("ct-bm25", "ct", ["--ct-negatives", "bm25", "--tag=-bm25"]),
    ("hce-s", "hce-s", ["--epochs", "3"]),
    ("hce-j", "hce-j", ["--epochs", "3"]),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, default_out="device")
    add_training_arguments(p, tuple(name for name, _, _ in RUNS), steps=STEPS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = resolve(args)
    args.work = work_dir(args, "hce")
    from benchmarks.retrieval import bench_hce

    steps, batch = (4, 8) if args.smoke else (args.steps, 32)
    common = [
        *("--data", str(args.data), "--device", args.device, "--base-model", str(args.model)),
        *("--out", str(args.work), "--threads", str(args.threads), "--max-seq-length", "128"),
    ]
    budget = [*("--batch-size", str(batch), "--steps", str(steps), "--negatives", "4")]
    if args.smoke:
        budget += ["--negative-depth", "8", "--mini-batch-size", "4"]
    result: dict[str, Any] = {"machine": machine(), "device": args.device, "steps": steps, "batch_size": batch}

    deadline = Deadline(args.seconds)
    chosen = [(name, s, extra) for name, s, extra in RUNS if not args.only or name in args.only]
    trainings = [name for name, s, _ in chosen if s != "base"]

    def stage(name: str, bench_stage: str, extra: list[str]) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            argv = [*common]
            if bench_stage != "base":  # a training stage: capped at its share of the time left
                left = len(trainings) - trainings.index(name)
                argv += [*budget, *extra, "--max-minutes", f"{share_minutes(deadline, left, reserve=RESERVE):.2f}"]
            code = bench_hce.main([bench_stage, *argv])
            if code != 0:
                raise RuntimeError(f"bench_hce.py {bench_stage} exited with {code}")
            vectors = ["base_corpus_len128.npy"] if name == "base" else [f"corpus-{name}.npy", f"queries-{name}.npy"]
            for file in vectors:
                shutil.copyfile(args.work / file, args.out / file)
            return json.loads((args.work / f"{name}.json").read_text(encoding="utf-8"))

        return run

    stages = [(name, stage(name, s, extra)) for name, s, extra in chosen]
    needs = 0.0 if args.smoke else 60.0
    done = run_stages(result, stages, deadline, out=args.out, name="hce", needs=needs)
    if len(done) >= 2:
        bench_hce.main(["compare", *common, "--compare", *done])
        result["compare"] = json.loads((args.work / "compare.json").read_text(encoding="utf-8"))
    print(write_result(args.out, "hce", result).read_text())
    return 0 if all(isinstance(v, dict) for v in result["runs"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
