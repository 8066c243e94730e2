"""Each training of a tuning run has its own progress bar label (the candidate, the refit, each fold, the final)."""

from __future__ import annotations

from typing import Any

import pytest

from rag_hier import HierStore
from rag_hier.tuning import train as train_module


@pytest.fixture
def labels(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The labels of the training progress bars made while the test runs."""
    seen: list[str] = []
    real = train_module._progress_callback

    def spy(total: int, label: str = "training") -> Any:
        seen.append(label)
        return real(total, label)

    monkeypatch.setattr(train_module, "_progress_callback", spy)
    return seen


def test_the_candidate_and_the_refit_are_told_apart(judged_store, judged_maps, stays, labels) -> None:
    queries, qrels = judged_maps
    store = HierStore.open(judged_store[0])
    settings = {**stays, "show_progress_bar": True}
    store.tune(queries, qrels, cross_fit="off", refit="continue", force=True, **settings)
    store.close()
    assert labels == ["candidate", "refit (continue)"]


def test_each_fold_and_the_final_model_are_told_apart(judged_store, judged_maps, stays, labels) -> None:
    queries, qrels = judged_maps
    store = HierStore.open(judged_store[0])
    settings = {**stays, "show_progress_bar": True}
    store.tune(queries, qrels, cross_fit="on", folds=3, force=True, **settings)
    store.close()
    assert labels == ["fold 1/3", "fold 2/3", "fold 3/3", "final model"]


def test_the_bar_shows_the_label() -> None:
    bar = train_module._progress_callback(4, "fold 2/5")
    bar.on_train_begin(None, None, None)
    try:
        assert bar.bar.desc.startswith("fold 2/5")
    finally:
        bar.on_train_end(None, None, None)
