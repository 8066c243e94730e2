"""SVDR's loss: ``L = L(E(q),E(p)) + ½ L(E(q),T(p)) + ½ L(T(q),E(p))``, each term bidirectional InfoNCE."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["semi_parametric_loss"]


def _bidirectional(
    queries: torch.Tensor, passages: torch.Tensor, false_negatives: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Bidirectional InfoNCE: q→p over all passages, p→q over the queries for the positives (½ each).

    ``passages[i]`` is the positive of ``queries[i]`` for ``i < len(queries)``; ``false_negatives[i, j]``
    masks passage ``j`` out of query ``i``'s negatives.
    """
    import torch
    import torch.nn.functional as F

    n = queries.shape[0]
    scores = (queries @ passages.T) / temperature
    scores = scores.masked_fill(false_negatives, -torch.inf)
    target = torch.arange(n, device=scores.device)
    q2p = F.cross_entropy(scores, target)
    p2q = F.cross_entropy(scores[:, :n].T, target)
    return (q2p + p2q) / 2


def semi_parametric_loss(
    eq: torch.Tensor,
    tq: torch.Tensor,
    ep: torch.Tensor,
    tp: torch.Tensor,
    false_negatives: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SVDR's ``L = L(E(q),E(p)) + ½ L(E(q),T(p)) + ½ L(T(q),E(p))``.

    Args:
        eq: E(q), ``(n, V)`` with gradient.
        tq: T(q), ``(n, V)`` binary.
        ep: E(p), ``(m, V)`` with gradient; rows ``0..n-1`` are the positives.
        tp: T(p), ``(m, V)`` binary.
        false_negatives: ``(n, m)`` bool, passages relevant to a query other than its positive.
        temperature: Softmax temperature.

    Returns:
        The loss and its parts (``l_p``, ``l_eq_tp``, ``l_tq_ep``) as floats.

    """
    l_p = _bidirectional(eq, ep, false_negatives, temperature)
    l_eq_tp = _bidirectional(eq, tp, false_negatives, temperature)
    l_tq_ep = _bidirectional(tq, ep, false_negatives, temperature)
    loss = l_p + 0.5 * l_eq_tp + 0.5 * l_tq_ep
    return loss, {"l_p": float(l_p.detach()), "l_eq_tp": float(l_eq_tp.detach()), "l_tq_ep": float(l_tq_ep.detach())}
