"""HCETrainer: every mode trains a few steps and saves a loadable sentence-transformers model; EM bookkeeping."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rag_hier.errors import RagHierError
from rag_hier.training.hce import HCEConfig, HCETrainer


def _config(mode: str, **kw) -> HCEConfig:
    base = dict(
        mode=mode,
        batch_size=4,
        epochs=1,
        steps_per_epoch=2,
        branching=4,
        max_seq_length=24,
        span_tokens=6,
        dev_size=8,
        encode_batch_size=64,
        logging_steps=1,
        tree_niter=5,
    )
    return HCEConfig(**{**base, **kw})


@pytest.mark.parametrize("mode", ["unsupervised", "supervised", "joint"])
def test_each_mode_trains_and_saves_a_loadable_model(tmp_path, tiny_model_path, small_corpus, small_queries, mode):
    from sentence_transformers import SentenceTransformer

    queries, qrels = small_queries
    trainer = HCETrainer(_config(mode), model=tiny_model_path, device="cpu", show_progress_bar=False)
    result = trainer.train(small_corpus, tmp_path / "out", queries=queries, qrels=qrels)
    assert result.steps == 2 and result.history[0].epoch == 0 and result.history[0].tree["items"] == 48
    assert result.best_dev is not None  # a dev set exists in every mode (held-out queries or ICT spans)
    model = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert model.encode(["apple"]).shape == (1, 32)
    report = json.loads((tmp_path / "out" / "hce_training.json").read_text())
    assert report["config"]["mode"] == mode and report["steps"] == 2


def test_em_rebuilds_the_tree_and_simcse_runs(tmp_path, tiny_model_path, small_corpus):
    cfg = _config("unsupervised", unsupervised_task="simcse", epochs=2, recluster="always", dev_size=0)
    result = HCETrainer(cfg, model=tiny_model_path, device="cpu", show_progress_bar=False).train(
        small_corpus, tmp_path / "o"
    )
    assert [e.epoch for e in result.history] == [0, 1, 2]
    assert result.history[1].reclustered and not result.history[2].reclustered  # never after the last epoch
    assert result.steps == 4 and result.best_dev is None


def test_supervised_needs_queries_and_config_is_validated(tmp_path, tiny_model_path, small_corpus):
    with pytest.raises(RagHierError, match="queries and qrels"):
        HCETrainer(_config("supervised"), model=tiny_model_path, device="cpu").train(small_corpus, tmp_path / "x")
    with pytest.raises(ValueError, match=r"HCEConfig\.mode"):
        HCEConfig(mode="semi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="temperature"):
        HCEConfig(temperature=0)
    with pytest.raises(ValueError, match="level_weight"):
        HCEConfig(level_weight=-0.1)
    with pytest.raises(ValueError, match=r"HCEConfig\.joint_schedule must be sum or alternate"):
        HCEConfig(joint_schedule="mixed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ict_remove_rate"):
        HCEConfig(ict_remove_rate=1.5)
    with pytest.raises(ValueError, match="ict_unit"):
        HCEConfig(ict_unit="words")  # type: ignore[arg-type]


@pytest.mark.real_model
def test_real_model_one_step_keeps_a_working_retriever(tmp_path, real_model_path):
    """One ICT step on the real MiniLM saves a model that still matches a question to its passage."""
    from sentence_transformers import SentenceTransformer

    texts = {
        "bees": "Bees turn nectar into honey and store it in wax cells.",
        "tides": "The moon pulls the oceans and makes the tides rise and fall.",
        "volcano": "Magma rises through cracks in the crust until the volcano erupts.",
        "bread": "Sourdough rises because wild yeast ferments the flour.",
        "press": "Movable type made printed books cheaper to produce.",
        "compost": "Microbes turn kitchen scraps into dark, crumbly humus.",
    }
    cfg = HCEConfig(
        mode="unsupervised", batch_size=4, epochs=1, max_steps=1, max_seq_length=32, span_tokens=6,
        dev_size=0, recluster="never", n_negatives=1, branching=2, tree_niter=5,
    )  # fmt: skip
    result = HCETrainer(cfg, model=real_model_path, device="cpu", show_progress_bar=False).train(texts, tmp_path / "m")
    assert result.steps == 1
    model = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    emb = model.encode(["How do bees make honey?", *texts.values()], normalize_embeddings=True)
    assert int(np.argmax(emb[1:] @ emb[0])) == 0


@pytest.mark.parametrize("schedule", ["sum", "alternate"])
def test_joint_schedules_train_with_ict_span_removal(tmp_path, tiny_model_path, small_corpus, small_queries, schedule):
    queries, qrels = small_queries
    cfg = _config("joint", joint_schedule=schedule, ict_remove_rate=0.9, dev_fraction=0.0, dev_size=0)
    trainer = HCETrainer(cfg, model=tiny_model_path, device="cpu", show_progress_bar=False)
    result = trainer.train(small_corpus, tmp_path / "o", queries=queries, qrels=qrels)
    assert result.steps == 2
    report = json.loads((tmp_path / "o" / "hce_training.json").read_text())
    assert report["config"]["joint_schedule"] == schedule and report["config"]["ict_remove_rate"] == 0.9


def test_joint_sum_rows_pair_a_supervised_and_an_unsupervised_example(tiny_model_path, small_corpus, small_queries):
    from rag_hier.index.tree import ClusterTree
    from rag_hier.training.hce import HierarchicalContrastiveLoss, JointLoss, TrainingCorpus
    from rag_hier.training.hce.data import resolve_pairs

    queries, qrels = small_queries
    cfg = _config("joint", n_negatives=2, ict_remove_rate=1.0)
    trainer = HCETrainer(cfg, model=tiny_model_path, device="cpu", show_progress_bar=False)
    items = TrainingCorpus.from_texts(small_corpus)
    emb = trainer.encode_corpus(items)
    tree = ClusterTree.build(emb, branching=4)
    loss = HierarchicalContrastiveLoss(trainer.model, tree)
    pairs = resolve_pairs(items, queries, qrels)
    ds, joint = trainer._datasets(items, tree, pairs, loss, np.random.default_rng(0), rows=10)
    assert isinstance(joint, JointLoss) and joint.n_columns == 4 and joint.alpha == cfg.alpha
    assert ds.column_names == [
        "anchor",
        "positive",
        "negative_1",
        "negative_2",
        "unsup_anchor",
        "unsup_positive",
        "unsup_negative_1",
        "unsup_negative_2",
        "label",
    ]
    assert len(ds) == 10
    for row in ds:
        sup_items, uns_items = row["label"][:3], row["label"][3:]
        assert row["positive"] == items.texts[sup_items[0]]
        # the ICT span is cut out of the positive context (remove rate 1), whose label is still the item
        assert row["unsup_anchor"] in items.texts[uns_items[0]] and row["unsup_anchor"] not in row["unsup_positive"]
        assert row["unsup_negative_1"] == items.texts[uns_items[1]]


def test_unsupervised_ict_spans_lie_in_the_window_the_model_encodes(tiny_model_path):
    """Issue 17: an ICT pseudo-query must come from the part of its passage the encoder sees (max_seq_length)."""
    from rag_hier.training.hce import TrainingCorpus

    trainer = HCETrainer(_config("unsupervised", max_seq_length=24), model=tiny_model_path, device="cpu")
    assert trainer._ict_window() == 22  # 24 minus [CLS] and [SEP]
    texts = [" ".join(f"word{d}x{i}" for i in range(150)) for d in range(6)]
    items = TrainingCorpus.from_texts({f"d{d}": t for d, t in enumerate(texts)})
    tokenizer = trainer.model.tokenizer
    owners = np.arange(6).repeat(5)
    queries, _positives = trainer._unsup_rows(items, owners, np.random.default_rng(0))
    assert len(queries) == 30
    for query, owner in zip(queries, owners, strict=True):
        text = texts[owner]  # the passage as stored (by default the span is cut out of the positive context)
        enc = tokenizer(text, truncation=True, max_length=24, return_offsets_mapping=True)
        window_end = max(end for _, end in enc["offset_mapping"])  # last character the model encodes
        start = text.find(query)
        assert start >= 0 and start + len(query) <= window_end, (query, window_end)


def test_training_prints_no_widget_bar_nor_length_warning(tmp_path, tiny_model_path, small_corpus, capfd) -> None:
    # a document longer than the model reads is cut on purpose (ICT spans lie in what the model encodes)
    corpus = {**small_corpus, "long": " ".join(f"word{i}" for i in range(700))}
    trainer = HCETrainer(_config("unsupervised"), model=tiny_model_path, device="cpu", show_progress_bar=False)
    capfd.readouterr()
    trainer.train(corpus, tmp_path / "out")
    err = capfd.readouterr().err
    for noise in ("widget examples", "indexing errors", "Writing model shards"):
        assert noise not in err, err
