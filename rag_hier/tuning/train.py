"""Training a candidate model for a store: the recipes registered in :mod:`rag_hier.tuning.recipes`.

:func:`train_candidate` runs the recipe the configuration's ``method`` names. The built-in ones live here:
``contrastive``: sentence-transformers' :class:`~sentence_transformers.SentenceTransformerTrainer` with its
cached multiple-negatives ranking loss (GradCache mini-batches, both directions, scale ``1 / temperature``),
(query, positive, hard negatives) rows from :mod:`rag_hier.tuning.mining`, AdamW with linear warm-up and
decay. This is the "+CT with mined negatives" recipe of docs/hce.md. ``hce-s`` / ``hce-j``: the HCE trainer
(:mod:`rag_hier.training.hce`) on the store's passages, tiered sibling negatives of its k-means tree.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier._compat import st_training
from rag_hier.encoders._st_loading import quiet_trainer_setup
from rag_hier.errors import RagHierError
from rag_hier.eval.judged import JudgedQueries
from rag_hier.training.arguments import training_arguments
from rag_hier.training.time_limit import TimeLimit
from rag_hier.tuning.config import TuneConfig
from rag_hier.tuning.mining import mine_examples, training_rows
from rag_hier.tuning.recipes import TrainOutcome, recipe

logger = logging.getLogger(__name__)

__all__ = ["TrainOutcome", "train_candidate", "train_contrastive", "train_hce"]

Say = Callable[[str], None]


def _callback_base() -> Any:
    from transformers import TrainerCallback

    return TrainerCallback


def _timing_callback(outcome: TrainOutcome, on_estimate: Callable[[float], None]) -> Any:
    """Measures seconds per step and reports the estimate after the second step."""
    base = _callback_base()

    class Timing(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.t_first: float | None = None
            self.announced = False

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            now = time.perf_counter()
            if state.global_step == 1:
                self.t_first = now
            elif self.t_first is not None and state.global_step > 1:
                outcome.seconds_per_step = (now - self.t_first) / (state.global_step - 1)
                if not self.announced:
                    self.announced = True
                    on_estimate(outcome.seconds_per_step)
            return control

    return Timing()


def _time_limit(outcome: TrainOutcome, time_limit: float | None, say: Say) -> TimeLimit:
    """Stops training after ``time_limit`` seconds, noting it in ``outcome`` and saying so."""

    def reached(step: int) -> None:
        outcome.stopped_early = "max_minutes"
        say(f"stopping training at step {step}: its share of --max-minutes ({(time_limit or 0) / 60:.1f} min) is spent")

    return TimeLimit(seconds=time_limit, on_reached=reached)


def _progress_callback(total: int, label: str = "training") -> Any:
    """A progress bar ``label`` over the optimizer steps (with its ETA); the trainer's own bar also prints dicts."""
    base = _callback_base()

    class Progress(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.bar: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, unit="step", dynamic_ncols=True)
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.bar is not None:
                self.bar.update(state.global_step - self.bar.n)
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            return control

    return Progress()


def _quiet(trainer: Any) -> None:
    """Drop the trainer's printing callbacks (loss dicts on stdout); :func:`_progress_callback` shows progress."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)


def planned_steps(pairs: int, cfg: TuneConfig) -> int:
    """Optimizer steps for ``pairs`` pairs: ``epochs`` passes (at least ``min_steps``), capped by ``max_steps``."""
    steps = max(1, math.ceil(cfg.epochs * pairs / cfg.batch_size), cfg.min_steps)
    return min(steps, cfg.max_steps) if cfg.max_steps is not None else steps


def train_candidate(
    store: Any,
    train: JudgedQueries,
    query_vectors: np.ndarray,
    cfg: TuneConfig,
    output_dir: Path,
    *,
    say: Say,
    on_estimate: Callable[[int, float], None],
    max_steps: int | None = None,
    start: Any = None,
    evaluate: Callable[[Any], float] | None = None,
    time_limit: float | None = None,
    label: str = "training",
) -> TrainOutcome:
    """Train a candidate from the store's model and save it to ``output_dir``.

    Args:
        store: The store (its model is the starting point; its search mines the negatives).
        train: The training queries.
        query_vectors: ``train``'s queries encoded by the store's model (for mining).
        cfg: The settings.
        output_dir: Where the candidate is saved (a sentence-transformers model directory).
        say: Prints a progress line.
        on_estimate: Called once with ``(planned steps, measured seconds per step)`` after two steps.
        max_steps: Override of the step budget (a dry run's two measured steps).
        start: The ``SentenceTransformer`` to train from (default: a copy of the store's model).
        evaluate: With more than one pass (contrastive): scores the model in training on the dev queries after
            each pass (higher is better); the best pass is kept and training stops at the first pass that does
            not improve on it (sentence-transformers' ``load_best_model_at_end`` with early stopping).
        time_limit: Stop training after this many seconds (default: ``cfg.max_minutes``); the model trained so
            far is saved.
        label: What the progress bar of contrastive training calls this training (``"candidate"``, ``"fold 2/5"``,
            ``"refit (continue)"``), so the several trainings of one tuning run tell apart.

    """
    if time_limit is None and cfg.max_minutes is not None:
        time_limit = cfg.max_minutes * 60
    run_recipe = recipe(cfg.method).function()
    encoder = store.encoder
    if encoder is None:
        raise RagHierError(f"the store at {store.location} has no model to tune")
    # the store's own model stays as it is
    model = copy.deepcopy(encoder.model) if start is None else start
    model.max_seq_length = cfg.max_seq_length or encoder.max_seq_length or model.max_seq_length
    t0 = time.perf_counter()
    outcome = run_recipe(
        store,
        train,
        query_vectors,
        cfg,
        model,
        output_dir,
        say=say,
        on_estimate=on_estimate,
        max_steps=max_steps,
        evaluate=evaluate,
        time_limit=time_limit,
        label=label,
    )
    outcome.seconds = time.perf_counter() - t0
    return outcome


def train_contrastive(
    store: Any,
    train: JudgedQueries,
    query_vectors: np.ndarray,
    cfg: TuneConfig,
    model: Any,
    output_dir: Path,
    *,
    say: Say,
    on_estimate: Callable[[int, float], None],
    max_steps: int | None,
    evaluate: Callable[[Any], float] | None = None,
    time_limit: float | None = None,
    label: str = "training",
) -> TrainOutcome:
    """The ``contrastive`` recipe (a :class:`~rag_hier.tuning.recipes.RecipeFunction`).

    Hard negatives mined from the store, the multiple-negatives ranking loss in both directions; with ``evaluate``
    and more than one pass, the best pass is kept.
    """
    import tempfile

    from datasets import Dataset

    from rag_hier.training._attention import attention_dropout

    st = st_training("Fine-tuning")
    Trainer, Args, BatchSamplers = st.trainer, st.arguments, st.batch_samplers
    examples = mine_examples(
        store,
        train,
        query_vectors,
        range_max=cfg.negative_depth,
        relative_margin=cfg.relative_margin,
    )
    pairs = sum(len(e.positives) for e in examples)
    if pairs == 0:
        raise RagHierError(
            f"none of the {len(train)} training queries of {train.source} has a relevant passage in the store: "
            "the judged ids name no stored document or passage"
        )
    plan = planned_steps(pairs, cfg)
    steps = min(plan, max_steps) if max_steps is not None else plan
    pools = [len(e.negatives) for e in examples]
    outcome = TrainOutcome(
        planned_steps=plan,
        details={
            "queries": len(examples),
            "pairs": pairs,
            "negatives_per_row": cfg.num_negatives,
            "negative_pool_mean": round(float(np.mean(pools)), 1) if pools else 0.0,
            "queries_without_negatives": int(sum(1 for p in pools if p == 0)),
        },
    )
    cols = training_rows(examples, num_negatives=cfg.num_negatives, rows=steps * cfg.batch_size, seed=cfg.seed)
    dataset = Dataset.from_dict(cols)
    card = getattr(model, "model_card_data", None)
    if card is not None and hasattr(card, "generate_widget_examples"):
        card.generate_widget_examples = False  # a model card nobody reads, and a progress bar on stderr
    loss = _contrastive_loss(st.losses, model, cfg)
    outcome.details["gradcache"] = _uses_gradcache(cfg)
    say(
        f"training: {len(examples)} queries, {pairs} pairs, {cfg.num_negatives} hard negatives each "
        f"(pool mean {outcome.details['negative_pool_mean']}), {steps} steps of {cfg.batch_size}"
    )
    per_pass = max(1, math.ceil(pairs / cfg.batch_size))
    with tempfile.TemporaryDirectory(prefix="rag-hier-tune-") as scratch:
        args = training_arguments(
            Args,
            scratch,
            device=str(model.device),
            batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate,
            seed=cfg.seed,
            max_steps=steps,
            warmup_steps=round(cfg.warmup_ratio * steps),
            show_progress_bar=cfg.show_progress_bar,
            batch_sampler=BatchSamplers.NO_DUPLICATES,
        )
        timing = _timing_callback(outcome, lambda sps: on_estimate(steps, sps))
        limit = _time_limit(outcome, time_limit, say)
        callbacks = [timing, limit.callback()] + ([_progress_callback(steps, label)] if cfg.show_progress_bar else [])
        selector = None
        if evaluate is not None and steps > per_pass:
            selector = _pass_selector(model, per_pass, steps, evaluate, outcome, say)
            callbacks.append(selector)
        with quiet_trainer_setup():  # the model card's "Computing widget examples" bar
            trainer = Trainer(model=model, args=args, train_dataset=dataset, loss=loss, callbacks=callbacks)
        _quiet(trainer)
        with attention_dropout(model, 0.0):  # PyTorch's fused attention kernel on CPU (docs/hce.md)
            trainer.train()
        outcome.steps = int(trainer.state.global_step)
        if selector is not None:
            selector.restore_best()
    with quiet_trainer_setup():  # transformers' "Writing model shards" bar
        model.save(str(output_dir))
    return outcome


def _uses_gradcache(cfg: TuneConfig) -> bool:
    """GradCache only pays when a step's batch does not fit in memory at once: a mini-batch below the batch."""
    return cfg.mini_batch_size is not None and cfg.mini_batch_size < cfg.batch_size


def _contrastive_loss(losses: Any, model: Any, cfg: TuneConfig) -> Any:
    """Multiple-negatives ranking loss in both directions at scale ``1 / temperature``; cached when asked."""
    kwargs = {
        "scale": 1.0 / cfg.temperature,
        "directions": ("query_to_doc", "doc_to_query"),
        "partition_mode": "per_direction",
    }
    if _uses_gradcache(cfg):
        return losses.CachedMultipleNegativesRankingLoss(model, mini_batch_size=cfg.mini_batch_size, **kwargs)
    return losses.MultipleNegativesRankingLoss(model, **kwargs)


def _pass_selector(
    model: Any, per_pass: int, steps: int, evaluate: Callable[[Any], float], outcome: TrainOutcome, say: Say
) -> Any:
    """Scores the model after every pass; keeps the best pass's weights; stops at the first pass not better."""
    base = _callback_base()

    class PassSelector(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.best: float | None = None
            self.best_pass = 0
            self.best_state: dict[str, Any] | None = None
            self.values: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            step = int(state.global_step)
            if step % per_pass and step < steps:
                return control
            value = float(evaluate(model))
            self.values.append(round(value, 4))
            n = len(self.values)
            outcome.details["dev_by_pass"] = list(self.values)
            if self.best is None or value > self.best:
                self.best, self.best_pass = value, n
                if step < steps:  # the last pass's weights are the model's own
                    self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                else:
                    self.best_state = None
                say(f"pass {n}: dev {value:.4f} (best so far)")
            else:
                say(f"pass {n}: dev {value:.4f}, not better than pass {self.best_pass} ({self.best:.4f}): stopping")
                control.should_training_stop = True
            return control

        def restore_best(self) -> None:
            outcome.details["best_pass"] = self.best_pass
            if self.best_pass and self.best_pass < len(self.values) and self.best_state is not None:
                model.load_state_dict(self.best_state)

    return PassSelector()


def train_hce(
    store: Any,
    train: JudgedQueries,
    query_vectors: np.ndarray,
    cfg: TuneConfig,
    model: Any,
    output_dir: Path,
    *,
    say: Say,
    on_estimate: Callable[[int, float], None],
    max_steps: int | None,
    evaluate: Callable[[Any], float] | None = None,
    time_limit: float | None = None,
    label: str = "training",
) -> TrainOutcome:
    """The ``hce-s`` / ``hce-j`` recipes (a :class:`~rag_hier.tuning.recipes.RecipeFunction`).

    The HCE trainer on the store's passages in supervised or joint mode, one pass, no re-clustering (``evaluate``
    and ``label`` are not used).
    """
    from rag_hier.training.hce import HCEConfig, HCETrainer

    passages = store.filter_passages()
    pairs = sum(sum(1 for g in rel.values() if g > 0) for rel in train.qrels.values())
    plan = planned_steps(pairs, cfg)
    steps = min(plan, max_steps) if max_steps is not None else plan
    hce = HCEConfig(
        mode="supervised" if cfg.resolved_method == "hce-s" else "joint",
        n_negatives=cfg.num_negatives,
        temperature=cfg.temperature,
        learning_rate=cfg.learning_rate,
        warmup_ratio=cfg.warmup_ratio,
        batch_size=cfg.batch_size,
        epochs=1,
        max_steps=steps,
        max_minutes=None if time_limit is None else time_limit / 60,
        recluster="never",
        dev_fraction=0.0,
        max_seq_length=model.max_seq_length,
        mini_batch_size=cfg.mini_batch_size,
        seed=cfg.seed,
    )
    say(f"training ({cfg.resolved_method}): {len(train)} queries, {pairs} pairs, {steps} steps of {cfg.batch_size}")
    trainer = HCETrainer(hce, model=model, show_progress_bar=cfg.show_progress_bar)
    t0 = time.perf_counter()
    result = trainer.train(passages, output_dir, queries=train.queries, qrels=train.qrels)
    done = int(result.steps)
    outcome = TrainOutcome(steps=done, planned_steps=plan, details={"pairs": pairs, "hce": hce.to_dict()})
    if done:
        outcome.seconds_per_step = (time.perf_counter() - t0) / done
        on_estimate(steps, outcome.seconds_per_step)
    return outcome
