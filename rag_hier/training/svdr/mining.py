"""SvdrMiningCallback: SVDR's hard-negative schedule as a callback of sentence-transformers' trainer.

At the start of every optimizer step, before the loss draws the step's negatives, the callback decides where the
hard negatives come from, as the paper's schedule says (``negative_schedule="paper"``): BM25 candidates while
training is less than half done (by steps, or by time under ``max_seconds``), then β search with the current
model; ``"beta"`` mines with β search from the first step. β mining encodes the step's own queries
(``mining="batch"``) or every query at the start of an epoch and when the schedule switches (``"epoch"``).
The callback also keeps what the run reports: the loss and the seconds of every step, the time spent mining, the
steps on BM25 negatives, and the log line every ``log_every`` steps.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from transformers import TrainerCallback

if TYPE_CHECKING:
    from rag_hier.training.svdr.config import SvdrTrainingConfig
    from rag_hier.training.svdr.loss import SemiParametricLoss

logger = logging.getLogger(__name__)

__all__ = ["NegativeSource", "SvdrMiningCallback"]


class NegativeSource(Protocol):
    """What the callback refreshes: the hard-negative pools of an SVDR trainer (:class:`~.trainer.SvdrTrainer`)."""

    config: SvdrTrainingConfig

    def use_bm25_negatives(self) -> None:
        """Make the BM25 candidates every query's pool."""

    def mine_negatives(self, qids: Sequence[str] | None = None) -> dict[str, list[int]]:
        """β-search ``qids`` (default: every training query) with the current model; update their pools."""


class SvdrMiningCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]
    """Refresh SVDR's hard negatives before each step, and record the run.

    Args:
        trainer: The SVDR trainer whose negatives are refreshed.
        loss: The loss module (its last loss and parts are recorded after each step).
        pending: The queries of each batch the data loader collated, oldest first
            (:attr:`~rag_hier.training.svdr.data.ExampleCollator.pending`); one is taken per step.
        planned: The steps the run plans (the schedule's and the learning rate's progress).
        max_seconds: The run's time budget, or ``None`` (progress is then counted in steps only).
        log: Whether this process logs (rank 0).

    """

    def __init__(
        self,
        trainer: NegativeSource,
        loss: SemiParametricLoss,
        pending: deque[list[str]],
        *,
        planned: int,
        max_seconds: float | None,
        log: bool = True,
    ) -> None:
        self.trainer = trainer
        self.loss = loss
        self.pending = pending
        self.planned = max(1, planned)
        self.max_seconds = max_seconds
        self.log = log
        self.start = time.perf_counter()
        self.losses: list[float] = []
        self.step_seconds: list[float] = []
        self.mining_seconds = 0.0
        self.bm25_steps = 0
        self.phase = ""
        self.epoch_start = False
        self._t0 = self.start
        self._rng_state: Any = None

    def progress(self, step: int) -> float:
        """How far the run is after ``step`` steps: the fraction of the planned steps, or of the time budget."""
        done = step / self.planned
        if self.max_seconds:
            done = max(done, (time.perf_counter() - self.start) / self.max_seconds)
        return done

    def lr_factor(self, step: int) -> float:
        """Linear warm-up, then linear decay to 0 at the end of the planned steps or of the time budget."""
        warmup = self.trainer.config.warmup_ratio
        done = min(self.progress(step + 1), 1.0)
        if done < warmup:
            return done / warmup
        return max(0.0, (1.0 - done) / max(1e-9, 1.0 - warmup))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Start the clock the schedule and the logs count from."""
        self.start = time.perf_counter()
        return control

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """An epoch starts: ``mining="epoch"`` mines every query at its first step."""
        import torch

        self.epoch_start = True
        self.pending.clear()  # a batch collated ahead for an epoch the trainer ended early
        # the data loader's iterator draws its base seed from torch's generator when the epoch starts: put the
        # generator back before the first step, so dropout depends on the seed and the steps alone
        self._rng_state = torch.random.get_rng_state()
        return control

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Choose and refresh the negatives of the step about to run."""
        t0 = time.perf_counter()
        self._t0 = t0
        if self._rng_state is not None:
            import torch

            torch.random.set_rng_state(self._rng_state)
            self._rng_state = None
        cfg = self.trainer.config
        batch = self.pending.popleft() if self.pending else None
        if cfg.hard_negatives and cfg.negative_schedule == "paper" and self.progress(int(state.global_step)) < 0.5:
            self.trainer.use_bm25_negatives()  # the first half: BM25 negatives
            self.bm25_steps += 1
            self.phase = "bm25"
        elif cfg.mining == "batch" or self.epoch_start or self.phase == "bm25":
            per_batch = cfg.mining == "batch" and batch is not None
            self.trainer.mine_negatives(batch if per_batch else None)
            self.phase = "beta"
        self.epoch_start = False
        self.mining_seconds += time.perf_counter() - t0
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Record the step's loss and time; log every ``log_every`` steps."""
        self.losses.append(self.loss.last_loss)
        self.step_seconds.append(time.perf_counter() - self._t0)
        every = self.trainer.config.log_every
        step = int(state.global_step)
        if self.log and step % every == 0:
            logger.info(
                "step %d (epoch %.2f): loss %.4f (%s) %.0fs",
                step,
                float(state.epoch or 0.0),
                float(np.mean(self.losses[-every:])),
                ", ".join(f"{k} {v:.3f}" for k, v in self.loss.last_parts.items()),
                time.perf_counter() - self.start,
            )
        return control
