"""The ``fusion`` strategy's parameters, importable without NumPy (``rag-hier search --help`` lists them)."""

from __future__ import annotations

from dataclasses import dataclass

from rag_hier.errors import ParameterError
from rag_hier.retrieval.params import RetrieverParams, param
from rag_hier.retrieval.registry import strategy_names

__all__ = ["FUSION_METHODS", "FusionParams"]

FUSION_METHODS: list[str] = ["rrf", "relative_score", "dbsf", "convex"]
"""The fusion functions' names (:data:`rag_hier.retrieval.fusion.FUSIONS`; ``register_fusion`` adds to both)."""


@dataclass(frozen=True)
class FusionParams(RetrieverParams):
    """Parameters of the ``fusion`` strategy."""

    strategies: tuple[str, ...] = param(
        ("dense", "svdr-lexical"), help="component strategies (default parameters)", flag="--fusion-strategies"
    )
    method: str = param("relative_score", help="fusion function: relative_score, rrf, dbsf or convex", flag="--fusion")
    weights: tuple[float, ...] = param((), help="one weight per component (default: all 1)", flag="--fusion-weights")
    rrf_k: int = param(60, help="rrf: the rank constant k", minimum=1)
    depth: int = param(
        100, help="candidates taken from each component (at least top_k)", minimum=1, flag="--fusion-depth"
    )
    depths: tuple[int, ...] = param((), help="candidates per component (overrides depth)", cli=False)
    keep_zero_scores: bool = param(
        False,
        help="token and sparse components: keep their candidates that score 0 (nothing in common with the query); "
        "by default those are not candidates",
        cli=False,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.method not in FUSION_METHODS:
            raise ParameterError(f"FusionParams.method must be one of {', '.join(FUSION_METHODS)}; got {self.method!r}")
        if "fusion" in self.strategies:
            raise ParameterError("FusionParams.strategies cannot contain 'fusion'")
        unknown = [name for name in self.strategies if name not in strategy_names()]
        if unknown:
            raise ParameterError(
                f"FusionParams.strategies: unknown strategy {unknown[0]!r}; known: {', '.join(strategy_names())}"
            )
