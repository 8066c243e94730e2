"""The one wall-clock limit on training, used by every trainer and by ``rag-hier tune``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["TimeLimit"]


class TimeLimit:
    """A deadline ``max_minutes`` (or ``seconds``) from now (``None``: none); :meth:`callback` stops a trainer there.

    One instance spans every ``Trainer`` a training run creates (EM epochs, iterations), so the limit is on the
    whole run; :attr:`reached` tells the run's own loop to stop too.

    Args:
        max_minutes: Minutes from now (``None``: no limit).
        seconds: The limit in seconds instead (give one of the two).
        on_reached: Called once, with the trainer's step, when the callback stops a trainer; without it the limit
            logs a warning instead (the caller reports the stop itself).

    """

    def __init__(
        self,
        max_minutes: float | None = None,
        *,
        seconds: float | None = None,
        on_reached: Callable[[int], None] | None = None,
    ) -> None:
        if max_minutes is not None and seconds is not None:
            raise ValueError("give TimeLimit max_minutes or seconds, not both")
        span = 60.0 * float(max_minutes) if max_minutes is not None else seconds
        self.seconds = None if span is None else float(span)
        self.deadline = None if self.seconds is None else time.monotonic() + self.seconds
        self.max_minutes = None if self.seconds is None else self.seconds / 60.0
        self.on_reached = on_reached
        self.reached = False

    def passed(self) -> bool:
        """Whether the deadline has passed (and remember it)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            if not self.reached and self.on_reached is None:
                logger.warning("stopping training: the %g-minute limit is reached", self.max_minutes)
            self.reached = True
        return self.reached

    def callback(self) -> Any:
        """A ``transformers.TrainerCallback`` that stops training at the deadline (after the current step)."""
        from transformers import TrainerCallback

        limit = self

        class _Stop(TrainerCallback):  # type: ignore[misc,unused-ignore]
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
                already = limit.reached
                if limit.passed():
                    control.should_training_stop = True
                    if not already and limit.on_reached is not None:
                        limit.on_reached(int(state.global_step))
                return control

        return _Stop()
