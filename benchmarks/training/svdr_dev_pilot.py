"""Pilot for choosing SVDR training settings on a dev split of SciFact *train* queries (never the test set).

Usage::

    python -m benchmarks.training.svdr_dev_pilot LR TEMPERATURE MINUTES BATCH_SIZE [--untrained] [--bf16]

Holds out 100 (``--dev-queries``) of the 809 judged SciFact train queries (shuffled with seed 0; the data folder as
in ``benchmarks/README.md``), trains the offline MiniLM (``--model``) as an SVDR encoder on the rest for MINUTES,
and prints β search nDCG@10 / Recall@100 on the held-out queries (with ``--untrained`` also before training). β
needs only the binary token index and the queries' E(q), so each evaluation takes seconds.
"""

from __future__ import annotations

import argparse
import logging
import random

from benchmarks.common.data import add_data_argument, load_scifact


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lr", type=float)
    parser.add_argument("temperature", type=float)
    parser.add_argument("minutes", type=float)
    parser.add_argument("batch_size", type=int)
    parser.add_argument("--untrained", action="store_true")
    add_data_argument(parser)
    parser.add_argument("--model", default=None, help="the starting model (default: the offline all-MiniLM-L6-v2)")
    parser.add_argument("--dev-queries", type=int, default=100, help="training queries held out as the dev split")
    parser.add_argument("--max-steps", type=int, default=None, help="also stop after this many steps")
    parser.add_argument("--bf16", action="store_true", help="train in bfloat16 mixed precision")
    args = parser.parse_args(argv)
    import numpy as np
    import torch

    from rag_hier.corpus.model import split_document
    from rag_hier.encoders import DEFAULT_MODEL
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.eval import evaluate
    from rag_hier.index.token import TokenIndex
    from rag_hier.training.svdr import SvdrTrainer, SvdrTrainingConfig

    torch.set_num_threads(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    scifact = load_scifact(args.data)
    docs, queries, qrels = scifact.documents, scifact.queries, scifact.train_qrels
    qids = sorted(qrels)
    random.Random(0).shuffle(qids)
    dev, train = qids[: args.dev_queries], qids[args.dev_queries :]
    encoder = VocabEncoder(args.model or DEFAULT_MODEL, selection_precision="bfloat16")
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
        max_steps=args.max_steps,
        bf16=args.bf16,
        log_every=5,
    )
    trainer = SvdrTrainer.from_documents(encoder, docs, queries, {q: qrels[q] for q in train}, config=config)
    result = trainer.train()
    print("PILOT result", result.steps, result.seconds, result.mining_seconds, result.last_loss, flush=True)
    beta_dev("trained")


if __name__ == "__main__":
    main()
