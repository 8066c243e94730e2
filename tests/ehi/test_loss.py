"""EHILoss against a plain-Python reference; the mined-negative option; the intra gate; mining helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rag_hier.index.ehi import EHIIndexer, LeafAssignment
from rag_hier.training.ehi import EHILoss, triplet
from rag_hier.training.ehi.data import exact_pools, leaf_pools, sample_negatives

GAMMA = 0.3


def _reference(q, p, n, labels, relevant, indexer, lambdas, mined_terms, threshold=0.9):
    """Eq. 2–6 by loops: every (row, negative) pair listed explicitly."""
    q, p, n = (F.normalize(torch.as_tensor(x), dim=-1).double() for x in (q, p, n))
    with torch.no_grad():
        tq, tp, tn = (indexer(x.float()).double() for x in (q, p, n))
    rows = len(q)

    def hinge(a, pos, neg):
        return max(0.0, float(a @ neg - a @ pos) + GAMMA)

    pairs = {"siamese": [], "indexing": [], "intra": []}
    for i in range(rows):
        qi, pi, ni = labels[i]
        for j in range(rows):  # in-batch: other rows' positives, not this row's positive, not relevant to q_i
            pj = labels[j][1]
            if j == i or pj == pi or (qi, pj) in relevant:
                continue
            pairs["siamese"].append(hinge(q[i], p[i], p[j]))
            pairs["indexing"].append(hinge(tq[i], tp[i], tp[j]))
            if float(p[i] @ p[j]) < threshold:
                pairs["intra"].append(hinge(tp[i], tp[i], tp[j]))
        if ni >= 0:
            pairs["siamese"].append(hinge(q[i], p[i], n[i]))
            if mined_terms == "all":
                pairs["indexing"].append(hinge(tq[i], tp[i], tn[i]))
                if float(p[i] @ n[i]) < threshold:
                    pairs["intra"].append(hinge(tp[i], tp[i], tn[i]))
    return {k: w * (float(np.mean(v)) if v else 0.0) for (k, v), w in zip(pairs.items(), lambdas, strict=True)}


def _batch(seed: int = 0, rows: int = 6, dim: int = 8):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((rows, dim)).astype(np.float32)
    p = q + 0.5 * rng.standard_normal((rows, dim)).astype(np.float32)
    n = rng.standard_normal((rows, dim)).astype(np.float32)
    n[2] = p[2] * 3 + 0.01  # a near-duplicate of its positive: gated out of L_intra
    # rows 0 and 1: the same query (index 0) with two relevant documents; row 4 has no mined negative
    labels = [[0, 10, 20], [0, 11, 21], [1, 12, 22], [2, 13, 23], [3, 14, -1], [4, 10, 24]]
    relevant = {(0, 10), (0, 11), (1, 12), (2, 13), (3, 14), (4, 10), (3, 12)}  # q3 also judges doc 12
    return q, p, n, labels[:rows], relevant


@pytest.mark.parametrize("mined_terms", ["all", "siamese"])
@pytest.mark.parametrize(("branching", "height"), [(4, 1), (3, 2)])
def test_loss_matches_the_reference(mined_terms: str, branching: int, height: int) -> None:
    q, p, n, labels, relevant = _batch()
    indexer = EHIIndexer(8, branching, height, seed=0)
    with torch.no_grad():
        for prm in indexer.parameters():
            prm.mul_(3.0)
    lambdas = (0.2, 0.8, 0.5)
    loss = EHILoss(None, indexer, lambdas=lambdas, mined_negative_terms=mined_terms)  # type: ignore[arg-type]
    loss.set_relevance(100, relevant)
    got = loss.compute_loss_from_embeddings(
        [torch.from_numpy(q), torch.from_numpy(p), torch.from_numpy(n)], torch.tensor(labels)
    )
    want = _reference(q, p, n, labels, relevant, indexer, lambdas, mined_terms)
    assert set(got) == {"siamese", "indexing", "intra"}
    for k in want:
        assert float(got[k].detach()) == pytest.approx(want[k], rel=1e-4, abs=1e-6), k


def test_siamese_only_option_changes_only_the_tree_terms() -> None:
    q, p, n, labels, _ = _batch(1)
    indexer = EHIIndexer(8, 4, 1, seed=1)
    args = ([torch.from_numpy(q), torch.from_numpy(p), torch.from_numpy(n)], torch.tensor(labels))
    a = EHILoss(None, indexer, mined_negative_terms="all").compute_loss_from_embeddings(*args)
    s = EHILoss(None, indexer, mined_negative_terms="siamese").compute_loss_from_embeddings(*args)
    assert a["siamese"].detach().item() == pytest.approx(s["siamese"].detach().item())
    assert a["indexing"].detach().item() != pytest.approx(s["indexing"].detach().item())


def test_gradients_reach_encoder_vectors_and_indexer() -> None:
    q, p, n, labels, _ = _batch(2)
    indexer = EHIIndexer(8, 3, 2, seed=2)
    qt, pt, nt = (torch.from_numpy(x).requires_grad_(True) for x in (q, p, n))
    out = EHILoss(None, indexer).compute_loss_from_embeddings([qt, pt, nt], torch.tensor(labels))
    sum(out.values()).backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in (qt, pt, nt))
    assert all(prm.grad is not None for prm in indexer.parameters())


def test_two_columns_and_no_labels() -> None:
    q, p, _, _, _ = _batch(3)
    indexer = EHIIndexer(8, 4, 1, seed=0)
    out = EHILoss(None, indexer, lambdas=(1.0, 1.0, 1.0)).compute_loss_from_embeddings(
        [torch.from_numpy(q), torch.from_numpy(p)]
    )
    qn, pn = F.normalize(torch.from_numpy(q), dim=-1), F.normalize(torch.from_numpy(p), dim=-1)
    s = qn @ pn.T
    mask = ~torch.eye(len(q), dtype=torch.bool)
    want = (triplet(s.diag()[:, None], s, GAMMA) * mask).sum() / mask.sum()
    assert float(out["siamese"]) == pytest.approx(float(want), rel=1e-5)


def test_bad_arguments() -> None:
    indexer = EHIIndexer(8, 4, 1)
    with pytest.raises(ValueError, match="lambdas"):
        EHILoss(None, indexer, lambdas=(1.0, -1.0, 0.0))
    with pytest.raises(ValueError, match="mined_negative_terms"):
        EHILoss(None, indexer, mined_negative_terms="some")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="built without a model"):
        EHILoss(None, indexer)([], None)
    with pytest.raises(ValueError, match="columns"):
        EHILoss(None, indexer).compute_loss_from_embeddings([torch.zeros(2, 8)])


def test_mining_pools_and_sampling() -> None:
    assignment = LeafAssignment(np.array([0, 0, 1, 1, 1, 2]), 3)
    pools = leaf_pools(np.array([[0], [1], [2]]), assignment, [frozenset({0}), frozenset(), frozenset({5})])
    assert [p.tolist() for p in pools] == [[1], [2, 3, 4], []]
    rng = np.random.default_rng(0)
    neg, fallback = sample_negatives(
        pools, np.array([0, 1, 2, 2]), [frozenset({0}), frozenset(), frozenset({5})], 6, rng
    )
    assert neg[0] == 1 and neg[1] in (2, 3, 4)
    assert fallback == 2 and 5 not in neg[2:].tolist()
    c = np.eye(4, dtype=np.float32)
    pools = exact_pools(np.array([[1.0, 0.5, 0.2, 0.0]], np.float32), c, [frozenset({0})], 2)
    assert pools[0].tolist() == [1, 2]
