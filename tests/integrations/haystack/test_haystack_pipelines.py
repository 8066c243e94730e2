"""Pipelines with rag-hier components: YAML round trip in a fresh interpreter, run_async, the real model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from haystack import Document, Pipeline
from haystack.components.builders import PromptBuilder
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.writers import DocumentWriter
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.embedders.rag_hier import RagHierDocumentEmbedder
from haystack_integrations.components.retrievers.rag_hier import HierarchicalRetriever
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.corpus import read_corpus

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TEMPLATE = """Answer from these passages:
{% for document in documents %}- {{ document.content }}
{% endfor %}Question: {{ query }}"""
DOCS = [
    Document(id="tides", content="The Moon pulls the oceans. Tides rise twice a day. Spring tides are large."),
    Document(id="bees", content="Bees live in colonies. Bees dance to show where flowers are. Honey is stored."),
    Document(id="lava", content="Magma rises through the crust. Volcanoes erupt lava. Ash clouds travel far."),
]
QUERY = "Bees dance to show where flowers are."

FRESH_INTERPRETER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import yaml
    from haystack import Document, Pipeline

    def canonical(data):  # Haystack may list connections in another order after loading
        return {**data, "connections": sorted(data["connections"], key=lambda c: (c["sender"], c["receiver"]))}

    indexing_yaml, query_yaml, docs_json, query = sys.argv[1:5]
    indexing = Pipeline.loads(Path(indexing_yaml).read_text())
    querying = Pipeline.loads(Path(query_yaml).read_text())
    docs = [Document.from_dict(d) for d in json.loads(Path(docs_json).read_text())]
    written = indexing.run({"splitter": {"documents": docs}})["writer"]["documents_written"]
    out = querying.run({"retriever": {"query": query}, "prompt_builder": {"query": query}},
                       include_outputs_from={"retriever"})
    print(json.dumps({
        "written": written,
        "ids": [d.id for d in out["retriever"]["documents"]],
        "prompt": out["prompt_builder"]["prompt"],
        "round_trip": [canonical(p.to_dict()) == canonical(yaml.safe_load(Path(f).read_text()))
                       for p, f in ((indexing, indexing_yaml), (querying, query_yaml))],
        "modules": sorted(m for m in sys.modules if m.startswith(("tests", "test_", "conftest"))),
    }))
    """
)


def canonical(data: dict) -> dict:
    """A pipeline dict with its connections sorted (Haystack may reorder them when loading)."""
    return {**data, "connections": sorted(data["connections"], key=lambda c: (c["sender"], c["receiver"]))}


def indexing_pipeline(store: RagHierDocumentStore, model: str) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("splitter", DocumentSplitter(split_by="period", split_length=1))
    pipeline.add_component("embedder", RagHierDocumentEmbedder(model=model, progress_bar=False))
    pipeline.add_component("writer", DocumentWriter(document_store=store, policy=DuplicatePolicy.OVERWRITE))
    pipeline.connect("splitter.documents", "embedder.documents")
    pipeline.connect("embedder.documents", "writer.documents")
    return pipeline


def query_pipeline(store: RagHierDocumentStore, top_k: int = 2, **dhr: Any) -> Pipeline:
    pipeline = Pipeline()
    retriever = HierarchicalRetriever(document_store=store, top_k=top_k, auto_document_index=True, **dhr)
    pipeline.add_component("retriever", retriever)
    pipeline.add_component(
        "prompt_builder", PromptBuilder(template=TEMPLATE, required_variables=["query", "documents"])
    )
    pipeline.connect("retriever.documents", "prompt_builder.documents")
    return pipeline


@pytest.mark.parametrize("backend", ["local", "milvus"])
def test_yaml_round_trip_in_a_fresh_interpreter(tmp_path, store_path, tiny_model_path, backend):
    if backend == "milvus":  # a Milvus Lite file, first opened by the fresh interpreter, then by this process
        pytest.importorskip("pymilvus")
        pytest.importorskip("milvus_lite")
        location = {"uri": f"{tmp_path / 'pipeline.db'}#dhr"}
    else:
        location = {"path": store_path}
    indexing = indexing_pipeline(RagHierDocumentStore(**location, model=tiny_model_path), tiny_model_path)
    querying = query_pipeline(RagHierDocumentStore(**location, model=tiny_model_path), k1=2, lambda_=0.5)
    files = {"indexing": tmp_path / "indexing.yaml", "query": tmp_path / "query.yaml", "docs": tmp_path / "docs.json"}
    files["indexing"].write_text(indexing.dumps())
    files["query"].write_text(querying.dumps())
    files["docs"].write_text(json.dumps([d.to_dict() for d in DOCS]))
    assert "haystack_integrations.document_stores.rag_hier.document_store.RagHierDocumentStore" in indexing.dumps()
    for key, value in location.items():
        assert f"{key}: {value}" in files["query"].read_text()
    for pipeline in (indexing, querying):  # and in this process too
        assert canonical(Pipeline.loads(pipeline.dumps()).to_dict()) == canonical(pipeline.to_dict())

    env = {k: v for k, v in os.environ.items() if not k.startswith("HAYSTACK_")}  # default allowlist, safe mode
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            FRESH_INTERPRETER,
            str(files["indexing"]),
            str(files["query"]),
            str(files["docs"]),
            QUERY,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["round_trip"] == [True, True]
    assert result["modules"] == []
    assert result["written"] == 9

    # what the fresh interpreter indexed is on disk, and this process retrieves the same
    here = querying.run(
        {"retriever": {"query": QUERY}, "prompt_builder": {"query": QUERY}}, include_outputs_from={"retriever"}
    )
    assert [d.id for d in here["retriever"]["documents"]] == result["ids"]
    assert here["prompt_builder"]["prompt"] == result["prompt"]
    assert here["retriever"]["documents"][0].content.strip() == QUERY
    assert "Question: " + QUERY in result["prompt"]
    assert all(d.meta["source_id"] in {"tides", "bees", "lava"} for d in here["retriever"]["documents"])
    # DHR ran with the saved settings: the parent of every passage is its source document, scores fused
    for d in here["retriever"]["documents"]:
        assert d.meta["parent_document"]["id"] == d.meta["source_id"]
        assert d.score == d.meta["scores"]["passage"] + 0.5 * d.meta["scores"]["document"]
    assert "lambda_: 0.5" in files["query"].read_text() and "k1: 2" in files["query"].read_text()


def test_pipelines_run_async(store_path, tiny_model_path):
    store = RagHierDocumentStore(path=store_path, model=tiny_model_path)
    indexing = indexing_pipeline(store, tiny_model_path)
    written = asyncio.run(indexing.run_async({"splitter": {"documents": DOCS}}))["writer"]["documents_written"]
    assert written == 9
    querying = query_pipeline(store, top_k=3)
    data = {"retriever": {"query": QUERY}, "prompt_builder": {"query": QUERY}}
    async_out = asyncio.run(querying.run_async(data, include_outputs_from={"retriever"}))
    sync_out = querying.run(data, include_outputs_from={"retriever"})
    assert async_out == sync_out
    assert async_out["retriever"]["documents"][0].content.strip() == QUERY
    store.close()


@pytest.mark.real_model
def test_real_model_finds_the_right_document(store_path):
    store = RagHierDocumentStore(path=store_path, model="sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    store.write_corpus(read_corpus(EXAMPLES / "corpus"))
    querying = query_pipeline(store, top_k=3)
    questions = {
        json.loads(line)["_id"]: json.loads(line)["text"]
        for line in (EXAMPLES / "queries.jsonl").read_text().splitlines()
        if line.strip()
    }
    qrels = dict(line.split("\t")[:2] for line in (EXAMPLES / "qrels.tsv").read_text().splitlines()[1:] if line.strip())
    hits = 0
    for qid, text in questions.items():
        docs = querying.run(
            {"retriever": {"query": text}, "prompt_builder": {"query": text}}, include_outputs_from={"retriever"}
        )["retriever"]["documents"]
        hits += docs[0].meta["source_id"] == qrels[qid]
    assert hits >= 0.8 * len(questions)
    store.close()


def test_pep420_namespace_layout():
    """No ``__init__.py`` in the shared namespace folders (haystack-core-integrations' layout)."""
    root = Path(__file__).resolve().parents[3] / "integrations" / "haystack" / "src" / "haystack_integrations"
    for shared in ("", "components", "components/retrievers", "components/embedders", "document_stores"):
        assert not (root / shared / "__init__.py").exists(), shared
    for leaf in ("components/retrievers/rag_hier", "components/embedders/rag_hier", "document_stores/rag_hier"):
        assert (root / leaf / "__init__.py").is_file(), leaf


def test_a_reopened_store_encodes_queries_with_the_embedders_model(tmp_path, tiny_model_path):
    # a normal indexing pipeline: the embedder computes the vectors, the store has no model= of its own
    path = tmp_path / "store"
    indexing = Pipeline()
    indexing.add_component("embedder", RagHierDocumentEmbedder(model=tiny_model_path, progress_bar=False))
    indexing.add_component("writer", DocumentWriter(RagHierDocumentStore(path=str(path))))
    indexing.connect("embedder.documents", "writer.documents")
    docs = [Document(id="t", content="Tides follow the moon."), Document(id="v", content="Volcanoes erupt lava.")]
    indexing.run({"embedder": {"documents": docs}})
    # reopened elsewhere without model=: query text is encoded with the model that embedded the documents
    store = RagHierDocumentStore(path=str(path))
    retriever = HierarchicalRetriever(document_store=store, top_k=1, auto_document_index=True)
    retriever.warm_up()  # loads the recorded model, not the first query
    assert store._query_encoder is not None and store._query_encoder[1].is_loaded
    found = retriever.run(query="Tides follow the moon.")
    assert [d.id for d in found["documents"]] == ["t"]
    # the model's name is recorded, not stored in any document's metadata
    assert all("embedded_by" not in d.meta for d in store.filter_documents())
