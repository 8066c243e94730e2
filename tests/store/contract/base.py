"""What a backend's test class provides to run the contract: a :class:`StoreFactory`, and the fixtures built on it.

A concrete class (``tests/store/test_contract_local.py``, ``tests/milvus/test_contract_milvus.py``) inherits
:class:`~tests.store.contract.StoreContract` and defines one class-scoped fixture, ``factory``, returning its
:class:`StoreFactory`. Every contract test then takes ``store`` (a fresh store holding :data:`DOCS`),
``shared_store`` (the same, shared by the tests of a class that only read), ``vector_store`` (a fresh store
without a model: caller vectors only) or ``factory`` itself (to create or reopen stores).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from rag_hier import Document, HierStore, Section
from rag_hier.errors import StoreError
from rag_hier.store.contract import StoreBackend

HOSTILE = 'x" or 1==1 or meta["k"] == "'
"""A metadata value that would change an expression built by pasting it in."""

BEES_META = {"topic": "animals", "year": 2010, "tags": ["insect", "farm"]}

DOCS: tuple[Document, ...] = (
    Document(
        "tides",
        "Tides",
        ("The moon pulls the oceans and makes tides.",),
        metadata={"topic": "sea", "year": 2001},
    ),
    Document(
        "bees",
        "Honeybees",
        ("Honeybees live in colonies.",),
        sections=(
            Section(
                "Honey",
                ("Bees turn nectar into honey.",),
                (Section("Storage", ("Honey is stored in wax cells.",)),),
            ),
        ),
        metadata=BEES_META,
    ),
    Document(
        "volcano",
        "Volcanoes",
        ("Magma rises through the crust.", "Eruptions can be explosive."),
        metadata={"topic": "earth", "year": 1999, "note": HOSTILE, "path": "C:\\temp\\'q'"},
    ),
)
"""Three documents, six passages (``tides#0``, ``bees#0..2``, ``volcano#0..1``), stored with ``max_passage_words=0``."""


class StoreFactory(Protocol):
    """How a backend's test class makes, reopens and disposes of stores (the only backend-specific code)."""

    reuse_stores: bool
    """Whether tests share stores, emptied between them (for a backend whose stores are slow to create)."""

    def create(self, name: str, **options: Any) -> StoreBackend:
        """A new empty store called ``name`` (unique in the session); ``options`` as ``HierStore.create`` takes them
        (``encoder=``, ``model=None``, ``dimension=``, ``index=``)."""

    def reopen(self, store: StoreBackend, *, read_only: bool = False, **options: Any) -> StoreBackend:
        """Another handle on ``store`` (as another process would open it: same location, encoder unless given)."""

    def copy_of(self, local: HierStore, name: str) -> StoreBackend:
        """A copy of a local store (passages, vectors, extensions), for comparing strategies on identical inputs."""

    def dispose(self, store: StoreBackend) -> None:
        """Close ``store`` (it may be closed already) and remove what it holds."""


_names = itertools.count()


def unique_name(prefix: str = "c") -> str:
    """A collection / directory name not used before in this session (letters, digits and ``_`` only)."""
    return f"{prefix}{next(_names)}"


def _emptied(store: StoreBackend) -> bool:
    """Empty a store for reuse (as created: no passage, document or extension); ``False`` if it cannot be."""
    try:
        if store.read_only:
            return False
        for name in list(store.extensions):
            store.remove_extension(name)
        store.delete_all()
        return store.count_passages() == store.count_documents() == 0 and not store.extensions
    except StoreError:  # closed by the test
        return False


class ContractBase:
    """The fixtures every behaviour class uses; a concrete class adds ``factory``."""

    @pytest.fixture(scope="class")
    @classmethod
    def factory(cls) -> StoreFactory:
        raise NotImplementedError("a backend's contract class defines the `factory` fixture")

    @pytest.fixture(scope="class")
    @classmethod
    def store_pool(cls, factory: StoreFactory) -> Iterator[dict[tuple[Any, ...], list[StoreBackend]]]:
        """Stores a finished test handed back, by creation options (used when ``factory.reuse_stores`` is true)."""
        pool: dict[tuple[Any, ...], list[StoreBackend]] = {}
        yield pool
        for stores in pool.values():
            for s in stores:
                factory.dispose(s)

    @pytest.fixture()
    def make_store(self, factory: StoreFactory, store_pool: dict[tuple[Any, ...], list[StoreBackend]]) -> Iterator[Any]:
        """Create stores (``make_store(**options)``), disposed of (or emptied for reuse) after the test.

        Where creating a store is slow (a Milvus collection waits for its indexes), the factory sets
        ``reuse_stores = True``: a store a test is done with is emptied through the protocol (extensions removed,
        ``delete_all()``) and handed to the next test asking for the same options, as a fresh one would be.
        """
        made: list[tuple[tuple[Any, ...], StoreBackend]] = []
        reuse = bool(getattr(factory, "reuse_stores", False))

        def make(**options: Any) -> StoreBackend:
            key = tuple(sorted((k, id(v) if k == "encoder" else repr(v)) for k, v in options.items()))
            free = store_pool.get(key) if reuse else None
            s = free.pop() if free else factory.create(unique_name(), **options)
            made.append((key, s))
            return s

        yield make
        for key, s in reversed(made):
            if reuse and _emptied(s):
                store_pool.setdefault(key, []).append(s)
            else:
                factory.dispose(s)

    @pytest.fixture()
    def store(self, make_store: Any, encoder: Any) -> StoreBackend:
        """A fresh store with the tiny encoder, holding :data:`DOCS` (tests may change it)."""
        s = make_store(encoder=encoder)
        s.add_documents(list(DOCS), max_passage_words=0)
        return s

    @pytest.fixture(scope="class")
    @classmethod
    def shared_store(cls, factory: StoreFactory, encoder: Any) -> Iterator[StoreBackend]:
        """A store holding :data:`DOCS` that the tests of one class only read."""
        s = factory.create(unique_name("shared"), encoder=encoder)
        s.add_documents(list(DOCS), max_passage_words=0)
        yield s
        factory.dispose(s)

    @pytest.fixture()
    def vector_store(self, make_store: Any) -> StoreBackend:
        """A fresh store without a model, for 4-d caller vectors (a Milvus collection needs its dimension at once)."""
        return make_store(model=None, dimension=4)
