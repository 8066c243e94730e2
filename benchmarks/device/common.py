"""Shared parts of the device scripts: the machine's description, result files, a deadline, smoke data.

Every script takes ``--out`` (where its JSON result goes; on the device machine ``$OUT``), ``--data`` (the data
folder holding ``scifact/`` and ``xquad_en/``, resolved by :func:`benchmarks.common.data_dir`; ``.dev`` on the
device machine) and ``--smoke`` (a CPU run on a tiny random model and generated data, seconds long, so that the
script is exercised by the test suite and cannot rot between runs on a GPU). The smoke inputs and the result
file come from :mod:`benchmarks.common`.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common.data import add_data_argument, data_dir
from benchmarks.common.report import OUT, write_json
from benchmarks.common.smoke import smoke_beir, smoke_data, smoke_qa, tiny_model

__all__ = [
    "Deadline",
    "add_common_arguments",
    "add_training_arguments",
    "machine",
    "resolve",
    "run_stages",
    "share_minutes",
    "smoke_beir",
    "smoke_qa",
    "tiny_model",
    "work_dir",
    "write_result",
]


def add_common_arguments(p: argparse.ArgumentParser, *, default_out: str) -> None:
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or OUT / default_out))
    add_data_argument(p)
    p.add_argument("--model", default=None, help="the base model (a directory or hub id; default: the offline MiniLM)")
    p.add_argument("--device", default=None, help="cuda, cpu, ... (default: CUDA when available)")
    p.add_argument("--seconds", type=float, default=480.0, help="deadline for the whole script")
    p.add_argument("--smoke", action="store_true", help="a seconds-long CPU run on a tiny model and generated data")


def add_training_arguments(p: argparse.ArgumentParser, stages: tuple[str, ...], *, steps: int) -> None:
    """``--steps``, ``--work``, ``--threads``, ``--only`` of a script that trains models (``steps``: its default)."""
    p.add_argument("--steps", type=int, default=steps, help="optimizer steps per trained model (CPU runs: 87)")
    p.add_argument("--work", type=Path, default=None, help="models and stage files (default: a folder in /tmp)")
    p.add_argument("--threads", type=int, default=8, help="CPU threads (BM25, evaluation)")
    p.add_argument("--only", nargs="+", choices=stages, default=None, help="run these stages only")


def work_dir(args: argparse.Namespace, name: str) -> Path:
    """``--work``, else ``<out>/smoke-inputs/<name>-work`` (smoke) or ``/tmp/rag-hier-device-<name>``."""
    if args.work is not None:
        return Path(args.work)
    return args.out / "smoke-inputs" / f"{name}-work" if args.smoke else Path(f"/tmp/rag-hier-device-{name}")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``--model``/``--device``/``--data`` for the run (the smoke mode builds its model and data)."""
    import torch

    if args.smoke:
        smoke = args.out / "smoke-inputs"
        args.model = tiny_model(smoke / "model")
        args.data = smoke_data(smoke)
        args.device = "cpu"
    args.data = data_dir(args.data)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.model is None:
        from rag_hier.encoders.identity import DEFAULT_MODEL, resolve_model_path

        args.model = resolve_model_path(DEFAULT_MODEL)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def machine() -> dict[str, Any]:
    """The machine, the accelerator (by name) and the versions that produced a result."""
    import faiss
    import sentence_transformers
    import torch
    import transformers

    info: dict[str, Any] = {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "faiss": faiss.__version__,
        "faiss_gpus": faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0,
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda_version=torch.version.cuda
        )
    return info


class Deadline:
    """Seconds left of a script's budget (sections that would not fit are skipped and say so)."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def share_minutes(deadline: Deadline, trainings_left: int, *, reserve: float) -> float:
    """Minutes a training stage may take: its equal share of what is left, after ``reserve`` seconds per stage.

    ``reserve`` is what one stage needs besides training (loading, negatives, the evaluation). Passed to the
    trainers as ``max_minutes``, so that a stage whose step estimate was wrong stops, saves and is evaluated within
    its share instead of running into the next stage's time or past the call; its ``steps_done`` then says so.
    """
    n = max(trainings_left, 1)
    return max((deadline.left() - reserve * n) / n, 30.0) / 60.0


def run_stages(
    result: dict[str, Any],
    stages: list[tuple[str, Callable[[], dict[str, Any]]]],
    deadline: Deadline,
    *,
    out: Path,
    name: str,
    needs: float = 60.0,
) -> list[str]:
    """Run each ``(stage, fn)`` while ``needs`` seconds are left; ``result["runs"][stage]`` gets what ``fn`` returns.

    A stage that would not fit is recorded as skipped, one that raises as failed (the others still run); the
    result file ``<out>/<name>.json`` is rewritten after every stage, so a call stopped midway keeps what ran.
    Returns the stages that completed.
    """
    log = logging.getLogger(f"device.{name}")
    runs = result.setdefault("runs", {})
    done = []
    for stage, fn in stages:
        if deadline.left() < needs:
            runs[stage] = "skipped: deadline"
            continue
        t = time.perf_counter()
        try:
            runs[stage] = fn()
            done.append(stage)
        except Exception as exc:  # one failed stage must not lose the others' figures
            log.exception("stage %s failed", stage)
            runs[stage] = f"failed: {type(exc).__name__}: {exc}"
        log.info("%s done in %.0f s", stage, time.perf_counter() - t)
        write_result(out, name, result)
    return done


def write_result(out: Path, name: str, result: dict[str, Any]) -> Path:
    """Write ``<out>/<name>.json`` (indented, sorted as built) and return its path."""
    return write_json(out / f"{name}.json", result)
