"""Checks at the edges of a tuning run: what must be refused before anything is trained."""

from __future__ import annotations

import math
from typing import Any

from rag_hier.errors import ParameterError

__all__ = ["check_finite"]

_FINITE = ("epochs", "learning_rate", "temperature", "dev_fraction")


def check_finite(config: Any) -> None:
    """Refuse a :class:`~rag_hier.tuning.TuneConfig` whose counts or rates are not finite (``epochs=inf``)."""
    for name in _FINITE:
        value = getattr(config, name, None)
        if value is not None and not math.isfinite(float(value)):
            raise ParameterError(f"TuneConfig.{name} must be a finite number, got {value!r}")
