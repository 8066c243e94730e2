"""Shared parts of the device scripts: the machine's description, result files, a deadline, smoke data.

Every script takes ``--out`` (where its JSON result goes; on the device machine ``$OUT``), ``--data`` (the
SciFact folder; default ``../shared/data/scifact`` beside the repository) and ``--smoke`` (a CPU run on a
tiny random model and a generated BEIR-shaped corpus, seconds long, so that the script is exercised by the
test suite and cannot rot between runs on a GPU).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "scifact"


def add_common_arguments(p: argparse.ArgumentParser, *, default_out: str) -> None:
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / "benchmarks" / "out" / default_out))
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the BEIR SciFact folder")
    p.add_argument("--model", default=None, help="the base model (a directory or hub id; default: the offline MiniLM)")
    p.add_argument("--device", default=None, help="cuda, cpu, ... (default: CUDA when available)")
    p.add_argument("--seconds", type=float, default=480.0, help="deadline for the whole script")
    p.add_argument("--smoke", action="store_true", help="a seconds-long CPU run on a tiny model and generated data")


def add_training_arguments(p: argparse.ArgumentParser, stages: tuple[str, ...]) -> None:
    """``--steps``, ``--work``, ``--threads``, ``--only`` of a script that trains models at a 10x step budget."""
    p.add_argument("--steps", type=int, default=870, help="optimizer steps per trained model (the docs: 87)")
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
        args.data = smoke_beir(smoke / "scifact")
        args.device = "cpu"
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
    path = out / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return path


def tiny_model(path: Path) -> str:
    """The test suite's tiny random BERT (built once per folder)."""
    from rag_hier.testing import build_tiny_model

    if not (path / "modules.json").exists():
        build_tiny_model(path)
    return str(path)


_WORDS = [
    *("cell", "protein", "gene", "tumor", "immune", "virus", "brain", "heart", "blood", "insulin", "muscle"),
    *("bone", "liver", "lung", "kidney", "neuron", "enzyme", "receptor", "antibody", "vaccine", "mutation"),
    *("therapy", "dose", "trial", "risk", "mortality", "infection", "cancer", "diabetes"),
]


def smoke_beir(path: Path, n_docs: int = 60, n_queries: int = 40, seed: int = 0) -> Path:
    """A small BEIR-shaped folder (``corpus.jsonl.gz``, ``queries.jsonl``, ``qrels/{train,test}.tsv``).

    Each query repeats words of its one relevant document, so a trained model has something to learn.
    """
    if (path / "qrels" / "test.tsv").exists():
        return path
    rng = random.Random(seed)
    (path / "qrels").mkdir(parents=True, exist_ok=True)
    docs = {f"d{i}": " ".join(rng.choices(_WORDS, k=40)) for i in range(n_docs)}
    with gzip.open(path / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        for i, (doc_id, text) in enumerate(docs.items()):
            fh.write(json.dumps({"_id": doc_id, "title": f"Study {i}", "text": text}) + "\n")
    rows: dict[str, list[str]] = {"train": [], "test": []}
    with (path / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for q in range(n_queries):
            doc_id = f"d{rng.randrange(n_docs)}"
            words = docs[doc_id].split()
            fh.write(json.dumps({"_id": f"q{q}", "text": " ".join(rng.sample(words, 6))}) + "\n")
            rows["train" if q % 4 else "test"].append(f"q{q}\t{doc_id}\t1")
    for split, lines in rows.items():
        (path / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    return path


def smoke_qa(path: Path, n_docs: int = 8, paragraphs: int = 3, seed: int = 0) -> Path:
    """A small XQuAD-shaped folder (``documents.jsonl``, ``questions.jsonl``): documents → paragraphs → questions.

    Each question repeats words of its paragraph and names one of them as its answer.
    """
    if (path / "questions.jsonl").exists():
        return path
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    docs, questions = [], []
    for d in range(n_docs):
        paras = [" ".join(rng.choices(_WORDS, k=30)) for _ in range(paragraphs)]
        docs.append({"doc_id": f"doc{d}", "title": f"Topic {d}", "paragraphs": paras})
        for i, text in enumerate(paras):
            words = text.split()
            answer = words[5]
            questions.append(
                {
                    "qid": f"q{d}-{i}",
                    "question": " ".join(rng.sample(words, 6)),
                    "answers": [answer],
                    "answer_starts": [text.index(answer)],
                    "doc_id": f"doc{d}",
                    "paragraph_index": i,
                }
            )
    for name, rows in (("documents.jsonl", docs), ("questions.jsonl", questions)):
        (path / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
