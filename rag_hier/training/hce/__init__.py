"""HCE — Hierarchical Corpus Encoder (Chen et al., 2025): hierarchy-aware fine-tuning of dense encoders.

* :class:`HCEConfig` — hyper-parameters (modes, ``b``, ``M``, ``n_NS``, ``τ``, ``α``, EM policy, ...).
* :class:`HierarchicalContrastiveLoss` — the loss, a sentence-transformers loss module; :class:`JointLoss`
  adds ``alpha`` times the unsupervised loss in the same step (HCE-J).
* :class:`HCETrainer` / :func:`train_hce` — EM training on sentence-transformers' trainer; the result is
  a plain sentence-transformers model directory.
* :mod:`rag_hier.training.hce.data` — training items, ICT pseudo-queries, tiered tree negatives.
* :mod:`rag_hier.training.distributed` — in-batch negatives gathered across processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.training.hce.config import HCEConfig
    from rag_hier.training.hce.data import TrainingCorpus, ict_examples, ict_queries, sample_tree_negatives
    from rag_hier.training.hce.loss import HCE_CITATION, HierarchicalContrastiveLoss, JointLoss, ScaledLoss
    from rag_hier.training.hce.trainer import HCEEpoch, HCETrainer, HCETrainingResult, train_hce

# Imported on first use (PEP 562), so that reading the configuration (``rag-hier --help`` builds the
# ``train hce`` parser from HCEConfig) does not import torch through the loss and trainer modules.
_LAZY = {
    "HCEConfig": "config",
    "TrainingCorpus": "data",
    "ict_examples": "data",
    "ict_queries": "data",
    "sample_tree_negatives": "data",
    "HCE_CITATION": "loss",
    "HierarchicalContrastiveLoss": "loss",
    "JointLoss": "loss",
    "ScaledLoss": "loss",
    "HCEEpoch": "trainer",
    "HCETrainer": "trainer",
    "HCETrainingResult": "trainer",
    "train_hce": "trainer",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "HCE_CITATION",
    "HCEConfig",
    "HCEEpoch",
    "HCETrainer",
    "HCETrainingResult",
    "HierarchicalContrastiveLoss",
    "JointLoss",
    "ScaledLoss",
    "TrainingCorpus",
    "ict_examples",
    "ict_queries",
    "sample_tree_negatives",
    "train_hce",
]
