"""Fixtures for the DHR tests: a small sectioned corpus, a store with a document index, tiny encoders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rag_hier import Document, HierStore, Section
from rag_hier.encoders import DenseEncoder
from rag_hier.store.extensions.doc_index import DocumentIndex


@pytest.fixture(scope="session")
def dhr_encoder(tiny_model_path: str) -> DenseEncoder:
    enc = DenseEncoder(tiny_model_path, device="cpu")
    enc.model  # noqa: B018 - load once per session
    return enc


@pytest.fixture(scope="session")
def doc_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second tiny model of another dimension, as a distinct document encoder."""
    from rag_hier.testing import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-doc-model"), dimension=16, seed=7))


def make_docs() -> list[Document]:
    topics = [
        ("rivers", "Rivers", "Rivers carry sediment to the sea.", [("Deltas", ["Deltas form where rivers slow."])]),
        ("glaciers", "Glaciers", "Glaciers are rivers of ice.", [("Valleys", ["They carve U-shaped valleys."])]),
        ("volcano", "Volcanoes", "Magma rises through the crust.", [("Eruptions", ["Ash clouds block the sun."])]),
        ("bees", "Honeybees", "Honeybees live in colonies.", [("Honey", ["Bees turn nectar into honey."])]),
        ("tides", "Tides", "The moon pulls the oceans.", [("Spring tides", ["Spring tides follow full moons."])]),
        ("comets", "Comets", "Comets have icy nuclei.", [("Tails", ["Solar wind pushes the tail away."])]),
    ]
    docs = []
    for doc_id, title, lead, sections in topics:
        docs.append(
            Document(
                doc_id,
                title,
                (lead, f"{title} are studied by scientists."),
                tuple(
                    Section(t, tuple(ps), (Section("Details", (f"More about {t.lower()}.",)),)) for t, ps in sections
                ),
                metadata={"topic": doc_id, "year": len(doc_id)},
            )
        )
    return docs


@pytest.fixture()
def docs() -> list[Document]:
    return make_docs()


@pytest.fixture()
def store(tmp_path: Path, dhr_encoder: DenseEncoder, docs: list[Document]) -> Iterator[HierStore]:
    s = HierStore.create(tmp_path / "store", encoder=dhr_encoder)
    s.add_documents(docs, max_passage_words=0)
    s.add_extension(DocumentIndex())
    yield s
    s.close()
