"""Tuning a store: fine-tune its model on judged queries and adopt the result only when it measures better.

``store.tune(queries, qrels)`` and ``rag-hier tune`` run :func:`~rag_hier.tuning.workflow.tune`: a dev part of
the queries is held back, a candidate is trained on the rest, both models are scored on the dev part with the
store's own search, and the candidate is adopted (one commit; ``store.rollback_model()`` undoes it) only when
the paired difference says it is better. See docs/tuning.md.

:meth:`HierStore.tune` runs :func:`store_tune`, found by name. Importing this package loads nothing else: the
configuration, the evaluation and the training stack load when they are first used (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.tuning.config import TUNE_METHODS, TuneConfig
    from rag_hier.tuning.report import TuneReport

__all__ = ["TUNE_METHODS", "TuneConfig", "TuneReport", "store_tune", "tune"]

__getattr__ = lazy_getattr(
    __name__, {"TUNE_METHODS": "config", "TuneConfig": "config", "TuneReport": "report"}, globals()
)


def tune(store: Any, queries: Any = None, qrels: Any = None, **kwargs: Any) -> TuneReport:
    """:func:`rag_hier.tuning.workflow.tune` (imported on first use)."""
    from rag_hier.tuning.workflow import tune as run

    return run(store, queries, qrels, **kwargs)


def store_tune(
    store: Any, queries: Any = None, qrels: Any = None, *, config: TuneConfig | None = None, **kwargs: Any
) -> TuneReport:
    """What :meth:`HierStore.tune` runs: :func:`tune`, with :class:`TuneConfig` fields given as keywords.

    ``resume=True`` (no queries) finishes the adoption an interrupted run left instead
    (:func:`~rag_hier.tuning.workflow.resume_adoption`).
    """
    from rag_hier.tuning.config import TuneConfig

    if kwargs.pop("resume", False):
        from rag_hier.tuning.workflow import resume_adoption

        extra = kwargs.keys() - {"say", "show_progress_bar"}
        if queries is not None or qrels is not None or config is not None or extra:
            raise TypeError("tune(resume=True) takes only say= and show_progress_bar=: the run's settings are kept")
        return resume_adoption(store, **kwargs)

    settings = {k: kwargs.pop(k) for k in list(kwargs) if k in TuneConfig.__dataclass_fields__}
    if settings:
        config = TuneConfig(**{**(config.to_dict() if config is not None else {}), **settings})
    return tune(store, queries, qrels, config=config, **kwargs)
