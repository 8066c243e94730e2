"""The old home of the Tied-Atomic and DSI-atomic configurations: see :mod:`rag_hier.training.tied_atomic.config`.

Kept because scripts outside the package import it (``benchmarks/retrieval/bench_tied_atomic.py``).
"""

from __future__ import annotations

from rag_hier.training.tied_atomic.config import DSIAtomicConfig, TiedAtomicConfig

__all__ = ["DSIAtomicConfig", "TiedAtomicConfig"]
