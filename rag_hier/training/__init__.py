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
it needs). Every trainer has one shape (:mod:`rag_hier.training.base`): ``Trainer(config, *, model=None,
device=None, show_progress_bar=None)``, ``trainer.train(corpus, output_dir, queries=..., qrels=..., ...)`` returning
a :class:`TrainingResult`. A method's registration (:class:`rag_hier.index.methods.TrainSpec`) names its trainer
and configuration; :func:`trainer_class` and :func:`config_class` load them by method name.

Shared parts: :mod:`rag_hier.training.config` (the base configuration and its field helpers),
:mod:`rag_hier.training.corpus` (:class:`TrainingCorpus`, what every trainer accepts as a corpus),
:mod:`rag_hier.training.arguments` (:func:`training_arguments`, the one builder of the trainers' training
arguments), :mod:`rag_hier.training.time_limit` (:class:`TimeLimit`, the one wall-clock limit) and
``rag_hier._compat.st_training`` (sentence-transformers' training classes, with one error for missing training
extras). Every name here loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr

if TYPE_CHECKING:
    from rag_hier.training.arguments import training_arguments
    from rag_hier.training.base import Trainer, TrainingResult
    from rag_hier.training.config import TrainingConfig, shared_field, train_field
    from rag_hier.training.corpus import CorpusInput, TrainingCorpus, as_training_corpus
    from rag_hier.training.dhr import DHRTrainer, DHRTrainingConfig, DHRTrainingResult
    from rag_hier.training.ehi import EHIConfig, EHITrainer, EHITrainingResult, train_ehi
    from rag_hier.training.hce import HCEConfig, HCETrainer, HCETrainingResult, train_hce
    from rag_hier.training.registry import config_class, trainer_class, trainers
    from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig, SvdrTrainingResult, train_svdr
    from rag_hier.training.tied_atomic import (
        DSIAtomicConfig,
        DSIAtomicTrainer,
        TiedAtomicConfig,
        TiedAtomicTrainer,
        TiedAtomicTrainingResult,
    )
    from rag_hier.training.time_limit import TimeLimit

_LAZY = {
    "training_arguments": "arguments",
    "Trainer": "base",
    "TrainingResult": "base",
    "config_class": "registry",
    "trainer_class": "registry",
    "trainers": "registry",
    "TimeLimit": "time_limit",
    "TiedAtomicTrainingResult": "tied_atomic",
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
    "TiedAtomicTrainingResult",
    "TimeLimit",
    "Trainer",
    "TrainingConfig",
    "TrainingCorpus",
    "TrainingResult",
    "as_training_corpus",
    "config_class",
    "shared_field",
    "train_ehi",
    "train_field",
    "train_hce",
    "train_svdr",
    "trainer_class",
    "trainers",
    "training_arguments",
]
