"""Dev grid: the EHI indexer trained alone on frozen base MiniLM vectors (SciFact, 25 % of train queries held out).

Each line: the config, Recall@100 interpolated at 5 / 10 / 20 % of the corpus scored (measured), the leaf-size
maximum and non-empty leaves, training seconds. Usage: ``python benchmarks/ehi_dev_grid.py NAME 'k=v, ...' ...``
(each argument after NAME is one configuration, as Python keyword arguments of the bench's options);
results are appended to ``benchmarks/out/ehi/dev-grid.jsonl``.
"""

from __future__ import annotations

import json
import sys
import time

import bench_ehi as b
import numpy as np


def main() -> None:
    import faiss
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    passages, queries, eval_qrels, train_qrels = b.load("dev", b.DEFAULT_DATA)
    c, qv = b.vectors(f"base_len{b.MAX_LEN}")
    doc_ids = [p.doc_id for p in passages]
    qids = [q for q in eval_qrels if q in qv]
    q = np.stack([qv[x] for x in qids])
    group = sys.argv[1]
    for spec in sys.argv[2:]:
        opts = eval(f"dict({spec})")  # a benchmark's own command line
        seeds = opts.pop("seeds", [0])
        ns = argparse_defaults()
        for k, v in opts.items():
            setattr(ns, k, v)
        for seed in seeds:
            t = time.perf_counter()
            res = b.train_frozen(ns, seed, passages, queries, train_qrels, c, qv)
            secs = time.perf_counter() - t
            leaves = res.indexer.assign(c, top_k=ns.leaves_per_document)
            rows = b.sweep_ehi("ehi-frozen", res.indexer, leaves, c, q, qids, doc_ids, eval_qrels, seed)
            line = {
                "group": group, "spec": spec, "seed": seed,
                **{f"r100@{x}": _r(b.interp_at(rows, "ehi-frozen", x)) for x in (0.05, 0.10, 0.20)},
                **{f"r10@{x}": _r(b.interp_at(rows, "ehi-frozen", x, "recall@10")) for x in (0.10,)},
                "best<=10%": b.best_at_most(rows, "ehi-frozen", 0.10),
                "leaf_max": int(np.bincount(leaves[:, 0]).max()),
                "nonempty": int((np.bincount(leaves[:, 0]) > 0).sum()),
                "train_s": round(secs, 1),
            }  # fmt: skip
            print(json.dumps(line), flush=True)
            with (b.OUT / "dev-grid.jsonl").open("a") as f:
                f.write(json.dumps(line) + "\n")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def argparse_defaults():  # the bench's own defaults for every EHI option
    import argparse

    ns = argparse.Namespace(
        branching=40, height=1, lambdas=[0.2, 0.8, 0.2], indexer_lr=0.016, encoder_lr=4e-4, epochs=100,
        refresh_every=5, init="random", mined_negative_terms="all", mine_leaves=1, batch_size=64,
        leaves_per_document=1,
    )  # fmt: skip
    return ns


if __name__ == "__main__":
    main()
