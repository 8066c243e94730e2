"""TuneConfig: every setting of a tuning run, validated at construction."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from rag_hier.errors import ParameterError
from rag_hier.eval.metrics import parse_metric

__all__ = ["CROSS_FIT", "DEV_SCORING", "DEV_SPLITS", "REFIT", "TUNE_METHODS", "DevSplit", "TuneConfig", "TuneMethod"]

TuneMethod = Literal["auto", "contrastive", "hce-s", "hce-j"]
TUNE_METHODS: tuple[str, ...] = ("auto", "contrastive", "hce-s", "hce-j")
DevSplit = Literal["grouped", "random", "mixed"]
DEV_SPLITS: tuple[str, ...] = ("grouped", "random", "mixed")
DevScoring = Literal["auto", "rerank", "full"]
DEV_SCORING: tuple[str, ...] = ("auto", "rerank", "full")
Refit = Literal["off", "continue", "full"]
REFIT: tuple[str, ...] = ("off", "continue", "full")
CrossFit = Literal["auto", "on", "off"]
CROSS_FIT: tuple[str, ...] = ("auto", "on", "off")


@dataclass(frozen=True)
class TuneConfig:
    """Settings of ``rag-hier tune`` / ``store.tune()`` (defaults: docs/tuning.md says where each comes from).

    Args:
        method: ``"contrastive"`` (sentence-transformers' cached multiple-negatives ranking loss with hard
            negatives mined from the store), ``"hce-s"`` / ``"hce-j"`` (HCE supervised / joint, tiered tree
            negatives), or ``"auto"`` (the rule in docs/tuning.md: ``"contrastive"``).
        dev_fraction: Share of the judged queries held back to decide adoption.
        dev_split: ``"grouped"``: queries that share a relevant document go to one side together, so the dev
            queries are about documents no training query is about (how the model does on new documents);
            ``"random"``: queries are drawn one by one, so dev queries follow the distribution of the judged
            queries, including documents that training queries are about too (how it does on more queries like
            them); ``"mixed"``: half of the dev part each way. The report shows the dev queries of both kinds
            separately whichever is chosen.
        refit: What is adopted once the dev figures say adopt: ``"off"``, the measured candidate itself;
            ``"continue"``, the candidate trained one more pass over the dev part's pairs (so the adopted model has
            seen every judged query, at the cost of the dev part's steps); ``"full"``, a model trained again from
            the store's model on every judged query with the same settings (a second training). ``True`` and
            ``False`` mean ``"full"`` and ``"off"``.
        cross_fit: ``"on"``: K-fold cross-fitting instead of one dev part: every judged query is scored by a
            candidate that never trained on it, the verdict uses all of them, and the model adopted trains on all;
            ``"auto"``: when fewer than ``cross_fit_below`` judged queries are usable; ``"off"``: one dev part.
        folds: K of cross-fitting.
        cross_fit_below: ``cross_fit="auto"`` cross-fits below this many usable judged queries.
        dev_scoring: How a candidate is scored on dev queries: ``"full"`` encodes every passage into an index
            beside the store's; ``"rerank"`` encodes only each dev query's pool (the base's top ``rerank_depth``
            and its judged-relevant passages, :mod:`rag_hier.tuning.rerank`); ``"auto"`` re-ranks when the pools
            hold at most half of the store's passages.
        rerank_depth: The base's top results in each dev query's re-ranking pool.
        metric: The metric adoption is decided on.
        metrics: Every metric reported (the decision metric is added when missing).
        confidence: Level of the paired bootstrap interval of the difference.
        n_resamples: Bootstrap resamples.
        epochs: Passes over the training (query, positive) pairs (at most; with more than one, the candidate is
            scored on dev after each pass, the best pass kept, and training stops at a pass that is not better).
        min_steps: Train at least this many steps (more passes over small sets).
        max_steps: Stop after this many optimizer steps (``None``: ``epochs`` decide).
        max_minutes: Stop training after this many minutes (the candidate is still scored).
        batch_size: Training pairs per step (in-batch negatives).
        learning_rate: AdamW learning rate.
        warmup_ratio: Linear warm-up share of the steps, then linear decay.
        temperature: Softmax temperature of the contrastive loss (its scale is ``1 / temperature``).
        num_negatives: Hard negatives per training pair.
        negative_depth: Hard negatives are drawn from the store's top this many results per query.
        relative_margin: Skip candidates scoring above ``(1 - relative_margin)`` times the positive (the
            false-negative margin of sentence-transformers' ``mine_hard_negatives``).
        mini_batch_size: GradCache mini-batch below ``batch_size`` (bounds activation memory, same gradients, about
            a third more compute); ``None``: the plain loss, one forward pass per step.
        max_seq_length: Token limit while training (``None``: the store's encoder setting, else the model's).
        seed: Seeds the split, the negatives, the data order and the bootstrap.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` picks CUDA when available.
        force: Adopt the candidate whatever the dev figures say.
        show_progress_bar: Show progress bars (training, encoding).

    """

    method: TuneMethod = "auto"
    dev_fraction: float = 0.2
    dev_split: DevSplit = "mixed"
    refit: Refit = "off"
    cross_fit: CrossFit = "auto"
    folds: int = 5
    cross_fit_below: int = 200
    dev_scoring: DevScoring = "auto"
    rerank_depth: int = 100
    metric: str = "ndcg@10"
    metrics: tuple[str, ...] = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
    confidence: float = 0.95
    n_resamples: int = 10_000
    epochs: float = 1.0
    min_steps: int = 0
    max_steps: int | None = None
    max_minutes: float | None = None
    batch_size: int = 32
    learning_rate: float = 1e-4
    warmup_ratio: float = 0.1
    temperature: float = 0.05
    num_negatives: int = 1
    negative_depth: int = 30
    relative_margin: float = 0.05
    mini_batch_size: int | None = None
    max_seq_length: int | None = None
    seed: int = 42
    device: str | None = None
    force: bool = False
    show_progress_bar: bool = True

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> ParameterError:
            return ParameterError(f"TuneConfig.{name} must be {allowed}, got {getattr(self, name)!r}")

        if self.method not in TUNE_METHODS:
            raise bad("method", f"one of {', '.join(TUNE_METHODS)}")
        if not 0 < self.dev_fraction < 1:
            raise bad("dev_fraction", "between 0 and 1 (exclusive)")
        if self.dev_split not in DEV_SPLITS:
            raise bad("dev_split", f"one of {', '.join(DEV_SPLITS)}")
        parse_metric(self.metric)
        metrics = tuple(dict.fromkeys((self.metric, *self.metrics)))
        for m in metrics:
            parse_metric(m)
        object.__setattr__(self, "metrics", metrics)
        if not 0 < self.confidence < 1:
            raise bad("confidence", "between 0 and 1")
        if isinstance(self.refit, bool):
            object.__setattr__(self, "refit", "full" if self.refit else "off")
        if self.refit not in REFIT:
            raise bad("refit", f"one of {', '.join(REFIT)}")
        if self.cross_fit not in CROSS_FIT:
            raise bad("cross_fit", f"one of {', '.join(CROSS_FIT)}")
        if self.dev_scoring not in DEV_SCORING:
            raise bad("dev_scoring", f"one of {', '.join(DEV_SCORING)}")
        if isinstance(self.folds, bool) or not isinstance(self.folds, int) or self.folds < 2:
            raise bad("folds", "an integer >= 2")
        if isinstance(self.min_steps, bool) or not isinstance(self.min_steps, int) or self.min_steps < 0:
            raise bad("min_steps", "an integer >= 0")
        mini = self.mini_batch_size
        if mini is not None and (isinstance(mini, bool) or not isinstance(mini, int) or mini < 1):
            raise bad("mini_batch_size", "a positive integer or None")
        for name in ("n_resamples", "batch_size", "negative_depth", "cross_fit_below", "rerank_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(name, "a positive integer")
        if isinstance(self.num_negatives, bool) or not isinstance(self.num_negatives, int) or self.num_negatives < 0:
            raise bad("num_negatives", "an integer >= 0")
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise bad("max_steps", "a positive integer or None")
        if self.max_seq_length is not None and (not isinstance(self.max_seq_length, int) or self.max_seq_length < 8):
            raise bad("max_seq_length", "an integer >= 8 or None")
        for name in ("epochs", "learning_rate", "temperature"):
            if not math.isfinite(float(getattr(self, name))) or not float(getattr(self, name)) > 0:
                raise bad(name, "a finite number > 0")
        if self.max_minutes is not None and not (math.isfinite(float(self.max_minutes)) and self.max_minutes > 0):
            raise bad("max_minutes", "a finite number > 0 or None")
        if not 0 <= self.warmup_ratio < 1:
            raise bad("warmup_ratio", "in [0, 1)")
        if not 0 <= self.relative_margin < 1:
            raise bad("relative_margin", "in [0, 1)")

    @property
    def resolved_method(self) -> str:
        """The method ``"auto"`` stands for (docs/tuning.md: the supervised contrastive recipe)."""
        return "contrastive" if self.method == "auto" else self.method

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings."""
        out = asdict(self)
        out["metrics"] = list(self.metrics)
        return out
