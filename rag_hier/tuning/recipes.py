"""Tuning recipes by name: what ``TuneConfig(method=...)`` and ``rag-hier tune --method`` choose.

A recipe trains a candidate model from the store's model on the training part of the judged queries
(:func:`rag_hier.tuning.train.train_candidate` runs the one the configuration names). The built-in ones are
``contrastive`` (sentence-transformers' multiple-negatives ranking loss with hard negatives mined from the store),
``hce-s`` and ``hce-j`` (the HCE trainer, supervised or joint); ``auto`` stands for ``contrastive``
(docs/tuning.md). Another is added with :func:`register_recipe`::

    register_recipe(TuneRecipe("my-loss", "my loss on mined negatives", "my_package.tuning:train_my_loss"))

Importing this module loads no NumPy or PyTorch: :class:`~rag_hier.tuning.config.TuneConfig` checks its ``method``
against :func:`recipe_names`, and a recipe's training function is imported when it first runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "AUTO",
    "RecipeFunction",
    "TrainOutcome",
    "TuneRecipe",
    "recipe",
    "recipe_names",
    "recipes",
    "register_recipe",
]

AUTO = "auto"
"""The method name that stands for the default recipe."""

DEFAULT_RECIPE = "contrastive"
"""The recipe :data:`AUTO` stands for (docs/tuning.md says why)."""


@dataclass
class TrainOutcome:
    """What training a candidate did.

    Attributes:
        steps: Optimizer steps done.
        planned_steps: Steps planned (``epochs`` passes, capped by ``max_steps``).
        seconds: Wall time of training (mining included).
        seconds_per_step: Measured mean seconds per step (after the first).
        stopped_early: Why training stopped before the plan (``"max_minutes"``), else ``None``.
        details: Method-specific facts (pairs, negatives per pool, ...).

    """

    steps: int = 0
    planned_steps: int = 0
    seconds: float = 0.0
    seconds_per_step: float | None = None
    stopped_early: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


class RecipeFunction(Protocol):
    """The shape of a recipe's training function (the arguments of :func:`~rag_hier.tuning.train.train_candidate`).

    Args:
        store: The store (its search mines negatives; its passages are the corpus).
        train: The training queries (:class:`~rag_hier.eval.judged.JudgedQueries`).
        query_vectors: ``train``'s queries encoded by the store's model.
        cfg: The :class:`~rag_hier.tuning.config.TuneConfig`.
        model: The ``SentenceTransformer`` to train (a copy of the store's model, or the candidate to continue).
        output_dir: Where the trained model is saved (a sentence-transformers model directory).
        say: Prints a progress line.
        on_estimate: Called once with ``(steps, seconds per step)`` once a step time is measured.
        max_steps: Override of the step budget (a dry run's two measured steps), else ``None``.
        evaluate: Scores the model in training on the dev queries (higher is better), for recipes that keep the
            best pass; may be ignored.
        time_limit: Stop training after this many seconds (``None``: no limit); the model so far is saved.
        label: What a progress bar calls this training (``"candidate"``, ``"fold 2/5"``, ...).

    Returns:
        What training did (``seconds`` is filled in by the caller).

    """

    def __call__(
        self,
        store: Any,
        train: Any,
        query_vectors: Any,
        cfg: Any,
        model: Any,
        output_dir: Any,
        *,
        say: Callable[[str], None],
        on_estimate: Callable[[int, float], None],
        max_steps: int | None,
        evaluate: Callable[[Any], float] | None,
        time_limit: float | None,
        label: str,
    ) -> TrainOutcome:
        """Train ``model`` on ``train`` and save it to ``output_dir``."""
        ...


@dataclass(frozen=True)
class TuneRecipe:
    """A tuning recipe: its name, one line of help, and its training function.

    Attributes:
        name: What ``TuneConfig(method=...)`` and ``rag-hier tune --method`` call it.
        help: One line saying what it trains (``rag-hier tune --help`` lists it).
        train: The :class:`RecipeFunction`, or ``"module:function"`` naming it (imported when it first runs, so
            that registering a recipe loads no training library).

    """

    name: str
    help: str
    train: RecipeFunction | str

    def function(self) -> RecipeFunction:
        """The training function (imported now when :attr:`train` names it)."""
        if not isinstance(self.train, str):
            return self.train
        module, _, name = self.train.partition(":")
        function: RecipeFunction = getattr(importlib.import_module(module), name)
        return function


_RECIPES: dict[str, TuneRecipe] = {}


def register_recipe(recipe: TuneRecipe, *, replace: bool = False) -> TuneRecipe:
    """Add ``recipe`` (``replace=True`` to replace one of the same name); returns it.

    Raises:
        ValueError: The name is ``"auto"``, empty, or taken (without ``replace``), or ``train`` names no
            ``module:function``.

    """
    if not recipe.name or recipe.name == AUTO:
        raise ValueError(f"a tuning recipe cannot be called {recipe.name!r}")
    if recipe.name in _RECIPES and not replace:
        raise ValueError(f"a tuning recipe {recipe.name!r} is registered already (replace=True replaces it)")
    if isinstance(recipe.train, str) and not all(recipe.train.partition(":")[::2]):
        raise ValueError(f"tuning recipe {recipe.name!r}: train must be a function or 'module:function'")
    _RECIPES[recipe.name] = recipe
    return recipe


def recipes() -> dict[str, TuneRecipe]:
    """The registered recipes, name → :class:`TuneRecipe`, in registration order."""
    return dict(_RECIPES)


def recipe_names() -> tuple[str, ...]:
    """What ``method`` may be: ``"auto"`` and every registered recipe's name."""
    return (AUTO, *_RECIPES)


def recipe(name: str) -> TuneRecipe:
    """The recipe ``name`` stands for (``"auto"``: :data:`DEFAULT_RECIPE`).

    Raises:
        KeyError: No recipe of that name; the message names the known ones.

    """
    key = DEFAULT_RECIPE if name == AUTO else name
    if key not in _RECIPES:
        raise KeyError(f"no tuning recipe {name!r}; known: {', '.join(recipe_names())}")
    return _RECIPES[key]


for _recipe in (
    TuneRecipe(
        "contrastive",
        "multiple-negatives ranking loss with hard negatives mined from the store (sentence-transformers)",
        "rag_hier.tuning.train:train_contrastive",
    ),
    TuneRecipe("hce-s", "HCE supervised: tiered negatives from the k-means tree", "rag_hier.tuning.train:train_hce"),
    TuneRecipe(
        "hce-j",
        "HCE joint: supervised plus the unsupervised passage task, tiered negatives",
        "rag_hier.tuning.train:train_hce",
    ),
):
    register_recipe(_recipe)
del _recipe
