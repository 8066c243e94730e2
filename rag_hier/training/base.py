"""The one shape every trainer has: :class:`Trainer` (a protocol) and :class:`TrainingResult` (the results' base).

Every method's trainer is built and run the same way::

    trainer = MethodTrainer(config, model=..., device=..., show_progress_bar=...)  # every argument optional
    result = trainer.train(corpus, output_dir, queries=..., qrels=..., **method_options)

``config`` is the method's :class:`~rag_hier.training.config.TrainingConfig` (``None``: its defaults); ``model``
the model to start from (``None``: the method's default, or its configuration's ``base_model``); ``device`` and
``show_progress_bar`` where it trains and whether it shows progress bars (``None``: the configuration's or the
method's default). ``train`` takes the corpus (a :data:`~rag_hier.training.corpus.CorpusInput`), where to save
(``None`` where a method can train without saving), the judged queries, and the method's own options as keywords,
and returns a :class:`TrainingResult` subclass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rag_hier.training.config import TrainingConfig

__all__ = ["Trainer", "TrainingResult", "with_overrides"]


@dataclass(frozen=True, kw_only=True)
class TrainingResult:
    """What every training run reports; each method's result adds its own facts.

    Attributes:
        output_dir: Where the trained model was saved (``None``: not saved).
        steps: Optimizer steps done.
        seconds: Wall-clock time of the run.

    """

    output_dir: Path | None
    steps: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the training report written next to the model)."""
        out = dataclasses.asdict(self)
        out["output_dir"] = str(self.output_dir) if self.output_dir is not None else None
        out["seconds"] = round(self.seconds, 1)
        return out


@runtime_checkable
class Trainer(Protocol):
    """What every method's trainer is: built from a configuration, trained on a corpus and judged queries.

    Constructor (the same for every trainer): ``(config=None, *, model=None, device=None, show_progress_bar=None)``.
    """

    config: TrainingConfig

    def train(
        self,
        corpus: Any,
        output_dir: str | Path | None,
        *,
        queries: Any = None,
        qrels: Any = None,
        **options: Any,
    ) -> TrainingResult:
        """Train on ``corpus`` (and the judged ``queries``), save to ``output_dir``; what the run did."""
        ...


def with_overrides(config: Any, **values: Any) -> Any:
    """``config`` with the fields in ``values`` that are not ``None`` replaced (a trainer's constructor arguments)."""
    given = {k: v for k, v in values.items() if v is not None}
    return dataclasses.replace(config, **given) if given else config
