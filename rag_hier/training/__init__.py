"""Trainers, one per method, each a package ``rag_hier.training.<method>`` of the same shape.

=====================  ==============================  ======================================================
method                 configuration                   trainer
=====================  ==============================  ======================================================
HCE                    :class:`HCEConfig`              :class:`HCETrainer` / :func:`train_hce`
EHI                    :class:`EHIConfig`              :class:`EHITrainer` / :func:`train_ehi`
DHR                    :class:`DHRTrainingConfig`      :class:`DHRTrainer`
SVDR                   :class:`SvdrTrainingConfig`     :class:`SvdrTrainer` / :func:`train_svdr`
Tied-Atomic, DSI       :class:`TiedAtomicConfig`,      :class:`TiedAtomicTrainer`, :class:`DSIAtomicTrainer`
                       :class:`DSIAtomicConfig`
=====================  ==============================  ======================================================

Each package holds ``config.py`` (a frozen :class:`TrainingConfig` subclass, importable without NumPy or PyTorch:
``rag-hier train METHOD`` generates its flags from the fields), ``data.py``, ``loss.py`` and ``trainer.py`` (those
it needs). Shared parts: :mod:`rag_hier.training.config` (the base configuration and its field helpers),
:mod:`rag_hier.training.corpus` (:class:`TrainingCorpus`, what every trainer accepts as a corpus) and
``rag_hier._compat.st_training`` (sentence-transformers' training classes, with one error for missing training
extras). Every name here loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.training.config import TrainingConfig, shared_field, train_field
    from rag_hier.training.corpus import CorpusInput, TrainingCorpus, as_training_corpus
    from rag_hier.training.dhr import DHRTrainer, DHRTrainingConfig, DHRTrainingResult
    from rag_hier.training.ehi import EHIConfig, EHITrainer, EHITrainingResult, train_ehi
    from rag_hier.training.hce import HCEConfig, HCETrainer, HCETrainingResult, train_hce
    from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig, SvdrTrainingResult, train_svdr
    from rag_hier.training.tied_atomic import DSIAtomicConfig, DSIAtomicTrainer, TiedAtomicConfig, TiedAtomicTrainer

METHODS: dict[str, str] = {
    "hce": "rag_hier.training.hce",
    "ehi": "rag_hier.training.ehi",
    "dhr": "rag_hier.training.dhr",
    "svdr": "rag_hier.training.svdr",
    "tied-atomic": "rag_hier.training.tied_atomic",
}
"""Training method (as ``rag-hier train`` names it) → its package."""

_LAZY = {
    "TrainingConfig": "config",
    "shared_field": "config",
    "train_field": "config",
    "CorpusInput": "corpus",
    "TrainingCorpus": "corpus",
    "as_training_corpus": "corpus",
    "HCEConfig": "hce",
    "HCETrainer": "hce",
    "HCETrainingResult": "hce",
    "train_hce": "hce",
    "EHIConfig": "ehi",
    "EHITrainer": "ehi",
    "EHITrainingResult": "ehi",
    "train_ehi": "ehi",
    "DHRTrainingConfig": "dhr",
    "DHRTrainer": "dhr",
    "DHRTrainingResult": "dhr",
    "SvdrTrainingConfig": "svdr",
    "SvdrTrainer": "svdr",
    "SvdrTrainingResult": "svdr",
    "train_svdr": "svdr",
    "TiedAtomicConfig": "tied_atomic",
    "TiedAtomicTrainer": "tied_atomic",
    "DSIAtomicConfig": "tied_atomic",
    "DSIAtomicTrainer": "tied_atomic",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "METHODS",
    "CorpusInput",
    "DHRTrainer",
    "DHRTrainingConfig",
    "DHRTrainingResult",
    "DSIAtomicConfig",
    "DSIAtomicTrainer",
    "EHIConfig",
    "EHITrainer",
    "EHITrainingResult",
    "HCEConfig",
    "HCETrainer",
    "HCETrainingResult",
    "SvdrTrainer",
    "SvdrTrainingConfig",
    "SvdrTrainingResult",
    "TiedAtomicConfig",
    "TiedAtomicTrainer",
    "TrainingConfig",
    "TrainingCorpus",
    "as_training_corpus",
    "shared_field",
    "train_ehi",
    "train_field",
    "train_hce",
    "train_svdr",
]
