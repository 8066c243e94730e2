"""rag-hier as the vector store of a LlamaIndex ``VectorStoreIndex``: build, retrieve, persist, reload.

Runs offline on a CPU in well under a minute (the default embedding model is the packaged
all-MiniLM-L6-v2)::

    python examples/llamaindex_backend.py            # works in a temporary directory
    python examples/llamaindex_backend.py ./storage  # keeps the persisted index there
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from llama_index.core import Document, StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.node_parser import SentenceSplitter
from llama_index.embeddings.rag_hier import RagHierEmbedding
from llama_index.retrievers.rag_hier import HierarchicalRetriever
from llama_index.vector_stores.rag_hier import RagHierVectorStore

from rag_hier.corpus import read_corpus, read_qrels

HERE = Path(__file__).resolve().parent
QUESTIONS = ("q1", "q5", "q8")


def load_documents() -> list[Document]:
    """The example corpus (Markdown files) as LlamaIndex documents, one per file."""
    return [
        Document(id_=d.doc_id, text=f"{d.title}\n\n{d.text}", metadata={"title": d.title, **d.metadata})
        for d in read_corpus(HERE / "corpus")
    ]


def load_questions() -> dict[str, str]:
    with (HERE / "queries.jsonl").open(encoding="utf-8") as f:
        queries = {q["_id"]: q["text"] for q in map(json.loads, f)}
    return {qid: queries[qid] for qid in QUESTIONS}


def show(title: str, results: dict[str, list], relevant: dict[str, dict[str, int]]) -> None:
    print(f"\n== {title}")
    for qid, hits in results.items():
        print(f"{qid} (relevant: {', '.join(relevant.get(qid, {}))})")
        for hit in hits:
            snippet = " ".join(hit.node.get_content().split())[:80]
            print(f"  {hit.score:.3f}  {hit.node.ref_doc_id:<16} {snippet}...")


def main(out_dir: Path) -> None:
    embed_model = RagHierEmbedding()  # offline all-MiniLM-L6-v2; query and passage sides
    questions = load_questions()
    relevant = read_qrels(HERE / "qrels.tsv")

    # 1. Build: the store directory holds text, metadata, relationships and vectors (SQLite + FAISS).
    store = RagHierVectorStore()  # a temporary store, like SimpleVectorStore; or RagHierVectorStore("./coll")
    index = VectorStoreIndex.from_documents(
        load_documents(),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
        transformations=[SentenceSplitter(chunk_size=160, chunk_overlap=20)],
    )
    print(f"indexed {len(store.get_nodes())} nodes from {store.client.count_documents()} documents")

    # 2. Retrieve with the index's own retriever and with the rag-hier HierarchicalRetriever.
    retriever = index.as_retriever(similarity_top_k=3)
    first = {qid: retriever.retrieve(q) for qid, q in questions.items()}
    show("VectorStoreIndex.as_retriever()", first, relevant)
    # DHR: the best k1 documents first, then only their nodes; the document index is built on first use
    hier = HierarchicalRetriever.from_index(index, similarity_top_k=3, k1=2, auto_document_index=True)
    show("HierarchicalRetriever (DHR, k1=2)", {qid: hier.retrieve(q) for qid, q in questions.items()}, relevant)

    # 3. Persist (the store lands in <dir>/default__vector_store/) and reload it, as in a new process.
    index.storage_context.persist(persist_dir=str(out_dir))
    reloaded_store = RagHierVectorStore.from_persist_dir(str(out_dir))
    reloaded = load_index_from_storage(
        StorageContext.from_defaults(persist_dir=str(out_dir), vector_store=reloaded_store),
        embed_model=embed_model,
    )
    again = {qid: reloaded.as_retriever(similarity_top_k=3).retrieve(q) for qid, q in questions.items()}
    same = all([h.node.node_id for h in first[q]] == [h.node.node_id for h in again[q]] for q in questions)
    print(f"\npersisted to {out_dir}; reloaded index returns the same nodes: {same}")
    store.close()
    reloaded_store.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="rag-hier-example-") as tmp:
            main(Path(tmp) / "storage")
