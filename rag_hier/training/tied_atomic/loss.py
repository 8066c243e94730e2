"""DSI-atomic's ``"docid_softmax"`` objective: cross-entropy over the docids (a sentence-transformers loss)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch.nn.functional as F
from torch import Tensor, nn

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["AtomicDocidLoss"]


class AtomicDocidLoss(nn.Module):
    """Cross-entropy over every docid of ``W_docs · h(x)``: DSI's atomic-docid objective (a sentence-transformers loss).

    Args:
        model: The encoder-decoder SentenceTransformer.
        docid_embeddings: ``W_docs`` (``(n_docids, dim)``), trained with the model.

    Inputs:
        +--------+----------------------------+
        | Texts  | Labels                     |
        +========+============================+
        | (text) | docid index (``0..n-1``)   |
        +--------+----------------------------+

    """

    def __init__(self, model: SentenceTransformer, docid_embeddings: nn.Parameter) -> None:
        super().__init__()
        self.model = model
        self.docid_embeddings = docid_embeddings

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        """The mean cross-entropy of the batch."""
        (features,) = list(sentence_features)
        h = self.model(features)["sentence_embedding"]
        logits = h.float() @ self.docid_embeddings.float().T
        return F.cross_entropy(logits, labels.long().to(logits.device))

    def get_config_dict(self) -> dict[str, Any]:
        """For the model card."""
        return {"num_docids": int(self.docid_embeddings.shape[0])}
