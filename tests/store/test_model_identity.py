"""A store encodes with the model it was built with: other weights at its recorded path, or encoder=, are refused."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from rag_hier import HierStore
from rag_hier.corpus.model import Document
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import ModelMismatchError
from rag_hier.testing import build_tiny_model


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two tiny models of the same shape with different weights."""
    root = tmp_path_factory.mktemp("models")
    return build_tiny_model(root / "a", seed=1), build_tiny_model(root / "b", seed=2)


def _store(path: Path, model: Path) -> HierStore:
    store = HierStore.create(path, encoder=DenseEncoder(str(model), device="cpu"))
    store.add_documents(
        [Document("d1", paragraphs=("tides follow the moon",)), Document("d2", paragraphs=("volcanoes erupt lava",))]
    )
    return store


def test_store_records_the_weights_digest(tmp_path: Path, two_models: tuple[Path, Path]) -> None:
    a, _ = two_models
    _store(tmp_path / "s", a).close()
    enc = HierStore.open(tmp_path / "s").model_info["current"]
    assert enc["model"] == str(a)
    assert isinstance(enc["weights_sha256"], str) and len(enc["weights_sha256"]) == 64


def test_other_weights_at_the_recorded_path_are_refused(tmp_path: Path, two_models: tuple[Path, Path]) -> None:
    a, b = two_models
    model = tmp_path / "model"
    shutil.copytree(a, model)
    _store(tmp_path / "s", model).close()
    # the same shape, other weights, at the path the store recorded
    shutil.rmtree(model)
    shutil.copytree(b, model)
    store = HierStore.open(tmp_path / "s")
    with pytest.raises(ModelMismatchError, match=str(model)):
        store.search("tides", top_k=1)
    store.close()
    # the original weights back: it works again
    shutil.rmtree(model)
    shutil.copytree(a, model)
    with HierStore.open(tmp_path / "s") as store:
        assert store.search("tides", top_k=1)[0].doc_id in {"d1", "d2"}


def test_the_same_weights_elsewhere_are_the_same_model(tmp_path: Path, two_models: tuple[Path, Path]) -> None:
    a, _ = two_models
    _store(tmp_path / "s", a).close()
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    with HierStore.open(tmp_path / "s", encoder=DenseEncoder(str(copy), device="cpu")) as store:
        assert store.search("tides", top_k=1)


def test_encoder_of_another_model_is_refused_unless_allowed(
    tmp_path: Path, two_models: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    a, b = two_models
    _store(tmp_path / "s", a).close()
    with pytest.raises(ModelMismatchError, match="allow_other_model=True"):
        HierStore.open(tmp_path / "s", encoder=DenseEncoder(str(b), device="cpu"))
    with caplog.at_level(logging.WARNING, logger="rag_hier"):
        store = HierStore.open(tmp_path / "s", encoder=DenseEncoder(str(b), device="cpu"), allow_other_model=True)
    assert "allow_other_model=True" in caplog.text
    assert store.encoder is not None and store.encoder.model_name == str(b)
    store.close()
    # the store's own model under its own name is accepted as before
    with HierStore.open(tmp_path / "s", encoder=DenseEncoder(str(a), device="cpu")) as store:
        assert store.search("tides", top_k=1)


def test_a_store_recorded_without_a_digest_keeps_working(
    tmp_path: Path, two_models: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _ = two_models
    with monkeypatch.context() as m:  # a store built before digests were recorded (or a model not on disk)
        m.setattr(DenseEncoder, "weights_digest", lambda self: None)
        _store(tmp_path / "s", a).close()
    with HierStore.open(tmp_path / "s") as store:
        assert store.model_info["current"]["weights_sha256"] is None
        assert store.search("tides", top_k=1)
    with HierStore.open(tmp_path / "s", encoder=DenseEncoder(str(a), device="cpu")) as store:
        assert store.search("tides", top_k=1)
