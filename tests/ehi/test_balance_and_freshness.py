"""EHI's leaf load-balancing term and fresh re-mining between refreshes (``lambda_balance``, ``remine_every``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rag_hier.index.ehi import EHIIndexer
from rag_hier.training.ehi import EHIConfig, EHITrainer
from rag_hier.training.ehi.loss import EHILoss, leaf_balance
from rag_hier.training.ehi.trainer import EHITrainer as _Trainer


def _paths(leaf_of_row: list[int], n_leaves: int, confidence: float = 1.0) -> torch.Tensor:
    """Height-1 path embeddings putting ``confidence`` on each row's leaf and the rest evenly elsewhere."""
    rest = (1 - confidence) / (n_leaves - 1)
    t = torch.full((len(leaf_of_row), n_leaves), rest)
    t[torch.arange(len(leaf_of_row)), torch.tensor(leaf_of_row)] = confidence
    return t


def test_balance_is_one_when_spread_and_the_number_of_leaves_when_collapsed() -> None:
    assert leaf_balance(_paths([0, 1, 2, 3] * 5, 4), 4, 1).item() == pytest.approx(1.0)
    assert leaf_balance(_paths([2] * 20, 4), 4, 1).item() == pytest.approx(4.0)
    assert leaf_balance(_paths([0, 0, 0, 1], 4), 4, 1).item() == pytest.approx(4 * (0.75**2 + 0.25**2))
    assert leaf_balance(torch.zeros(0, 4), 4, 1).item() == 0.0


def test_balance_reads_every_level_of_a_deeper_tree() -> None:
    indexer = EHIIndexer(8, branching=3, height=2, seed=0)
    x = torch.nn.functional.normalize(torch.randn(30, 8), dim=-1)
    paths = indexer(x)
    value = leaf_balance(paths, 3, 2)
    # by hand: per level, the nodes of the argmax prefixes and the mass the rows give them
    blocks = paths.detach().reshape(30, 2, 3)
    total = 0.0
    prefix = torch.zeros(30, dtype=torch.long)
    for h in range(2):
        choice = blocks[:, h].argmax(1)
        node = prefix * 3 + choice
        n_nodes = 3 ** (h + 1)
        f = torch.bincount(node, minlength=n_nodes).float() / 30
        p = torch.zeros(n_nodes)
        for r in range(30):
            for c in range(3):
                p[prefix[r] * 3 + c] += blocks[r, h, c] / 30
        total += n_nodes * float((f * p).sum())
        prefix = node
    assert value.item() == pytest.approx(total / 2, rel=1e-5)


def test_balance_gradient_lowers_the_over_used_leaf() -> None:
    indexer = EHIIndexer(8, branching=4, height=1, seed=0)
    x = torch.nn.functional.normalize(torch.randn(40, 8), dim=-1)
    with torch.no_grad():  # make leaf 0 the argmax of most rows
        indexer.classifier[0][0] += 3 * x.mean(0) / x.mean(0).norm()
    before = indexer(x).detach()
    top = int(before.argmax(1).bincount(minlength=4).argmax())
    opt = torch.optim.SGD(indexer.parameters(), lr=0.5)
    for _ in range(20):
        opt.zero_grad()
        leaf_balance(indexer(x), 4, 1).backward()
        opt.step()
    after = indexer(x).detach()
    assert after[:, top].mean() < before[:, top].mean()
    assert (after.argmax(1) == top).sum() < (before.argmax(1) == top).sum()


def test_corpus_shares_leave_an_even_tree_alone_and_push_on_full_leaves() -> None:
    indexer = EHIIndexer(8, branching=4, height=1, seed=0)
    x = torch.nn.functional.normalize(torch.randn(40, 8), dim=-1)
    even = leaf_balance(indexer(x), 4, 1, torch.full((4,), 0.25))
    assert even.item() == pytest.approx(1.0)
    even.backward()
    assert all(p.grad is None or p.grad.abs().max() < 1e-6 for p in indexer.parameters())
    indexer.zero_grad()
    # leaf 2 holds most of the corpus: the term lowers its probability for every row
    before = indexer(x).detach()
    opt = torch.optim.SGD(indexer.parameters(), lr=0.5)
    for _ in range(10):
        opt.zero_grad()
        leaf_balance(indexer(x), 4, 1, torch.tensor([0.1, 0.1, 0.7, 0.1])).backward()
        opt.step()
    assert indexer(x).detach()[:, 2].mean() < before[:, 2].mean()
    # a two-level tree sums the leaves' shares to the first level's nodes
    deep = EHIIndexer(8, branching=2, height=2, seed=0)
    y = deep(x)
    share = torch.tensor([0.4, 0.1, 0.3, 0.2])
    first = 2 * (torch.tensor([0.5, 0.5]) * y[:, :2].mean(0)).sum()
    second_nodes = y[:, :2].argmax(1) * 2
    p2 = torch.zeros(4).index_add(0, (second_nodes[:, None] + torch.arange(2)).reshape(-1), y[:, 2:].reshape(-1)) / 40
    expected = (first + 4 * (share * p2).sum()) / 2
    assert leaf_balance(y, 2, 2, share).item() == pytest.approx(expected.item(), rel=1e-5)


def test_loss_adds_the_balance_term_only_when_weighted() -> None:
    indexer = EHIIndexer(8, branching=4, height=1, seed=0)
    q, p, n = (torch.nn.functional.normalize(torch.randn(6, 8), dim=-1) for _ in range(3))
    labels = torch.tensor([[i, i, 10 + i] for i in range(6)])
    plain = EHILoss(None, indexer).compute_loss_from_embeddings([q, p, n], labels)
    weighted = EHILoss(None, indexer, lambda_balance=0.5).compute_loss_from_embeddings([q, p, n], labels)
    assert "balance" not in plain and set(weighted) == {"siamese", "indexing", "intra", "balance"}
    docs = indexer(torch.cat([p, n]))
    assert weighted["balance"].item() == pytest.approx(0.5 * leaf_balance(docs, 4, 1).item(), rel=1e-5)
    for k in plain:
        torch.testing.assert_close(plain[k], weighted[k])
    shared = EHILoss(None, indexer, lambda_balance=0.5)
    shared.set_leaf_share(torch.tensor([10.0, 0.0, 30.0, 0.0]))
    got = shared.compute_loss_from_embeddings([q, p, n], labels)["balance"]
    assert got.item() == pytest.approx(0.5 * leaf_balance(docs, 4, 1, torch.tensor([0.25, 0, 0.75, 0])).item())
    with pytest.raises(ValueError, match="documents_per_leaf"):
        shared.set_leaf_share(torch.ones(3))
    with pytest.raises(ValueError, match="lambda_balance"):
        EHILoss(None, indexer, lambda_balance=-1)
    with pytest.raises(ValueError, match=r"EHIConfig\.lambda_balance"):
        EHIConfig(lambda_balance=-0.1)
    with pytest.raises(ValueError, match=r"EHIConfig\.remine_every"):
        EHIConfig(remine_every=0)


def _collapsing_setup() -> tuple[dict, dict, dict, np.ndarray, dict]:
    """48 documents in 6 tight clusters of 8, and queries next to them (one per document)."""
    rng = np.random.default_rng(1)
    dim = 16
    centres = rng.standard_normal((6, dim))
    docs = centres[np.arange(48) % 6] + 0.2 * rng.standard_normal((48, dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    qv = {f"q{i}": (docs[i] + 0.1 * rng.standard_normal(dim)).astype(np.float32) for i in range(48)}
    corpus = {f"d{i}": "x" for i in range(48)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(48)}
    return corpus, {q: q for q in qv}, qrels, docs.astype(np.float32), qv


def test_balance_term_spreads_a_randomly_initialised_tree() -> None:
    corpus, queries, qrels, docs, qv = _collapsing_setup()

    def largest_leaf(lambda_balance: float) -> tuple[int, int]:
        cfg = EHIConfig(
            branching=8, epochs=40, refresh_every=5, batch_size=16, freeze_encoder=True, init="random", seed=0,
            lambda_balance=lambda_balance, remine_every=1,
        )  # fmt: skip
        res = EHITrainer(cfg, model="unused", device="cpu", show_progress_bar=False).train(
            corpus, None, queries=queries, qrels=qrels, corpus_embeddings=docs, query_embeddings=qv
        )
        sizes = np.bincount(res.leaves[:, 0], minlength=8)
        return int(sizes.max()), int((sizes > 0).sum())

    # 8 leaves for 6 clusters: the paper's loss keeps one leaf per cluster and leaves two empty (8 x 6);
    # the balance term (leaf shares updated at every step) splits clusters to use every leaf
    plain_max, plain_nonempty = largest_leaf(0.0)
    balanced_max, balanced_nonempty = largest_leaf(1.0)
    assert (plain_max, plain_nonempty) == (8, 6)
    assert balanced_nonempty == 8 and balanced_max < plain_max


def test_remine_every_mines_with_the_current_indexer(monkeypatch: pytest.MonkeyPatch) -> None:
    corpus, queries, qrels, docs, qv = _collapsing_setup()
    calls: list[int] = []
    real = _Trainer._refresh

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(_Trainer, "_refresh", counting)
    # 48 pairs, batch 16: 3 steps per epoch; 2 epochs in one period; re-mined every 2 steps: after steps 2 and 4
    cfg = EHIConfig(branching=4, epochs=2, refresh_every=2, batch_size=16, freeze_encoder=True, seed=0, remine_every=2)
    res = EHITrainer(cfg, model="unused", device="cpu", show_progress_bar=False).train(
        corpus, None, queries=queries, qrels=qrels, corpus_embeddings=docs, query_embeddings=qv
    )
    assert res.steps == 6 and len(calls) == 1 + 2
    calls.clear()
    cfg = EHIConfig(
        branching=4, epochs=2, refresh_every=2, batch_size=16, freeze_encoder=True, seed=0, remine_every=None
    )
    plain = EHITrainer(cfg, model="unused", device="cpu", show_progress_bar=False)
    assert (
        plain.train(corpus, None, queries=queries, qrels=qrels, corpus_embeddings=docs, query_embeddings=qv).steps == 6
    )
    assert len(calls) == 1


def test_joint_training_in_segments(tmp_path: Path, tiny_model_path: str, ehi_corpus, ehi_queries) -> None:
    queries, qrels = ehi_queries
    cfg = EHIConfig(
        branching=4, height=1, epochs=2, refresh_every=2, batch_size=8, max_seq_length=24, init_steps=20,
        remine_every=2, lambda_balance=0.1, logging_steps=1, refit_epochs=0, seed=0,
    )  # fmt: skip
    res = EHITrainer(cfg, model=tiny_model_path, device="cpu", show_progress_bar=False).train(
        ehi_corpus, None, queries=queries, qrels=qrels
    )
    # 25 pairs (q0 has two positives), batch 8: 4 steps per epoch, 8 in the period, in segments of 2 steps
    assert res.steps == 8 and [p.steps for p in res.history] == [8]
    assert set(res.history[0].loss) == {"siamese", "indexing", "intra", "balance"}
