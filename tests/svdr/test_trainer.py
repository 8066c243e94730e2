"""SvdrTrainer on sentence-transformers' trainer: precision flags, the mining callback's timing, the time budget."""

from __future__ import annotations

import numpy as np
import pytest

from rag_hier.encoders.vocab import VocabEncoder
from rag_hier.errors import RagHierError
from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig

from .conftest import TEXTS, make_docs

QUERIES = {f"q{i}": f"{t.split()[1]} {t.split()[-1]}" for i, t in enumerate(TEXTS)}
QRELS = {f"q{i}": {f"d{i}": 1} for i in range(len(TEXTS))}


def _trainer(tiny_model_path: str, **config: object) -> SvdrTrainer:
    encoder = VocabEncoder(tiny_model_path, device="cpu")
    base = {"batch_size": 3, "max_steps": 2, "learning_rate": 1e-3, "seed": 1}
    return SvdrTrainer.from_documents(
        encoder, make_docs(), QUERIES, QRELS, config=SvdrTrainingConfig(**{**base, **config})
    )


def test_fp16_is_refused_on_cpu_and_bf16_trains(tiny_model_path: str) -> None:
    with pytest.raises(ValueError, match=r"SvdrTrainingConfig\.fp16 must be False when bf16 is True"):
        SvdrTrainingConfig(fp16=True, bf16=True)
    trainer = _trainer(tiny_model_path, fp16=True)
    before = trainer.encoder.fingerprint
    with pytest.raises(RagHierError, match=r"fp16 needs a CUDA device.*'cpu'.*bf16"):
        trainer.train()
    assert trainer.encoder.fingerprint == before  # refused before any step
    trainer = _trainer(tiny_model_path, bf16=True)
    result = trainer.train()
    assert result.steps == 2 and np.isfinite(result.losses).all()
    assert trainer.encoder.fingerprint != before and not trainer.encoder.module.training
    # the encoder's weights stay float32 (autocast only during the steps)
    assert {str(p.dtype) for p in trainer.encoder.module.parameters()} == {"torch.float32"}


def test_mining_callback_mines_each_steps_own_queries_before_the_step(tiny_model_path: str) -> None:
    trainer = _trainer(tiny_model_path, negative_schedule="beta", max_steps=None)  # one epoch: 3 batches
    events: list[tuple[str, list[str] | None]] = []
    mine, step_inputs = trainer.mine_negatives, trainer._step_inputs

    def mined(qids: list[str] | None = None) -> dict[str, list[int]]:
        events.append(("mine", sorted(qids) if qids is not None else None))
        return mine(qids)

    def drawn(batch, rng):  # type: ignore[no-untyped-def]
        events.append(("step", sorted(e.qid for e in batch)))
        return step_inputs(batch, rng)

    trainer.mine_negatives = mined  # type: ignore[method-assign]
    trainer._step_inputs = drawn  # type: ignore[method-assign]
    result = trainer.train()
    assert result.steps == 3 and result.stopped_by == "epochs" and result.bm25_steps == 0
    assert [kind for kind, _ in events] == ["mine", "step"] * 3
    for (_, mined_for), (_, trained_on) in zip(events[::2], events[1::2], strict=True):
        assert mined_for == trained_on  # β search with the current model, for that step's queries
    assert sorted(q for kind, qs in events if kind == "step" for q in qs or []) == sorted(QUERIES)
    assert len(result.step_seconds) == 3 and result.mining_seconds > 0


def test_epoch_mining_once_per_epoch_and_paper_schedule_switch(tiny_model_path: str) -> None:
    trainer = _trainer(tiny_model_path, negative_schedule="paper", mining="epoch", epochs=2, max_steps=None)
    calls: list[list[str] | None] = []
    mine = trainer.mine_negatives
    trainer.mine_negatives = lambda qids=None: calls.append(qids) or mine(qids)  # type: ignore[method-assign]
    result = trainer.train()
    # 2 epochs of 3 batches: BM25 negatives for the first half (3 steps), then β search over every query once,
    # at the switch (the first step of epoch 2); the epoch's other steps reuse those negatives
    assert result.steps == 6 and result.bm25_steps == 3 and result.epochs_completed == 2.0
    assert calls == [None]


def test_time_budget_stops_after_the_step_that_spends_it(tiny_model_path: str) -> None:
    trainer = _trainer(tiny_model_path, max_steps=None, epochs=3, max_seconds=1e-3)
    result = trainer.train()
    assert result.steps == 1 and result.stopped_by == "max_seconds"
    assert len(result.losses) == 1 and np.isfinite(result.losses).all()
