"""SVDR's loss: ``L = L(E(q),E(p)) + ½ L(E(q),T(p)) + ½ L(T(q),E(p))``, each term bidirectional InfoNCE.

:func:`semi_parametric_loss` is the formula; :class:`SemiParametricLoss` the sentence-transformers loss module that
:class:`~rag_hier.training.svdr.trainer.SvdrTrainer` gives sentence-transformers' trainer, over a model whose one
module is :class:`VocabTrainingModule` (the vocabulary encoder, E(x) with gradient and T(x)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rag_hier._compat import st_modules

if TYPE_CHECKING:
    from rag_hier.encoders.vocab import VocabEncoder

__all__ = ["SVDR_CITATION", "SemiParametricLoss", "StepInputs", "VocabTrainingModule", "semi_parametric_loss"]

SVDR_CITATION = """
@article{zhou2024semiparametric,
    title = {Semi-Parametric Retrieval via Binary Token Index},
    author = {Zhou, Jiawei and Dong, Li and Wei, Furu and Chen, Lei},
    journal = {arXiv preprint arXiv:2405.01924},
    year = {2024}
}
"""

# sentence-transformers' module base class (its save/load helpers); a plain torch module before it had one
_STModule: type[nn.Module] = getattr(st_modules(), "Module", nn.Module)

StepInputs = Callable[[Sequence[int]], tuple[list[str], list[str], np.ndarray]]
"""Example indices of a batch → query texts, passage texts (positives first), false-negative mask ``(n, m)``."""


def _bidirectional(
    queries: torch.Tensor, passages: torch.Tensor, false_negatives: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Bidirectional InfoNCE: q→p over all passages, p→q over the queries for the positives (½ each).

    ``passages[i]`` is the positive of ``queries[i]`` for ``i < len(queries)``; ``false_negatives[i, j]``
    masks passage ``j`` out of query ``i``'s negatives.
    """
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


class VocabTrainingModule(_STModule):  # type: ignore[misc,valid-type]
    """A :class:`~rag_hier.encoders.vocab.VocabEncoder` as the one module of a sentence-transformers model.

    It lets sentence-transformers' trainer (and, under torch.distributed, its ``DistributedDataParallel``
    wrapper) run the encoder: ``forward({"texts": [...], "kind": "query" | "document"})`` adds ``"values"``,
    E(x) over the kept vocabulary with gradient, and ``"lexical"``, T(x)
    (:meth:`~rag_hier.encoders.vocab.VocabEncoder.encode_for_training`). The encoder's torch module is this
    module's child, so the trainer moves, wraps and optimises the encoder's own weights.

    Args:
        encoder: The vocabulary encoder (trained in place).

    """

    def __init__(self, encoder: VocabEncoder) -> None:
        super().__init__()
        self.vocab = encoder.module
        self.encoder = encoder

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """E(x) (``"values"``) and T(x) (``"lexical"``) of ``features["texts"]`` encoded as ``features["kind"]``."""
        out = self.encoder.encode_for_training(features["texts"], features["kind"])
        return {**features, "values": out.values, "lexical": out.lexical}

    def save(self, output_path: str, *args: Any, **kwargs: Any) -> None:
        """Write the encoder's directory (:meth:`~rag_hier.encoders.vocab.VocabEncoder.save`)."""
        self.encoder.save(output_path)


class SemiParametricLoss(nn.Module):
    """SVDR's loss as a sentence-transformers loss module: ``L(E(q),E(p)) + ½ L(E(q),T(p)) + ½ L(T(q),E(p))``.

    Args:
        model: A sentence-transformers model whose one module is a :class:`VocabTrainingModule`.
        step_inputs: The batch's texts and false-negative mask from its example indices (drawn when the step
            runs, after the mining callback refreshed the hard negatives).
        temperature: Softmax temperature on raw inner products.

    Requirements:
        The trainer's collator gives each batch's example indices as its labels
        (:class:`~rag_hier.training.svdr.data.ExampleCollator`).

    Inputs:
        +--------------------+------------------------+
        | Texts              | Labels                 |
        +====================+========================+
        | none (drawn here)  | example indices        |
        +--------------------+------------------------+

    The three terms are computed in float32 outside autocast (inner products in the hundreds at temperature 1:
    half precision would blur the softmax); the encoder's forward runs in the trainer's precision. The last
    step's loss and its parts are kept in :attr:`last_loss` and :attr:`last_parts`.

    """

    def __init__(self, model: nn.Module, step_inputs: StepInputs, temperature: float = 1.0) -> None:
        super().__init__()
        self.model = model
        self.step_inputs = step_inputs
        self.temperature = temperature
        self.last_loss = float("nan")
        self.last_parts: dict[str, float] = {}

    def forward(self, features: Sequence[dict[str, Any]], labels: torch.Tensor) -> torch.Tensor:
        """The loss of the batch whose example indices are ``labels`` (``features`` is empty)."""
        q_texts, p_texts, false_neg = self.step_inputs([int(i) for i in labels.tolist()])
        q = self.model({"texts": q_texts, "kind": "query"})
        p = self.model({"texts": p_texts, "kind": "document"})
        values = q["values"]
        mask = torch.as_tensor(false_neg, device=values.device)
        with torch.autocast(device_type=values.device.type, enabled=False):
            loss, parts = semi_parametric_loss(
                values.float(), q["lexical"].float(), p["values"].float(), p["lexical"].float(), mask, self.temperature
            )
        self.last_loss = float(loss.detach())
        self.last_parts = parts
        return loss

    def get_config_dict(self) -> dict[str, Any]:
        """The loss's parameters (for sentence-transformers' model card)."""
        return {"temperature": self.temperature}

    @property
    def citation(self) -> str:
        """BibTeX of the SVDR paper."""
        return SVDR_CITATION
