"""Strategy parameters: the base dataclass, ``param()``, and the parameters of the built-in strategies.

Importable without NumPy: ``rag-hier search --help`` builds its flags from these dataclasses, and the registry
(:mod:`rag_hier.retrieval.registry`) names each strategy's parameters here (``fusion``'s in
:mod:`rag_hier.retrieval.fusion_params`), so listing strategies and their parameters loads no retriever. Each
retriever module re-exports its own (``rag_hier.retrieval.dense.DenseParams``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from rag_hier.errors import ParameterError
from rag_hier.index.kinds import SearchMethod

__all__ = [
    "DEFAULT_K1",
    "DEFAULT_LAMBDA",
    "EHI_DEFAULT_BEAM",
    "HIERARCHICAL_MODES",
    "SVDR_MODES",
    "TREE_DEFAULT_BEAM",
    "BM25Params",
    "DenseParams",
    "EHIParams",
    "HierarchicalMode",
    "HierarchicalParams",
    "RetrieverParams",
    "SparseEmbeddingParams",
    "SvdrMode",
    "SvdrParams",
    "TreeParams",
    "param",
]

P = TypeVar("P", bound="RetrieverParams")

HierarchicalMode = Literal["serial", "parallel"]
HIERARCHICAL_MODES: tuple[str, ...] = ("serial", "parallel")
DEFAULT_K1 = 500
"""Documents kept by DHR's first stage. Measured (docs/dhr.md): on 1M passages in 50k documents, k1=500 keeps
flat search's top-1 accuracy at 8x its speed (k1=100, the paper's NQ setting, loses 3 points of top-10)."""
DEFAULT_LAMBDA = 0.0
"""Weight of the document score in DHR's fused score. Measured (docs/dhr.md): with one shared cosine encoder,
λ > 0 never helped on XQuAD-en (untrained or DHR-trained) nor on the synthetic corpus."""
TREE_DEFAULT_BEAM = 8
"""Nodes kept per tree level when no beam is given (``tree``)."""
EHI_DEFAULT_BEAM = 12
"""Leaves visited per query when no beam is given (``ehi``)."""
SvdrMode = Literal["full", "alpha", "beta", "beta-rerank", "lexical"]
SVDR_MODES: tuple[str, ...] = ("full", "alpha", "beta", "beta-rerank", "lexical")


# ----------------------------------------------------------------------------------------------------
# parameters
# ----------------------------------------------------------------------------------------------------
def param(
    default: Any,
    *,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    flag: str | None = None,
    cli: bool = True,
) -> Any:
    """Declare a strategy parameter: its default, one line of help and its bounds.

    Args:
        default: The default value (its type, with the annotation, is checked on construction).
        help: One line for ``--help`` and the docs.
        minimum: Smallest allowed value (numbers).
        maximum: Largest allowed value (numbers).
        flag: The ``rag-hier`` flag (default ``--`` + the name with dashes); for a ``bool`` that defaults to
            true, a ``--no-...`` flag turns it off.
        cli: Whether ``rag-hier search/eval`` offers a flag for it.

    """
    return field(
        default=default, metadata={"help": help, "minimum": minimum, "maximum": maximum, "flag": flag, "cli": cli}
    )


@dataclass(frozen=True)
class RetrieverParams:
    """Base of the frozen parameter dataclasses of strategies; validates every field when built.

    Annotations drive the checks: ``int`` (not ``bool``), ``float`` (finite; ints accepted), ``str``,
    ``bool``, ``X | None``, ``Literal[...]`` (one of the values), ``tuple[str, ...]``; ``param(minimum=,
    maximum=)`` bounds numbers.
    """

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = _check_value(type(self).__name__, f.name, getattr(self, f.name), hints[f.name], f.metadata)
            object.__setattr__(self, f.name, value)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The parameter names."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_mapping(cls: type[P], data: Mapping[str, Any] | None, *, where: str = "parameters") -> P:
        """Build from a mapping, naming unknown keys (``where``: how the caller calls the mapping)."""
        data = dict(data or {})
        unknown = sorted(set(data) - set(cls.field_names()))
        if unknown:
            known = ", ".join(cls.field_names()) or "none"
            raise ParameterError(f"{where}: unknown parameter(s) {', '.join(unknown)}; this strategy takes {known}")
        return cls(**data)

    def replace(self: P, **changes: Any) -> P:
        """A copy with ``changes`` (validated)."""
        unknown = sorted(set(changes) - set(self.field_names()))
        if unknown:
            raise ParameterError(
                f"unknown parameter(s) {', '.join(unknown)}; expected among {', '.join(self.field_names())}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _check_value(owner: str, name: str, value: Any, hint: Any, meta: Mapping[str, Any]) -> Any:
    where = f"{owner}.{name}"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        if value not in args:
            raise ParameterError(f"{where} must be one of {', '.join(map(repr, args))}; got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ParameterError(f"{where} must be a list, got {value!r}")
        return tuple(_check_value(owner, name, v, args[0], {}) for v in value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ParameterError(f"{where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ParameterError(f"{where} must be an integer, got {value!r}")
        value = int(value)
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ParameterError(f"{where} must be a finite number, got {value!r}")
        value = float(value)
    elif hint is str:
        if not isinstance(value, str):
            raise ParameterError(f"{where} must be a string, got {value!r}")
        return value
    else:  # pragma: no cover - a strategy declared a type this check does not know
        return value
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if lo is not None and value < lo:
        raise ParameterError(f"{where} must be >= {lo:g}, got {value!r}")
    if hi is not None and value > hi:
        raise ParameterError(f"{where} must be <= {hi:g}, got {value!r}")
    return value


@dataclass(frozen=True)
class DenseParams(RetrieverParams):
    """The ``dense`` strategy has no parameters of its own (the index's own, e.g. ``nprobe``, live in the store)."""


@dataclass(frozen=True)
class HierarchicalParams(RetrieverParams):
    """Parameters of the ``hierarchical`` strategy (DHR)."""

    k1: int = param(DEFAULT_K1, help="documents kept by the document-level search (serial mode)", minimum=1)
    lambda_: float = param(
        DEFAULT_LAMBDA, help="weight of the document score in passage + lambda * document", flag="--lambda"
    )
    mode: HierarchicalMode = param(
        "serial",
        help="serial = passages of the top-k1 documents only (DHR, fast); parallel = all passages fused with "
        "their document's score",
        flag="--hierarchical-mode",
    )
    extension: str = param("doc-index", help="name of the document-index extension", cli=False)
    gather_max: int = param(
        65_536,
        help="serial pools up to this many passages are scored by gathering their vectors (exact over any index)",
        minimum=0,
        cli=False,
    )


@dataclass(frozen=True)
class TreeParams(RetrieverParams):
    """Parameters of the ``tree`` strategy."""

    beam: int = param(
        TREE_DEFAULT_BEAM,
        help="nodes kept per tree level; a beam as wide as the widest level scores every passage",
        minimum=1,
    )


@dataclass(frozen=True)
class EHIParams(RetrieverParams):
    """Parameters of the ``ehi`` strategy."""

    beam: int | None = param(
        None,
        help=f"leaves visited per query, 1..B^H (default: {EHI_DEFAULT_BEAM}, at most B^H); B^H scores every passage",
        minimum=1,
    )


@dataclass(frozen=True)
class SvdrParams(RetrieverParams):
    """Parameters of the SVDR strategies (``mode`` is fixed by each ``svdr-*`` strategy name)."""

    mode: SvdrMode = param("beta-rerank", help="full, alpha, beta, beta-rerank or lexical", cli=False)
    rerank_m: int = param(100, help="svdr-beta-rerank: beta candidates re-ranked per query", minimum=1)
    vocab_model: str | None = param(
        None,
        help="vocabulary encoder: a `rag-hier train svdr` output or any BERT-family model "
        "(default: the store's model, else its token index's)",
    )
    cache: bool = param(
        True, help="write the passage vectors E(d) computed during search into the store", flag="--no-cache"
    )
    encode_missing: bool = param(
        True, help="full and alpha search: encode the E(d) that are missing (else raise)", cli=False
    )
    method: SearchMethod = param("auto", help="sparse product strategy (same results)", cli=False)


@dataclass(frozen=True)
class BM25Params(RetrieverParams):
    """Parameters of the ``bm25`` strategy (flags ``--bm25-k1``/``--bm25-b``: DHR's ``--k1`` is another thing)."""

    k1: float = param(1.5, help="BM25 term-frequency saturation", minimum=0.0, flag="--bm25-k1")
    b: float = param(
        0.75, help="BM25 length normalisation (0: none, 1: full)", minimum=0.0, maximum=1.0, flag="--bm25-b"
    )


@dataclass(frozen=True)
class SparseEmbeddingParams(RetrieverParams):
    """The ``sparse-embedding`` strategy has no parameters."""
