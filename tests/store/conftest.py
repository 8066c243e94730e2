from __future__ import annotations

import pytest

from rag_hier import Document, HierStore, Section
from rag_hier.encoders import DenseEncoder


@pytest.fixture(scope="session")
def tiny_encoder(tiny_model_path: str) -> DenseEncoder:
    enc = DenseEncoder(tiny_model_path, device="cpu")
    enc.model  # noqa: B018 - load once per session
    return enc


@pytest.fixture()
def docs() -> list[Document]:
    return [
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
            metadata={"topic": "animals", "year": 2010},
        ),
        Document(
            "volcano",
            "Volcanoes",
            ("Magma rises through the crust.", "Eruptions can be explosive."),
            metadata={"topic": "earth", "year": 1999},
        ),
    ]


@pytest.fixture()
def store(tmp_path, tiny_encoder: DenseEncoder, docs: list[Document]) -> HierStore:
    s = HierStore.create(tmp_path / "store", encoder=tiny_encoder)
    s.add_documents(docs, max_passage_words=0)
    yield s
    s.close()
