"""Random unit vectors for benchmarks that need no model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` scaled to unit length, in place; returns ``x``."""
    import numpy as np

    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` float32 vectors drawn uniformly on the unit sphere of ``dim`` dimensions."""
    import numpy as np

    return normalize(rng.standard_normal((n, dim), dtype=np.float32))


def mixture(
    n: int, dim: int, *, centers: int = 1000, noise: float = 0.05, seed: int = 0, center_seed: int = 7
) -> np.ndarray:
    """``n`` float32 unit vectors, each a random centre (unit vectors, drawn with ``center_seed``) plus noise.

    Clustered like real embeddings, so that approximate indexes reach a high recall; generated in blocks of
    100,000 (one float64 copy of 1M x 384 would take 3 GB).
    """
    import numpy as np

    c = normalize(np.random.default_rng(center_seed).standard_normal((centers, dim), dtype=np.float32))
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        block = c[rng.integers(centers, size=m)] + noise * rng.standard_normal((m, dim), dtype=np.float32)
        out[start : start + m] = normalize(block)
    return out
