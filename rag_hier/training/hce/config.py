"""HCEConfig: every hyper-parameter of HCE training, validated at construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "DIRECTION_REDUCTIONS",
    "HCE_MODES",
    "JOINT_SCHEDULES",
    "RECLUSTER_POLICIES",
    "UNSUPERVISED_TASKS",
    "HCEConfig",
    "JointSchedule",
    "Mode",
    "Recluster",
    "UnsupervisedTask",
]

Mode = Literal["unsupervised", "supervised", "joint"]
UnsupervisedTask = Literal["ict", "simcse"]
Recluster = Literal["improved", "always", "never"]
JointSchedule = Literal["sum", "alternate"]
DirectionReduction = Literal["sum", "mean"]
HCE_MODES: tuple[str, ...] = ("unsupervised", "supervised", "joint")
UNSUPERVISED_TASKS: tuple[str, ...] = ("ict", "simcse")
IctUnit = Literal["tokens", "sentence"]
ICT_UNITS: tuple[str, ...] = ("tokens", "sentence")
RECLUSTER_POLICIES: tuple[str, ...] = ("improved", "always", "never")
JOINT_SCHEDULES: tuple[str, ...] = ("sum", "alternate")
DIRECTION_REDUCTIONS: tuple[str, ...] = ("sum", "mean")


@dataclass(frozen=True)
class HCEConfig:
    """Hyper-parameters of HCE training (defaults follow the paper where it gives them).

    Args:
        mode: ``"supervised"`` (query, relevant document) pairs; ``"unsupervised"`` (pseudo-queries from
            the corpus, see ``unsupervised_task``); ``"joint"``: supervised + ``alpha`` · unsupervised.
        unsupervised_task: ``"ict"`` (Inverse Cloze Task: a random ``span_tokens`` span of the document is
            the pseudo-query) or ``"simcse"`` (the document itself, encoded again under other dropout).
        branching: Tree branching factor ``b``; ``None``: the smallest power of 2 >= N^(1/3) (paper).
        levels_m: ``M``, the number of top tree levels trained against sibling centroids (trainable).
        n_negatives: ``n_NS``, negatives sampled per lower level among the children of the positive's prefix.
        temperature: ``τ`` applied to cosine similarities (paper: 0.01).
        alpha: Weight of the unsupervised loss in ``joint`` mode (paper: 0.5).
        joint_schedule: ``"sum"`` (paper: every step adds the supervised loss of a batch of query pairs and
            ``alpha`` times the unsupervised loss of a batch of pseudo-queries) or ``"alternate"`` (supervised
            and unsupervised batches take turns, each step half the cost and half the supervised data).
        ict_remove_rate: Probability that an ICT pseudo-query's span is cut out of its positive document
            (Lee et al., 2019: 0.9, the default); 0 leaves the span inside its document, which makes the
            document term trivial now that spans lie inside the encoded window (docs/hce.md).
        symmetric: Add the document → query in-batch term to the lower-level loss (paper: yes).
        level_weight: Factor on each of the ``M`` level (sibling-centroid) terms. 1.0 with
            ``direction_reduction="sum"`` is the paper's Eq. 8 exactly (the default); ``docs/hce.md`` reports the
            level-weight study (a smaller weight is an option for short fine-tuning runs, where the level terms
            otherwise dominate the early updates).
        direction_reduction: ``"sum"`` (Eq. 8: query → document plus document → query) or ``"mean"`` (their
            average, this library's behaviour before 0.2; ``level_weight`` w under ``"mean"`` weighs the level
            terms relative to each direction as 2w does under ``"sum"``).
        learning_rate: AdamW learning rate for the encoder and the centroids (paper: 1e-4).
        weight_decay: AdamW weight decay.
        warmup_ratio: Linear warm-up over this fraction of the planned steps, then linear decay.
        batch_size: Training pairs per device and step.
        epochs: Maximum number of EM epochs.
        steps_per_epoch: Steps between two EM checks (default: one pass over the training data).
        max_steps: Stop after this many optimizer steps in total (``None``: no limit).
        max_minutes: Stop training after this many minutes (single process; the model of the last epoch that
            was kept is the result).
        recluster: Re-embed the corpus and rebuild the tree after an epoch ``"improved"`` the dev metric
            (Alg. 3), ``"always"``, or ``"never"``.
        patience: Stop after this many consecutive epochs without dev improvement (``0``: never stop early).
        dev_fraction: Share of the training queries held out as the dev set (supervised and joint modes).
        dev_size: Number of held-out ICT pseudo-queries forming a dev set in unsupervised mode (default 0: none,
            so EM re-clusters after every epoch and keeps the last model). Such spans are found at rank 1 by the
            base model already (dev nDCG@10 0.998 on XQuAD-en's paragraphs), so they cannot tell epochs apart and
            early stopping on them mostly returned the base model.
        span_tokens: ICT pseudo-query length in tokens. Spans are drawn inside the part of the document the
            model encodes (its first ``max_seq_length`` tokens, special tokens excluded).
        ict_unit: ``"tokens"`` (a ``span_tokens`` span, the default) or ``"sentence"`` (one random sentence inside
            that window, Lee et al.'s ICT; a token span when the window holds fewer than two sentences).
        max_seq_length: Truncate texts to this many tokens (``None``: the model's own limit).
        mini_batch_size: Embed each step's texts in GradCache mini-batches of this many texts (``None``: all in
            one forward pass). Same loss and gradients for one extra forward pass; bounds the activation memory,
            which otherwise grows with ``batch_size`` x (2 + negatives) x ``max_seq_length``.
        attention_dropout: Dropout on the attention probabilities while training (default 0: PyTorch's fused CPU
            attention kernel then applies, measured 1.7x faster with 1/7 of the activation memory at 256 tokens;
            ``None`` keeps the model's own rate, 0.1 for BERT-family models). Hidden-state dropout is unchanged.
        gradient_accumulation_steps: Micro-batches per optimizer step (each has its own in-batch negatives).
        fp16: Mixed precision (float16) training; GPU only.
        bf16: Mixed precision (bfloat16) training; GPU or recent CPUs.
        gather_across_devices: Gather in-batch negatives across processes under torch.distributed.
        encode_batch_size: Batch size for re-embedding the corpus.
        seed: Seed for sampling, data order and clustering.
        tree_niter: k-means iterations per tree level.
        logging_steps: Log the training loss every this many steps.

    """

    mode: Mode = "unsupervised"
    unsupervised_task: UnsupervisedTask = "ict"
    branching: int | None = None
    levels_m: int = 2
    n_negatives: int = 4
    temperature: float = 0.01
    alpha: float = 0.5
    joint_schedule: JointSchedule = "sum"
    ict_remove_rate: float = 0.9
    symmetric: bool = True
    level_weight: float = 1.0
    direction_reduction: DirectionReduction = "sum"
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    batch_size: int = 32
    epochs: int = 3
    steps_per_epoch: int | None = None
    max_steps: int | None = None
    max_minutes: float | None = None
    recluster: Recluster = "improved"
    patience: int = 1
    dev_fraction: float = 0.1
    dev_size: int = 0
    span_tokens: int = 64
    ict_unit: IctUnit = "tokens"
    max_seq_length: int | None = None
    mini_batch_size: int | None = 32
    attention_dropout: float | None = 0.0
    gradient_accumulation_steps: int = 1
    fp16: bool = False
    bf16: bool = False
    gather_across_devices: bool = True
    encode_batch_size: int = 64
    seed: int = 42
    tree_niter: int = 20
    logging_steps: int = 10

    def __post_init__(self) -> None:
        def need(cond: bool, name: str, allowed: str) -> None:
            if not cond:
                raise ValueError(f"HCEConfig.{name} must be {allowed}; got {getattr(self, name)!r}")

        need(self.mode in HCE_MODES, "mode", " or ".join(HCE_MODES))
        need(self.unsupervised_task in UNSUPERVISED_TASKS, "unsupervised_task", " or ".join(UNSUPERVISED_TASKS))
        need(self.recluster in RECLUSTER_POLICIES, "recluster", " or ".join(RECLUSTER_POLICIES))
        need(self.branching is None or self.branching >= 2, "branching", ">= 2 or None")
        need(self.levels_m >= 0, "levels_m", ">= 0")
        need(self.n_negatives >= 0, "n_negatives", ">= 0")
        need(self.temperature > 0, "temperature", "> 0")
        need(self.alpha >= 0, "alpha", ">= 0")
        need(self.joint_schedule in JOINT_SCHEDULES, "joint_schedule", " or ".join(JOINT_SCHEDULES))
        need(0 <= self.ict_remove_rate <= 1, "ict_remove_rate", "in [0, 1]")
        need(self.level_weight >= 0, "level_weight", ">= 0")
        need(self.direction_reduction in DIRECTION_REDUCTIONS, "direction_reduction", " or ".join(DIRECTION_REDUCTIONS))
        need(self.learning_rate > 0, "learning_rate", "> 0")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio", "in [0, 1)")
        need(self.batch_size >= 1, "batch_size", ">= 1")
        need(self.epochs >= 1, "epochs", ">= 1")
        need(self.steps_per_epoch is None or self.steps_per_epoch >= 1, "steps_per_epoch", ">= 1 or None")
        need(self.max_steps is None or self.max_steps >= 1, "max_steps", ">= 1 or None")
        need(self.max_minutes is None or self.max_minutes > 0, "max_minutes", "> 0 or None")
        need(self.patience >= 0, "patience", ">= 0")
        need(0 <= self.dev_fraction < 1, "dev_fraction", "in [0, 1)")
        need(self.dev_size >= 0, "dev_size", ">= 0")
        need(self.span_tokens >= 1, "span_tokens", ">= 1")
        need(self.ict_unit in ICT_UNITS, "ict_unit", " or ".join(ICT_UNITS))
        need(self.max_seq_length is None or self.max_seq_length >= 8, "max_seq_length", ">= 8 or None")
        need(self.mini_batch_size is None or self.mini_batch_size >= 1, "mini_batch_size", ">= 1 or None")
        dropout = self.attention_dropout
        need(dropout is None or 0 <= dropout < 1, "attention_dropout", "in [0, 1) or None")
        need(self.gradient_accumulation_steps >= 1, "gradient_accumulation_steps", ">= 1")
        need(not (self.fp16 and self.bf16), "fp16", "False when bf16 is True")
        need(self.encode_batch_size >= 1, "encode_batch_size", ">= 1")
        need(self.tree_niter >= 1, "tree_niter", ">= 1")
        need(self.logging_steps >= 1, "logging_steps", ">= 1")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written next to the trained model)."""
        return asdict(self)
