"""Tied-Atomic: generative retrieval whose docids are tied to the documents' text, so new documents need no training.

Usage::

    python examples/tied_atomic_new_documents.py [--steps 10] [--work DIR] [--base-model t5-small]

1. Train a Tied-Atomic encoder-decoder on the example corpus (``examples/corpus``) and its 8 judged queries
   (``examples/queries.jsonl``, ``examples/qrels.tsv``). Offline, the start is an encoder-decoder
   warm-started from all-MiniLM-L6-v2 (its cross-attention copied from the self-attention, not pretrained, so a
   few steps teach it little); with a model hub, ``--base-model t5-small`` is the paper's setting.
2. Index the corpus with it: the store's passage vectors are the docid embeddings, and
   :class:`~rag_hier.retrieval.generative.TiedAtomicHead` "generates" docids with one decoding step (a dot product
   with every stored vector), ranking exactly as the store's dense search.
3. Add a document the model never saw: it is encoded like any other and is generated at once; an untied
   DSI-atomic model would have to be trained again to give it a useful output row.

The same from the command line::

    rag-hier train tied-atomic examples/corpus --queries examples/queries.jsonl --qrels examples/qrels.tsv \\
        --output work/tied --max-steps 10 --batch-size 8
    rag-hier index examples/corpus --store work/store --model work/tied
    rag-hier search --store work/store --query "how do bees make honey?"
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from rag_hier import DenseRetriever, Document, HierStore
from rag_hier.corpus import read_corpus, read_qrels, read_queries
from rag_hier.encoders import DenseEncoder
from rag_hier.retrieval.generative import TiedAtomicHead
from rag_hier.training.tied_atomic import TiedAtomicConfig, TiedAtomicTrainer

HERE = Path(__file__).resolve().parent

NEW_DOCUMENT = Document(
    "glaciers",
    "Glaciers",
    (
        "A glacier is a slow river of ice. Snow that survives the summer is pressed into firn and then into "
        "dense blue ice, which flows downhill under its own weight and carves U-shaped valleys.",
    ),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    parser.add_argument("--work", type=Path, default=None, help="where the model and store go (default: a temp dir)")
    parser.add_argument("--base-model", default=None, help="an encoder-decoder (default: MiniLM warm start)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

    work = args.work or Path(tempfile.mkdtemp(prefix="tied-atomic-example-"))
    documents = read_corpus(HERE / "corpus")
    queries = read_queries(HERE / "queries.jsonl")
    qrels = read_qrels(HERE / "qrels.tsv")
    print(f"{len(documents)} documents, {len(qrels)} judged queries; working in {work}")

    # 1. Contrastive training: InfoNCE over in-batch and BM25 negatives, raw dot products (the paper's recipe).
    config = TiedAtomicConfig(
        base_model=args.base_model,
        max_steps=args.steps,
        batch_size=8,
        max_seq_length=128,
        max_passage_words=100,  # cut documents as `rag-hier index` does for Markdown
        bm25_depth=3,
    )
    result = TiedAtomicTrainer(config).train(documents, work / "model", queries=queries, qrels=qrels)
    print(f"trained {result.steps} steps in {result.seconds:.0f}s; model in {result.output_dir}")

    # 2. Index: the docid embeddings are the store's passage vectors.
    store = HierStore.create(work / "store", encoder=DenseEncoder(str(work / "model"), device="cpu"))
    store.add_documents(documents, max_passage_words=100)
    head = TiedAtomicHead(store, level="document")
    question = "How do bees turn nectar into honey?"
    print(f"\n{len(head)} docids; generate({question!r}, k=3):")
    for docid, logit in head.generate_scored(question, k=3)[0]:
        print(f"  {docid:<18} logit {logit:8.3f}")
    dense = DenseRetriever(store).search(question, top_k=3, aggregate="doc")
    assert head.generate(question, k=3) == [h.doc_id for h in dense]  # one decoding step = dense search

    # 3. A new document: encode and add it; its docid exists at once.
    store.add_documents([NEW_DOCUMENT], max_passage_words=100)
    question = "How does snow turn into glacier ice?"
    print(f"\nadded {NEW_DOCUMENT.doc_id!r}; now {len(head)} docids; generate({question!r}, k=3):")
    for docid, logit in head.generate_scored(question, k=3)[0]:
        print(f"  {docid:<18} logit {logit:8.3f}")
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
