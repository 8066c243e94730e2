"""The store contract suite: one class per behaviour of :class:`~rag_hier.store.contract.StoreBackend`.

A backend runs it with one test class inheriting :class:`StoreContract` and defining a class-scoped ``factory``
fixture (a :class:`~tests.store.contract.base.StoreFactory`: create, reopen, copy a local store, dispose):
``tests/store/test_contract_local.py`` (the local store) and ``tests/milvus/test_contract_milvus.py`` (Milvus
Lite). The behaviour classes use the public protocol only (no backend class, no private attribute).
"""

from __future__ import annotations

from .bad_inputs import BadInputsContract
from .base import DOCS, ContractBase, StoreFactory, unique_name
from .crash import CrashPointsContract
from .deletes import DeletesContract
from .extensions import ExtensionsContract
from .filters import FiltersContract, RefinedFiltersContract
from .generations import GenerationsContract
from .search import SearchContract
from .updates import UpdatesContract
from .writes import WritesContract

__all__ = [
    "DOCS",
    "BadInputsContract",
    "ContractBase",
    "CrashPointsContract",
    "DeletesContract",
    "ExtensionsContract",
    "FiltersContract",
    "GenerationsContract",
    "RefinedFiltersContract",
    "SearchContract",
    "StoreContract",
    "StoreFactory",
    "UpdatesContract",
    "WritesContract",
    "unique_name",
]


class StoreContract(
    WritesContract,
    UpdatesContract,
    DeletesContract,
    FiltersContract,
    RefinedFiltersContract,
    SearchContract,
    GenerationsContract,
    CrashPointsContract,
    ExtensionsContract,
    BadInputsContract,
):
    """Every behaviour at once (a backend's test class inherits this, or the behaviour classes it supports)."""
