"""Index the example corpus into a RagHierDocumentStore and ask questions through a Haystack pipeline.

Run from the repository root (needs ``pip install "rag-hier[haystack]"``; runs on CPU in well under a minute
with the default offline all-MiniLM-L6-v2 model)::

    python examples/haystack_pipeline.py              # a temporary store, removed at the end
    python examples/haystack_pipeline.py --store DIR  # keep the store in DIR (reused when run again)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from haystack import Pipeline
from haystack.components.builders import PromptBuilder
from haystack_integrations.components.retrievers.rag_hier import HierarchicalRetriever
from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

from rag_hier.corpus import read_corpus
from rag_hier.encoders import DEFAULT_MODEL

CORPUS = Path(__file__).resolve().parent / "corpus"
QUESTIONS = [
    "Who invented the lens that concentrates lighthouse light into a narrow beam?",
    "Why are there two high tides a day?",
    "How do bees tell each other where the flowers are?",
]
TEMPLATE = """Answer the question using only these passages.
{% for document in documents %}
[{{ loop.index }}] {{ document.meta.title_path | join(" > ") }}: {{ document.content }}
{% endfor %}
Question: {{ query }}
Answer:"""


def build_store(path: str) -> RagHierDocumentStore:
    """Open the store at ``path``, indexing the example corpus into it when it is empty."""
    store = RagHierDocumentStore(path=path, model=DEFAULT_MODEL)
    if store.count_documents() == 0:
        started = time.perf_counter()
        summary = store.write_corpus(read_corpus(CORPUS), max_passage_words=80)
        print(
            f"indexed {summary.documents_added} documents as {summary.passages_added} passages "
            f"in {time.perf_counter() - started:.1f}s"
        )
    return store


def build_pipeline(store: RagHierDocumentStore) -> Pipeline:
    """Retriever (the store's model encodes the question) -> prompt for an LLM of your choice.

    The retriever runs Dense Hierarchical Retrieval: the best documents first (k1 of them), then only their
    passages. ``auto_document_index=True`` builds the store's document index on the first question (it then
    follows every write); ``mode="flat"`` would search all passages instead.
    """
    pipeline = Pipeline()
    pipeline.add_component(
        "retriever", HierarchicalRetriever(document_store=store, top_k=3, k1=2, auto_document_index=True)
    )
    pipeline.add_component(
        "prompt_builder", PromptBuilder(template=TEMPLATE, required_variables=["query", "documents"])
    )
    pipeline.connect("retriever.documents", "prompt_builder.documents")
    return pipeline


def ask(pipeline: Pipeline, question: str) -> None:
    """Run one question and print the retrieved sources (an LLM would take the prompt from here)."""
    result = pipeline.run(
        {"retriever": {"query": question}, "prompt_builder": {"query": question}},
        include_outputs_from={"retriever"},
    )
    documents = result["retriever"]["documents"]
    print(f"\nQ: {question}")
    print(f"A (best passage): {documents[0].content}")
    print("sources:")
    for doc in documents:
        scores, parent = doc.meta["scores"], doc.meta["parent_document"]
        section = " > ".join(parent["title_path"])
        print(
            f"  {doc.score:.3f} (passage {scores['passage']:.3f}, document {scores['document']:.3f})  "
            f"passage {doc.id:<22} doc {parent['id']:<16} {section}"
        )
    print(f"(prompt for the LLM: {len(result['prompt_builder']['prompt'])} characters)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="store directory (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = build_store(args.store or str(Path(tmp) / "store"))
        pipeline = build_pipeline(store)
        for question in QUESTIONS:
            ask(pipeline, question)
        store.close()


if __name__ == "__main__":
    main()
