"""Dev grid: the EHI indexer trained alone on frozen base MiniLM vectors (SciFact, 25 % of train queries held out).

Each line: the config, Recall@100 interpolated at 5 / 10 / 20 % of the corpus scored (measured), the leaf-size
maximum and non-empty leaves, training seconds. Every configuration starts from ``bench_ehi``'s own defaults
and reads the base vectors its ``encode`` stage cached in ``--out``. Usage::

    python -m benchmarks.retrieval.bench_ehi encode                    # once: the base vectors
    python -m benchmarks.training.ehi_dev_grid NAME 'k=v, ...' ...     # each argument after NAME: one configuration

(each configuration as Python keyword arguments of ``bench_ehi``'s options, e.g. ``'branching=20, seeds=[0, 1]'``);
results are appended to ``<out>/dev-grid.jsonl`` (``--out``, default ``benchmarks/out/ehi``).
"""

from __future__ import annotations

import argparse
import ast
import json
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from benchmarks.common.data import add_data_argument
from benchmarks.retrieval import bench_ehi as b


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        self.namespace = namespace


def ehi_defaults() -> argparse.Namespace:
    """``bench_ehi``'s defaults for every option: its own parser, stopped before it runs a stage."""
    parse = argparse.ArgumentParser.parse_args

    def stop(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        raise _Parsed(parse(self, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", stop):
        try:
            b.main(["sweep"])
        except _Parsed as parsed:
            return parsed.namespace
    raise RuntimeError("bench_ehi.main did not parse its arguments")


def configuration(spec: str) -> dict[str, Any]:
    """``'k=v, k2=v2'`` -> ``{"k": v, "k2": v2}`` (values: Python literals)."""
    call = ast.parse(f"f({spec})", mode="eval").body
    assert isinstance(call, ast.Call)
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("group", help="a name for this grid (written on every line)")
    p.add_argument("specs", nargs="+", help="configurations: 'k=v, ...' (bench_ehi options, plus seeds=[...])")
    add_data_argument(p)
    p.add_argument("--out", type=Path, default=b.OUT, help="bench_ehi's folder: cached vectors in, results out")
    p.add_argument("--base-model", default=b.BASE_MODEL, help="the encoder the frozen vectors came from")
    args = p.parse_args(argv)
    import faiss
    import torch

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    b.OUT = args.out  # bench_ehi reads its cached vectors there
    passages, queries, eval_qrels, train_qrels = b.load("dev", args.data)
    c, qv = b.vectors(f"base_len{b.MAX_LEN}")
    doc_ids = [p.doc_id for p in passages]
    qids = [q for q in eval_qrels if q in qv]
    q = np.stack([qv[x] for x in qids])
    for spec in args.specs:
        opts = configuration(spec)
        seeds = opts.pop("seeds", [0])
        ns = ehi_defaults()
        ns.base_model = args.base_model
        for k, v in opts.items():
            setattr(ns, k, v)
        for seed in seeds:
            t = time.perf_counter()
            res = b.train_frozen(ns, seed, passages, queries, train_qrels, c, qv)
            secs = time.perf_counter() - t
            leaves = res.indexer.assign(c, top_k=ns.leaves_per_document)
            rows = b.sweep_ehi("ehi-frozen", res.indexer, leaves, c, q, qids, doc_ids, eval_qrels, seed)
            line = {
                "group": args.group, "spec": spec, "seed": seed,
                **{f"r100@{x}": _r(b.interp_at(rows, "ehi-frozen", x)) for x in (0.05, 0.10, 0.20)},
                **{f"r10@{x}": _r(b.interp_at(rows, "ehi-frozen", x, "recall@10")) for x in (0.10,)},
                "best<=10%": b.best_at_most(rows, "ehi-frozen", 0.10),
                "leaf_max": int(np.bincount(leaves[:, 0]).max()),
                "nonempty": int((np.bincount(leaves[:, 0]) > 0).sum()),
                "train_s": round(secs, 1),
            }  # fmt: skip
            print(json.dumps(line), flush=True)
            with (args.out / "dev-grid.jsonl").open("a") as f:
                f.write(json.dumps(line) + "\n")
    return 0


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


if __name__ == "__main__":
    raise SystemExit(main())
