from __future__ import annotations

from dataclasses import replace

import pytest

from rag_hier import Document, HierStore
from rag_hier.encoders import DenseEncoder
from tests.store.contract.base import DOCS


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model_path: str) -> DenseEncoder:
    enc = DenseEncoder(tiny_model_path, device="cpu")
    enc.model  # noqa: B018 - load once per session
    return enc


@pytest.fixture()
def docs() -> list[Document]:
    """The contract's :data:`~tests.store.contract.base.DOCS` with only their ``topic`` and ``year`` metadata.

    (The contract's copies carry more: the bees' ``tags``, the volcano's hostile strings.)
    """
    return [replace(d, metadata={k: d.metadata[k] for k in ("topic", "year")}) for d in DOCS]


@pytest.fixture()
def store(tmp_path, tiny_encoder: DenseEncoder, docs: list[Document]) -> HierStore:
    s = HierStore.create(tmp_path / "store", encoder=tiny_encoder)
    s.add_documents(docs, max_passage_words=0)
    yield s
    s.close()
