"""SVDR: semi-parametric contrastive training of a vocabulary encoder (:class:`SvdrTrainer`).

Zhou, Dong, Wei, Chen, "Semi-Parametric Retrieval via Binary Token Index" (arXiv 2405.01924). One
:class:`~rag_hier.encoders.vocab.VocabEncoder` (shared by queries and passages) is trained with

    L = L_p + L_sp,   L_p = L(E(q), E(p)),   L_sp = ½ L(E(q), T(p)) + ½ L(T(q), E(p)),

where E is the sparsified vocabulary vector (top-k ∪ own tokens, exactly as at search time), T the binary
bag of tokens, and L the bidirectional contrastive loss of the reference code: query → passage softmax
over every passage of the batch (positives, in-batch and hard negatives) plus passage → query softmax
over the batch's queries for the positives, averaged, at temperature ``temperature`` on raw inner
products (1, as the reference). A passage that is relevant to another query of the batch is masked out
of that query's negatives.

Hard negatives follow the paper's schedule by default (``negative_schedule="paper"``): **BM25** negatives
(bm25s over the training corpus) for the first half of training, then negatives retrieved during training
by **β search** ⟨E(q), T(D)⟩ over a binary token index of the training corpus. The index is built once by
tokenization and never rebuilt as the model changes, so β negatives come from the *current* model for the
price of encoding the batch's queries (``mining="batch"``; ``"epoch"`` mines every query once per epoch).
Each query draws ``hard_negatives`` passages at random from its top ``negative_depth`` (20) candidates that
are not relevant: where answer strings are given, a candidate containing one is dropped (the paper's
filter); otherwise, and always, documents judged relevant to the query are. ``negative_schedule="beta"``
mines with β search from the first step (this library's behaviour before 0.2, with ``negative_depth=30``).

Differences from the reference: one shared encoder (the paper's svdr-hlp setting; the NQ/MS MARCO
checkpoints use two), masked max-pooling, and three loss terms as the paper writes them (the reference
code averages four, pairing sparsified with unsparsified vectors).

* :class:`SvdrTrainingConfig` (:mod:`~rag_hier.training.svdr.config`) — hyper-parameters.
* :mod:`~rag_hier.training.svdr.data` — examples, batches without a repeated query or document, the collator.
* :func:`semi_parametric_loss`, :class:`SemiParametricLoss` (:mod:`~rag_hier.training.svdr.loss`) — the loss, and
  the loss module sentence-transformers' trainer runs over the encoder wrapped as a sentence-transformers module.
* :class:`SvdrMiningCallback` (:mod:`~rag_hier.training.svdr.mining`) — the negative schedule as a trainer callback:
  BM25 or β-mined negatives refreshed before each step with the current model.
* :class:`SvdrTrainer`, :func:`train_svdr` (:mod:`~rag_hier.training.svdr.trainer`) — training on
  sentence-transformers' trainer (fp16/bf16, torch.distributed) and the saved directory (``training.json`` next to
  the model).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr
from rag_hier.training.svdr.config import SvdrTrainingConfig

if TYPE_CHECKING:
    from rag_hier.training.svdr.loss import SemiParametricLoss, semi_parametric_loss
    from rag_hier.training.svdr.mining import SvdrMiningCallback
    from rag_hier.training.svdr.trainer import TRAINING_INFO, SvdrTrainer, SvdrTrainingResult, train_svdr

# the loss and trainer import NumPy and torch: loaded on first use, so the CLI's parser stays light
_LAZY = {
    "semi_parametric_loss": "loss",
    "SemiParametricLoss": "loss",
    "SvdrMiningCallback": "mining",
    "TRAINING_INFO": "trainer",
    "SvdrTrainer": "trainer",
    "SvdrTrainingResult": "trainer",
    "train_svdr": "trainer",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "TRAINING_INFO",
    "SemiParametricLoss",
    "SvdrMiningCallback",
    "SvdrTrainer",
    "SvdrTrainingConfig",
    "SvdrTrainingResult",
    "semi_parametric_loss",
    "train_svdr",
]
