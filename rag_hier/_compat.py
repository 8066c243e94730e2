"""Imports that moved between supported versions of upstream libraries."""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any, NamedTuple


def st_modules() -> ModuleType:
    """sentence-transformers' module classes (``Transformer``, ``Pooling``, ``Normalize``, ...).

    They live in ``sentence_transformers.sentence_transformer.modules`` from 6.0 on and in
    ``sentence_transformers.models`` before (which 6.x still serves, with a deprecation warning).
    """
    try:
        from sentence_transformers.sentence_transformer import modules

        return modules
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import models  # type: ignore[attr-defined,unused-ignore]

        return models


def st_losses() -> ModuleType:
    """sentence-transformers' losses module (``sentence_transformer.losses`` from 6.0 on, ``losses`` before)."""
    try:
        from sentence_transformers.sentence_transformer import losses

        return losses
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import losses as old  # type: ignore[attr-defined,no-redef,unused-ignore]

        return old


class STTraining(NamedTuple):
    """sentence-transformers' training classes, wherever the installed version keeps them."""

    trainer: Any
    """``SentenceTransformerTrainer``."""
    arguments: Any
    """``SentenceTransformerTrainingArguments``."""
    batch_samplers: Any
    """``BatchSamplers``."""
    multi_dataset_batch_samplers: Any
    """``MultiDatasetBatchSamplers``."""
    losses: ModuleType
    """The losses module (:func:`st_losses`)."""
    ir_evaluator: Any
    """``InformationRetrievalEvaluator``."""


def st_training(method: str) -> STTraining:
    """The training classes every rag-hier trainer uses, with one clear error when the training extras are missing.

    Args:
        method: The trainer's name, for the error (``"HCE"``, ``"DHR"``, ...).

    Raises:
        MissingDependencyError: ``accelerate`` or ``datasets`` is not installed.

    """
    from rag_hier.errors import MissingDependencyError

    try:
        import accelerate  # noqa: F401
        import datasets  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"{method} training uses sentence-transformers' trainer, which needs the 'accelerate' and 'datasets' "
            "packages: pip install accelerate datasets (or: pip install 'rag-hier[train]')"
        ) from exc
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    try:
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers, MultiDatasetBatchSamplers
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.training_args import (  # type: ignore[no-redef,import-not-found,unused-ignore]
            BatchSamplers,
            MultiDatasetBatchSamplers,
        )
    try:
        from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.evaluation import (  # type: ignore[no-redef,attr-defined,unused-ignore]
            InformationRetrievalEvaluator,
        )
    return STTraining(
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        BatchSamplers,
        MultiDatasetBatchSamplers,
        st_losses(),
        InformationRetrievalEvaluator,
    )


def embed_columns(model: Any, features: Iterable[dict[str, Any]]) -> list[Any]:
    """Sentence embeddings of every input column (one merged forward pass when sentence-transformers can)."""
    feats = list(features)
    try:
        from sentence_transformers.base.losses.merged_forward import embed_columns as merged
    except ImportError:  # older sentence-transformers: one forward per column
        return [model(f)["sentence_embedding"] for f in feats]
    return list(merged(model, feats))
