"""Paired comparison of retrieval systems over the same queries (``rag-hier compare``).

For each metric and each system against the first (the baseline): the mean per system, the mean paired
difference with a seeded percentile-bootstrap confidence interval over queries
(:func:`scipy.stats.bootstrap`), a paired test (:func:`scipy.stats.ttest_rel`, or Fisher's randomization
test through :func:`scipy.stats.permutation_test` with paired sign flips), wins / losses / ties, and
Holm's step-down correction of the p-values when more than one system is compared with the baseline.

The statistics are scipy's; this module only pairs the values and lays out the result.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rag_hier.errors import RagHierError
from rag_hier.eval.choices import PAIRED_TESTS, PairedTest

__all__ = [
    "PAIRED_TESTS",
    "Comparison",
    "PairedDifference",
    "compare_systems",
    "holm",
    "paired_difference",
]

TIE_TOLERANCE = 1e-9
"""Per-query differences at most this large (in absolute value) count as ties."""


@dataclass(frozen=True)
class PairedDifference:
    """One system against the baseline on one metric (``delta`` = system − baseline).

    Attributes:
        metric: The metric name.
        baseline: The baseline system's name.
        system: The compared system's name.
        queries: Number of paired queries.
        mean_baseline: The baseline's mean.
        mean_system: The system's mean.
        delta: Mean of the per-query differences.
        ci_low: Lower end of the bootstrap interval of ``delta``.
        ci_high: Upper end of it.
        p_value: Two-sided p-value of the paired test (``nan`` when it is undefined, e.g. one query).
        p_holm: Holm-adjusted p-value within the metric's family (equals ``p_value`` with one comparison).
        wins: Queries where the system is better than the baseline.
        losses: Queries where it is worse.
        ties: Queries where they are equal (within :data:`TIE_TOLERANCE`).

    """

    metric: str
    baseline: str
    system: str
    queries: int
    mean_baseline: float
    mean_system: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    wins: int
    losses: int
    ties: int


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare_systems`."""

    systems: tuple[str, ...]
    metrics: tuple[str, ...]
    queries: int
    means: dict[str, dict[str, float]]
    """system → metric → mean."""
    differences: tuple[PairedDifference, ...]
    test: str
    seed: int
    n_resamples: int
    confidence: float
    sources: dict[str, str] = field(default_factory=dict)
    """system → the file it was read from (when it was)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``nan`` p-values become ``None``)."""

        def clean(value: Any) -> Any:
            return None if isinstance(value, float) and math.isnan(value) else value

        return {
            "systems": list(self.systems),
            "sources": dict(self.sources),
            "metrics": list(self.metrics),
            "queries": self.queries,
            "test": self.test,
            "bootstrap": {"resamples": self.n_resamples, "confidence": self.confidence, "seed": self.seed},
            "holm": len(self.systems) > 2,
            "means": self.means,
            "differences": [{k: clean(v) for k, v in asdict(d).items()} for d in self.differences],
        }

    def to_markdown(self) -> str:
        """Two Markdown tables: means per system, then paired differences against the baseline."""
        test_name = "paired t-test" if self.test == "t" else "randomization test"
        lines = [
            f"{self.queries} queries; baseline: {self.systems[0]}",
            "",
            "| system | " + " | ".join(self.metrics) + " |",
            "|---|" + "---:|" * len(self.metrics),
        ]
        for s in self.systems:
            lines.append(f"| {s} | " + " | ".join(f"{self.means[s][m]:.4f}" for m in self.metrics) + " |")
        holm_col = len(self.systems) > 2
        lines += [
            "",
            f"Paired differences against {self.systems[0]} (system − baseline; {self.confidence:.0%} bootstrap "
            f"interval over queries, {self.n_resamples:,} resamples, seed {self.seed}; p from the {test_name}"
            + ("; Holm-adjusted over the systems compared" if holm_col else "")
            + ")",
            "",
            "| metric | system | Δ | CI | p |" + (" p (Holm) |" if holm_col else "") + " better / worse / tied |",
            "|---|---|---:|---|---:|" + ("---:|" if holm_col else "") + "---|",
        ]
        for d in self.differences:
            row = (
                f"| {d.metric} | {d.system} | {d.delta:+.4f} | [{d.ci_low:+.4f}, {d.ci_high:+.4f}] | "
                f"{_format_p(d.p_value)} |"
            )
            if holm_col:
                row += f" {_format_p(d.p_holm)} |"
            lines.append(row + f" {d.wins} / {d.losses} / {d.ties} |")
        return "\n".join(lines) + "\n"


def _format_p(p: float) -> str:
    if math.isnan(p):
        return "–"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def _rng_kwargs(func: Any, seed: int) -> dict[str, Any]:
    """Seed keyword for scipy: ``rng`` from 1.15 on, ``random_state`` before (same draws from one Generator)."""
    name = "rng" if "rng" in inspect.signature(func).parameters else "random_state"
    return {name: np.random.default_rng(seed)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: ``p_(i) * (m - i + 1)``, made monotone, capped at 1 (``nan`` stays).

    Example:
        >>> [round(p, 4) for p in holm([0.01, 0.04, 0.03])]
        [0.03, 0.06, 0.06]

    """
    indexed = [(p, i) for i, p in enumerate(p_values) if not math.isnan(p)]
    m = len(indexed)
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(indexed)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def paired_difference(
    baseline: Sequence[float] | np.ndarray,
    system: Sequence[float] | np.ndarray,
    *,
    test: PairedTest = "t",
    seed: int = 42,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
) -> dict[str, float]:
    """Statistics of ``system − baseline`` over paired per-query values.

    Args:
        baseline: Per-query values of the baseline.
        system: The same queries' values of the other system, in the same order.
        test: ``"t"`` (paired t-test) or ``"randomization"`` (paired sign-flip permutation test).
        seed: Seeds the bootstrap and the randomization test (``numpy.random.default_rng(seed)``).
        n_resamples: Bootstrap resamples (and permutations).
        confidence: Level of the percentile-bootstrap interval.

    Returns:
        ``mean_baseline``, ``mean_system``, ``delta``, ``ci_low``, ``ci_high``, ``p_value``, ``wins``,
        ``losses``, ``ties`` and ``queries``.

    Raises:
        RagHierError: Different lengths, no values, an unknown test, or a bad ``confidence``.

    """
    from scipy import stats

    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(system, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise RagHierError(f"paired values must be two sequences of one length, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise RagHierError("no queries to compare")
    if test not in PAIRED_TESTS:
        raise RagHierError(f"unknown paired test {test!r}; use one of {', '.join(PAIRED_TESTS)}")
    if not 0 < confidence < 1:
        raise RagHierError(f"confidence must be between 0 and 1, got {confidence}")
    if n_resamples < 1:
        raise RagHierError(f"n_resamples must be >= 1, got {n_resamples}")
    d = b - a
    delta = float(d.mean())
    if a.size < 2 or np.ptp(d) <= 1e-12:
        # no spread: the bootstrap distribution is one point and the tests are undefined (or trivial)
        low = high = delta
        p = math.nan if a.size < 2 else (1.0 if delta == 0 else 0.0)
    else:
        ci = stats.bootstrap(
            (d,),
            np.mean,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            **_rng_kwargs(stats.bootstrap, seed),
        ).confidence_interval
        low, high = float(ci.low), float(ci.high)
        if test == "t":
            p = float(stats.ttest_rel(b, a).pvalue)
        else:

            def mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
                return np.mean(x - y, axis=axis)

            p = float(
                stats.permutation_test(
                    (b, a),
                    mean_difference,
                    permutation_type="samples",
                    vectorized=True,
                    n_resamples=n_resamples,
                    alternative="two-sided",
                    **_rng_kwargs(stats.permutation_test, seed),
                ).pvalue
            )
    return {
        "queries": int(a.size),
        "mean_baseline": float(a.mean()),
        "mean_system": float(b.mean()),
        "delta": delta,
        "ci_low": low,
        "ci_high": high,
        "p_value": p,
        "wins": int((d > TIE_TOLERANCE).sum()),
        "losses": int((d < -TIE_TOLERANCE).sum()),
        "ties": int((np.abs(d) <= TIE_TOLERANCE).sum()),
    }


def compare_systems(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
    *,
    metrics: Sequence[str] | None = None,
    test: PairedTest = "t",
    seed: int = 42,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    sources: Mapping[str, str] | None = None,
) -> Comparison:
    """Compare systems on the same queries, each against the first.

    Args:
        per_query: System name → metric → {query id → value}, systems in order (the first is the baseline).
            Every system must hold the same queries for every metric compared. The values are paired
            in query-id order (sorted), so the bootstrap resamples do not depend on where they came from.
        metrics: Metrics to compare (default: those of the first system, in its order).
        test: ``"t"`` or ``"randomization"`` (see :func:`paired_difference`).
        seed: Seed of the bootstrap and the randomization test.
        n_resamples: Bootstrap resamples.
        confidence: Level of the bootstrap interval.
        sources: System → file it came from, recorded in the result and named in errors.

    Raises:
        RagHierError: Fewer than two systems, a metric a system lacks, or query sets that differ.

    """
    names = list(per_query)
    if len(names) < 2:
        raise RagHierError(f"compare needs at least two systems, got {len(names)}")
    where = dict(sources or {})

    def label(s: str) -> str:
        return f"{s} ({where[s]})" if s in where and where[s] != s else s

    first = per_query[names[0]]
    wanted = list(metrics) if metrics is not None else list(first)
    if not wanted:
        raise RagHierError(f"{label(names[0])} holds no metric")
    means: dict[str, dict[str, float]] = {s: {} for s in names}
    differences: list[PairedDifference] = []
    n_queries = 0
    for metric in wanted:
        for s in names:
            if metric not in per_query[s]:
                have = ", ".join(per_query[s]) or "none"
                raise RagHierError(f"{label(s)} has no values of {metric!r} (it has {have})")
        qids = list(first[metric])
        base_set = set(qids)
        for s in names[1:]:
            other = set(per_query[s][metric])
            if other != base_set:
                only_base = sorted(base_set - other)
                only_other = sorted(other - base_set)
                raise RagHierError(
                    f"{label(s)} and {label(names[0])} do not hold the same queries for {metric!r}: "
                    f"{len(only_base)} only in {names[0]} (e.g. {only_base[:3]}), "
                    f"{len(only_other)} only in {s} (e.g. {only_other[:3]})"
                )
        qids.sort()  # one order whatever the source (run, per-query file), so the resamples are the same
        n_queries = len(qids)
        base = np.asarray([first[metric][q] for q in qids], dtype=np.float64)
        means[names[0]][metric] = float(base.mean())
        rows = []
        for s in names[1:]:
            vals = np.asarray([per_query[s][metric][q] for q in qids], dtype=np.float64)
            means[s][metric] = float(vals.mean())
            rows.append(
                (s, paired_difference(base, vals, test=test, seed=seed, n_resamples=n_resamples, confidence=confidence))
            )
        adjusted = holm([r["p_value"] for _, r in rows])
        for (s, r), p_holm in zip(rows, adjusted, strict=True):
            differences.append(
                PairedDifference(
                    metric=metric,
                    baseline=names[0],
                    system=s,
                    queries=int(r["queries"]),
                    mean_baseline=r["mean_baseline"],
                    mean_system=r["mean_system"],
                    delta=r["delta"],
                    ci_low=r["ci_low"],
                    ci_high=r["ci_high"],
                    p_value=r["p_value"],
                    p_holm=p_holm,
                    wins=int(r["wins"]),
                    losses=int(r["losses"]),
                    ties=int(r["ties"]),
                )
            )
    return Comparison(
        systems=tuple(names),
        metrics=tuple(wanted),
        queries=n_queries,
        means=means,
        differences=tuple(differences),
        test=test,
        seed=seed,
        n_resamples=n_resamples,
        confidence=confidence,
        sources=where,
    )
