"""Train an EHI tree index on a small corpus with a few queries, attach it to a store, search with ``ehi``.

Usage::

    python examples/ehi_learned_index.py [--steps 8] [--work DIR] [--query "..."]

EHI (End-to-end Hierarchical Indexing) learns a tree of classifiers jointly with the encoder: queries and
passages are routed to leaves, and a search scores only the passages of the ``beam`` leaves a query reaches.
Here the offline all-MiniLM-L6-v2 and a 16-leaf tree (B=4, H=2, k-means warm start) are trained for a few
steps on ``examples/queries.jsonl`` / ``examples/qrels.tsv`` over ``examples/corpus`` (passages of 100 words,
as ``rag-hier index`` splits them), and a fresh indexer is then fitted on the final vectors (``refit_epochs``,
20 epochs with the encoder frozen: seconds; ``docs/ehi.md``); then the trained encoder and indexer are
loaded back from the output directory into a store (the ``ehi`` extension files every passage under its
leaf) and a query is answered by the ``ehi`` strategy, with the measured fraction of passages scored. A few
minutes on an idle 2-core CPU. The same from the command line::

    rag-hier train ehi examples/corpus --queries examples/queries.jsonl --qrels examples/qrels.tsv \\
        --output work/ehi --branching 4 --height 2 --init kmeans --epochs 6 --refresh-every 2 --batch-size 8
    rag-hier index examples/corpus --store work/store --model work/ehi --ehi
    rag-hier search --store work/store --strategy ehi --beam 2 --query "How do bees turn nectar into honey?"
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from rag_hier import HierStore
from rag_hier.corpus import read_corpus, read_qrels, read_queries, split_documents
from rag_hier.encoders import DenseEncoder
from rag_hier.retrieval import Queries, build_retriever
from rag_hier.store.extensions.ehi import EHIExtension
from rag_hier.training.ehi import EHIConfig, EHITrainer

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="training steps (default 8)")
    parser.add_argument("--work", type=Path, default=None, help="where the model goes (default: a temp dir)")
    parser.add_argument("--query", default="How do bees turn nectar into honey?")
    parser.add_argument("--beam", type=int, default=2, help="leaves visited per query (default 2 of 16)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    for noisy in ("transformers", "sentence_transformers", "httpx", "datasets", "faiss"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    work = args.work or Path(tempfile.mkdtemp(prefix="ehi-example-"))
    documents = read_corpus(HERE / "corpus")
    passages = split_documents(documents, 100)
    queries = read_queries(HERE / "queries.jsonl")
    qrels = read_qrels(HERE / "qrels.tsv")
    print(f"{len(documents)} documents, {len(passages)} passages, {len(qrels)} training queries; working in {work}")

    # 1. Train: B=4, H=2 (16 leaves), classifiers warm-started from a k-means tree of the base vectors;
    #    every 2 epochs the passages are re-encoded, reassigned to leaves and hard negatives re-mined.
    config = EHIConfig(
        branching=4,
        height=2,
        init="kmeans",
        epochs=max(1, args.steps),
        refresh_every=2,
        batch_size=8,
        max_steps=args.steps,
        encoder_lr=5e-5,
        max_seq_length=128,
    )
    result = EHITrainer(config=config, device="cpu").train(passages, work / "ehi", queries=queries, qrels=qrels)
    print(f"trained {result.steps} steps in {result.seconds:.0f}s; leaves: {result.leaf_stats}")

    # 2. A store encoded by the trained encoder, with the trained indexer attached: every passage is filed
    #    under its most probable leaf; passages added later are routed by the indexer without retraining.
    store = HierStore.create(work / "store", encoder=DenseEncoder(str(work / "ehi"), device="cpu"))
    store.add_documents(documents, max_passage_words=100, show_progress_bar=False)
    store.add_extension(EHIExtension(work / "ehi"))
    print(f"store: {store.extension('ehi').describe()}")

    # 3. Search: beam search over the tree, exact scores inside the leaves reached.
    (res,) = build_retriever("ehi", store, beam=args.beam).run(Queries(texts=[args.query]), top_k=3)
    print(f"\n{args.query!r}: scored {res.stats['passages_scored']:.0f} passages ({res.stats['fraction_scored']:.0%})")
    for hit in res.hits:
        print(f"  {hit.rank}. {hit.score:.3f}  {hit.passage_id}: {hit.text[:90]}...")
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
