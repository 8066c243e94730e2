"""EHITrainer: a 2-step joint run on the tiny model, indexer-only training on fixed vectors, bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from rag_hier.errors import RagHierError
from rag_hier.index.ehi import INDEXER_FILES, EHIIndexer, ehi_search
from rag_hier.training.ehi import EHIConfig, EHITrainer


def _clustered(n_docs: int = 48, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((6, dim))
    docs = centres[np.arange(n_docs) % 6] + 0.3 * rng.standard_normal((n_docs, dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[:24] + 0.2 * rng.standard_normal((24, dim))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return docs.astype(np.float32), {f"q{i}": queries[i].astype(np.float32) for i in range(24)}


def test_joint_training_two_steps(tmp_path: Path, tiny_model_path: str, ehi_corpus, ehi_queries) -> None:
    from sentence_transformers import SentenceTransformer

    queries, qrels = ehi_queries
    cfg = EHIConfig(
        branching=4, height=2, epochs=2, refresh_every=1, batch_size=8, max_steps=2, max_seq_length=24,
        init="kmeans", init_steps=20, logging_steps=1, lambda_balance=0.0, remine_every=None,  # the paper's loss
    )  # fmt: skip
    before = SentenceTransformer(tiny_model_path, device="cpu").encode(["apple river"], convert_to_numpy=True)
    result = EHITrainer(cfg, model=tiny_model_path, device="cpu", show_progress_bar=False).train(
        ehi_corpus, tmp_path / "out", queries=queries, qrels=qrels
    )
    assert result.steps == 2
    assert [p.steps for p in result.history] == [2]  # 3 steps per epoch, the budget ends inside the first period
    assert set(result.history[0].loss) == {"siamese", "indexing", "intra"}
    assert result.leaves.shape == (48, 1) and result.leaf_stats["items"] == 48
    out = tmp_path / "out"
    for name in (*INDEXER_FILES, "ehi_training.json", "modules.json"):
        assert (out / name).is_file(), name
    model = SentenceTransformer(str(out), device="cpu")  # an ordinary sentence-transformers directory
    after = model.encode(["apple river"], convert_to_numpy=True)
    assert not np.allclose(before, after)  # the encoder was trained
    indexer = EHIIndexer.from_pretrained(out)
    assert (indexer.branching, indexer.height, indexer.dimension) == (4, 2, 32)
    assert indexer.info["config"]["branching"] == 4
    report = json.loads((out / "ehi_training.json").read_text())
    assert report["steps"] == 2 and report["config"]["init"] == "kmeans"
    vecs = model.encode(list(ehi_corpus.values()), convert_to_numpy=True, normalize_embeddings=True)
    res = ehi_search(indexer, vecs[:2], vecs, indexer.assign(vecs), beam=16, top_k=3)
    assert (res.scored == 48).all()


def test_frozen_training_learns_to_route_queries_with_their_documents() -> None:
    docs, qv = _clustered()
    corpus = {f"d{i}": f"text {i}" for i in range(48)}
    queries = {q: q for q in qv}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(24)}
    cfg = EHIConfig(branching=6, height=1, epochs=30, refresh_every=5, batch_size=8, freeze_encoder=True, seed=0)
    trainer = EHITrainer(cfg, model="unused", device="cpu", show_progress_bar=False)
    untrained = EHIIndexer(16, 6, 1, seed=0)
    result = trainer.train(corpus, None, queries=queries, qrels=qrels, corpus_embeddings=docs, query_embeddings=qv)
    assert result.output_dir is None and len(result.history) == 6 and result.steps == 30 * 3

    def co_located(indexer: EHIIndexer) -> float:
        dl = indexer.assign(docs)[:24, 0]
        ql = indexer.assign(np.stack(list(qv.values())))[:, 0]
        return float((dl == ql).mean())

    assert co_located(result.indexer) > max(0.8, co_located(untrained))
    later = [p.loss["indexing"] for p in result.history]
    assert later[-1] < later[0]


@pytest.mark.parametrize("refit_epochs", [0, 3])
def test_refit_replaces_the_joint_indexer(tmp_path: Path, tiny_model_path: str, ehi_corpus, ehi_queries, refit_epochs):
    queries, qrels = ehi_queries
    cfg = EHIConfig(
        branching=4, height=1, epochs=2, refresh_every=1, batch_size=8, max_steps=2, max_seq_length=24,
        init_steps=20, refit_epochs=refit_epochs, seed=3,
    )  # fmt: skip
    joint: list[dict] = []

    def on_period(period, indexer: EHIIndexer) -> None:
        joint.append({k: v.detach().clone() for k, v in indexer.state_dict().items()})

    result = EHITrainer(cfg, model=tiny_model_path, device="cpu", show_progress_bar=False).train(
        ehi_corpus, tmp_path / "out", queries=queries, qrels=qrels, on_period=on_period
    )
    assert result.steps == 2 and result.config.refit_epochs == refit_epochs
    final = result.indexer.state_dict()
    same_as_joint = all(torch.equal(joint[-1][k], final[k]) for k in final)
    assert same_as_joint == (refit_epochs == 0)
    assert sum(p.epochs for p in result.refit_history) == refit_epochs
    # the saved indexer is the one kept, and the leaves are its assignment of the final vectors
    saved = EHIIndexer.from_pretrained(tmp_path / "out")
    assert all(torch.equal(saved.state_dict()[k], final[k].cpu()) for k in final)
    assert np.array_equal(result.leaves, result.indexer.assign(result.corpus_embeddings))
    report = json.loads((tmp_path / "out" / "ehi_training.json").read_text())
    assert len(report["refit_history"]) == len(result.refit_history)


def test_refit_epochs_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="refit_epochs must be >= 0"):
        EHIConfig(refit_epochs=-1)


def test_on_period_sees_each_period_and_its_indexer() -> None:
    docs, qv = _clustered()
    corpus = {f"d{i}": f"text {i}" for i in range(48)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(24)}
    cfg = EHIConfig(branching=6, height=1, epochs=5, refresh_every=2, batch_size=8, freeze_encoder=True, seed=0)
    seen: list[tuple[int, int, dict]] = []

    def on_period(period, indexer: EHIIndexer) -> None:
        snapshot = {k: v.detach().clone() for k, v in indexer.state_dict().items()}
        seen.append((period.first_epoch, period.steps, snapshot))
        indexer.eval()  # the trainer puts it back in training mode

    result = EHITrainer(cfg, model="unused", device="cpu", show_progress_bar=False).train(
        corpus, None, queries={q: q for q in qv}, qrels=qrels, corpus_embeddings=docs, query_embeddings=qv,
        on_period=on_period,
    )  # fmt: skip
    assert [(first, steps) for first, steps, _ in seen] == [(1, 6), (3, 6), (5, 3)]
    assert not all(torch.equal(seen[0][2][k], seen[1][2][k]) for k in seen[0][2])  # a snapshot per period
    final = result.indexer.state_dict()
    assert all(torch.equal(seen[-1][2][k], final[k]) for k in final)  # the last call saw the trained indexer


def test_bad_input(tiny_model_path: str, ehi_corpus, ehi_queries) -> None:
    queries, qrels = ehi_queries
    with pytest.raises(RagHierError, match="needs training queries"):
        EHITrainer(EHIConfig(branching=4), model=tiny_model_path).train(ehi_corpus, None, queries={}, qrels=qrels)
    frozen = EHIConfig(branching=4, freeze_encoder=True, lambda_indexing=0, lambda_intra=0)
    with pytest.raises(RagHierError, match="nothing would be trained"):
        EHITrainer(frozen, model=tiny_model_path).train(ehi_corpus, None, queries=queries, qrels=qrels)
    with pytest.raises(RagHierError, match="no \\(query, relevant document\\) pair"):
        EHITrainer(EHIConfig(branching=4, freeze_encoder=True), model=tiny_model_path).train(
            ehi_corpus,
            None,
            queries=queries,
            qrels={"q1": {"nope": 1}},
            corpus_embeddings=np.eye(48, 32, dtype=np.float32),
        )
    with pytest.raises(ValueError, match=r"EHIConfig\.mine_leaves must be in 1\.\.branching"):
        EHIConfig(branching=4, mine_leaves=5)
    with pytest.raises(ValueError, match=r"EHIConfig\.init"):
        EHIConfig(init="hierarchical")  # type: ignore[arg-type]


def test_same_seed_same_indexer() -> None:
    docs, qv = _clustered(seed=3)
    corpus = {f"d{i}": "x" for i in range(48)}
    kwargs = {"queries": {q: q for q in qv}, "qrels": {f"q{i}": {f"d{i}": 1} for i in range(24)}}
    cfg = EHIConfig(branching=4, height=2, epochs=4, refresh_every=2, batch_size=8, freeze_encoder=True)
    a = EHITrainer(cfg, model="unused").train(corpus, None, corpus_embeddings=docs, query_embeddings=qv, **kwargs)
    b = EHITrainer(cfg, model="unused").train(corpus, None, corpus_embeddings=docs, query_embeddings=qv, **kwargs)
    for name, t in a.indexer.tensors().items():
        torch.testing.assert_close(t, b.indexer.tensors()[name])


def test_automatic_branching() -> None:
    from rag_hier.training.ehi.config import auto_branching

    assert auto_branching(5183, 1) == 162 and auto_branching(5183, 2) == 13 and auto_branching(10, 1) == 2
    cfg = EHIConfig()
    assert cfg.branching is None and cfg.resolved(3200).branching == 100
    assert EHIConfig(branching=8).resolved(3200).branching == 8
    with pytest.raises(ValueError, match="resolved"):
        _ = cfg.n_leaves
    docs, qv = _clustered()
    trainer = EHITrainer(EHIConfig(height=1, epochs=1, batch_size=8, freeze_encoder=True), model="unused")
    result = trainer.train(
        {f"d{i}": "x" for i in range(48)}, None, queries={q: q for q in qv},
        qrels={f"q{i}": {f"d{i}": 1} for i in range(24)}, corpus_embeddings=docs, query_embeddings=qv,
    )  # fmt: skip
    assert result.config.branching == 2 and result.indexer.n_leaves == 2


def test_warmup_trains_the_indexer_alone_before_the_joint_training(
    tmp_path: Path, tiny_model_path: str, ehi_corpus, ehi_queries, monkeypatch
):
    queries, qrels = ehi_queries
    cfg = EHIConfig(
        branching=4, height=1, epochs=1, refresh_every=1, batch_size=8, max_steps=1, max_seq_length=24,
        init_steps=20, refit_epochs=0, warmup_epochs=3, seed=3,
    )  # fmt: skip
    starts: list[dict] = []
    from rag_hier.training.ehi import trainer as trainer_module

    real_loss = trainer_module.EHILoss

    def recording_loss(model, indexer, **kwargs):  # the indexer each training run starts from
        starts.append({"frozen": model is None, **{k: v.detach().clone() for k, v in indexer.state_dict().items()}})
        return real_loss(model, indexer, **kwargs)

    monkeypatch.setattr(trainer_module, "EHILoss", recording_loss)
    result = EHITrainer(cfg, model=tiny_model_path, device="cpu", show_progress_bar=False).train(
        ehi_corpus, tmp_path / "out", queries=queries, qrels=qrels
    )
    # the warm-up (frozen encoder, 3 epochs) runs first; the joint training starts from its trained indexer
    assert [s["frozen"] for s in starts] == [True, False]
    assert sum(p.epochs for p in result.warmup_history) == 3 and result.steps == 1
    warm_kmeans, joint_start = starts
    keys = [k for k in joint_start if k != "frozen"]
    assert not all(torch.equal(warm_kmeans[k], joint_start[k]) for k in keys)  # the warm-up trained it
    assert not result.refit_history
    report = json.loads((tmp_path / "out" / "ehi_training.json").read_text())
    assert report["config"]["warmup_epochs"] == 3 and len(report["warmup_history"]) == len(result.warmup_history)
    # without a warm-up the joint training starts from the k-means initialisation, the warm-up's own start
    starts.clear()
    EHITrainer(replace(cfg, warmup_epochs=0), model=tiny_model_path, device="cpu", show_progress_bar=False).train(
        ehi_corpus, None, queries=queries, qrels=qrels
    )
    assert [s["frozen"] for s in starts] == [False]
    assert all(torch.equal(warm_kmeans[k], starts[0][k]) for k in keys)


def test_warmup_epochs_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="warmup_epochs must be >= 0"):
        EHIConfig(warmup_epochs=-1)


@pytest.mark.parametrize("scope", ["last", "all"])
def test_encoder_scope_last_trains_the_last_layer_only(tiny_model_path: str, ehi_corpus, ehi_queries, scope) -> None:
    from sentence_transformers import SentenceTransformer

    from rag_hier.training.ehi.trainer import last_layer_parameters

    queries, qrels = ehi_queries
    cfg = EHIConfig(
        branching=4, height=1, epochs=1, refresh_every=1, batch_size=8, max_steps=2, max_seq_length=24,
        init_steps=20, refit_epochs=0, warmup_epochs=0, encoder_scope=scope, encoder_lr=1e-3,
    )  # fmt: skip
    model = SentenceTransformer(tiny_model_path, device="cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    last = set(last_layer_parameters(model))
    layers = {n.split(".layer.")[1].split(".")[0] for n in before if ".layer." in n}
    assert last and all(f".layer.{max(layers, key=int)}." in n for n in last)  # the tiny model's last layer
    result = EHITrainer(cfg, model=model, device="cpu", show_progress_bar=False).train(
        ehi_corpus, None, queries=queries, qrels=qrels
    )
    assert result.steps == 2
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    if scope == "last":
        assert changed and changed <= last  # the last layer trained, nothing else moved
        assert not any("embeddings" in n for n in changed)
    else:
        assert changed - last  # the whole encoder: earlier layers and embeddings move too
    assert all(p.requires_grad for p in model.parameters())  # the flags are put back after training


def test_encoder_scope_is_checked() -> None:
    with pytest.raises(ValueError, match="encoder_scope"):
        EHIConfig(encoder_scope="first")  # type: ignore[arg-type]
