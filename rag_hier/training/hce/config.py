"""HCEConfig: every hyper-parameter of HCE training, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rag_hier.training.config import TrainingConfig, shared_field, train_field

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
class HCEConfig(TrainingConfig):
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
            attention kernel then applies: faster, with a fraction of the activation memory; docs/hce.md, "Defaults";
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

    mode: Mode = train_field("unsupervised", help="training signal: unsupervised, supervised or joint")
    unsupervised_task: UnsupervisedTask = train_field(
        "ict", help="pseudo-queries: ict = random span of the document, simcse = the document under other dropout"
    )
    branching: int | None = train_field(None, help="tree branching factor b (default: 2^ceil(log2 N^(1/3)))", minimum=2)
    levels_m: int = train_field(2, help="M: top tree levels trained against sibling centroids", minimum=0)
    n_negatives: int = train_field(4, help="n_NS: negatives sampled per lower level", minimum=0, flag="--negatives")
    temperature: float = train_field(0.01, help="tau on cosine similarity", above=0)
    alpha: float = train_field(0.5, help="weight of the unsupervised loss in joint mode", minimum=0)
    joint_schedule: JointSchedule = train_field(
        "sum",
        help="joint mode: sum = supervised + alpha * unsupervised loss in every step (paper), "
        "alternate = the two kinds of batches take turns",
    )
    ict_remove_rate: float = train_field(
        0.9, help="probability that an ICT span is cut out of its positive document", minimum=0, maximum=1
    )
    symmetric: bool = train_field(
        True, help="add the document -> query in-batch term to the lower-level loss", cli=False
    )
    level_weight: float = train_field(
        1.0,
        help="factor on each sibling-centroid level term (1.0 with --direction-reduction sum: the paper's Eq. 8 "
        "exactly; docs/hce.md has the level-weight study)",
        minimum=0,
    )
    direction_reduction: DirectionReduction = train_field(
        "sum", help="sum (paper, Eq. 8) or mean of the query->document and document->query terms"
    )
    learning_rate: float = shared_field("learning_rate", 1e-4, help="learning rate")
    weight_decay: float = shared_field("weight_decay", 0.01)
    batch_size: int = shared_field("batch_size", 32, help="training pairs per step and device")
    epochs: int = shared_field("epochs", 3, help="maximum EM epochs")
    steps_per_epoch: int | None = train_field(
        None, help="steps between EM checks (default: one pass over the data)", minimum=1
    )
    max_minutes: float | None = shared_field("max_minutes", None)
    recluster: Recluster = train_field(
        "improved",
        help="rebuild the tree after an epoch that improved the dev metric (improved), after every epoch "
        "(always), or never",
    )
    patience: int = train_field(1, help="stop after this many epochs without dev improvement (0: never)", minimum=0)
    dev_fraction: float = train_field(
        0.1, help="share of training queries held out for the dev metric", minimum=0, below=1
    )
    dev_size: int = train_field(
        0, help="unsupervised mode: held-out ICT pseudo-queries for the dev metric (0: none)", minimum=0
    )
    span_tokens: int = train_field(64, help="ICT pseudo-query length in tokens", minimum=1)
    ict_unit: IctUnit = train_field(
        "tokens", help="ICT pseudo-query: a --span-tokens span or one sentence of the passage"
    )
    max_seq_length: int | None = shared_field("max_seq_length", None)
    mini_batch_size: int | None = shared_field("mini_batch_size", 32)
    attention_dropout: float | None = shared_field("attention_dropout", 0.0)
    gradient_accumulation_steps: int = shared_field("gradient_accumulation_steps", 1)
    fp16: bool = shared_field("fp16", False)
    bf16: bool = shared_field("bf16", False)
    gather_across_devices: bool = shared_field("gather_across_devices", True)
    encode_batch_size: int = shared_field("encode_batch_size", 64, help="batch size for re-embedding the corpus")
    tree_niter: int = train_field(20, help="k-means iterations per tree level", minimum=1, cli=False)
    logging_steps: int = shared_field("logging_steps", 10)
