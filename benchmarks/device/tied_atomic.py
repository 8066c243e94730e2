"""Tied-Atomic and DSI-atomic at ten times the CPU step budget of docs/tied_atomic.md, on one GPU.

The protocol of docs/tied_atomic.md's SciFact test table (``benchmarks/retrieval/bench_tied_atomic.py``: an
encoder-decoder warm-started from all-MiniLM-L6-v2 with cross-attention copied from self-attention, 128 tokens,
batch 32, lr 1e-4, one BM25 negative per query from the top 10, seed 42, 300 test queries), with ``--steps``
optimizer steps instead of 87 (default 870), in this order while the deadline allows: untrained MiniLM, MiniLM
fine-tuned with the same rows and steps, Tied-Atomic, DSI-atomic (retrieval and indexing tasks mixed;
``--dsi-objective seq2seq``, the default, is the paper's baseline: docids as new vocabulary tokens, target
``[docid, eos]``, teacher forcing, cross-entropy over the whole vocabulary; ``docid_softmax`` is the
classification head over the Tied-Atomic embedding). The figures go into one ``tied_atomic.json`` (models stay in
``--work``); the DSI run records its loss log and the probe losses at the start and the end.

Run (repository root)::

    python -m benchmarks.device.tied_atomic --data ../shared/data --out benchmarks/out/device
    python -m benchmarks.device.tied_atomic --smoke --out /tmp/smoke      # CPU, tiny model, seconds

Expected on one H100: not measured yet; from the CPU runs' step counts and the H100's 0.43 s per +CT step
(`benchmarks/device/README.md`), about 6 minutes for MiniLM and Tied-Atomic at 870 steps each, DSI-atomic
(5,183 + 919 examples a pass, one text per example) about 4 minutes with its probes: one call holds
``--only minilm-ft tied`` or ``--only dsi``.
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
    work_dir,
    write_result,
)

logger = logging.getLogger("device.tied_atomic")

RUNS = ("minilm-base", "minilm-ft", "tied", "dsi")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, default_out="device")
    add_training_arguments(p, RUNS)
    p.add_argument(
        "--dsi-objective",
        choices=("seq2seq", "docid_softmax"),
        default="seq2seq",
        help="the DSI run: seq2seq (the paper's baseline) or docid_softmax (classification head)",
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
    result: dict[str, Any] = {"machine": machine(), "device": args.device, "steps": steps, "batch_size": batch}

    def stage(name: str) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            extra = ["--dsi-objective", args.dsi_objective] if name == "dsi" else []
            bench_tied_atomic.main([name, *common, *extra])
            return json.loads((args.work / f"{name}.json").read_text(encoding="utf-8"))

        return run

    stages = [(name, stage(name)) for name in RUNS if not args.only or name in args.only]
    run_stages(result, stages, Deadline(args.seconds), out=args.out, name="tied_atomic", needs=0 if args.smoke else 60)
    print(write_result(args.out, "tied_atomic", result).read_text())
    return 0 if all(isinstance(v, dict) for v in result["runs"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
