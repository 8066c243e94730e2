"""HierarchicalContrastiveLoss against hand-computed values, masking, and the data helpers it relies on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rag_hier.index.tree import ClusterTree
from rag_hier.training.hce import HierarchicalContrastiveLoss, ScaledLoss, ict_queries, sample_tree_negatives


def _toy_tree() -> ClusterTree:
    """Two top nodes, four leaves (parents 0,0,1,1), one 2-d item per leaf."""
    top = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    leaves = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.8, 0.6]], np.float32)
    return ClusterTree(2, 2, [top, leaves], [np.zeros(2, np.int64), np.array([0, 0, 1, 1])], np.arange(4), np.arange(4))


def _loss(levels_m: int, temperature: float = 1.0) -> HierarchicalContrastiveLoss:
    return HierarchicalContrastiveLoss(torch.nn.Linear(1, 1), _toy_tree(), levels_m=levels_m, temperature=temperature)


def test_hand_computed_example() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    pos = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    neg = torch.tensor([[0.6, 0.8], [1.0, 0.0]])  # row 2's negative is row 1's positive document
    labels = torch.tensor([[0, 1], [2, 0]])
    out = _loss(levels_m=2).compute_loss_from_embeddings([q, pos, neg], labels)
    e = math.e
    # level 1: both top nodes are siblings (children of the root); q is one of them exactly
    assert out["level_1"].item() == pytest.approx(math.log(1 + e**-1), rel=1e-5)
    # level 2: leaf 0 against its sibling leaf 1 (cos 0.6); leaf 2 against leaf 3 (cos 0.6)
    assert out["level_2"].item() == pytest.approx(math.log(1 + e**-0.4), rel=1e-5)
    # query 1 -> docs: [d1=1, d2=0, n1=0.6, n2 masked (it is query 1's own positive)]
    qd1 = -math.log(e / (e + 1 + e**0.6))
    # query 2 -> docs: [d1=0, d2=1, n1=0.8, n2=0]
    qd2 = -math.log(e / (1 + e + e**0.8 + 1))
    dq = math.log(1 + e**-1)
    # Eq. 8: the two directions are summed (the "mean" option averages them)
    assert out["documents"].item() == pytest.approx((qd1 + qd2) / 2 + dq, rel=1e-5)
    mean = HierarchicalContrastiveLoss(
        torch.nn.Linear(1, 1), _toy_tree(), levels_m=2, temperature=1.0, direction_reduction="mean"
    ).compute_loss_from_embeddings([q, pos, neg], labels)
    assert mean["documents"].item() == pytest.approx(((qd1 + qd2) / 2 + dq) / 2, rel=1e-5)
    assert mean["level_1"].item() == pytest.approx(out["level_1"].item(), rel=1e-6)
    with pytest.raises(ValueError, match="direction_reduction"):
        HierarchicalContrastiveLoss(torch.nn.Linear(1, 1), _toy_tree(), direction_reduction="max")  # type: ignore[arg-type]


def test_levels_m_and_asymmetric_variant() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    out = _loss(levels_m=1).compute_loss_from_embeddings([q, q.clone()], torch.tensor([0, 2]))
    assert set(out) == {"level_1", "documents"}
    loss0 = HierarchicalContrastiveLoss(
        torch.nn.Linear(1, 1), _toy_tree(), levels_m=0, temperature=1.0, symmetric=False
    )
    only = loss0.compute_loss_from_embeddings([q, q.clone()], None)
    assert set(only) == {"documents"}
    assert only["documents"].item() == pytest.approx(math.log(1 + math.e**-1), rel=1e-5)


def test_level_weight_scales_only_the_level_terms() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    pos = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    neg = torch.tensor([[0.6, 0.8], [1.0, 0.0]])
    labels = torch.tensor([[0, 1], [2, 0]])
    full = _loss(levels_m=2).compute_loss_from_embeddings([q, pos, neg], labels)
    weighted = HierarchicalContrastiveLoss(
        torch.nn.Linear(1, 1), _toy_tree(), levels_m=2, temperature=1.0, level_weight=0.25
    )
    out = weighted.compute_loss_from_embeddings([q, pos, neg], labels)
    assert out["level_1"].item() == pytest.approx(0.25 * full["level_1"].item(), rel=1e-6)
    assert out["level_2"].item() == pytest.approx(0.25 * full["level_2"].item(), rel=1e-6)
    assert out["documents"].item() == pytest.approx(full["documents"].item(), rel=1e-6)
    assert weighted.get_config_dict()["level_weight"] == 0.25
    # weight 0: the level terms vanish, so do the centroids' gradients
    zero = HierarchicalContrastiveLoss(torch.nn.Linear(1, 1), _toy_tree(), levels_m=2, temperature=1.0, level_weight=0)
    out0 = zero.compute_loss_from_embeddings([q.requires_grad_(), pos, neg], labels)
    sum(out0.values()).backward()
    assert out0["level_1"].item() == 0.0
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0.0 for p in zero.centroids)
    with pytest.raises(ValueError, match="level_weight"):
        HierarchicalContrastiveLoss(torch.nn.Linear(1, 1), _toy_tree(), level_weight=-1.0)


def test_matches_a_numpy_oracle_at_tau_001() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 8)).astype(np.float32)
    tree = ClusterTree.build(x, branching=4)
    loss = HierarchicalContrastiveLoss(torch.nn.Linear(1, 1), tree, levels_m=2, temperature=0.01)
    q = rng.standard_normal((6, 8)).astype(np.float32)
    items = np.array([0, 5, 9, 13, 21, 30])
    out = loss.compute_loss_from_embeddings([torch.from_numpy(q), torch.from_numpy(x[items])], torch.from_numpy(items))

    def ce(logits: np.ndarray, target: int) -> float:
        m = logits.max()
        return float(-(logits[target] - m - np.log(np.exp(logits - m).sum())))

    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    paths = tree.node_paths()
    for t in (1, 2):
        c = tree.centroids[t - 1]
        vals = []
        for i, item in enumerate(items):
            node = paths[item, t - 1]
            sib = np.nonzero(tree.parents[t - 1] == tree.parents[t - 1][node])[0]
            vals.append(ce(qn[i] @ c[sib].T / 0.01, int(np.nonzero(sib == node)[0][0])))
        assert out[f"level_{t}"].item() == pytest.approx(np.mean(vals), rel=1e-4)
    dn = x[items] / np.linalg.norm(x[items], axis=1, keepdims=True)
    qd = np.mean([ce(qn[i] @ dn.T / 0.01, i) for i in range(6)])
    dq = np.mean([ce(dn[i] @ qn.T / 0.01, i) for i in range(6)])
    assert out["documents"].item() == pytest.approx(qd + dq, rel=1e-4)


def test_centroids_are_trainable_and_reset_by_set_tree() -> None:
    loss = _loss(levels_m=2)
    assert [tuple(p.shape) for p in loss.centroids] == [(2, 2), (4, 2)]
    q = torch.tensor([[0.9, 0.1]], requires_grad=True)
    out = loss.compute_loss_from_embeddings([q, q.detach().clone()], torch.tensor([0]))
    sum(out.values()).backward()
    assert loss.centroids[1].grad is not None and loss.centroids[1].grad.abs().sum() > 0
    with torch.no_grad():
        loss.centroids[0].add_(1.0)
    assert loss.set_tree(_toy_tree()) is False  # same shapes: overwritten in place
    assert torch.equal(loss.centroids[0].detach(), torch.tensor([[1.0, 0.0], [0.0, 1.0]]))


def test_scaled_loss_weights_every_component() -> None:
    inner = _loss(levels_m=1)
    feats_q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    base = inner.compute_loss_from_embeddings([feats_q, feats_q.clone()], torch.tensor([0, 2]))
    scaled = ScaledLoss(inner, 0.5, prefix="unsup_")
    inner.forward = lambda feats, labels: inner.compute_loss_from_embeddings(list(feats), labels)  # type: ignore[method-assign]
    got = scaled([feats_q, feats_q.clone()], torch.tensor([0, 2]))
    assert got["unsup_documents"].item() == pytest.approx(0.5 * base["documents"].item())
    assert scaled.model is inner.model


def test_tree_negatives_are_siblings_of_the_positive(unit_vectors: np.ndarray) -> None:
    tree = ClusterTree.build(unit_vectors, branching=4)
    assert tree.depth == 4  # 300 -> 75 -> 19 -> 5 -> 2 -> root
    pos = np.arange(0, 300, 7)
    rng = np.random.default_rng(0)
    neg = sample_tree_negatives(tree, pos, levels_m=2, n_negatives=3, rng=rng)
    assert neg.shape == (pos.size, 3 * 3)  # levels 3, 4 and the item level
    paths = tree.paths()
    for row, item in enumerate(pos):
        for li, level in enumerate((3, 4, 5)):
            for j in neg[row, li * 3 : (li + 1) * 3]:
                assert j != item
                # same prefix down to level-1 ... unless the node had no sibling (fallback one level up)
                assert np.array_equal(paths[j, : level - 2], paths[item, : level - 2])
    banned = sample_tree_negatives(
        tree,
        pos[:1],
        levels_m=4,
        n_negatives=5,
        rng=rng,
        exclude=[frozenset(tree.members(4, tree.item_leaf[pos[0]]).tolist())],
    )
    assert not np.isin(banned, tree.members(4, tree.item_leaf[pos[0]])).any()


def test_ict_spans_are_substrings() -> None:
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{i}" for i in range(200)), "short text here", ""]
    spans = ict_queries(texts, rng, span_tokens=64)
    assert len(spans[0].split()) == 64 and spans[0] in texts[0]
    assert len(spans[1].split()) == 1 and spans[1] in texts[1]
    assert spans[2] == ""


def test_ict_spans_lie_inside_the_encoded_window() -> None:
    from rag_hier.training.hce import ict_examples

    texts = [" ".join(f"w{i}" for i in range(300)) for _ in range(200)]
    queries, _ = ict_examples(texts, np.random.default_rng(0), span_tokens=16, max_tokens=40)
    ends = [max(int(w[1:]) for w in q.split()) for q in queries]
    assert max(ends) <= 39 and min(int(q.split()[0][1:]) for q in queries) == 0  # the window is covered
    assert all(len(q.split()) == 16 for q in queries)
    short = ict_examples(texts[:1], np.random.default_rng(0), span_tokens=64, max_tokens=20)[0][0]
    assert len(short.split()) == 10 and max(int(w[1:]) for w in short.split()) <= 19  # half the window
    with pytest.raises(ValueError, match="max_tokens"):
        ict_examples(texts[:1], np.random.default_rng(0), max_tokens=0)


def test_ict_examples_cut_the_span_out_of_its_context() -> None:
    from rag_hier.training.hce import ict_examples

    texts = [" ".join(f"w{i}" for i in range(200)), "alpha beta gamma delta"]
    queries, contexts = ict_examples(texts, np.random.default_rng(0), span_tokens=8, remove_rate=1.0)
    for text, query, context in zip(texts, queries, contexts, strict=True):
        assert query in text and query not in context
        assert len(context.split()) + len(query.split()) == len(text.split())  # nothing else lost
    kept_q, kept_c = ict_examples(texts, np.random.default_rng(0), span_tokens=8, remove_rate=0.0)
    assert kept_q == queries and kept_c == texts  # same spans; contexts untouched
    many = [" ".join(f"w{i}" for i in range(n, n + 50)) for n in range(30)]
    spans = [ict_examples(many, np.random.default_rng(3), span_tokens=8, remove_rate=r)[0] for r in (0, 0.5, 1)]
    assert spans[0] == spans[1] == spans[2]  # the rate does not change which spans are drawn
    mixed = ict_examples(texts * 200, np.random.default_rng(1), span_tokens=8, remove_rate=0.5)[1]
    removed = sum(c != t for c, t in zip(mixed, texts * 200, strict=True))
    assert 150 < removed < 250  # about half of 400


def test_ict_sentence_unit_takes_one_whole_sentence_inside_the_window() -> None:
    from rag_hier.training.hce import ict_examples

    sentences = [f"Sentence number {i} talks about  topic{i}." for i in range(12)]  # a double space inside
    text = " ".join(sentences)
    queries, contexts = ict_examples([text] * 60, np.random.default_rng(0), unit="sentence", remove_rate=1.0)
    normalized = [" ".join(s.split()) for s in sentences]
    assert {" ".join(q.split()) for q in queries} <= set(normalized) and len(set(queries)) > 3
    for query, context in zip(queries, contexts, strict=True):
        assert query in text and query not in context
        assert len(context.split()) + len(query.split()) == len(text.split())
    # inside the window: with 14 words visible only the first two sentences (6 words each) qualify
    window = ict_examples([text] * 40, np.random.default_rng(1), unit="sentence", max_tokens=14)[0]
    assert {" ".join(q.split()) for q in window} == set(normalized[:2])
    # fewer than two sentences in the window: a token span, as with unit="tokens"
    one = ict_examples([text], np.random.default_rng(2), unit="sentence", max_tokens=7, span_tokens=3)[0][0]
    assert len(one.split()) == 3
    with pytest.raises(ValueError, match="unit"):
        ict_examples([text], np.random.default_rng(0), unit="words")


def test_joint_loss_is_supervised_plus_alpha_unsupervised(tiny_model_path) -> None:
    from sentence_transformers import SentenceTransformer

    from rag_hier.training.hce import JointLoss

    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.eval()  # no dropout: the two computations see the same embeddings
    emb = model.encode([f"text {i}" for i in range(8)], normalize_embeddings=True)
    tree = ClusterTree.build(emb, branching=2)
    hce = HierarchicalContrastiveLoss(model, tree, levels_m=1, temperature=0.05)
    sup_cols = [["apple pie", "ocean tides"], ["text 1", "text 2"], ["text 3", "text 4"]]
    uns_cols = [["text", "6"], ["text 5", "text 6"], ["text 7", "text 0"]]
    sup_lab = torch.tensor([[1, 3], [2, 4]])
    uns_lab = torch.tensor([[5, 7], [6, 0]])
    feats = [model.tokenize(c) for c in sup_cols + uns_cols]
    joint = JointLoss(hce, alpha=0.5, n_columns=3)
    with torch.no_grad():
        out = joint(feats, torch.cat([sup_lab, uns_lab], dim=1))
        sup = hce([model.tokenize(c) for c in sup_cols], sup_lab)
        uns = hce([model.tokenize(c) for c in uns_cols], uns_lab)
    assert set(out) == {"level_1", "documents", "unsup_level_1", "unsup_documents"}
    for k, v in sup.items():
        assert out[k].item() == pytest.approx(v.item(), rel=1e-4)
        assert out[f"unsup_{k}"].item() == pytest.approx(0.5 * uns[k].item(), rel=1e-4)
    assert joint.model is model and joint.get_config_dict()["alpha"] == 0.5
    with pytest.raises(ValueError, match="2 x 3 text columns"):
        joint(feats[:5], None)


def _grads(model: torch.nn.Module, loss: torch.nn.Module, feats, labels, scale: float = 1.0):
    model.zero_grad(set_to_none=True)
    for p in loss.parameters():
        p.grad = None
    out = loss([{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in f.items()} for f in feats], labels)
    total = torch.stack(list(out.values())).sum()
    (total * scale).backward()
    named = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    cents = [c.grad.clone() for c in getattr(loss, "loss", loss).centroids]
    return {k: v.item() for k, v in out.items()}, float(total.item()), named, cents


@pytest.mark.parametrize("joint", [False, True])
def test_gradcache_mini_batches_give_the_plain_loss_and_gradients(tiny_model_path, joint) -> None:
    from sentence_transformers import SentenceTransformer

    from rag_hier.training.hce import JointLoss

    model = SentenceTransformer(tiny_model_path, device="cpu")
    model.eval()  # no dropout, so both passes see the same embeddings
    texts = [f"text {i} about {w}" for i, w in enumerate(["apple", "river", "stone", "cloud", "music", "forest"])]
    tree = ClusterTree.build(model.encode(texts, normalize_embeddings=True), branching=2)
    cols = [["apple pie", "river bank", "rock", "rain"], texts[:4], texts[2:6]]
    labels = torch.tensor([[0, 2], [1, 3], [2, 4], [3, 5]])
    if joint:
        cols = [*cols, ["pie", "bank", "stone", "sky"], texts[1:5], [texts[5], texts[0], texts[1], texts[2]]]
        labels = torch.cat([labels, torch.tensor([[1, 5], [2, 0], [3, 1], [4, 2]])], dim=1)
    feats = [model.tokenize(c) for c in cols]
    results = []
    for mbs in (None, 3):
        hce = HierarchicalContrastiveLoss(model, tree, levels_m=1, temperature=0.05, mini_batch_size=mbs)
        loss = JointLoss(hce, alpha=0.5, n_columns=3) if joint else hce
        results.append(_grads(model, loss, feats, labels, scale=0.5))
    (parts0, total0, named0, cents0), (parts1, total1, named1, cents1) = results
    assert total1 == pytest.approx(total0, rel=1e-5)
    assert sum(parts1.values()) == pytest.approx(sum(parts0.values()), rel=1e-5)
    for k in parts0:
        if k not in ("level_1",):  # the first component carries the gradient; the others are the same values
            assert parts1[k] == pytest.approx(parts0[k], rel=1e-5)
    assert set(named1) == set(named0) and named0
    for n, g in named0.items():
        torch.testing.assert_close(named1[n], g, rtol=1e-4, atol=1e-6)
    for a, b in zip(cents1, cents0, strict=True):  # the centroids' gradients are scaled like the embeddings'
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="mini_batch_size"):
        HierarchicalContrastiveLoss(model, tree, mini_batch_size=0)
