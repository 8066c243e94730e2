"""The library's exceptions: one base class, specific subclasses that name what went wrong."""

from __future__ import annotations

__all__ = [
    "CapabilityError",
    "CorpusFormatError",
    "DimensionMismatchError",
    "DuplicateIdError",
    "FilterError",
    "InvalidInputError",
    "MissingDependencyError",
    "ModelMismatchError",
    "ParameterError",
    "RagHierError",
    "StoreCorruptedError",
    "StoreError",
]


class RagHierError(Exception):
    """Base class of every error raised by rag-hier."""


class CorpusFormatError(RagHierError, ValueError):
    """A corpus, queries or qrels file is malformed; the message names the file and line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


class StoreError(RagHierError):
    """A store operation cannot be carried out (bad argument, missing store, read-only store, ...)."""


class StoreCorruptedError(StoreError):
    """A store directory fails its consistency checks (manifest, counts or checksums)."""


class DimensionMismatchError(StoreError, ValueError):
    """Vectors or a model whose dimension differs from the store's."""


class ModelMismatchError(StoreError):
    """A model that is not the one a store was built with (other weights at its recorded path, or encoder=)."""


class ModelChangedError(StoreError):
    """A switch of a store's model refused: the store's model is no longer the one the caller measured."""


class CapabilityError(StoreError):
    """A store lacks an optional capability an operation needs (:mod:`rag_hier.store.capabilities`).

    The message names the operation, the capability, its missing members and the store's type.
    """


class DuplicateIdError(StoreError, ValueError):
    """A write with ``policy="fail"`` met an id that is already stored."""


class FilterError(RagHierError, ValueError):
    """A metadata filter is malformed or compares incompatible types."""


class InvalidInputError(RagHierError, ValueError, TypeError):
    """An argument of the wrong type or value (a document id, metadata, a parameter); the message names it.

    It is both a :class:`ValueError` and a :class:`TypeError` (as numpy's ``AxisError`` is both a
    ``ValueError`` and an ``IndexError``), so callers catching either builtin keep working.
    """


class MissingDependencyError(RagHierError, ImportError):
    """An optional dependency is not installed; the message says which extra provides it."""


class ParameterError(RagHierError, ValueError):
    """A parameter (of a strategy, an index or a search) is unknown, of the wrong type or out of range.

    The message names it, the value given and what is allowed.
    """
