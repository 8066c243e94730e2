"""``tune``: fine-tune a store's model on judged queries and adopt it only when it measures better.

1. The judged queries are read as ``rag-hier eval`` reads them (:mod:`rag_hier.eval.judged`) and split by
   query into a training part and a dev part (:func:`~rag_hier.tuning.split.split_dev`, seeded; queries that
   share a relevant document stay on one side).
2. The base (the store as it is) is scored on the dev queries with the store's own search.
3. A candidate is trained from the store's model on the training queries (:mod:`rag_hier.tuning.train`);
   after two steps the whole run is estimated from the measured seconds per step and the measured encoding
   rate.
4. Every passage is encoded by the candidate into an index of the store's kind beside the store's own, and
   the candidate is scored on the same dev queries.
5. The paired difference per dev query decides (:data:`ADOPTION_RULE`); ``force`` adopts anyway. Adoption is
   :meth:`HierStore.adopt_model` with the vectors of step 4 (no second encoding): one commit, the model kept
   inside the store, the previous one kept for ``rollback_model``.

The model measured is the model adopted: nothing is retrained on the dev queries after the decision.
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import RagHierError
from rag_hier.eval.compare import paired_difference
from rag_hier.eval.judged import JudgedQueries, default_level, judged_from_mappings, load_judged
from rag_hier.store.encoder_switch import encode_passages
from rag_hier.tuning.config import TuneConfig
from rag_hier.tuning.edges import candidate_workspace, check_finite
from rag_hier.tuning.report import TuneReport
from rag_hier.tuning.scoring import candidate_index, score_queries
from rag_hier.tuning.split import seen_documents, split_dev
from rag_hier.tuning.train import train_candidate

logger = logging.getLogger(__name__)

__all__ = ["ADOPTION_RULE", "paired_differences", "report_files", "tune"]

ADOPTION_RULE = (
    "adopt when the lower end of the {confidence:.0%} paired bootstrap interval of the dev {metric} difference "
    "(candidate - base, per query, {n_resamples} resamples, seed {seed}) is above 0, and the candidate is not shown "
    "worse on the dev queries about documents no training query is about (when there are at least {min_new}): the "
    "upper end of their interval is not below 0"
)
MIN_NEW_DOCUMENT_QUERIES = 10
"""Dev queries about new documents below which the new-document part of the rule does not apply."""
_SAMPLE = 64
"""Passages encoded to measure the encoding rate for the estimate."""


def _peak_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1 << 20) if sys.platform == "darwin" else rss / 1024


def _check_store(store: Any) -> None:
    if not hasattr(store, "check_switchable"):
        raise RagHierError(
            f"tuning needs a local store directory; {store.location} is not one (tune a local copy of the "
            "collection, then build the collection with the tuned model)"
        )
    store.check_switchable("tuning")


def _judged(store: Any, queries: Any, qrels: Any, level: str) -> JudgedQueries:
    if isinstance(queries, JudgedQueries):
        return queries
    if isinstance(queries, Mapping):
        if qrels is None or not isinstance(qrels, Mapping):
            raise RagHierError("queries given as a mapping need qrels as a mapping {query id: {id: grade}}")
        return judged_from_mappings(store, queries, qrels, level)
    if queries is None:
        raise RagHierError(
            "tuning needs judged queries (a BEIR queries.jsonl with qrels, a QA questions.jsonl, or mappings) or a "
            "question generator (generator=, or --generator MODULE:FUNCTION): without either there is nothing to "
            "train on or to measure"
        )
    return load_judged(store, Path(queries), Path(qrels) if qrels is not None else None, level)


def _encode_rate(store: Any, encoder: DenseEncoder, seed: int) -> tuple[float, int]:
    """Measured passages per second of ``encoder`` on a sample of the store's passages, and their count."""
    rowids = store.rowids_of()
    n = int(rowids.size)
    if n == 0:
        return float("inf"), 0
    rng = np.random.default_rng(seed)
    sample = rng.choice(rowids, size=min(_SAMPLE, n), replace=False)
    texts = [r.to_passage().embedding_text for r in store.records(sample.tolist()).values()]
    encoder.encode_documents(texts[:2])  # warm
    t0 = time.perf_counter()
    encoder.encode_documents(texts)
    elapsed = max(time.perf_counter() - t0, 1e-6)
    return len(texts) / elapsed, n


def tune(
    store: Any,
    queries: Any = None,
    qrels: Any = None,
    *,
    config: TuneConfig | None = None,
    level: str | None = None,
    dry_run: bool = False,
    say: Callable[[str], None] | None = None,
    generator: Callable[[str], Any] | None = None,
    generator_name: str | None = None,
    max_generated_passages: int = 1000,
) -> TuneReport:
    """Fine-tune ``store``'s model on judged queries; adopt the candidate only when it measures better on dev.

    Args:
        store: A writable local :class:`~rag_hier.store.HierStore` with a recorded model.
        queries: A queries file (BEIR ``queries.jsonl`` or QA ``questions.jsonl``), ``{query id: text}``, or a
            :class:`~rag_hier.eval.judged.JudgedQueries`.
        qrels: A qrels file (optional for QA questions), or ``{query id: {id: grade}}``.
        config: The settings (:class:`TuneConfig`).
        level: What the judgements name: ``"doc"`` or ``"passage"`` (default: documents for BEIR corpora).
        dry_run: Measure and estimate (two training steps), then stop without adopting.
        say: Receives progress lines (default: the module logger).
        generator: Without ``queries``: a question generator ``(passage text) -> list[str]``; its questions (kept in
            the store, see :mod:`rag_hier.tuning.generate`) judge the passage they were written for.
        generator_name: The name its questions are kept under (default: the callable's module and name).
        max_generated_passages: Passages sampled for questions.

    Returns:
        The :class:`TuneReport` (adopted or not, and why).

    Raises:
        RagHierError: Unusable inputs (no judgements, ids the store lacks, an empty split), a store that
            cannot be tuned; the store is unchanged.

    """
    cfg = config or TuneConfig()
    check_finite(cfg)
    out = say or logger.info
    t_start = time.perf_counter()
    _check_store(store)
    measured = store.model_info["current"]  # adopted only if still the store's model at the commit
    lvl = default_level(store, level)
    if lvl not in ("doc", "passage"):
        raise RagHierError(f"level must be 'doc' or 'passage', got {lvl!r}")
    if queries is None and generator is not None:
        from rag_hier.tuning.generate import generated_judgements

        queries, qrels = generated_judgements(
            store,
            generator,
            level=lvl,
            max_passages=max_generated_passages,
            seed=cfg.seed,
            name=generator_name,
            show_progress_bar=cfg.show_progress_bar,
            say=out,
        )
    judged = _judged(store, queries, qrels, lvl)
    report = TuneReport(
        store=str(store.location),
        method=cfg.resolved_method,
        level=judged.level,
        config=cfg.to_dict(),
        rule=ADOPTION_RULE.format(
            confidence=cfg.confidence,
            metric=cfg.metric,
            n_resamples=cfg.n_resamples,
            seed=cfg.seed,
            min_new=MIN_NEW_DOCUMENT_QUERIES,
        ),
        dry_run=dry_run,
    )
    answerable = [q for q in judged.queries if any(g > 0 and d in judged.known for d, g in judged.qrels[q].items())]
    if not answerable:
        raise RagHierError(
            f"none of the {len(judged)} judged queries of {judged.source} names a relevant "
            f"{'document' if judged.level == 'doc' else 'passage'} the store holds: are the ids from this corpus?"
        )
    answered = judged.subset(answerable)
    train, dev = split_dev(answered, cfg.dev_fraction, cfg.seed, mode=cfg.dev_split)
    for line in judged.warnings():
        report.warnings.append(line)
        out(f"warning: {line}")
    if len(answerable) < len(judged):
        out(f"warning: {len(judged) - len(answerable)} judged queries name nothing the store holds; they are left out")
    report.train_queries, report.dev_queries = len(train), len(dev)
    report.dev_query_ids = list(dev.queries)
    out(f"{len(judged)} judged queries ({judged.level} level): {len(train)} to train on, {len(dev)} held back")
    base = store.encoder
    rate, n_passages = _encode_rate(store, base, cfg.seed)
    encode_estimate = n_passages / rate if n_passages else 0.0
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    q_train = base.encode_queries(list(train.queries.values()))
    q_dev = base.encode_queries(list(dev.queries.values()))
    base_values = score_queries(store, dev, q_dev, cfg.metrics)
    seconds["score_base"] = time.perf_counter() - t0
    report.base = {m: float(np.mean(list(v.values()))) for m, v in base_values.items()}
    out("base on dev: " + ", ".join(f"{m} {v:.4f}" for m, v in report.base.items()))

    refit_share = len(answered) / max(len(train), 1) if cfg.refit else 0.0

    def on_estimate(steps: int, seconds_per_step: float) -> None:
        train_s = seconds_per_step * steps * (1 + refit_share)
        total = train_s + (3 if cfg.refit else 2) * encode_estimate
        report.estimate_seconds = round(total, 1)
        refit = f" (and again on all {len(answered)} queries if adopted)" if cfg.refit else ""
        out(
            f"estimate: {seconds_per_step:.2f} s/step (measured) x {steps} steps{refit} + encoding {n_passages} "
            f"passages and scoring (~{encode_estimate:.0f} s each, measured {rate:.0f} passages/s) = about "
            f"{total / 60:.1f} min at most"
        )

    with candidate_workspace() as tmp:
        candidate_dir = Path(tmp) / "candidate"
        t0 = time.perf_counter()
        outcome = train_candidate(
            store,
            train,
            q_train,
            cfg,
            candidate_dir,
            say=out,
            on_estimate=(lambda steps, sps: None) if dry_run else on_estimate,
            max_steps=2 if dry_run else None,
        )
        seconds["train"] = time.perf_counter() - t0
        report.steps, report.planned_steps = outcome.steps, outcome.planned_steps
        report.details = dict(outcome.details)
        if outcome.stopped_early:
            report.details["stopped_early"] = outcome.stopped_early
        if dry_run:
            if outcome.seconds_per_step is not None:
                on_estimate(outcome.planned_steps, outcome.seconds_per_step)
            report.reason = "dry run: two training steps measured, nothing adopted"
            return _finish(report, store, seconds, t_start)
        enc_cfg = store.model_info["current"] or {}
        candidate = store.encoder_for(candidate_dir, device=cfg.device or base.requested_device)
        t0 = time.perf_counter()
        encoded = encode_passages(store, candidate, show_progress_bar=cfg.show_progress_bar)
        seconds["encode"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = candidate_index(store, encoded)
        cand_values = score_queries(
            store, dev, candidate.encode_queries(list(dev.queries.values())), cfg.metrics, index=index
        )
        seconds["score_candidate"] = time.perf_counter() - t0
        report.candidate = {m: float(np.mean(list(v.values()))) for m, v in cand_values.items()}
        report.difference = paired_differences(base_values, cand_values, list(dev.queries), cfg)
        report.dev_subsets = _subsets(train, dev, base_values, cand_values, cfg)
        d = report.difference[cfg.metric]
        report.reason, better = _verdict(d, report.dev_subsets.get("unseen_documents"), len(dev), cfg)
        if better or cfg.force:
            adopt_dir, adopt_encoded = candidate_dir, encoded
            if cfg.refit:
                adopt_dir = Path(tmp) / "refit"
                adopt_encoded = _refit(store, answered, cfg, adopt_dir, seconds, report, out)
            t0 = time.perf_counter()
            details = {
                "method": report.method,
                "base_model": (enc_cfg.get("adopted") or {}).get("base_model", enc_cfg.get("model")),
                "steps": report.steps,
                "train_queries": report.train_queries,
                "dev_queries": report.dev_queries,
                "metric": cfg.metric,
                "base": report.base.get(cfg.metric),
                "candidate": report.candidate.get(cfg.metric),
                "difference": d,
                "forced": not better,
            }
            out("adopting: re-encoded passages go into the store's index in one commit")
            if cfg.refit:
                details["refit"] = report.details.get("refit")
            store.adopt_model(
                adopt_dir,
                encoded=adopt_encoded,
                details=details,
                show_progress_bar=cfg.show_progress_bar,
                expected=measured,
            )
            seconds["adopt"] = time.perf_counter() - t0
            report.adopted = True
    return _finish(report, store, seconds, t_start)


def _verdict(d: Mapping[str, float], new: Mapping[str, float] | None, n_dev: int, cfg: TuneConfig) -> tuple[str, bool]:
    """The reason and whether the rule adopts: ``d`` the dev difference, ``new`` that on new-document queries."""
    interval = f"{cfg.metric} {d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]"
    shown = d["ci_low"] > 0
    guard = new if new is not None and new["queries"] >= MIN_NEW_DOCUMENT_QUERIES else None
    new_ok = guard is None or guard["ci_high"] >= 0
    about = (
        f"the {guard['queries']:.0f} dev queries about documents no training query is about ({cfg.metric} "
        f"{guard['delta']:+.4f} [{guard['ci_low']:+.4f}, {guard['ci_high']:+.4f}])"
        if guard is not None
        else ""
    )
    if shown and new_ok:
        tail = f", and not shown worse on {about}" if about else ""
        return f"the candidate is better on the {n_dev} dev queries: {interval}{tail}", True
    if cfg.force:
        return f"forced: the rule does not adopt the candidate (dev {interval}{'; ' + about if about else ''})", False
    if shown:
        return (
            f"the candidate is better on the {n_dev} dev queries ({interval}) but shown worse on {about}: it would "
            "hurt queries about new documents; the store is unchanged"
        ), False
    return (
        f"the candidate is not shown better on the {n_dev} dev queries: {interval} (the interval reaches 0 or "
        "below); the store is unchanged"
    ), False


def _refit(
    store: Any,
    judged: JudgedQueries,
    cfg: TuneConfig,
    output_dir: Path,
    seconds: dict[str, float],
    report: TuneReport,
    out: Callable[[str], None],
) -> Any:
    """Train the model to adopt on every judged query (same settings) into ``output_dir``; its encoded passages."""
    out(f"refitting on all {len(judged)} judged queries (training and dev part), as the measured candidate was trained")
    t0 = time.perf_counter()
    base = store.encoder
    q_all = base.encode_queries(list(judged.queries.values()))
    outcome = train_candidate(store, judged, q_all, cfg, output_dir, say=out, on_estimate=lambda steps, sps: None)
    seconds["refit"] = time.perf_counter() - t0
    report.details["refit"] = {"queries": len(judged), "steps": outcome.steps, **dict(outcome.details)}
    model = store.encoder_for(output_dir, device=cfg.device or base.requested_device)
    t0 = time.perf_counter()
    encoded = encode_passages(store, model, show_progress_bar=cfg.show_progress_bar)
    seconds["encode_refit"] = time.perf_counter() - t0
    return encoded


def _subsets(
    train: JudgedQueries,
    dev: JudgedQueries,
    base: dict[str, dict[str, float]],
    other: dict[str, dict[str, float]],
    cfg: TuneConfig,
) -> dict[str, dict[str, float]]:
    """The decision metric's difference on dev queries about documents training saw, and on the others."""
    out: dict[str, dict[str, float]] = {}
    for name, qids in zip(("seen_documents", "unseen_documents"), seen_documents(train, dev), strict=True):
        if len(qids) >= 2:
            diff = paired_differences(base, other, qids, cfg, metrics=(cfg.metric,))[cfg.metric]
            out[name] = {"queries": float(len(qids)), **diff}
    return out


def paired_differences(
    base: dict[str, dict[str, float]],
    other: dict[str, dict[str, float]],
    qids: list[str],
    cfg: TuneConfig,
    *,
    metrics: tuple[str, ...] | None = None,
) -> dict[str, dict[str, float]]:
    """Per metric (default: ``cfg.metrics``), the paired difference ``other - base`` over ``qids``.

    Each: delta, interval, p, wins / losses / ties, with ``cfg``'s seed, resamples and confidence.
    """
    out = {}
    for m in metrics or cfg.metrics:
        stats = paired_difference(
            [base[m][q] for q in qids],
            [other[m][q] for q in qids],
            seed=cfg.seed,
            n_resamples=cfg.n_resamples,
            confidence=cfg.confidence,
        )
        out[m] = {k: float(stats[k]) for k in ("delta", "ci_low", "ci_high", "p_value", "wins", "losses", "ties")}
    return out


def _finish(report: TuneReport, store: Any, seconds: dict[str, float], t_start: float) -> TuneReport:
    seconds["total"] = time.perf_counter() - t_start
    report.seconds = {k: round(v, 1) for k, v in seconds.items()}
    report.peak_memory_mb = round(_peak_mb(), 1)
    report.generation = store.generation
    report.model = (store.model_info["current"] or {}).get("model")
    return report


def report_files(report: TuneReport, store_path: str | Path) -> tuple[Path, Path]:
    """Write the Markdown report and its plot inside the store directory: ``tune.md`` and ``tune.svg``.

    Each is written to a temporary file and renamed onto its name, so a symbolic link planted there is replaced,
    never followed.
    """
    from rag_hier.store.files import atomic_write_bytes

    root = Path(store_path)
    md, svg = root / "tune.md", root / "tune.svg"
    atomic_write_bytes(svg, report.svg_plot().encode("utf-8"))
    atomic_write_bytes(md, report.to_markdown(plot=svg.name).encode("utf-8"))
    return md, svg
