"""Imports that moved between supported versions of upstream libraries."""

from __future__ import annotations

from types import ModuleType
from typing import Any


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


def st_trainer() -> tuple[Any, Any, Any]:
    """sentence-transformers' ``(SentenceTransformerTrainer, SentenceTransformerTrainingArguments, BatchSamplers)``.

    Raises:
        MissingDependencyError: The training extras (``accelerate``, ``datasets``) are not installed.

    """
    from rag_hier.errors import MissingDependencyError

    try:
        import accelerate  # noqa: F401
        import datasets  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            "training uses sentence-transformers' trainer, which needs the 'accelerate' and 'datasets' packages: "
            "pip install 'rag-hier[train]'"
        ) from exc
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    try:
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.training_args import BatchSamplers  # type: ignore[no-redef,import-not-found,unused-ignore]
    return SentenceTransformerTrainer, SentenceTransformerTrainingArguments, BatchSamplers


def st_losses() -> ModuleType:
    """sentence-transformers' losses module (``sentence_transformer.losses`` from 6.0 on, ``losses`` before)."""
    try:
        from sentence_transformers.sentence_transformer import losses

        return losses
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers import losses as old  # type: ignore[attr-defined,no-redef,unused-ignore]

        return old
