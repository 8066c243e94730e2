"""DHR trained at five times the default budget on XQuAD-en, tested on documents unseen in training, on one GPU.

The protocol of docs/dhr.md (``benchmarks/retrieval/bench_dhr_xquad.py``: the 48 documents halved by document with
``random.Random(0)``; DHR trains on the questions of one half over those documents only and is scored on the
600 questions of the other half, retrieving from all 48). Two stages, each saved as it finishes: the untrained
model, then the ``e5-lr2e-5`` variant (5 epochs at the default learning rate 2e-5; the default is 1 epoch) with
document- and passage-level top-k, flat and hierarchical, and the paired difference against the untrained model.
The results go into one ``dhr.json``. With 48 documents the default k1 = 500 keeps every document, so
hierarchical search here is flat search: this row measures training, not the document stage.

Run (repository root)::

    python -m benchmarks.device.dhr --data ../shared/data --out benchmarks/out/device
    python -m benchmarks.device.dhr --smoke --out /tmp/smoke      # CPU, tiny model, seconds

Expected on one H100 (an estimate, not measured there): on the 2-core CPU host, in one sitting at the same load
(≈ 12), a DHR step of both levels (48-64 texts of 256 tokens) took 48.7 s and an HCE-S step (192 texts of 128
tokens, GradCache) 191.8 s (medians of 4 steps: ``python -m benchmarks.training.bench_train_cost dhr --dataset
xquad --steps 4 --no-anchor`` and ``... hce-s --dataset scifact --steps 4 --no-anchor``). An HCE-S step takes
0.44 s on the H100 (``gpu_check``), so a DHR step about 0.11 s if it scales, and at most about 0.44 s if the
H100's step is bound by per-step overheads as HCE-S's seems to be. 5 epochs = 370 steps: 40-165 s, plus two
evaluations of the 48 documents (seconds each): inside a 360 s call even at the upper bound. DHR's trainer has no
time cap, so the step count, not the deadline, bounds the training stage.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.device.common import (
    Deadline,
    add_common_arguments,
    machine,
    resolve,
    run_stages,
    work_dir,
    write_result,
)

VARIANT = "e5-lr2e-5"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, default_out="device")
    p.add_argument("--work", type=Path, default=None, help="models and stage files (default: a folder in /tmp)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = resolve(args)
    args.work = work_dir(args, "dhr")
    from benchmarks.retrieval import bench_dhr_xquad

    common = ["--data", str(args.data), "--out", str(args.work), "--device", args.device, "--base-model", args.model]
    variant = "e1-lr2e-5" if args.smoke else VARIANT
    result: dict[str, Any] = {"machine": machine(), "device": args.device, "variant": variant}

    def stage(train: bool) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            argv = ["--split", "test", *common, *(["--train", variant] if train else ["--only-untrained"])]
            code = bench_dhr_xquad.main(argv)
            if code != 0:
                raise RuntimeError(f"bench_dhr_xquad.py exited with {code}")
            out = {"results": json.loads((args.work / "test-results.json").read_text(encoding="utf-8"))}
            if train:
                out["paired"] = (args.work / "test-paired.md").read_text(encoding="utf-8")
            return out

        return run

    needs = 0.0 if args.smoke else 60.0
    stages = [("untrained", stage(False)), (variant, stage(True))]
    run_stages(result, stages, Deadline(args.seconds), out=args.out, name="dhr", needs=needs)
    print(write_result(args.out, "dhr", result).read_text())
    return 0 if all(isinstance(v, dict) for v in result["runs"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
