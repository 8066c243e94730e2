"""``tune``: fine-tune a store's model on judged queries and adopt it only when it measures better.

1. The judged queries are read as ``rag-hier eval`` reads them (:mod:`rag_hier.eval.judged`). With at least
   ``cross_fit_below`` usable ones a dev part is held back (:func:`~rag_hier.tuning.split.split_dev`, seeded);
   with fewer they are dealt into folds (:func:`~rag_hier.tuning.split.fold_split`) and cross-fitted.
2. The base (the store as it is) is scored on the dev queries (every query, cross-fitted) with the store's search.
3. A candidate is trained from the store's model on the training queries (:mod:`rag_hier.tuning.train`; one per
   fold when cross-fitting); after two steps the whole run is estimated from the measured seconds per step and
   the measured encoding rate.
4. The candidate is scored on the dev queries: by encoding every passage into an index of the store's kind beside
   the store's own, or by re-ranking each dev query's pool (:mod:`rag_hier.tuning.rerank`) when that is cheaper.
5. The paired difference per query decides (:data:`ADOPTION_RULE`); ``force`` adopts anyway; a refusal says what
   would resolve it (:func:`resolution`). Adoption is :meth:`HierStore.adopt_model` (one commit, the model kept
   inside the store, the previous one kept for ``rollback_model``), with the vectors of step 4 when they are a
   full encode of the model adopted: the measured candidate, unless ``refit`` trains it further (``continue``)
   or again on every query (``full``), or cross-fitting trains the model to adopt on every query.
"""

from __future__ import annotations

import logging
import math
import resource
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.errors import ModelChangedError, RagHierError
from rag_hier.eval.compare import paired_difference
from rag_hier.eval.judged import JudgedQueries, default_level, judged_from_mappings, load_judged
from rag_hier.eval.metrics import parse_metric
from rag_hier.store.capabilities import ModelSwitching, require
from rag_hier.store.encode_parts import encode_in_parts
from rag_hier.store.encoder_switch import encode_passages
from rag_hier.tuning.config import TuneConfig
from rag_hier.tuning.edges import candidate_workspace, check_finite
from rag_hier.tuning.pending import (
    PendingAdoption,
    check_model,
    check_no_pending,
    find_pending,
    start_pending,
    still_current,
)
from rag_hier.tuning.report import TuneReport
from rag_hier.tuning.rerank import RerankPool, prefer_rerank, rerank_pool
from rag_hier.tuning.scoring import candidate_index, score_queries
from rag_hier.tuning.split import fold_split, seen_documents, split_dev
from rag_hier.tuning.train import Say, train_candidate

logger = logging.getLogger(__name__)

__all__ = ["ADOPTION_RULE", "paired_differences", "report_files", "resolution", "tune"]

ADOPTION_RULE = (
    "adopt when the lower ends of the {confidence:.0%} paired bootstrap interval of the dev {metric} difference "
    "(candidate - base, per query, {n_resamples} resamples, seed {seed}) and of Student's t interval of it are "
    "above 0, and the candidate is not shown "
    "worse on the dev queries about documents no training query is about (when there are at least {min_new}): the "
    "upper end of their interval is not below 0; cross-fitted, also: every fold's candidate improves its fold's "
    "queries on average"
)
STEP_COST = 3.5
"""A training step costs about this many times encoding its rows' texts once at the measured encoding rate
(forward and backward passes and the optimizer; measured: docs/tuning.md). Plans ``--max-minutes`` up front."""
MIN_NEW_DOCUMENT_QUERIES = 10
"""Dev queries about new documents below which the new-document part of the rule does not apply."""
_SAMPLE = 64
"""Passages encoded to measure the encoding rate for the estimate."""


def _peak_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1 << 20) if sys.platform == "darwin" else rss / 1024


def _check_store(store: Any) -> None:
    require(store, ModelSwitching, what="tuning").check_switchable("tuning")


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
    if not dry_run and store.path is not None:  # a local store keeps an interrupted adoption (a Milvus one: no)
        check_no_pending(store.path)
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
    for line in judged.warnings():
        report.warnings.append(line)
        out(f"warning: {line}")
    if len(answerable) < len(judged):
        out(f"warning: {len(judged) - len(answerable)} judged queries name nothing the store holds; they are left out")
    cross_fit = cfg.cross_fit == "on" or (cfg.cross_fit == "auto" and len(answered) < cfg.cross_fit_below)
    seconds: dict[str, float] = {}
    base = store.encoder
    rate, n_passages = _encode_rate(store, base, cfg.seed)
    run = _Run(store, cfg, report, seconds, out, rate, n_passages, dry_run, t_start)
    with candidate_workspace() as tmp:
        adopt = run.cross_fitted(answered, Path(tmp)) if cross_fit else run.held_out(answered, Path(tmp))
        if adopt is not None:
            model_dir, encoded = adopt
            details = _adoption_details(store, report, cfg, run.better, cross_fit)
            pending = None
            if encoded is None and store.path is not None:
                # the encode of every passage is the long part: it is kept in the store as it goes (resumable)
                pending = start_pending(
                    store.path, Path(model_dir), expected=measured, details=details, report=report.to_dict()
                )
                encoded = _encode_for_adoption(store, pending, cfg, run.rate, seconds, out)
            elif encoded is None:  # a collection on a server: encoded in one go, not resumable
                model = store.encoder_for(model_dir, device=cfg.device or base.requested_device)
                t0 = time.perf_counter()
                encoded = encode_passages(store, model, show_progress_bar=cfg.show_progress_bar)
                seconds["encode"] = seconds.get("encode", 0.0) + time.perf_counter() - t0
            _switch(store, pending, Path(model_dir), encoded, details, cfg, measured, seconds, out)
            report.adopted = True
    return _finish(report, store, seconds, t_start)


def _adoption_details(store: Any, report: TuneReport, cfg: TuneConfig, better: bool, cross_fit: bool) -> dict[str, Any]:
    """The facts recorded with an adopted model (``model_info``)."""
    enc_cfg = store.model_info["current"] or {}
    details = {
        "method": report.method,
        "base_model": (enc_cfg.get("adopted") or {}).get("base_model", enc_cfg.get("model")),
        "steps": report.steps,
        "train_queries": report.train_queries,
        "dev_queries": report.dev_queries,
        "metric": cfg.metric,
        "base": report.base.get(cfg.metric),
        "candidate": report.candidate.get(cfg.metric),
        "difference": report.difference[cfg.metric],
        "forced": not better,
    }
    if "refit" in report.details:
        details["refit"] = report.details["refit"]
    if cross_fit:
        details["folds"] = cfg.folds
    return details


def _encode_for_adoption(
    store: Any, pending: PendingAdoption, cfg: TuneConfig, rate: float | None, seconds: dict[str, float], out: Say
) -> Any:
    """Every passage encoded by the pending adoption's model, in parts saved in its folder (resumes from them).

    ``rate``: the measured passages per second (``None``: measured here on a sample).
    """
    check_model(pending)
    model = store.encoder_for(pending.model_dir, device=cfg.device or store.encoder.requested_device)
    if rate is None:
        rate = _encode_rate(store, model, cfg.seed)[0]

    def on_start(todo: int, total: int) -> None:
        left = f"{todo} of {total}" if todo < total else f"{total}"
        eta = f" (about {todo / rate / 60:.1f} min at the measured rate)" if math.isfinite(rate) and rate > 0 else ""
        out(
            f"adopting: encoding {left} passages with the adopted model{eta}, saved in parts under {pending.path}: "
            f"if interrupted, `rag-hier tune --store {store.path} --resume` continues from the last part"
        )

    t0 = time.perf_counter()
    try:
        encoded = encode_in_parts(
            store,
            model,
            pending.parts_dir,
            model_digest=pending.digest,
            show_progress_bar=cfg.show_progress_bar,
            label="encoding passages (adopted model)",
            on_start=on_start,
        )
    except KeyboardInterrupt:
        out(
            f"interrupted: the store still encodes with its previous model; the encoded parts are kept: "
            f"`rag-hier tune --store {store.path} --resume` continues"
        )
        raise
    seconds["encode"] = seconds.get("encode", 0.0) + time.perf_counter() - t0
    return encoded


def _switch(
    store: Any,
    pending: PendingAdoption | None,
    model_dir: Path,
    encoded: Any,
    details: dict[str, Any],
    cfg: TuneConfig,
    measured: Any,
    seconds: dict[str, float],
    out: Say,
) -> None:
    """Commit the switch; the pending folder goes once it is committed (or when the store's model changed)."""
    out("adopting: re-encoded passages go into the store's index in one commit")
    t0 = time.perf_counter()
    try:
        store.adopt_model(
            pending.model_dir if pending is not None else model_dir,
            encoded=encoded,
            details=details,
            show_progress_bar=cfg.show_progress_bar,
            expected=measured,
        )
    except ModelChangedError:
        if pending is not None:
            pending.discard()
        raise
    seconds["adopt"] = time.perf_counter() - t0
    if pending is not None:
        pending.discard()


def resume_adoption(store: Any, *, say: Say | None = None, show_progress_bar: bool = True) -> TuneReport:
    """Finish the adoption an interrupted ``tune`` left in the store (:mod:`rag_hier.tuning.pending`).

    Encodes the passages its saved parts do not hold, then switches (one commit) if the store's model is still the
    one the candidate was measured against; else the pending adoption is discarded
    (:class:`~rag_hier.errors.ModelChangedError`).

    Returns:
        The interrupted run's report, now adopted.

    Raises:
        RagHierError: Nothing is pending, or the kept files do not match what was recorded.
        ModelChangedError: The store's model changed since the measurement (the pending adoption is discarded).

    """
    out = say or logger.info
    t_start = time.perf_counter()
    _check_store(store)
    if store.path is None:
        raise RagHierError(f"{store.location}: only a local store directory keeps an interrupted adoption to resume")
    pending = find_pending(store.path)
    if pending is None:
        raise RagHierError(f"no interrupted adoption waits in {store.path}: nothing to resume")
    still_current(pending, store.model_info["current"])
    known = {f.name for f in fields(TuneReport)}
    report = TuneReport(**{k: v for k, v in pending.report.items() if k in known})
    cfg = TuneConfig(show_progress_bar=show_progress_bar)
    out(f"resuming: {pending.describe()}")
    seconds: dict[str, float] = {}
    encoded = _encode_for_adoption(store, pending, cfg, None, seconds, out)
    _switch(store, pending, pending.model_dir, encoded, pending.details, cfg, pending.expected, seconds, out)
    report.adopted = True
    report.reason = f"{report.reason} (adoption resumed after an interruption)".strip()
    return _finish(report, store, seconds, t_start)


def _pairs(judged: JudgedQueries) -> int:
    """Judged (query, relevant id) pairs: what one pass of training goes over."""
    return sum(sum(1 for g in r.values() if g > 0) for r in judged.qrels.values())


def _mean(values: Mapping[str, float]) -> float:
    return float(np.mean(list(values.values()))) if values else 0.0


class _Run:
    """The parts of one tuning run: training candidates, scoring them, deciding (held out or cross-fitted)."""

    def __init__(
        self,
        store: Any,
        cfg: TuneConfig,
        report: TuneReport,
        seconds: dict[str, float],
        out: Callable[[str], None],
        rate: float,
        n_passages: int,
        dry_run: bool,
        t_start: float,
    ) -> None:
        self.store, self.cfg, self.report, self.seconds, self.out = store, cfg, report, seconds, out
        self.rate, self.n_passages, self.dry_run, self.t_start = rate, n_passages, dry_run, t_start
        self.base = store.encoder
        self.better = False
        self.estimated = False
        self.time_limits: list[float | None] = []

    # -- pieces ---------------------------------------------------------------------------------------
    def _time(self, name: str, t0: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def _encode_seconds(self, passages: int) -> float:
        return passages / self.rate if passages and self.rate > 0 else 0.0

    def _announce(self, seconds_per_step: float, trainings: list[int], encode_passages_count: int, what: str) -> None:
        """The estimate of the whole run, once, after two measured steps."""
        if self.estimated:
            return
        self.estimated = True
        train_s = seconds_per_step * sum(trainings)
        encode_s = self._encode_seconds(encode_passages_count)
        total = train_s + encode_s
        self.report.estimate_seconds = round(total, 1)
        steps = " + ".join(str(n) for n in trainings)
        self.out(
            f"estimate: {seconds_per_step:.2f} s/step (measured) x {steps} steps{what} + encoding about "
            f"{encode_passages_count} passages ({self.rate:.0f} passages/s measured) = about {total / 60:.1f} min"
        )

    def _predicted_step(self) -> float:
        """Seconds a training step should take: :data:`STEP_COST` x encoding its texts at the measured rate."""
        texts = self.cfg.batch_size * (2 + self.cfg.num_negatives)
        return STEP_COST * texts / self.rate if self.rate > 0 else 0.0

    def _fit(self, planned: list[int], encode_count: int) -> list[int | None]:
        """Step caps that fit ``planned`` trainings and ``encode_count`` encoded passages into ``--max-minutes``."""
        caps: list[int | None] = [None] * len(planned)
        self.time_limits = [None] * len(planned)
        if self.cfg.max_minutes is None or self.dry_run:
            return caps
        left = self.cfg.max_minutes * 60 - (time.perf_counter() - self.t_start) - self._encode_seconds(encode_count)
        per = self._predicted_step()
        total = sum(planned)
        allowed = max(len(planned), int(left / per)) if per > 0 else total
        factor = min(1.0, allowed / max(total, 1))
        caps = [max(1, int(p * factor)) for p in planned] if factor < 1 else caps
        # each training stops when its share of what is left is spent (the estimate can be off under load)
        self.time_limits = [
            max(left, 0.0) * (c or p) / max(sum(c or q for c, q in zip(caps, planned, strict=True)), 1)
            for c, p in zip(caps, planned, strict=True)
        ]
        if factor < 1:
            self.out(
                f"--max-minutes {self.cfg.max_minutes:g}: {sum(c or 0 for c in caps)} of {total} planned steps fit "
                f"(about {per:.1f} s a step from the measured encoding rate, plus encoding about {encode_count} "
                "passages)"
            )
            self.report.details["fitted_steps"] = list(caps)
        return caps

    def _train(
        self,
        judged: JudgedQueries,
        output_dir: Path,
        on_estimate: Callable[[int, float], None],
        evaluate: Callable[[Any], float] | None = None,
        max_steps: int | None = None,
        time_limit: float | None = None,
        start: Any = None,
        label: str = "training",
    ) -> Any:
        t0 = time.perf_counter()
        q = self.base.encode_queries(list(judged.queries.values()))
        outcome = train_candidate(
            self.store,
            judged,
            q,
            self.cfg,
            output_dir,
            say=self.out,
            on_estimate=on_estimate,
            max_steps=max_steps,
            evaluate=evaluate,
            time_limit=time_limit,
            start=start,
            label=label,
        )
        self._time("train", t0)
        if outcome.stopped_early:
            self.report.details["stopped_early"] = outcome.stopped_early
        return outcome

    def _score(
        self, judged: JudgedQueries, q_base: np.ndarray, model_dir: Path, pool: RerankPool | None
    ) -> tuple[dict[str, dict[str, float]], Any]:
        """The candidate's per-query values on ``judged``; its full encoding when that is how it was scored."""
        cfg = self.cfg
        candidate = self.store.encoder_for(model_dir, device=cfg.device or self.base.requested_device)
        if pool is not None:
            t0 = time.perf_counter()
            values = pool.score(candidate, cfg.metrics)
            self._time("score_candidate", t0)
            return values, None
        t0 = time.perf_counter()
        encoded = encode_passages(self.store, candidate, show_progress_bar=cfg.show_progress_bar)
        self._time("encode", t0)
        t0 = time.perf_counter()
        index = candidate_index(self.store, encoded)
        values = score_queries(
            self.store, judged, candidate.encode_queries(list(judged.queries.values())), cfg.metrics, index=index
        )
        self._time("score_candidate", t0)
        return values, encoded

    def _score_base(self, judged: JudgedQueries, what: str) -> tuple[np.ndarray, dict[str, dict[str, float]]]:
        """``judged`` encoded by the store's model and scored by its search; the means go into the report."""
        t0 = time.perf_counter()
        q = self.base.encode_queries(list(judged.queries.values()))
        values = score_queries(self.store, judged, q, self.cfg.metrics)
        self._time("score_base", t0)
        self.report.base = {m: _mean(v) for m, v in values.items()}
        self.out(f"base on {what}: " + ", ".join(f"{m} {v:.4f}" for m, v in self.report.base.items()))
        return q, values

    def _pool(self, judged: JudgedQueries, q_base: np.ndarray, *, cross_fit: bool = False) -> RerankPool | None:
        """The re-ranking pools of ``judged`` when the settings (and their size) say to re-rank, else ``None``."""
        if self.cfg.dev_scoring == "full":
            return None
        if parse_metric(self.cfg.metric)[1] > self.cfg.rerank_depth:
            return None  # the decision metric reaches deeper than the pools
        t0 = time.perf_counter()
        pool = rerank_pool(self.store, judged, q_base, self.cfg.rerank_depth)
        self._time("score_base", t0)
        reuse = self.cfg.refit == "off" and not cross_fit
        return pool if prefer_rerank(pool.size, self.n_passages, self.cfg.dev_scoring, reuse_full=reuse) else None

    def _decide(
        self,
        base_values: dict[str, dict[str, float]],
        cand_values: dict[str, dict[str, float]],
        qids: list[str],
        subsets: dict[str, list[str]],
        judged_total: int,
        cross_fit: bool,
        folds: list[list[str]] | None = None,
    ) -> None:
        cfg, report = self.cfg, self.report
        cand_values = {m: v for m, v in cand_values.items() if all(q in v for q in qids)}
        report.candidate = {m: _mean({q: v[q] for q in qids}) for m, v in cand_values.items()}
        report.difference = paired_differences(base_values, cand_values, qids, cfg)
        report.dev_subsets = {}
        for name, ids in subsets.items():
            if len(ids) >= 2:
                diff = paired_differences(base_values, cand_values, ids, cfg, metrics=(cfg.metric,))[cfg.metric]
                report.dev_subsets[name] = {"queries": float(len(ids)), **diff}
        d = report.difference[cfg.metric]
        per_query = [cand_values[cfg.metric][q] - base_values[cfg.metric][q] for q in qids]
        d["t_low"] = _t_low(per_query, cfg.confidence)
        report.resolution = resolution(per_query, cfg, judged_total=judged_total, cross_fit=cross_fit)
        kind = "cross-fitted" if cross_fit else "dev"
        report.reason, self.better = _verdict(d, report.dev_subsets.get("unseen_documents"), len(qids), cfg, kind)
        if folds is not None:
            m = cfg.metric
            gains = [_mean({q: cand_values[m][q] - base_values[m][q] for q in part}) for part in folds]
            report.details["fold_differences"] = [round(g, 4) for g in gains]
            worse = sum(1 for g in gains if g <= 0)
            if self.better and worse:
                self.better = False
                report.reason = (
                    f"the candidates are better over the {len(qids)} cross-fitted queries ({m} {d['delta']:+.4f} "
                    f"[{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]) but not in every fold: {worse} of {len(folds)} "
                    f"folds' candidates did not improve their queries ({', '.join(f'{g:+.3f}' for g in gains)}); "
                    "the gain is not consistent enough to adopt; the store is unchanged."
                )
                if cfg.force:
                    report.reason = "forced: " + report.reason
        if not self.better and not cfg.force:
            report.reason += " " + report.resolution["advice"]

    # -- one dev part -----------------------------------------------------------------------------------
    def held_out(self, answered: JudgedQueries, tmp: Path) -> tuple[Path, Any] | None:
        """Train on a training part, score on the dev part; the model (and its encoding) to adopt, if any."""
        cfg, report, out = self.cfg, self.report, self.out
        train, dev = split_dev(answered, cfg.dev_fraction, cfg.seed, mode=cfg.dev_split)
        report.train_queries, report.dev_queries = len(train), len(dev)
        report.dev_query_ids = list(dev.queries)
        report.details["evaluation"] = "held out"
        out(f"{len(answered)} judged queries ({answered.level} level): {len(train)} to train on, {len(dev)} held back")
        q_dev, base_values = self._score_base(dev, "dev")
        pool = self._pool(dev, q_dev)
        report.details["dev_scoring"] = "rerank" if pool is not None else "full"
        if pool is not None:
            report.details["rerank_passages"] = pool.size
        from rag_hier.tuning.train import planned_steps

        refit_pairs = {"off": 0, "continue": _pairs(dev), "full": _pairs(answered)}[cfg.refit]
        refit_steps = planned_steps(refit_pairs, cfg) if refit_pairs else 0
        planned = [planned_steps(_pairs(train), cfg)] + ([refit_steps] if refit_steps else [])
        # a full encode for scoring is adopted as it is only without a refit; adopting encodes every passage
        scoring = pool.size if pool is not None else self.n_passages
        to_encode = scoring + (self.n_passages if pool is not None or refit_steps else 0)
        caps = self._fit(planned, to_encode)
        refit_what = {
            "continue": " (the second: one more pass on the dev part, if adopted)",
            "full": " (the second: the refit on all queries, if adopted)",
        }.get(cfg.refit, "")

        def on_estimate(steps: int, sps: float) -> None:
            self._announce(sps, [steps, refit_steps] if refit_steps else [steps], to_encode, refit_what)

        evaluate = None
        if cfg.epochs > 1:
            depth = max(cfg.rerank_depth, parse_metric(cfg.metric)[1])
            select_pool = pool or rerank_pool(self.store, dev, q_dev, depth)
            metric = cfg.metric

            def evaluate(model: Any) -> float:
                t = time.perf_counter()
                values = select_pool.score(self.base.over_model(model), (metric,))[metric]
                self._time("score_passes", t)
                return _mean(values)

        candidate_dir = tmp / "candidate"
        outcome = self._train(
            train,
            candidate_dir,
            (lambda steps, sps: None) if self.dry_run else on_estimate,
            evaluate=evaluate,
            max_steps=2 if self.dry_run else caps[0],
            time_limit=self.time_limits[0],
            label="candidate",
        )
        report.steps, report.planned_steps = outcome.steps, outcome.planned_steps
        report.details.update(outcome.details)
        if self.dry_run:
            if outcome.seconds_per_step is not None:
                self.estimated = False
                on_estimate(outcome.planned_steps, outcome.seconds_per_step)
            report.reason = "two training steps measured, nothing adopted"
            return None
        cand_values, encoded = self._score(dev, q_dev, candidate_dir, pool)
        seen, unseen = seen_documents(train, dev)
        subsets = {"seen_documents": seen, "unseen_documents": unseen}
        self._decide(base_values, cand_values, list(dev.queries), subsets, len(answered), cross_fit=False)
        if not (self.better or cfg.force):
            return None
        if cfg.refit != "off":
            refit_dir = tmp / "refit"
            start = None
            data = answered
            if cfg.refit == "continue":
                out(f"continuing the candidate for one pass over the {len(dev)} dev queries, so it has seen them all")
                start = self.store.encoder_for(candidate_dir, device=cfg.device or self.base.requested_device).model
                data = dev
            else:
                out(f"refitting on all {len(answered)} judged queries (training and dev part) as the candidate was")
            t0 = time.perf_counter()
            refit = self._train(
                data,
                refit_dir,
                lambda steps, sps: None,
                max_steps=caps[1],
                time_limit=self.time_limits[1],
                start=start,
                label=f"refit ({cfg.refit})",
            )
            self.seconds["refit"] = time.perf_counter() - t0
            self.seconds["train"] -= self.seconds["refit"]
            report.details["refit"] = {"mode": cfg.refit, "queries": len(data), "steps": refit.steps}
            return refit_dir, None
        return candidate_dir, encoded

    # -- cross-fitting ---------------------------------------------------------------------------------
    def cross_fitted(self, answered: JudgedQueries, tmp: Path) -> tuple[Path, Any] | None:
        """K folds: each scored by a candidate trained on the others; the model to adopt trains on all."""
        from rag_hier.tuning.train import planned_steps

        cfg, report, out = self.cfg, self.report, self.out
        parts = fold_split(answered, cfg.folds, cfg.seed, mode=cfg.dev_split)
        report.train_queries = report.dev_queries = len(answered)
        report.dev_query_ids = list(answered.queries)
        report.details["evaluation"] = f"cross-fitted, {cfg.folds} folds"
        report.details["fold_sizes"] = [len(p) for p in parts]
        out(
            f"{len(answered)} judged queries ({answered.level} level): cross-fitting in {cfg.folds} folds (each query "
            "scored by a candidate that never trained on it); the model adopted trains on all"
        )
        q_all, base_values = self._score_base(answered, "the judged queries")
        row = {q: i for i, q in enumerate(answered.queries)}

        all_pairs = _pairs(answered)
        fold_steps = [planned_steps(all_pairs - _pairs(answered.subset(p)), cfg) for p in parts]
        final_steps = planned_steps(all_pairs, cfg)
        pool_guess = min(self.n_passages, cfg.rerank_depth * len(answered)) if cfg.dev_scoring != "full" else 0
        caps = self._fit([*fold_steps, final_steps], (pool_guess or self.n_passages * len(parts)) + self.n_passages)
        cand_values: dict[str, dict[str, float]] = {m: {} for m in cfg.metrics}
        seen_all: list[str] = []
        unseen_all: list[str] = []
        fold_encodes: list[int] = []
        steps_done = 0
        for k, part in enumerate(parts):
            in_fold = set(part)
            dev = answered.subset(part)
            train = answered.subset([q for q in answered.queries if q not in in_fold])
            q_dev = q_all[[row[q] for q in part]]
            pool = self._pool(dev, q_dev, cross_fit=True)
            fold_encodes.append(pool.size if pool is not None else self.n_passages)

            def on_estimate(steps: int, sps: float) -> None:
                encode = fold_encodes[-1] * len(parts) + self.n_passages
                self._announce(sps, [*fold_steps, final_steps], encode, f" ({len(parts)} folds, then all queries)")

            out(f"fold {k + 1} of {len(parts)}: training on {len(train)} queries, scoring {len(dev)}")
            outcome = self._train(
                train,
                tmp / f"fold-{k}",
                (lambda steps, sps: None) if self.dry_run else on_estimate,
                max_steps=2 if self.dry_run else caps[k],
                time_limit=self.time_limits[k],
                label=f"fold {k + 1}/{len(parts)}",
            )
            steps_done += outcome.steps
            if self.dry_run:
                report.steps, report.planned_steps = outcome.steps, sum(fold_steps) + final_steps
                if outcome.seconds_per_step is not None:
                    self.estimated = False
                    on_estimate(outcome.steps, outcome.seconds_per_step)
                report.reason = "two training steps measured, nothing adopted"
                return None
            values, _ = self._score(dev, q_dev, tmp / f"fold-{k}", pool)
            for m, v in values.items():  # a re-ranked fold holds only the metrics within its pools' depth
                cand_values.setdefault(m, {}).update(v)
            seen, unseen = seen_documents(train, dev)
            seen_all += seen
            unseen_all += unseen
            shutil.rmtree(tmp / f"fold-{k}", ignore_errors=True)
        report.details["fold_steps"] = steps_done
        report.details["dev_scoring"] = "rerank" if all(n < self.n_passages for n in fold_encodes) else "full"
        qids = list(answered.queries)
        self._decide(
            base_values,
            cand_values,
            qids,
            {"seen_documents": seen_all, "unseen_documents": unseen_all},
            len(answered),
            cross_fit=True,
            folds=parts,
        )
        if not (self.better or cfg.force):
            report.steps, report.planned_steps = steps_done, sum(fold_steps)
            return None
        out(f"training the model to adopt on all {len(answered)} judged queries")
        final_dir = tmp / "final"
        outcome = self._train(
            answered,
            final_dir,
            lambda steps, sps: None,
            max_steps=caps[-1],
            time_limit=self.time_limits[-1],
            label="final model",
        )
        report.steps, report.planned_steps = outcome.steps, outcome.planned_steps
        return final_dir, None


def _t_low(per_query: list[float], confidence: float) -> float:
    """The lower end of Student's t interval of the mean per-query difference (``-inf`` for fewer than two)."""
    from scipy import stats

    x = np.asarray(per_query, dtype=np.float64)
    if x.size < 2:
        return float("-inf")
    sd = float(x.std(ddof=1))
    if sd == 0:
        return float(x.mean())
    return float(x.mean() - stats.t.ppf(1 - (1 - confidence) / 2, x.size - 1) * sd / math.sqrt(x.size))


def _verdict(
    d: Mapping[str, float], new: Mapping[str, float] | None, n_dev: int, cfg: TuneConfig, kind: str = "dev"
) -> tuple[str, bool]:
    """The reason and whether the rule adopts: ``d`` the dev difference, ``new`` that on new-document queries.

    ``kind`` names the scored queries (``"dev"``, ``"cross-fitted"``).
    """
    interval = f"{cfg.metric} {d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]"
    # Student's t interval too: below ~100 queries the percentile bootstrap's interval is narrower than its level
    shown = d["ci_low"] > 0 and d.get("t_low", d["ci_low"]) > 0
    why = "the interval reaches 0 or below"
    if d["ci_low"] > 0 and not shown:
        why = f"the bootstrap interval clears 0 but Student's t interval reaches {d['t_low']:+.4f}"
    guard = new if new is not None and new["queries"] >= MIN_NEW_DOCUMENT_QUERIES else None
    new_ok = guard is None or guard["ci_high"] >= 0
    about = (
        f"the {guard['queries']:.0f} {kind} queries about documents no training query is about ({cfg.metric} "
        f"{guard['delta']:+.4f} [{guard['ci_low']:+.4f}, {guard['ci_high']:+.4f}])"
        if guard is not None
        else ""
    )
    if shown and new_ok:
        tail = f", and not shown worse on {about}" if about else ""
        return f"the candidate is better on the {n_dev} {kind} queries: {interval}{tail}", True
    if cfg.force:
        return (
            f"forced: the rule does not adopt the candidate ({kind} {interval}{'; ' + about if about else ''})",
            False,
        )
    if shown:
        return (
            f"the candidate is better on the {n_dev} {kind} queries ({interval}) but shown worse on {about}: it would "
            "hurt queries about new documents; the store is unchanged."
        ), False
    return (
        f"the candidate is not shown better on the {n_dev} {kind} queries: {interval} ({why}); the store is unchanged."
    ), False


def resolution(per_query: list[float], cfg: TuneConfig, *, judged_total: int, cross_fit: bool) -> dict[str, Any]:
    """What the scored queries could resolve: the smallest detectable gain and the queries the observed one needs.

    The usual normal approximation of a paired test: a mean difference is detected (two-sided at ``cfg``'s
    confidence, 80 % power) when it exceeds ``(z_conf + z_0.8) * sd / sqrt(n)``, ``sd`` the spread of the per-query
    differences. The observed difference ``delta > 0`` needs ``((z_conf + z_0.8) * sd / delta) ** 2`` scored
    queries; with one dev part (a share of the judged queries) the judged queries needed are that over the share,
    with cross-fitting (every judged query scored) the same number.

    Returns:
        ``scored``, ``sd``, ``detectable`` (the smallest detectable gain), ``queries_needed`` (judged queries for
        the observed difference; ``None`` when it is not positive) and ``advice`` (one sentence for the report).

    """
    from statistics import NormalDist

    d = np.asarray(per_query, dtype=np.float64)
    n = int(d.size)
    delta = float(d.mean()) if n else 0.0
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    z = NormalDist().inv_cdf(1 - (1 - cfg.confidence) / 2) + NormalDist().inv_cdf(0.8)
    detectable = z * sd / math.sqrt(n) if n else float("inf")
    share = 1.0 if cross_fit else n / max(judged_total, 1)
    needed: int | None = None
    m = cfg.metric
    if n and sd == 0:
        advice = f"Every scored query has the same {m} under both models: the candidate changed nothing they measure."
    elif delta <= 0:
        advice = (
            f"The candidate did no better on average ({m} {delta:+.4f} over {n} scored queries): more judged queries "
            "would not by themselves change the verdict; the store's model already serves these queries as well as "
            "this training makes it."
        )
    else:
        needed = math.ceil(math.ceil((z * sd / delta) ** 2) / share)
        scored = "scored queries" if cross_fit else "dev queries"
        advice = (
            f"With {n} {scored} (per-query spread {sd:.3f}) only a gain of about {detectable:.3f} {m} or more can be "
            f"told from noise; the observed {delta:+.4f} would need about {needed} judged queries to be resolved"
        )
        if not cross_fit:
            folds_needed = math.ceil((z * sd / delta) ** 2)
            advice += (
                f" (about {folds_needed} with --cross-fit on, which scores every judged query; "
                f"{judged_total} are usable now)"
            )
        advice += "."
    return {
        "scored": n,
        "sd": round(sd, 4),
        "detectable": round(detectable, 4),
        "queries_needed": needed,
        "advice": advice,
    }


def paired_differences(
    base: dict[str, dict[str, float]],
    other: dict[str, dict[str, float]],
    qids: list[str],
    cfg: TuneConfig,
    *,
    metrics: tuple[str, ...] | None = None,
) -> dict[str, dict[str, float]]:
    """Per metric (default: ``cfg.metrics``), the paired difference ``other - base`` over ``qids``.

    Each: delta, interval, p, wins / losses / ties, with ``cfg``'s seed, resamples and confidence. A metric
    ``other`` does not hold (a re-ranked score beyond the pools' depth) is left out.
    """
    out = {}
    for m in metrics or cfg.metrics:
        if m not in other:
            continue
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
