"""A wall-clock limit on training, shared by the trainers built on sentence-transformers' trainer."""

from __future__ import annotations

import logging
import time
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["TimeLimit"]


class TimeLimit:
    """A deadline ``max_minutes`` from now (``None``: none); :meth:`callback` stops a trainer when it passes.

    One instance spans every ``Trainer`` a training run creates (EM epochs, iterations), so the limit is on the
    whole run; :attr:`reached` tells the run's own loop to stop too.
    """

    def __init__(self, max_minutes: float | None) -> None:
        self.deadline = None if max_minutes is None else time.monotonic() + 60.0 * float(max_minutes)
        self.max_minutes = max_minutes
        self.reached = False

    def passed(self) -> bool:
        """Whether the deadline has passed (and remember it)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            if not self.reached:
                logger.warning("stopping training: the %g-minute limit is reached", self.max_minutes)
            self.reached = True
        return self.reached

    def callback(self) -> Any:
        """A ``transformers.TrainerCallback`` that stops training at the deadline (after the current step)."""
        from transformers import TrainerCallback

        limit = self

        class _Stop(TrainerCallback):  # type: ignore[misc,unused-ignore]
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
                if limit.passed():
                    control.should_training_stop = True
                return control

        return _Stop()
