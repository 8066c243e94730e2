"""SvdrTrainer: the loss, the batches, β-mined negatives, and a few real steps."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rag_hier import Document
from rag_hier.encoders.vocab import VocabEncoder
from rag_hier.errors import RagHierError
from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig, semi_parametric_loss

from .conftest import TEXTS, make_docs

QUERIES = {f"q{i}": f"{t.split()[1]} {t.split()[-1]}" for i, t in enumerate(TEXTS)}
QRELS = {f"q{i}": {f"d{i}": 1} for i in range(len(TEXTS))}


def test_semi_parametric_loss_matches_its_definition() -> None:
    g = torch.Generator().manual_seed(0)
    eq, ep = torch.rand(3, 6, generator=g), torch.rand(5, 6, generator=g)
    tq, tp = (torch.rand(3, 6, generator=g) > 0.5).float(), (torch.rand(5, 6, generator=g) > 0.5).float()
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[0, 4] = True

    def contrastive(a: torch.Tensor, b: torch.Tensor, t: float) -> float:
        s = (a @ b.T).numpy() / t
        s[mask.numpy()] = -np.inf
        q2p = np.mean([-s[i, i] + np.log(np.exp(s[i]).sum()) for i in range(3)])
        sq = s[:, :3].T
        p2q = np.mean([-sq[i, i] + np.log(np.exp(sq[i]).sum()) for i in range(3)])
        return (q2p + p2q) / 2

    loss, parts = semi_parametric_loss(eq, tq, ep, tp, mask, temperature=0.5)
    expected = contrastive(eq, ep, 0.5) + 0.5 * contrastive(eq, tp, 0.5) + 0.5 * contrastive(tq, ep, 0.5)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert parts["l_p"] == pytest.approx(contrastive(eq, ep, 0.5), rel=1e-5)


def test_batches_hold_no_duplicate_query_or_document(vocab_encoder: VocabEncoder) -> None:
    qrels = {**QRELS, "q0": {"d0": 1, "d1": 1}, "q1": {"d1": 1}}
    trainer = SvdrTrainer.from_documents(
        vocab_encoder, make_docs(), QUERIES, qrels, config=SvdrTrainingConfig(batch_size=4)
    )
    assert len(trainer.examples) == 9
    batches = trainer._batches(random.Random(0))
    assert sorted((e.qid, e.doc) for b in batches for e in b) == sorted((e.qid, e.doc) for e in trainer.examples)
    for b in batches:
        assert len({e.qid for e in b}) == len(b) == len({e.doc for e in b}) <= 4
    # q0 and q1 share d1: whichever is the other's positive is masked out of its negatives
    trainer._negatives = {}
    batch = [e for e in trainer.examples if e.qid in ("q0", "q1") and e.doc != "d1"] + [
        e for e in trainer.examples if e.qid == "q1"
    ]
    _, _, mask = trainer._step_inputs(batch, random.Random(0))
    assert mask.tolist() == [[False, True], [False, False]]


def test_hard_negatives_come_from_beta_search_and_exclude_positives(vocab_encoder: VocabEncoder) -> None:
    trainer = SvdrTrainer.from_documents(
        vocab_encoder, make_docs(), QUERIES, QRELS, config=SvdrTrainingConfig(negative_depth=3)
    )
    negatives = trainer.mine_negatives()
    vectors = vocab_encoder.encode_queries([QUERIES["q0"]])
    _, ids = trainer.token_index.search(vectors, top_k=len(TEXTS))
    assert negatives["q0"] == [int(i) for i in ids[0] if i != 0][:3]
    assert all(trainer.passage_ids[i] != f"d{q[1:]}#0" for q, neg in negatives.items() for i in neg)


def test_bm25_negatives_and_answer_filtering(vocab_encoder: VocabEncoder) -> None:
    queries = {"q1": "bees honey apple trees", "q6": "rivers deltas sediment"}
    qrels = {"q1": {"d1": 1}, "q6": {"d6": 1}}
    config = SvdrTrainingConfig(negative_depth=3)
    trainer = SvdrTrainer.from_documents(vocab_encoder, make_docs(), queries, qrels, config=config)
    negatives = trainer.bm25_negatives()
    assert negatives["q1"][0] == 7 and 1 not in negatives["q1"]  # "Bees pollinate ... apple trees"
    assert all(i != 6 for i in negatives["q6"])
    # a passage that contains an answer string is never a negative (BM25 or beta)
    filtered = SvdrTrainer.from_documents(
        vocab_encoder, make_docs(), queries, qrels, config=config, answers={"q1": ["Apple"]}
    )
    assert 7 not in filtered.bm25_negatives()["q1"]
    assert 7 not in filtered.mine_negatives(["q1"])["q1"]
    with pytest.raises(ValueError, match="negative_schedule"):
        SvdrTrainingConfig(negative_schedule="bm25")  # type: ignore[arg-type]


def test_bm25_schedule_without_bm25s_names_the_fix(vocab_encoder: VocabEncoder, monkeypatch) -> None:
    from rag_hier.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "bm25s", None)  # import bm25s -> ImportError
    trainer = SvdrTrainer.from_documents(vocab_encoder, make_docs(), {"q1": "bees"}, {"q1": {"d1": 1}})
    with pytest.raises(MissingDependencyError, match=r"pip install bm25s.*negative-schedule beta"):
        trainer.bm25_negatives()


@pytest.mark.parametrize("schedule", ["paper", "beta"])
def test_negative_schedule_bm25_first_half_then_beta(tiny_model_path: str, schedule: str) -> None:
    encoder = VocabEncoder(tiny_model_path, device="cpu")
    config = SvdrTrainingConfig(batch_size=3, epochs=2, max_steps=4, negative_schedule=schedule)  # type: ignore[arg-type]
    trainer = SvdrTrainer.from_documents(encoder, make_docs(), QUERIES, QRELS, config=config)
    calls: list[int] = []
    original = trainer.mine_negatives
    trainer.mine_negatives = lambda qids=None: calls.append(len(qids or [])) or original(qids)  # type: ignore[method-assign]
    result = trainer.train()
    assert result.steps == 4 and len(result.step_seconds) == 4
    assert result.bm25_steps == (2 if schedule == "paper" else 0)
    assert len(calls) == (2 if schedule == "paper" else 4)  # beta search: once per step after the switch


def test_training_runs_saves_and_loads(tiny_model_path: str, tmp_path: Path) -> None:
    encoder = VocabEncoder(tiny_model_path, device="cpu")
    before = encoder.fingerprint
    reference = encoder.encode_queries(["honey bees"])
    config = SvdrTrainingConfig(batch_size=3, max_steps=2, learning_rate=1e-3, seed=1)
    trainer = SvdrTrainer.from_documents(encoder, make_docs(), QUERIES, QRELS, config=config)
    result = trainer.train()
    assert result.steps == 2 and result.stopped_by == "max_steps" and np.isfinite(result.losses).all()
    assert encoder.fingerprint != before and not encoder.module.training
    out = trainer.save(tmp_path / "model")
    assert (out / "training.json").is_file()
    loaded = VocabEncoder(out, device="cpu")
    assert loaded.fingerprint == encoder.fingerprint
    assert abs(loaded.encode_queries(["honey bees"]) - encoder.encode_queries(["honey bees"])).max() == 0
    assert abs(loaded.encode_queries(["honey bees"]) - reference).max() > 0


def test_training_refuses_data_without_pairs(vocab_encoder: VocabEncoder) -> None:
    with pytest.raises(RagHierError, match=r"no training pair.*document ids and passage ids"):
        SvdrTrainer.from_documents(vocab_encoder, [Document("x", "X", ("text",))], QUERIES, QRELS)
    with pytest.raises(ValueError, match="batch_size"):
        SvdrTrainingConfig(batch_size=0)


def test_passage_level_qrels_make_that_passage_the_positive(vocab_encoder: VocabEncoder) -> None:
    # two documents of two paragraphs each; QA data judges paragraphs (<doc_id>#<n>), BEIR data documents
    docs = [
        Document("a", "Bees", ("Bees make honey in hives.", "Bees pollinate apple trees in spring.")),
        Document("b", "Rivers", ("Rivers carry sediment to deltas.", "Bees drink water from rivers.")),
    ]
    queries = {"qp": "bees apple trees", "qd": "rivers sediment"}
    qrels = {"qp": {"a#1": 1}, "qd": {"b": 1}}
    config = SvdrTrainingConfig(negative_depth=4, hard_negatives=3)
    trainer = SvdrTrainer.from_documents(vocab_encoder, docs, queries, qrels, config=config)
    rows = {p: i for i, p in enumerate(trainer.passage_ids)}
    assert sorted((e.qid, e.doc) for e in trainer.examples) == [("qd", "b"), ("qp", "a#1")]
    assert trainer.relevant_rows == {"qp": {rows["a#1"]}, "qd": {rows["b#0"], rows["b#1"]}}
    # the judged paragraph is the positive; its document's other paragraph is an ordinary negative, while
    # every paragraph of a judged document stays out of the negatives
    for negatives in (trainer.bm25_negatives(), trainer.mine_negatives()):
        assert rows["a#1"] not in negatives["qp"] and rows["a#0"] in negatives["qp"]
        assert not {rows["b#0"], rows["b#1"]} & set(negatives["qd"])
    trainer._negatives = {"qp": [rows["b#1"], rows["a#0"]], "qd": [rows["a#1"], rows["a#0"]]}
    batch = sorted(trainer.examples, key=lambda e: e.qid, reverse=True)  # qp, qd
    for seed in range(5):
        _, texts, mask = trainer._step_inputs(batch, random.Random(seed))
        assert texts[0] == trainer.texts[rows["a#1"]]
        assert texts[1] in (trainer.texts[rows["b#0"]], trainer.texts[rows["b#1"]])
        # qp's row masks nothing (a#0 is not judged); qd's row masks a paragraph of b drawn as qp's negative
        assert not mask[0].any()
        of_b = [trainer.texts.index(t) in {rows["b#0"], rows["b#1"]} for t in texts[2:]]
        assert mask[1].tolist() == [False, False, *of_b]


def test_passage_level_qrels_train(tiny_model_path: str) -> None:
    encoder = VocabEncoder(tiny_model_path, device="cpu")
    docs = [Document(f"d{i}", f"T{i}", (t, TEXTS[(i + 3) % len(TEXTS)])) for i, t in enumerate(TEXTS)]
    qrels = {q: {f"d{q[1:]}#0": 1} for q in QUERIES}
    config = SvdrTrainingConfig(batch_size=3, max_steps=2, hard_negatives=1)
    trainer = SvdrTrainer.from_documents(encoder, docs, QUERIES, qrels, config=config)
    assert len(trainer.examples) == len(QUERIES)
    result = trainer.train()
    assert result.steps == 2 and np.isfinite(result.losses).all()
