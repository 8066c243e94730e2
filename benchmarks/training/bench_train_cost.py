"""Training cost: seconds per step and peak resident memory of each trainer, against plain MNRL on the same batches.

One process per trainer and dataset. Phase 1 runs the trainer (its own code path, its defaults) for ``--steps``
optimizer steps and records, for every step, the texts it trained on, the step's wall time and the process's
resident memory. Phase 2 trains a fresh copy of the base model with sentence-transformers' plain
``MultipleNegativesRankingLoss`` (no GradCache, AdamW, the same learning rate) on exactly those batches: the
first text column is the anchor, all the other columns are its candidates, so the same texts go through the
encoder with gradient (the model's own dropout, as a plain sentence-transformers run). Phase 2 runs in a child
process watched by the parent, which stops it when its resident memory passes ``--anchor-limit-gb`` (plain MNRL
on a large batch of long texts can take more memory than a shared machine has). A background thread samples the
resident set size every 20 ms; each phase reports its peak and the resident size at its start (model and data
loaded).

Usage::

    C="python -m benchmarks.training.bench_train_cost"
    $C hce-u --dataset scifact            # batch 32, 128 tokens (the goal's setting)
    $C hce-u --dataset xquad              # the trainer's own defaults (256 tokens)
    $C hce-u --dataset xquad --steps 40 --no-anchor   # memory over several epochs

Trainers: ``hce-u``, ``hce-s``, ``hce-j``, ``dhr``, ``svdr``. ``--dataset scifact`` sets batch 32 and 128 tokens for
every trainer (the setting of the memory goal); ``--dataset xquad`` keeps each trainer's defaults (HCE and DHR: the
model's 256 tokens; SVDR: 128-token queries, 256-token passages). The data sets come from the data folder (``--data``,
see ``benchmarks/README.md``). Writes ``<out>/<trainer>-<dataset>.json`` (``--out``, default ``benchmarks/out/cost``).
The first ``--warmup`` steps of each phase are left out of the seconds-per-step median.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import REPO, add_data_argument, data_dir, load_scifact, load_xquad
from benchmarks.common.report import out_path, write_json

log = logging.getLogger("bench_train_cost")


class RssSampler:
    """Samples this process's resident set size in a thread; ``phase(name)`` starts a new peak."""

    def __init__(self, interval: float = 0.02) -> None:
        import psutil

        self._proc = psutil.Process()
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self.starts: dict[str, int] = {}
        self.current: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        return int(self._proc.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            name = self.current
            if name is not None:
                value = self.rss()
                if value > self.peaks.get(name, 0):
                    self.peaks[name] = value
            time.sleep(self.interval)

    def phase(self, name: str) -> None:
        self.starts[name] = self.rss()
        self.peaks[name] = self.starts[name]
        self.current = name

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def base_model(args: argparse.Namespace) -> str:
    """``--model``, else the offline all-MiniLM-L6-v2 (every trainer's default)."""
    from rag_hier.encoders import DEFAULT_MODEL

    return args.model or DEFAULT_MODEL


def gb(x: int) -> float:
    return round(x / 2**30, 3)


# ----------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------
def scifact(data: Path | None) -> dict[str, Any]:
    d = load_scifact(data)
    return {"documents": d.documents, "queries": d.queries, "qrels": d.train_qrels, "max_passage_words": 0}


def xquad(data: Path | None) -> dict[str, Any]:
    d = load_xquad(data)
    return {
        "documents": d.documents,
        "questions": d.questions,
        "queries": {q.qid: q.question for q in d.questions},
        "qrels": {q.qid: {f"{q.doc_id}#{q.paragraph_index}": 1} for q in d.questions},
        "max_passage_words": 0,
    }


# ----------------------------------------------------------------------------------------------------
# phase 1: the trainers, with their batches recorded
# ----------------------------------------------------------------------------------------------------
class StepLog:
    def __init__(self, sampler: RssSampler) -> None:
        self.sampler = sampler
        self.batches: list[list[list[str]]] = []
        self.seconds: list[float] = []
        self.rss_after: list[int] = []
        self._t = 0.0

    def begin(self) -> None:
        self._t = time.perf_counter()

    def end(self) -> None:
        self.seconds.append(time.perf_counter() - self._t)
        self.rss_after.append(self.sampler.rss())


def _decode(model: Any, features: list[dict[str, Any]]) -> list[list[str]]:
    tok = model.tokenizer
    return [tok.batch_decode(f["input_ids"], skip_special_tokens=True) for f in features]


def _st_callback(steps: StepLog) -> Any:
    from transformers import TrainerCallback

    class CB(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            steps.begin()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            steps.end()

    return CB()


def _record_features(cls: Any, steps: StepLog, holder: dict[str, Any]) -> Any:
    """Wrap ``cls.forward`` so each call (one per micro-batch) records the texts of its columns."""
    import torch

    original = cls.forward

    def forward(self: Any, sentence_features: Any, labels: Any = None) -> Any:
        feats = list(sentence_features)
        if type(self) is cls and torch.is_grad_enabled():
            steps.batches.append([[str(t) for t in col] for col in holder["decode"](feats)])
        return original(self, feats, labels)

    cls.forward = forward
    return original


def run_hce(args: argparse.Namespace, data: dict[str, Any], steps: StepLog) -> dict[str, Any]:
    import rag_hier.training.hce.trainer as hce_trainer
    from rag_hier.training.hce import HCEConfig, HCETrainer
    from rag_hier.training.hce.loss import HierarchicalContrastiveLoss, JointLoss

    mode = {"hce-u": "unsupervised", "hce-s": "supervised", "hce-j": "joint"}[args.trainer]
    overrides: dict[str, Any] = {"mode": mode, "dev_size": 0, "dev_fraction": 0.0, "recluster": "always"}
    if args.dataset == "scifact":
        overrides.update(batch_size=32, max_seq_length=128)
    if args.steps_per_epoch:
        overrides["steps_per_epoch"] = args.steps_per_epoch
    overrides["max_steps"] = args.steps
    if args.mini_batch_size is not None:
        overrides["mini_batch_size"] = args.mini_batch_size or None
    cfg = HCEConfig(**overrides)
    trainer = HCETrainer(cfg, model=base_model(args), device="cpu", show_progress_bar=False)
    embeddings = None
    if args.corpus_embeddings:  # the base model's corpus vectors, e.g. bench_hce.py's cached ones (same texts)
        embeddings = np.load(args.corpus_embeddings, allow_pickle=False)
    holder = {"decode": lambda feats: _decode(trainer.model, feats)}
    target = JointLoss if mode == "joint" else HierarchicalContrastiveLoss
    original = _record_features(target, steps, holder)
    make = hce_trainer.st_training

    def patched(method: str) -> Any:
        st = make(method)

        class Recording(st.trainer):  # type: ignore[misc,name-defined]
            def __init__(self, *a: Any, **k: Any) -> None:
                super().__init__(*a, **k)
                self.add_callback(_st_callback(steps))

        return st._replace(trainer=Recording)

    hce_trainer.st_training = patched  # type: ignore[assignment]
    import tempfile

    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = trainer.train(
                data["documents"],
                tmp,
                queries=data["queries"] if mode != "unsupervised" else None,
                qrels=data["qrels"] if mode != "unsupervised" else None,
                max_passage_words=data["max_passage_words"],
                corpus_embeddings=embeddings,
            )
    finally:
        target.forward = original
        hce_trainer.st_training = make  # type: ignore[assignment]
    return {
        "config": cfg.to_dict(),
        "epochs": [{"epoch": e.epoch, "steps": e.steps, "seconds": e.seconds} for e in result.history],
        "seconds_total": round(result.seconds, 1),
    }


def run_dhr(args: argparse.Namespace, data: dict[str, Any], steps: StepLog) -> dict[str, Any]:
    import rag_hier.training.dhr.trainer as dhr  # the module whose st_training hook is patched below
    from rag_hier.training.dhr import DHRExample, DHRTrainer, DHRTrainingConfig, examples_from_questions

    if "questions" in data:
        examples = examples_from_questions(data["questions"], data["documents"], max_passage_words=0)
    else:
        examples = [
            DHRExample(data["queries"][q], d, (f"{d}#0",))
            for q, rel in data["qrels"].items()
            for d, g in rel.items()
            if g > 0 and q in data["queries"]
        ]
    overrides: dict[str, Any] = {"max_passage_words": 0, "device": "cpu", "base_model": base_model(args)}
    if args.dataset == "scifact":
        overrides.update(batch_size=32, max_seq_length=128)
    if args.mini_batch_size is not None:
        overrides["mini_batch_size"] = args.mini_batch_size or None
    cfg = DHRTrainingConfig(**overrides)
    trainer = DHRTrainer(cfg)
    make = dhr.st_training
    originals: list[tuple[Any, Any]] = []

    def patched(method: str) -> Any:
        st = make(method)

        class Recording(st.trainer):  # type: ignore[misc,name-defined]
            def __init__(self, *a: Any, **k: Any) -> None:
                super().__init__(*a, **k)
                self.add_callback(_st_callback(steps))
                model = k["model"]
                holder["decode"] = lambda feats: _decode(model, feats)

        return st._replace(trainer=Recording)

    holder: dict[str, Any] = {}
    from sentence_transformers.sentence_transformer import losses as st_losses

    for cls in (st_losses.MultipleNegativesRankingLoss, st_losses.CachedMultipleNegativesRankingLoss):
        originals.append((cls, _record_features(cls, steps, holder)))
    dhr.st_training = patched  # type: ignore[assignment]
    # stop after --steps optimizer steps
    orig_args = DHRTrainer._args

    def limited(self: Any, workdir: Path, **over: Any) -> Any:
        return orig_args(self, workdir, max_steps=args.steps, **over)

    DHRTrainer._args = limited  # type: ignore[method-assign]
    import tempfile

    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = trainer.train(data["documents"], tmp, examples=examples)
    finally:
        for cls, orig in originals:
            cls.forward = orig
        dhr.st_training = make  # type: ignore[assignment]
        DHRTrainer._args = orig_args  # type: ignore[method-assign]
    # the cached loss calls the plain one inside: keep one record per micro-batch
    return {"config": cfg.to_dict(), "rows": dict(result.rows), "seconds_total": round(result.seconds, 1)}


def run_svdr(args: argparse.Namespace, data: dict[str, Any], steps: StepLog) -> dict[str, Any]:
    from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig

    overrides: dict[str, Any] = {"max_steps": args.steps, "log_every": 1}
    if args.dataset == "scifact":
        overrides.update(batch_size=32)
    if args.mini_batch_size is not None and hasattr(SvdrTrainingConfig, "mini_batch_size"):
        overrides["mini_batch_size"] = args.mini_batch_size or None
    cfg = SvdrTrainingConfig(**overrides)
    kwargs: dict[str, Any] = {}
    if args.dataset == "scifact":
        kwargs = {"query_max_length": 128, "document_max_length": 128}
    from rag_hier.encoders.vocab import VocabEncoder

    encoder = VocabEncoder(base_model(args), **kwargs)
    answers = {q.qid: q.answers for q in data.get("questions", ()) if q.answers}  # QA data: the paper's filter
    trainer = SvdrTrainer.from_documents(
        encoder,
        data["documents"],
        data["queries"],
        data["qrels"],
        config=cfg,
        max_passage_words=0,
        answers=answers or None,
    )
    orig_inputs = SvdrTrainer._step_inputs

    def recording(self: Any, batch: Any, rng: Any) -> Any:
        q, p, mask = orig_inputs(self, batch, rng)
        n = len(q)
        steps.batches.append([q, p[:n], *([p[n:]] if len(p) > n else [])])
        return q, p, mask

    SvdrTrainer._step_inputs = recording  # type: ignore[method-assign]
    import torch

    orig_step = torch.optim.AdamW.step

    def step(self: Any, *a: Any, **k: Any) -> Any:  # a step = from the previous update to this one, mining included
        out = orig_step(self, *a, **k)
        steps.end()
        steps.begin()
        return out

    torch.optim.AdamW.step = step  # type: ignore[method-assign]
    steps.begin()
    try:
        result = trainer.train()
    finally:
        SvdrTrainer._step_inputs = orig_inputs  # type: ignore[method-assign]
        torch.optim.AdamW.step = orig_step  # type: ignore[method-assign]
    import dataclasses

    return {"config": dataclasses.asdict(cfg), "encoder": repr(encoder), "seconds_total": round(result.seconds, 1)}


# ----------------------------------------------------------------------------------------------------
# phase 2: plain MNRL on the same batches
# ----------------------------------------------------------------------------------------------------
def run_mnrl(args: argparse.Namespace, batches: list[list[list[str]]], lr: float, steps: StepLog) -> dict[str, Any]:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from rag_hier.encoders.dense import resolve_model_path

    model = SentenceTransformer(resolve_model_path(base_model(args)), device="cpu")
    if args.dataset == "scifact":
        model.max_seq_length = 128
    model.train()
    loss = MultipleNegativesRankingLoss(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    prepare = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers 6 renamed it
    for batch in batches:
        width = min(len(c) for c in batch)
        cols = [c[:width] for c in batch]
        steps.begin()
        feats = [prepare(c) for c in cols]
        value = loss(feats, None)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        steps.end()
    return {"texts_per_step": [sum(len(c) for c in b) for b in batches]}


def anchor_child(args: argparse.Namespace) -> int:
    """Phase 2 on its own (child process): read the batches, train plain MNRL on them, write the summary."""
    import torch

    torch.set_num_threads(args.threads)
    spec = json.loads(Path(args.anchor_from).read_text(encoding="utf-8"))
    sampler = RssSampler()
    sampler.phase("mnrl")
    anchor = StepLog(sampler)
    extra = run_mnrl(args, spec["batches"], spec["lr"], anchor)
    out = {
        **summarize(anchor, args.warmup),
        "rss_start_gb": gb(sampler.starts["mnrl"]),
        "rss_peak_gb": gb(sampler.peaks["mnrl"]),
        **extra,
    }
    sampler.stop()
    Path(args.anchor_from).with_suffix(".out.json").write_text(json.dumps(out), encoding="utf-8")
    return 0


def run_anchor(args: argparse.Namespace, batches: list[list[list[str]]], lr: float) -> dict[str, Any]:
    """Phase 2 in a child process; stopped (and reported so) when its RSS passes ``--anchor-limit-gb``."""
    import subprocess
    import sys
    import tempfile

    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "anchor.json"
        spec.write_text(json.dumps({"batches": batches, "lr": lr}), encoding="utf-8")
        cmd = [sys.executable, "-m", "benchmarks.training.bench_train_cost", args.trainer, "--dataset", args.dataset]
        cmd += ["--data", str(data_dir(args.data)), "--threads", str(args.threads), "--warmup", str(args.warmup)]
        cmd += ["--anchor-from", str(spec), *(["--model", args.model] if args.model else [])]
        child = subprocess.Popen(cmd, cwd=REPO)
        proc = psutil.Process(child.pid)
        peak = 0
        limit = args.anchor_limit_gb * 2**30
        while child.poll() is None:
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            if peak > limit:
                child.kill()
                child.wait()
                return {"stopped": f"resident memory passed {args.anchor_limit_gb} GB", "rss_peak_gb": gb(peak)}
            time.sleep(0.05)
        result = spec.with_suffix(".out.json")
        if child.returncode != 0 or not result.is_file():
            return {"failed": f"exit status {child.returncode}", "rss_peak_gb": gb(peak)}
        return dict(json.loads(result.read_text(encoding="utf-8")))


def summarize(steps: StepLog, warmup: int) -> dict[str, Any]:
    timed = steps.seconds[warmup:] or steps.seconds
    return {
        "steps": len(steps.seconds),
        "seconds_per_step_median": round(statistics.median(timed), 2) if timed else None,
        "seconds_per_step": [round(s, 2) for s in steps.seconds],
        "rss_after_step_gb": [gb(x) for x in steps.rss_after],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trainer", choices=("hce-u", "hce-s", "hce-j", "dhr", "svdr"))
    p.add_argument("--dataset", choices=("scifact", "xquad"), default="scifact")
    add_data_argument(p)
    p.add_argument("--model", default=None, help="the base model (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--out", type=Path, default=out_path("cost"), help="where <trainer>-<dataset>.json goes")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--steps-per-epoch", type=int, default=None, help="HCE: EM epoch length (default: the trainer's)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mini-batch-size", type=int, default=None, help="override the trainer's (0: plain forward)")
    p.add_argument("--corpus-embeddings", default=None, help="HCE: the base model's corpus vectors (.npy)")
    p.add_argument("--no-anchor", action="store_true", help="skip the plain-MNRL phase")
    p.add_argument("--anchor-limit-gb", type=float, default=8.0, help="stop the plain-MNRL phase above this RSS")
    p.add_argument("--anchor-from", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    if args.anchor_from:
        return anchor_child(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("transformers", "sentence_transformers", "httpx", "datasets", "faiss", "bm25s"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sampler = RssSampler()
    data = scifact(args.data) if args.dataset == "scifact" else xquad(args.data)
    load = [os.getloadavg()]
    sampler.phase("trainer")
    steps = StepLog(sampler)
    runner = {"dhr": run_dhr, "svdr": run_svdr}.get(args.trainer, run_hce)
    info = runner(args, data, steps)
    trainer_summary = {
        **summarize(steps, args.warmup),
        "rss_start_gb": gb(sampler.starts["trainer"]),
        "rss_peak_gb": gb(sampler.peaks["trainer"]),
        "texts_per_step": [sum(len(c) for c in b) for b in steps.batches[: len(steps.seconds)]],
        **info,
    }
    load.append(os.getloadavg())
    result: dict[str, Any] = {"trainer": args.trainer, "data": args.dataset, "phase_trainer": trainer_summary}
    path = args.out / f"{args.trainer}-{args.dataset}{args.tag}.json"
    write_json(path, result)  # kept if phase 2 fails
    if not args.no_anchor and steps.batches:
        lr = float(info.get("config", {}).get("learning_rate", 2e-5))
        result["phase_mnrl"] = run_anchor(args, steps.batches[: len(steps.seconds)], lr)
        t, m = trainer_summary["seconds_per_step_median"], result["phase_mnrl"].get("seconds_per_step_median")
        if t and m:
            result["seconds_ratio_trainer_over_mnrl"] = round(t / m, 2)
        load.append(os.getloadavg())
    sampler.stop()
    result["load_average"] = [list(np.round(x, 2)) for x in load]
    result["machine"] = f"{platform.processor() or platform.machine()}, {args.threads} torch threads, shared host"
    write_json(path, result)
    print(json.dumps({k: v for k, v in result.items()}, indent=1)[:4000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
