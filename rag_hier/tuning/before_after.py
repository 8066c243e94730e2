"""Did training help? A trained model against the model it started from, on held-out judged queries.

What every ``rag-hier train METHOD --eval-queries FILE [--eval-qrels FILE]`` prints: both models index the
training corpus in a temporary store (split as ``rag-hier index`` splits it), the held-out queries are read as
``rag-hier eval`` reads them and scored with the store's search, and the two are shown side by side under
``rag-hier eval``'s metric names with their paired difference.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag_hier.corpus.model import Document
from rag_hier.encoders.dense import DenseEncoder
from rag_hier.eval.judged import default_level, load_judged
from rag_hier.store.encoder_switch import encode_passages
from rag_hier.store.store import HierStore
from rag_hier.tuning.config import TuneConfig
from rag_hier.tuning.report import TuneReport
from rag_hier.tuning.scoring import candidate_index, score_queries
from rag_hier.tuning.workflow import paired_differences

__all__ = ["before_after"]


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
        f"the trained model is {verdict} than {base_model} on {len(judged)} held-out queries: "
        f"{cfg.metric} {d['delta']:+.4f} [{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]"
    )
    return report
