"""SvdrTrainingConfig: the hyper-parameters of SVDR training (no NumPy or torch: the CLI's parser reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rag_hier.training.config import TrainingConfig, shared_field, train_field

__all__ = ["SvdrTrainingConfig"]


@dataclass(frozen=True)
class SvdrTrainingConfig(TrainingConfig):
    """Hyper-parameters of :class:`SvdrTrainer`.

    Args:
        epochs: Passes over the (query, relevant document) pairs.
        batch_size: Queries per step (each brings one positive and ``hard_negatives`` negatives).
        learning_rate: AdamW peak learning rate (linear warm-up, then linear decay to 0 at the end of the
            planned steps or of ``max_seconds``, whichever comes first).
        weight_decay: AdamW weight decay.
        warmup_ratio: Fraction of the planned steps spent warming up.
        hard_negatives: Hard negatives per query (0: in-batch negatives only).
        negative_depth: Hard negatives are drawn from the top-N non-relevant candidates (paper: 20).
        negative_schedule: ``"paper"``: BM25 candidates during the first half of training (by steps, or by
            time under ``max_seconds``), then β search with the current model; ``"beta"``: β search throughout.
        mining: ``"batch"`` (default): before each step, β-search the batch's own queries with the current
            model (always fresh, and cheap: only those queries are encoded); ``"epoch"``: all queries at
            the start of each epoch (and when the schedule switches to β search).
        temperature: Contrastive temperature on raw inner products.
        max_steps: Stop after this many steps (``None``: run the epochs).
        max_seconds: Stop after this much wall-clock time, mining included (``None``: no limit).
        grad_clip: Gradient-norm clipping.
        seed: Seed for shuffling, negative sampling and dropout.
        attention_dropout: Dropout on the attention probabilities while training (default 0: PyTorch's fused
            CPU attention kernel applies: faster, with a fraction of the activation memory; ``None``
            keeps the model's own rate).
        gradient_checkpointing: Recompute the backbone's activations in the backward pass (less memory,
            ~30% more compute).
        show_progress_bar: Show a progress bar.
        fp16: float16 mixed precision (CUDA only; the loss itself is computed in float32).
        bf16: bfloat16 mixed precision (CUDA or CPU; the loss itself is computed in float32).
        log_every: Log the mean loss every N steps.

    """

    epochs: int = shared_field("epochs", 1, help="passes over the training pairs")
    batch_size: int = shared_field("batch_size", 16, help="queries per step")
    learning_rate: float = shared_field("learning_rate", 2e-5, help="AdamW learning rate")
    weight_decay: float = shared_field("weight_decay", 0.01)
    hard_negatives: int = train_field(1, help="hard negatives per query", minimum=0)
    negative_depth: int = train_field(20, help="sample them from the top-N usable candidates", minimum=1)
    negative_schedule: Literal["paper", "beta"] = train_field(
        "paper",
        help="paper: BM25 negatives for the first half of training, then beta search with the current model; "
        "beta: beta search throughout. With a QA questions file as --queries, passages containing an answer are "
        "never negatives",
    )
    mining: Literal["batch", "epoch"] = train_field(
        "batch", help="beta-mine each batch's queries before its step, or all queries once per epoch", cli=False
    )
    temperature: float = train_field(1.0, help="contrastive temperature", above=0)
    max_steps: int | None = shared_field("max_steps", None, help="stop after N steps")
    max_seconds: float | None = train_field(
        None, help="stop after this much wall-clock time, mining included", above=0, cli=False
    )
    grad_clip: float = train_field(2.0, help="gradient-norm clipping", above=0, cli=False)
    seed: int = shared_field("seed", 0)
    attention_dropout: float | None = shared_field("attention_dropout", 0.0)
    gradient_checkpointing: bool = train_field(False, help="less memory, ~30% more compute (recompute activations)")
    show_progress_bar: bool = shared_field("show_progress_bar", False)
    fp16: bool = shared_field("fp16", False)
    bf16: bool = shared_field("bf16", False)
    log_every: int = train_field(10, help="log the mean loss every N steps", minimum=1, cli=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 2 and self.hard_negatives == 0:
            self._invalid("batch_size", ">= 2 without hard negatives (hard_negatives=0: nothing to contrast against)")
