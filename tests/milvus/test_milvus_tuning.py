"""``tune`` on a Milvus collection (Milvus Lite, or the server of ``$RAG_HIER_TEST_MILVUS_URI``): Python, the CLI
and both framework adapters; and kill -9 during the model switch. Skips without ``pymilvus``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("pymilvus")

from rag_hier import Document, HierStore
from rag_hier.testing import translation_collection
from tests.store.contract.base import unique_name
from tests.tuning.conftest import LEARNS, STAYS
from tests.tuning.helpers import COMMON, LEARN_FLAGS, run_cli


@pytest.fixture(autouse=True)
def model_cache(tmp_path, monkeypatch) -> None:
    """Local copies of models stored in Milvus go to the test's own folder."""
    monkeypatch.setenv("RAG_HIER_CACHE", str(tmp_path / "cache"))


def _judged_collection(uri: str, model: str) -> tuple[HierStore, dict, dict]:
    corpus, queries, qrels = translation_collection()
    store = HierStore.create(uri=uri, model=model, corpus={"format": "beir", "max_passage_words": 0})
    store.add_documents([Document(doc_id=d, title="", paragraphs=(t,)) for d, t in corpus.items()], max_passage_words=0)
    return store, queries, {q: dict(r) for q, r in qrels.items()}


def test_tune_adopts_in_one_commit_and_the_cli_and_both_adapters_roll_back(milvus_db, tiny_model_path) -> None:
    uri = f"{milvus_db}#{unique_name('tune')}"
    store, queries, qrels = _judged_collection(uri, tiny_model_path)
    try:
        generation = store.generation
        report = store.tune(queries, qrels, **LEARNS)
        assert report.adopted, report.reason
        assert report.candidate["ndcg@10"] > report.base["ndcg@10"]
        info = store.model_info
        assert info["current"]["stored"] and info["current"]["adopted"]["method"] == report.method
        assert info["previous"]["model"] == tiny_model_path and store.generation == generation + 1
        tuned = store.search("a query", top_k=3)
        store.close()

        code, out, err = run_cli(["tune", "--store", uri, "--rollback"])
        assert code == 0 and "rolled back" in out, (out, err)

        pytest.importorskip("haystack")
        from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

        ds = RagHierDocumentStore(uri=uri)
        assert ds.rollback_model().direction == "forward"  # back to the tuned model
        ds.close()

        pytest.importorskip("llama_index.core")
        from llama_index.vector_stores.rag_hier import RagHierVectorStore

        vs = RagHierVectorStore(uri=uri)
        assert vs.rollback_model(to="original").direction == "original"
        vs.close()
        store = HierStore.open(uri=uri)
        assert store.model_info["current"]["model"] == tiny_model_path
        assert [h.passage_id for h in store.search("a query", top_k=3)] != [] and tuned
    finally:
        store.drop()
        store.close()


def test_the_cli_and_both_adapters_adopt(milvus_db, tiny_model_path, tmp_path) -> None:
    from rag_hier.testing import write_beir

    uri = f"{milvus_db}#{unique_name('tune_front')}"
    store, queries, qrels = _judged_collection(uri, tiny_model_path)
    corpus, _, _ = translation_collection()
    beir = write_beir(tmp_path / "beir", corpus, queries, qrels, split="train")
    store.close()
    try:
        code, out, err = run_cli(["tune", "--store", uri, "--beir", str(beir), *LEARN_FLAGS, *COMMON])
        assert code == 0 and "adopted" in out, (out, err)
        store = HierStore.open(uri=uri)
        first = store.model_info["current"]["model"]
        assert first != tiny_model_path and store.model_info["current"]["adopted"]["forced"] is False
        store.close()

        pytest.importorskip("haystack")
        from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

        ds = RagHierDocumentStore(uri=uri)
        assert ds.tune(queries, qrels, force=True, **STAYS).adopted
        ds.close()
        store = HierStore.open(uri=uri)
        second = store.model_info["current"]["model"]
        assert second != first and store.model_info["previous"]["model"] == first
        store.close()

        pytest.importorskip("llama_index.core")
        from llama_index.vector_stores.rag_hier import RagHierVectorStore

        vs = RagHierVectorStore(uri=uri)
        assert vs.tune(queries, qrels, force=True, **STAYS).adopted
        vs.close()
        store = HierStore.open(uri=uri)
        assert store.model_info["previous"]["model"] == second and store.search("a query", top_k=3)
    finally:
        store = HierStore.open(uri=uri)
        store.drop()
        store.close()


_KILLER = """
import os, signal, sys
from rag_hier import Document, HierStore
from rag_hier.store.milvus import store as milvus_store_module
from rag_hier.testing import translation_collection

uri, model, other, point = sys.argv[1:5]

def step(name):
    if name == point:
        os.kill(os.getpid(), signal.SIGKILL)

corpus, _, _ = translation_collection()
store = HierStore.create(uri=uri, model=model)
store.add_documents([Document(doc_id=d, title="", paragraphs=(t,)) for d, t in corpus.items()], max_passage_words=0)
milvus_store_module._step = step
store.adopt_model(other)
print("no kill at", point)
"""


@pytest.mark.parametrize(
    ("point", "switched"),
    [
        ("switch_encoded", False),
        ("switch_model_installed", False),
        ("switch_before_commit", False),
        ("before_commit", False),
        ("after_commit", True),
    ],
)
def test_kill_9_during_the_switch_leaves_one_models_vectors_searchable(
    milvus_db, tiny_model_path, tmp_path, point: str, switched: bool
) -> None:
    from rag_hier.encoders import DenseEncoder
    from rag_hier.testing import build_tiny_model

    other = str(build_tiny_model(tmp_path / "other", seed=11))
    # the writer is another process, killed; Milvus Lite serves a file to one process: a file of its own
    base = milvus_db if "://" in milvus_db else str(tmp_path / "kill.db")
    uri = f"{base}#{unique_name('kill')}"
    script = tmp_path / "killer.py"
    script.write_text(textwrap.dedent(_KILLER))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, str(script), uri, tiny_model_path, other, point]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, (proc.stdout, proc.stderr[-2000:])
    store = HierStore.open(uri=uri)
    try:
        passages = store.get_passages([p.id for p in store.filter_passages()])
        vectors = np.stack(store.get_embeddings([p.id for p in passages]))
        model = other if switched else tiny_model_path
        want = DenseEncoder(model, device="cpu").encode_documents([p.embedding_text for p in passages])
        np.testing.assert_allclose(vectors, want, atol=1e-5)  # one model's vectors, all of them
        assert bool(store.model_info["previous"]) is switched and store.generation == 1 + switched
        hits = store.search("a query", top_k=5)
        assert len(hits) == 5 and store.count_passages() == len(passages) == store.count_vectors() == 40
    finally:
        store.drop()
        store.close()
