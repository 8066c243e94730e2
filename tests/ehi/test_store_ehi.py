"""The ``ehi`` store extension and search strategy: files, incremental writes, bad input, and the CLI round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rag_hier import Document, HierStore
from rag_hier.cli.main import main
from rag_hier.encoders import DenseEncoder
from rag_hier.errors import DimensionMismatchError, ParameterError, StoreCorruptedError, StoreError
from rag_hier.index.ehi import EHIIndexer
from rag_hier.retrieval import Queries, build_retriever
from rag_hier.store.extensions.ehi import EHI_FILES, EHIExtension, _read_leaves


@pytest.fixture(scope="module")
def encoder(tiny_model_path: str) -> DenseEncoder:
    return DenseEncoder(tiny_model_path, device="cpu")


def _docs(corpus: dict[str, str], ids: list[str]) -> list[Document]:
    return [Document(i, "", (corpus[i],)) for i in ids]


def _indexer(store: HierStore, branching: int = 4) -> EHIIndexer:
    vectors = store.vectors(store.rowids_of())
    indexer = EHIIndexer(vectors.shape[1], branching, 1, seed=0)
    indexer.init_kmeans(vectors, seed=0, steps=20)
    return indexer


def test_extension_follows_writes_and_reopens(tmp_path: Path, encoder: DenseEncoder, ehi_corpus: dict) -> None:
    ids = sorted(ehi_corpus)
    store = HierStore.create(tmp_path / "s", encoder=encoder)
    store.add_documents(_docs(ehi_corpus, ids[:40]), max_passage_words=0)
    indexer = _indexer(store)
    indexer.info = {"trained_with": "rag-hier train ehi"}
    store.add_extension(EHIExtension(indexer))
    assert all((tmp_path / "s" / name).is_file() for name in EHI_FILES)
    ext = store.extension("ehi")
    assert isinstance(ext, EHIExtension) and ext.describe()["items"] == 40
    # passages added later are routed by the learned indexer (no retraining); deletes keep the lists exact
    store.add_documents(_docs(ehi_corpus, ids[40:]), max_passage_words=0)
    new_rowids = store.rowids_of(doc_ids=ids[40:])
    expected = indexer.assign(store.vectors(new_rowids))[:, 0]
    got = ext.assignment().leaves[np.searchsorted(ext.rowids, new_rowids), 0]
    np.testing.assert_array_equal(got, expected)
    store.delete_documents(ids[:5])
    np.testing.assert_array_equal(ext.rowids, store.rowids_of())
    leaves_before = ext.assignment().leaves.copy()
    store.close()

    store = HierStore.open(tmp_path / "s", encoder=encoder)
    ext = store.extension("ehi")
    assert isinstance(ext, EHIExtension) and ext.rowids.size == 43
    assert ext.require_indexer().info == {"trained_with": "rag-hier train ehi"}
    np.testing.assert_array_equal(ext.assignment().leaves, leaves_before)
    q = Queries(texts=[ehi_corpus["d7"]])
    # every leaf: exactly the dense ranking; one leaf: fewer passages scored, measured
    full = build_retriever("ehi", store, beam=4).run(q, top_k=5)[0]
    dense = build_retriever("dense", store).run(q, top_k=5)[0]
    assert [h.passage_id for h in full.hits] == [h.passage_id for h in dense.hits]
    assert full.stats["fraction_scored"] == 1.0
    one = build_retriever("ehi", store, beam=1).run(q, top_k=5)[0]
    sizes = ext.assignment().sizes()
    assert one.stats["passages_scored"] in set(sizes.tolist())
    assert one.stats["fraction_scored"] == pytest.approx(one.stats["passages_scored"] / 43)
    store.close()


def test_bad_input_is_one_clear_error(tmp_path: Path, encoder: DenseEncoder, ehi_corpus: dict) -> None:
    store = HierStore.create(tmp_path / "s", encoder=encoder)
    store.add_documents(_docs(ehi_corpus, sorted(ehi_corpus)[:12]), max_passage_words=0)
    with pytest.raises(StoreError, match="no EHI index"):
        build_retriever("ehi", store).run(Queries(texts=["x"]), top_k=3)
    with pytest.raises(DimensionMismatchError, match="16-d, the store's vectors are 32-d"):
        store.add_extension(EHIExtension(EHIIndexer(16, 3, 1, seed=0)))
    assert store.extension("ehi") is None and not (tmp_path / "s" / EHI_FILES[0]).exists()
    store.add_extension(EHIExtension(_indexer(store, 3)))
    with pytest.raises(ParameterError, match=r"beam must be in 1\.\.3"):
        build_retriever("ehi", store, beam=4).run(Queries(texts=["x"]), top_k=3)
    with pytest.raises(ParameterError, match="beam"):
        build_retriever("ehi", store, beam=0)
    store.close()
    assert _read_leaves(tmp_path / "s" / EHI_FILES[2], 3, 1)[0].size == 12

    def leaves_file(rowids: list[int], leaves: list[list[int]], fmt: str = "rag-hier-ehi-leaves") -> Path:
        from safetensors.numpy import save_file

        path = tmp_path / "leaves.safetensors"
        tensors = {"rowids": np.asarray(rowids, np.int64), "leaves": np.asarray(leaves, np.int64)}
        save_file(tensors, str(path), metadata={"format": fmt, "version": "1"})
        return path

    with pytest.raises(StoreCorruptedError, match=r"leaf numbers outside 0\.\.2"):
        _read_leaves(leaves_file([1, 2], [[0], [3]]), 3, 1)
    with pytest.raises(StoreCorruptedError, match="do not fit 2 leaves per passage"):
        _read_leaves(leaves_file([1, 2], [[0], [1]]), 3, 2)
    with pytest.raises(StoreCorruptedError, match="not strictly increasing"):
        _read_leaves(leaves_file([2, 1], [[0], [1]]), 3, 1)
    with pytest.raises(StoreCorruptedError, match="not an EHI leaf-lists file"):
        _read_leaves(leaves_file([1], [[0]], fmt="other"), 3, 1)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with pytest.raises(StoreCorruptedError, match=r"bad\.safetensors"):
        _read_leaves(bad, 3, 1)


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_train_index_search_eval(tmp_path: Path, capsys, tiny_model_path: str, beir_dir: Path) -> None:
    model = tmp_path / "ehi-model"
    code, _, err = _run(
        capsys, "train", "ehi", beir_dir, "--output", model, "--queries", beir_dir / "queries.jsonl",
        "--qrels", beir_dir / "qrels" / "train.tsv", "--base-model", tiny_model_path, "--max-seq-length", "24",
        "--branching", "4", "--epochs", "2", "--batch-size", "8", "--freeze-encoder", "--no-progress",
        "--device", "cpu",
    )  # fmt: skip
    assert code == 0, err
    store = tmp_path / "store"
    # a directory without an indexer: one line, exit 2, nothing stored
    code, _, err = _run(
        capsys, "index", beir_dir, "--store", store, "--model", model, "--ehi", tmp_path, "--no-progress"
    )
    assert code == 2 and "no EHI indexer there" in err and len(err.strip().splitlines()) == 1
    code, out, err = _run(capsys, "index", beir_dir, "--store", store, "--model", model, "--no-progress", "--ehi")
    assert code == 0, err
    assert "ehi: 48 passages in" in out and "(B=4, H=1)" in out
    code, out, err = _run(
        capsys, "search", "--store", store, "--query", "apple river", "--strategy", "ehi", "--beam", "2"
    )
    assert code == 0, err
    assert " 1. " in out
    code, _, err = _run(capsys, "search", "--store", store, "--query", "apple", "--strategy", "ehi", "--beam", "5")
    assert code == 2 and "beam must be in 1..4" in err
    metrics = tmp_path / "m.json"
    code, _, err = _run(
        capsys, "eval", "--store", store, "--queries", beir_dir / "queries.jsonl", "--qrels",
        beir_dir / "qrels" / "train.tsv", "--strategy", "ehi", "--beam", "1", "--output", metrics, "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(metrics.read_text())
    assert 0 < report["fraction_scored"] < 1
    # a passage added later is routed by the learned indexer
    with (beir_dir / "corpus.jsonl").open("a") as f:
        f.write(json.dumps({"_id": "extra", "title": "", "text": "comet planet meadow"}) + "\n")
    code, out, err = _run(capsys, "index", beir_dir, "--store", store, "--no-progress")
    assert code == 0, err
    assert "ehi: 49 passages in" in out
