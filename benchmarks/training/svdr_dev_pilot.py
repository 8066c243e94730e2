"""Pilot for choosing SVDR training settings on a dev split of SciFact *train* queries (never the test set).

Usage::

    python benchmarks/svdr_dev_pilot.py LR TEMPERATURE MINUTES BATCH_SIZE [--untrained]

Holds out 100 of the 809 judged SciFact train queries (shuffled with seed 0), trains the offline MiniLM
as an SVDR encoder on the rest for MINUTES, and prints β search nDCG@10 / Recall@100 on the held-out
queries (with ``--untrained`` also before training). β needs only the binary token index and the
queries' E(q), so each evaluation takes seconds.
"""

from __future__ import annotations

import argparse
import logging
import random
from pathlib import Path

import numpy as np
import torch

from rag_hier.corpus.model import split_document
from rag_hier.corpus.readers import read_beir_corpus, read_qrels, read_queries
from rag_hier.encoders import DEFAULT_MODEL
from rag_hier.encoders.vocab import VocabEncoder
from rag_hier.eval import evaluate
from rag_hier.index.token import TokenIndex
from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig

DATA = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lr", type=float)
    parser.add_argument("temperature", type=float)
    parser.add_argument("minutes", type=float)
    parser.add_argument("batch_size", type=int)
    parser.add_argument("--untrained", action="store_true")
    parser.add_argument("--data", default=DATA, help="the SciFact folder (default ../shared/data/scifact)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    docs = read_beir_corpus(args.data)
    queries = read_queries(args.data)
    qrels = read_qrels(f"{args.data}/qrels/train.tsv")
    qids = sorted(qrels)
    random.Random(0).shuffle(qids)
    dev, train = qids[:100], qids[100:]
    encoder = VocabEncoder(DEFAULT_MODEL, selection_precision="bfloat16")
    texts = [split_document(d, 0)[0].embedding_text for d in docs]
    index = TokenIndex(encoder.binarizer)
    index.add_texts(np.arange(len(texts)), texts)

    def beta_dev(tag: str) -> None:
        scores, ids = index.search(encoder.encode_queries([queries[q] for q in dev]), 100)
        run = {
            q: {docs[int(j)].doc_id: float(x) for x, j in zip(srow, irow, strict=True)}
            for q, srow, irow in zip(dev, scores, ids, strict=True)
        }
        metrics = evaluate(run, {q: qrels[q] for q in dev}, ("ndcg@10", "recall@100"))
        print(f"PILOT {tag} lr={args.lr} temp={args.temperature} bs={args.batch_size}: {metrics}", flush=True)

    if args.untrained:
        beta_dev("untrained")
    config = SvdrTrainingConfig(
        batch_size=args.batch_size,
        learning_rate=args.lr,
        temperature=args.temperature,
        max_seconds=args.minutes * 60,
        log_every=5,
    )
    trainer = SvdrTrainer.from_documents(encoder, docs, queries, {q: qrels[q] for q in train}, config=config)
    result = trainer.train()
    print("PILOT result", result.steps, result.seconds, result.mining_seconds, result.last_loss, flush=True)
    beta_dev("trained")


if __name__ == "__main__":
    main()
