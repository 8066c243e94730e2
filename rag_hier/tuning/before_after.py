"""Did training help? A trained model against the model it started from, on held-out judged queries.

What every ``rag-hier train METHOD --eval-queries FILE [--eval-qrels FILE]`` prints: both models index the
training corpus in a temporary store (split as ``rag-hier index`` splits it), the held-out queries are read as
``rag-hier eval`` reads them and scored with the store's search, and the two are shown side by side under
``rag-hier eval``'s metric names with their paired difference.

:func:`before_after` compares two dense models (one store, the trained model's vectors in an index beside
it); :func:`before_after_searches` compares two ways of searching, each in its own store (:class:`SearchSide`:
the model, the strategy and its parameters, extensions to attach), for methods whose trained output is more than
a dense model (EHI's indexer, SVDR's vocabulary encoder over a token index).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rag_hier.corpus.model import Document
from rag_hier.encoders.dense import DenseEncoder
from rag_hier.eval.judged import default_level, load_judged
from rag_hier.store.encoder_switch import encode_passages
from rag_hier.store.store import HierStore
from rag_hier.tuning.config import TuneConfig
from rag_hier.tuning.report import TuneReport
from rag_hier.tuning.scoring import candidate_index, fetch_depth, score_queries, score_results
from rag_hier.tuning.workflow import paired_differences

__all__ = ["SearchSide", "before_after", "before_after_searches"]


def before_after(
    documents: Sequence[Document],
    base_model: str,
    trained_model: str | Path,
    queries: str | Path,
    qrels: str | Path | None,
    *,
    corpus_format: str,
    max_passage_words: int,
    device: str | None = None,
    level: str | None = None,
    show_progress_bar: bool = False,
) -> TuneReport:
    """Score ``base_model`` and ``trained_model`` on held-out judged queries over ``documents``.

    Returns:
        A :class:`TuneReport` with ``base``, ``candidate`` (the trained model) and ``difference`` filled in.

    """
    cfg = TuneConfig(show_progress_bar=show_progress_bar)
    with tempfile.TemporaryDirectory(prefix="rag-hier-before-after-") as tmp:
        store = HierStore.create(
            Path(tmp) / "store",
            encoder=DenseEncoder(base_model, device=device, show_progress_bar=show_progress_bar),
            corpus={"format": corpus_format, "max_passage_words": max_passage_words},
        )
        try:
            store.add_documents(documents, max_passage_words=max_passage_words, show_progress_bar=show_progress_bar)
            judged = load_judged(store, Path(queries), Path(qrels) if qrels else None, default_level(store, level))
            texts = list(judged.queries.values())
            base_values = score_queries(store, judged, store.encoder.encode_queries(texts), cfg.metrics)  # type: ignore[union-attr]
            trained = store.encoder_for(trained_model, device=device)
            index = candidate_index(store, encode_passages(store, trained, show_progress_bar=show_progress_bar))
            trained_values = score_queries(store, judged, trained.encode_queries(texts), cfg.metrics, index=index)
        finally:
            store.close()
    return _report(judged, base_values, trained_values, base_model, cfg)


@dataclass(frozen=True)
class SearchSide:
    """One side of :func:`before_after_searches`: how its store is built and searched.

    Attributes:
        model: The store's dense model (``dense=True``), else the tokenizer a token-only store records.
        strategy: The search strategy (``rag-hier search --strategy``).
        params: The strategy's parameters.
        extensions: Called after indexing; returns the extensions to attach (e.g. a trained EHI index).
        dense: Encode the passages with ``model`` (``False``: a store without dense vectors).

    """

    model: str
    strategy: str = "dense"
    params: Mapping[str, Any] = field(default_factory=dict)
    extensions: Callable[[], Sequence[Any]] | None = None
    dense: bool = True


def before_after_searches(
    documents: Sequence[Document],
    base: SearchSide,
    trained: SearchSide,
    queries: str | Path,
    qrels: str | Path | None,
    *,
    corpus_format: str,
    max_passage_words: int,
    base_name: str,
    device: str | None = None,
    level: str | None = None,
    show_progress_bar: bool = False,
) -> TuneReport:
    """Score two searches (each over its own temporary store of ``documents``) on held-out judged queries.

    Returns:
        A :class:`TuneReport` with ``base``, ``candidate`` (the trained side) and ``difference`` filled in.

    """
    from rag_hier.retrieval.base import Queries
    from rag_hier.retrieval.registry import build_retriever

    cfg = TuneConfig(show_progress_bar=show_progress_bar)
    values: list[dict[str, dict[str, float]]] = []
    judged = None
    with tempfile.TemporaryDirectory(prefix="rag-hier-before-after-") as tmp:
        for i, side in enumerate((base, trained)):
            encoder = (
                DenseEncoder(side.model, device=device, show_progress_bar=show_progress_bar) if side.dense else None
            )
            corpus: dict[str, Any] = {"format": corpus_format, "max_passage_words": max_passage_words}
            store = HierStore.create(
                Path(tmp) / f"store{i}", encoder=encoder, corpus=corpus | ({} if side.dense else {"dense": False})
            )
            try:
                store.add_documents(documents, max_passage_words=max_passage_words, show_progress_bar=show_progress_bar)
                for ext in side.extensions() if side.extensions is not None else ():
                    store.add_extension(ext)
                judged = load_judged(store, Path(queries), Path(qrels) if qrels else None, default_level(store, level))
                retriever = build_retriever(side.strategy, store, dict(side.params))
                results = retriever.run(
                    Queries(texts=list(judged.queries.values())),
                    fetch_depth(judged, cfg.metrics),
                    aggregate=judged.level,  # type: ignore[arg-type]
                )
                values.append(score_results(judged, [r.hits for r in results], cfg.metrics))
            finally:
                store.close()
    assert judged is not None
    return _report(judged, values[0], values[1], base_name, cfg)


def _report(
    judged: Any,
    base_values: dict[str, dict[str, float]],
    trained_values: dict[str, dict[str, float]],
    base_name: str,
    cfg: TuneConfig,
) -> TuneReport:
    report = TuneReport(
        store="(held-out evaluation)", method="", level=judged.level, config=cfg.to_dict(), evaluation_only=True
    )
    report.dev_queries = len(judged)
    report.base = {m: float(np.mean(list(v.values()))) for m, v in base_values.items()}
    report.candidate = {m: float(np.mean(list(v.values()))) for m, v in trained_values.items()}
    report.difference = paired_differences(base_values, trained_values, list(judged.queries), cfg)
    report.warnings = judged.warnings()
    d = report.difference[cfg.metric]
    verdict = "better" if d["ci_low"] > 0 else ("worse" if d["ci_high"] < 0 else "not shown different")
    report.reason = (
        f"the trained model is {verdict} than {base_name} on {len(judged)} held-out queries: "
        f"{cfg.metric} {d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]"
    )
    return report
