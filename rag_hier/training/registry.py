"""The trainers as the method registrations name them (:class:`rag_hier.index.methods.TrainSpec`)."""

from __future__ import annotations

import importlib
from typing import Any

from rag_hier.index.methods import TrainSpec, methods

__all__ = ["config_class", "trainer_class", "trainers"]


def trainers() -> dict[str, TrainSpec]:
    """Every registered method with a trainer (``rag-hier train NAME``): name → its :class:`TrainSpec`."""
    return {m.name: m.train for m in methods() if m.train is not None}


def _spec(method: str) -> TrainSpec:
    known = trainers()
    if method not in known:
        raise KeyError(f"no trainer registered for method {method!r}; known: {', '.join(known)}")
    return known[method]


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def trainer_class(method: str) -> type:
    """The trainer class of ``method`` (``"hce"``, ``"tied-atomic"``, ...), imported on first use."""
    return _load(_spec(method).trainer)


def config_class(method: str) -> type:
    """The configuration class of ``method``'s trainer (importable without NumPy or PyTorch)."""
    return _load(_spec(method).config)
