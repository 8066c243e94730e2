"""EHI — End-to-end Hierarchical Indexing (Kumar et al., 2023): a tree index learned jointly with the encoder.

* :class:`EHIConfig` — hyper-parameters (``B``, ``H``, ``λ``s, learning rates, refresh period, mining, ...).
* :class:`EHILoss` — siamese, indexing and intra-leaf triplet losses (a sentence-transformers loss module
  that owns the :class:`~rag_hier.index.ehi.EHIIndexer`).
* :class:`EHITrainer` / :func:`train_ehi` — training with periodic re-encoding, leaf reassignment and
  hard-negative mining; the result is a sentence-transformers directory plus the indexer files.
* :mod:`rag_hier.training.ehi.data` — training queries, hard-negative pools, sampling.

The indexer itself, its leaf lists and its search live in :mod:`rag_hier.index.ehi`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr
from rag_hier.training.ehi.config import EHIConfig

if TYPE_CHECKING:
    from rag_hier.training.ehi.loss import EHILoss, triplet
    from rag_hier.training.ehi.trainer import EHIPeriod, EHITrainer, EHITrainingResult, train_ehi

# the loss and trainer import torch: loaded on first use, so the CLI's parser stays light
_LAZY = {
    "EHILoss": "loss",
    "triplet": "loss",
    "EHIPeriod": "trainer",
    "EHITrainer": "trainer",
    "EHITrainingResult": "trainer",
    "train_ehi": "trainer",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = ["EHIConfig", "EHILoss", "EHIPeriod", "EHITrainer", "EHITrainingResult", "train_ehi", "triplet"]
