"""TuneConfig: every setting of a tuning run, validated at construction.

:class:`TuneConfig` is a :class:`~rag_hier.training.config.TrainingConfig`: its fields are declared with
:func:`~rag_hier.training.config.train_field` / :func:`~rag_hier.training.config.shared_field`, whose metadata
gives each its bounds, its error message and its ``rag-hier tune`` flag (generated as ``rag-hier train``'s are,
:func:`rag_hier.cli._train.add_config_arguments`). The ``method`` choices are the registered tuning recipes
(:mod:`rag_hier.tuning.recipes`).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Literal

from rag_hier.errors import ParameterError
from rag_hier.eval.metrics import parse_metric
from rag_hier.training.config import TrainingConfig, allowed_text, field_type, shared_field, train_field
from rag_hier.tuning.recipes import recipe, recipe_names

__all__ = ["CROSS_FIT", "DEV_SCORING", "DEV_SPLITS", "REFIT", "TUNE_METHODS", "DevSplit", "TuneConfig", "TuneMethod"]

TuneMethod = Literal["auto", "contrastive", "hce-s", "hce-j"]
"""The built-in methods (:func:`~rag_hier.tuning.recipes.recipe_names` lists the registered ones)."""
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
class TuneConfig(TrainingConfig):
    """Settings of ``rag-hier tune`` / ``store.tune()`` (defaults: docs/tuning.md says where each comes from).

    Args:
        method: A registered tuning recipe (:mod:`rag_hier.tuning.recipes`): ``"contrastive"``
            (sentence-transformers' cached multiple-negatives ranking loss with hard negatives mined from the
            store), ``"hce-s"`` / ``"hce-j"`` (HCE supervised / joint, tiered tree negatives), or ``"auto"`` (the
            rule in docs/tuning.md: ``"contrastive"``).
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

    The fields of :class:`~rag_hier.training.config.TrainingConfig` come first (``epochs``, ``batch_size``,
    ``max_steps``, ``warmup_ratio``, ``seed``). A value out of range raises
    :class:`~rag_hier.errors.ParameterError` (a ``ValueError``): ``TuneConfig.folds must be an integer >= 2, got 1``.

    """

    epochs: float = shared_field(  # type: ignore[assignment]  # tuning counts passes in fractions
        "epochs",
        1.0,
        help="passes over the training pairs (at most: with more than one, the best pass on dev is kept)",
        minimum=None,
        above=0,
        below=math.inf,
        allowed="a finite number > 0",
    )
    batch_size: int = shared_field(
        "batch_size",
        32,
        help="training pairs per optimizer step (in-batch negatives); --batch-size is the encoding batch",
        allowed="a positive integer",
        flag="--train-batch-size",
    )
    max_steps: int | None = shared_field(
        "max_steps",
        None,
        help="cap on optimizer steps (default: --epochs passes)",
        allowed="a positive integer or None",
    )
    warmup_ratio: float = shared_field("warmup_ratio", 0.1, allowed="in [0, 1)")
    seed: int = shared_field("seed", 42, help="seed of the split, the negatives, the data order and the bootstrap")
    method: str = train_field(
        "auto",
        help="training recipe (auto: contrastive; docs/tuning.md)",
        choices=recipe_names,
    )
    dev_fraction: float = train_field(
        0.2, help="share of the judged queries held back", above=0, below=1, allowed="between 0 and 1 (exclusive)"
    )
    dev_split: DevSplit = train_field(
        "mixed",
        help="how the dev part is drawn: grouped, queries sharing a relevant document stay on one side, so dev "
        "asks about new documents; random, queries one by one, so dev follows your queries' own mix; mixed, half "
        "each way (docs/tuning.md)",
        choices=DEV_SPLITS,
    )
    refit: Refit = train_field(
        "off",
        help="what is adopted once the dev figures say adopt: off, the measured candidate; continue, the candidate "
        "trained one more pass on the dev part; full (--refit alone), a model trained again on every judged query",
        choices=REFIT,
        const="full",
    )
    cross_fit: CrossFit = train_field(
        "auto",
        help="score every judged query with a candidate trained on the other folds instead of holding a dev part "
        "back (auto: when fewer than 200 judged queries are usable; Python: cross_fit_below)",
        choices=CROSS_FIT,
    )
    folds: int = train_field(5, help="folds of --cross-fit", minimum=2, allowed="an integer >= 2")
    cross_fit_below: int = train_field(
        200,
        help="cross_fit='auto' cross-fits below this many usable judged queries",
        minimum=1,
        allowed="a positive integer",
        cli=False,
    )
    dev_scoring: DevScoring = train_field(
        "auto",
        help="how a candidate is scored: rerank encodes only each dev query's pool (the base's top --rerank-depth "
        "and its judged passages), full encodes every passage (auto: rerank when the pools hold at most half of the "
        "store)",
        choices=DEV_SCORING,
    )
    rerank_depth: int = train_field(
        100, help="base results in each dev query's re-ranking pool", minimum=1, allowed="a positive integer"
    )
    metric: str = train_field("ndcg@10", help="the metric adoption is decided on", cli=False)
    metrics: tuple[str, ...] = train_field(
        ("ndcg@10", "recall@10", "recall@100", "mrr@10"),
        help="every metric reported (the decision metric is added when missing)",
        cli=False,
    )
    confidence: float = train_field(
        0.95, help="level of the bootstrap interval", above=0, below=1, allowed="between 0 and 1", cli=False
    )
    n_resamples: int = train_field(
        10_000, help="bootstrap resamples", minimum=1, allowed="a positive integer", cli=False
    )
    min_steps: int = train_field(0, help="train at least this many steps", minimum=0, allowed="an integer >= 0")
    max_minutes: float | None = shared_field("max_minutes", None, below=math.inf, allowed="a finite number > 0 or None")
    learning_rate: float = shared_field(
        "learning_rate", 1e-4, below=math.inf, allowed="a finite number > 0", flag="--learning-rate"
    )
    temperature: float = train_field(
        0.05,
        help="softmax temperature of the contrastive loss (its scale is 1/temperature)",
        above=0,
        below=math.inf,
        allowed="a finite number > 0",
    )
    num_negatives: int = train_field(
        1, help="hard negatives per training pair", minimum=0, allowed="an integer >= 0", flag="--negatives"
    )
    negative_depth: int = train_field(
        30,
        help="hard negatives are drawn from the store's top this many results",
        minimum=1,
        allowed="a positive integer",
        cli=False,
    )
    relative_margin: float = train_field(
        0.05,
        help="skip candidates scoring above (1 - relative_margin) times the positive",
        minimum=0,
        below=1,
        cli=False,
    )
    mini_batch_size: int | None = shared_field(
        "mini_batch_size",
        None,
        help="GradCache mini-batch below --train-batch-size, for large batches in little memory (default: none)",
        allowed="a positive integer or None",
        flag_none=None,
    )
    max_seq_length: int | None = shared_field(
        "max_seq_length", None, help="token limit in training (default: the store's)", allowed="an integer >= 8 or None"
    )
    device: str | None = shared_field("device", None)
    force: bool = train_field(False, help="adopt the candidate whatever the dev figures say")
    show_progress_bar: bool = shared_field("show_progress_bar", True)

    def __post_init__(self) -> None:
        if isinstance(self.refit, bool):
            object.__setattr__(self, "refit", "full" if self.refit else "off")
        super().__post_init__()  # every field's bounds and choices
        for name in _integers(type(self)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                self._invalid(name, _allowed(type(self), name))
        parse_metric(self.metric)
        metrics = tuple(dict.fromkeys((self.metric, *self.metrics)))
        for m in metrics:
            parse_metric(m)
        object.__setattr__(self, "metrics", metrics)

    def _invalid(self, name: str, allowed: str) -> typing.NoReturn:
        """``TuneConfig.<name> must be <allowed>, got <value>`` (a :class:`~rag_hier.errors.ParameterError`)."""
        choices = self.__dataclass_fields__[name].metadata.get("choices")
        if choices is not None and not self.__dataclass_fields__[name].metadata.get("allowed"):
            allowed = f"one of {', '.join(choices() if callable(choices) else choices)}"
        raise ParameterError(f"{type(self).__name__}.{name} must be {allowed}, got {getattr(self, name)!r}")

    @property
    def resolved_method(self) -> str:
        """The recipe the method names (``"auto"``: docs/tuning.md's rule, the supervised contrastive recipe)."""
        return recipe(self.method).name


def _allowed(cls: type, name: str) -> str:
    """What field ``name`` of ``cls`` allows, as its error message says it."""
    meta = cls.__dataclass_fields__[name].metadata  # type: ignore[attr-defined]
    _, optional, _ = field_type(typing.get_type_hints(cls)[name])
    return allowed_text(meta, optional=optional)


_INTEGERS: dict[type, tuple[str, ...]] = {}


def _integers(cls: type) -> tuple[str, ...]:
    """The ``int`` fields with bounds (refused when not an integer, ``True`` included; kept per class)."""
    if cls not in _INTEGERS:
        hints = typing.get_type_hints(cls)
        _INTEGERS[cls] = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if field_type(hints[f.name])[0] is int
            and any(f.metadata.get(k) is not None for k in ("minimum", "maximum", "above", "below"))
        )
    return _INTEGERS[cls]
