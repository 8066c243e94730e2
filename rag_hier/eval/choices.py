"""Choices the evaluation offers, importable without NumPy (the CLI's ``--help`` lists them)."""

from __future__ import annotations

from typing import Literal

__all__ = ["PAIRED_TESTS", "PairedTest"]

PairedTest = Literal["t", "randomization"]
PAIRED_TESTS: tuple[str, ...] = ("t", "randomization")
"""The paired tests :func:`rag_hier.eval.compare.compare_systems` runs."""
