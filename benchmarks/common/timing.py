"""Timing: functions measured interleaved (the machine is shared), and the figures reported for them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Interleaved:
    """What :func:`interleaved` measured: per name, the seconds of each call and what each call returned."""

    seconds: dict[str, list[float]]
    results: dict[str, list[Any]]

    def summary(self) -> dict[str, dict[str, float]]:
        """:func:`summary` of each name's seconds."""
        return {name: summary(values) for name, values in self.seconds.items()}


def interleaved(
    fns: Mapping[str, Callable[[int], Any]],
    n: int,
    *,
    warmup: int = 0,
    rotate: bool = True,
    prepare: Callable[[], None] | None = None,
) -> Interleaved:
    """Call every function on item ``i`` (``fn(i)``) before any on item ``i + 1``, so machine noise hits all alike.

    Args:
        fns: Name -> function of the item number (e.g. ``lambda i: index.search(q[i : i + 1], 10)``).
        n: Items timed (``0 .. n - 1``).
        warmup: Items ``0 .. warmup - 1`` run first on every function, untimed.
        rotate: Start round ``i`` with function ``i mod len(fns)``, so that none always runs first (or last).
        prepare: Called before every call, untimed (e.g. to drop a cache).

    """
    names = list(fns)
    for i in range(warmup):
        for name in names:
            if prepare:
                prepare()
            fns[name](i)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    results: dict[str, list[Any]] = {name: [] for name in names}
    clock = time.perf_counter
    for i in range(n):
        shift = i % len(names) if rotate and names else 0
        for name in names[shift:] + names[:shift]:
            if prepare:
                prepare()
            t = clock()
            out = fns[name](i)
            seconds[name].append(clock() - t)
            results[name].append(out)
    return Interleaved(seconds, results)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100, linear interpolation) of ``values``."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summary(seconds: Sequence[float], *, digits: int | None = None) -> dict[str, float]:
    """Median and p95 of durations in seconds, in milliseconds (rounded to ``digits`` if given), and their count."""
    median, p95 = 1000 * percentile(seconds, 50), 1000 * percentile(seconds, 95)
    if digits is not None:
        median, p95 = round(median, digits), round(p95, digits)
    return {"median_ms": median, "p95_ms": p95, "n": len(seconds)}


def loadavg() -> list[float]:
    """The machine's 1/5/15-minute load averages (the machine is shared: report them with every figure)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not available on this platform
        return [float("nan")] * 3
