"""Tied-Atomic against the fine-tuned dual encoder, and DSI-atomic, at a multiple of the CPU step budget, on one GPU.

The protocol of docs/tied_atomic.md's SciFact test table (``benchmarks/retrieval/bench_tied_atomic.py``: an
encoder-decoder warm-started from all-MiniLM-L6-v2 with cross-attention copied from self-attention, 128 tokens,
batch 32, lr 1e-4, one BM25 negative per query from the top 10, seed 42, 300 test queries), with ``--steps``
optimizer steps instead of 87 (default 400), in this order while the deadline allows: untrained MiniLM, MiniLM
fine-tuned with the same rows and steps, Tied-Atomic, DSI-atomic (retrieval and indexing tasks mixed;
``--dsi-objective seq2seq``, the default, is the paper's baseline: docids as new vocabulary tokens, target
``[docid, eos]``, teacher forcing, cross-entropy over the whole vocabulary; ``docid_softmax`` is the
classification head over the Tied-Atomic embedding). The fine-tuned MiniLM trains with Tied-Atomic's similarity
and temperature by default (``--minilm-similarity dot --minilm-scale 1``: raw dot products, no Normalize module,
scale 1), so that the pair differs in the model only; ``--minilm-similarity cosine --minilm-scale 20`` is
sentence-transformers' recipe. The figures go into one ``tied_atomic.json``, rewritten after every stage (models
stay in ``--work``); the DSI run records its loss log and the probe losses at the start and the end.

Run (repository root)::

    python -m benchmarks.device.tied_atomic --data ../shared/data --out benchmarks/out/device
    python -m benchmarks.device.tied_atomic --smoke --out /tmp/smoke      # CPU, tiny model, seconds

Expected on one H100 (an estimate, not measured there): on the 2-core CPU host a MiniLM fine-tuning step took
12.3 s and a Tied-Atomic step 13.1 s (whole runs of 87 steps: 1,070 s and 1,136 s, docs/tied_atomic.md); scaled by
the one step measured on both machines (HCE-S: 17.1 s on the CPU host, 0.44 s on the H100, a factor 0.026), 0.32 s
and 0.34 s. At 400 steps: 2 × (about 130 s + 45 s of loading, negatives and encoding SciFact, ``RESERVE``) ≈ 6
minutes for ``--only minilm-ft tied``, one call of ``run.sh tied_atomic:360``; DSI-atomic (11.6 s a step on one
CPU thread) fits one call alone. A training stage is capped (``max_minutes``) at its share of what is left, so a
wrong estimate stops it early (``steps_done`` says so) instead of losing the stages after it.
"""

from __future__ import annotations

import argparse
import json
import logging
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

logger = logging.getLogger("device.tied_atomic")

RUNS = ("minilm-base", "minilm-ft", "tied", "dsi")
TRAINED = ("minilm-ft", "tied", "dsi")
STEPS = 400
RESERVE = 45.0
"""Seconds a training stage needs besides its steps on the device: loading, BM25 negatives, encoding SciFact."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, default_out="device")
    add_training_arguments(p, RUNS, steps=STEPS)
    p.add_argument(
        "--minilm-similarity",
        choices=("cosine", "dot"),
        default="dot",
        help="the fine-tuned MiniLM's similarity (default dot: Tied-Atomic's raw dot products)",
    )
    p.add_argument("--minilm-scale", type=float, default=1.0, help="its loss scale (default 1: Tied-Atomic's)")
    p.add_argument(
        "--dsi-objective",
        choices=("seq2seq", "docid_softmax"),
        default="seq2seq",
        help="the DSI run: seq2seq (the paper's baseline) or docid_softmax (classification head)",
    )
    p.add_argument(
        "--docid-lr",
        type=float,
        default=None,
        help="the DSI run, docid_softmax: the rows' own learning rate (XQuAD-en on a CPU: 1e-1 learns, see docs)",
    )
    p.add_argument(
        "--dsi-init",
        choices=("random", "mean"),
        default="random",
        help="the DSI run, seq2seq: new docid rows drawn by the model's initializer or at the vocabulary's mean",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args = resolve(args)
    args.work = work_dir(args, "tied")
    from benchmarks.retrieval import bench_tied_atomic

    steps, batch = (3, 4) if args.smoke else (args.steps, 32)
    common = [
        *("--data", str(args.data), "--device", args.device, "--minilm", str(args.model), "--out", str(args.work)),
        *("--threads", str(args.threads), "--steps", str(steps), "--batch-size", str(batch)),
    ]
    if args.smoke:
        common += ["--max-seq-length", "32", "--depth", "4"]
    result: dict[str, Any] = {
        "machine": machine(),
        "device": args.device,
        "steps": steps,
        "batch_size": batch,
        "minilm_loss": f"MNRL {args.minilm_similarity} scale {args.minilm_scale}",
    }

    deadline = Deadline(args.seconds)
    chosen = [name for name in RUNS if not args.only or name in args.only]
    trainings = [name for name in chosen if name in TRAINED]

    def stage(name: str) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            extra = ["--dsi-objective", args.dsi_objective] if name == "dsi" else []
            if name == "dsi" and args.dsi_objective == "docid_softmax" and args.docid_lr is not None:
                extra += ["--docid-lr", str(args.docid_lr)]
            if name == "dsi" and args.dsi_objective == "seq2seq":
                extra += ["--dsi-init", args.dsi_init]
            if name == "minilm-ft":
                extra = ["--minilm-similarity", args.minilm_similarity, "--minilm-scale", str(args.minilm_scale)]
            if name in TRAINED:  # capped at its share of the time left, so an overrun cannot eat the next stage
                left = len(trainings) - trainings.index(name)
                extra += ["--max-minutes", f"{share_minutes(deadline, left, reserve=RESERVE):.2f}"]
            bench_tied_atomic.main([name, *common, *extra])
            return json.loads((args.work / f"{name}.json").read_text(encoding="utf-8"))

        return run

    stages = [(name, stage(name)) for name in chosen]
    run_stages(result, stages, deadline, out=args.out, name="tied_atomic", needs=0 if args.smoke else 60)
    print(write_result(args.out, "tied_atomic", result).read_text())
    return 0 if all(isinstance(v, dict) for v in result["runs"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
