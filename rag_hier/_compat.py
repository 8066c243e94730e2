"""Imports that moved between supported versions of upstream libraries."""

from __future__ import annotations

from types import ModuleType


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
