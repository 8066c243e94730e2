"""Fixtures for the SVDR tests: one tiny vocabulary encoder per session, small corpora, a token store."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_hier import Document, HierStore

TEXTS = [
    "The moon pulls the oceans into two bulges.",
    "Honeybees store nectar as honey in wax cells.",
    "Magma rises through cracks in the crust.",
    "Microbes turn kitchen scraps into humus.",
    "Movable type made books cheaper to produce.",
    "Glaciers carve U-shaped valleys; moraines mark their edges.",
    "Rivers carry sediment to the sea, and deltas form where rivers slow down.",
    "Bees pollinate the blossom of apple trees in spring.",
]


def make_docs() -> list[Document]:
    titles = ["Tides", "Bees", "Volcanoes", "Compost", "Printing", "Glaciers", "Rivers", "Orchards"]
    return [
        Document(f"d{i}", titles[i], (TEXTS[i],), metadata={"n": i, "group": "even" if i % 2 == 0 else "odd"})
        for i in range(len(TEXTS))
    ]


@pytest.fixture(scope="session")
def vocab_encoder(tiny_model_path: str):
    """A VocabEncoder over the tiny random BERT (tied embeddings, MiniLM vocabulary), loaded once."""
    from rag_hier.encoders.vocab import VocabEncoder

    encoder = VocabEncoder(tiny_model_path, device="cpu", batch_size=4)
    encoder.module  # noqa: B018 - load now
    return encoder


@pytest.fixture()
def docs() -> list[Document]:
    return make_docs()


@pytest.fixture()
def token_store(tmp_path: Path, tiny_model_path: str, docs: list[Document]) -> HierStore:
    """A store without dense vectors whose passages are in a token index."""
    from rag_hier.store.extensions.token_index import TokenIndexExtension

    store = HierStore.create(tmp_path / "store", model=None, corpus={"max_passage_words": 0})
    store.add_extension(TokenIndexExtension(model=tiny_model_path))
    store.add_documents(docs, max_passage_words=0, encode=False)
    yield store
    store.close()
