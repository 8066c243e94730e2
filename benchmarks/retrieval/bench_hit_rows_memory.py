"""What ``hit_rows="memory"`` costs: resident memory, opening and the first query, and the write path.

Usage::

    python -m benchmarks.retrieval.bench_hit_rows_memory --sizes 10000,100000 --kind hnsw --anchor 046153c
    python -m benchmarks.retrieval.bench_hit_rows_memory --stores 100000=DIR --kind hnsw

For each store size (N synthetic 384-d vectors, passage texts of ``--words`` words; built by the working tree's
engine, or given with ``--stores``), fresh worker processes open the store read-write, one per setting and round:
``sqlite`` and ``memory`` (the working tree, ``hit_rows=`` each) and, with ``--anchor``, the anchor engine
(``git archive <anchor>`` unpacked, default options: the engine before the option, to show what the hit-row log
every commit writes costs). The order of the settings rotates each round. Each worker reports:

- ``open_s``: ``HierStore.open``; ``first_query_s``: the first ``DenseRetriever.search_vectors`` (with
  ``memory``: reading every hit row); ``query_ms``: the median of ``--queries`` more;
- ``rss_mib``: the process's resident memory after them (and ``rss_open_mib`` after opening), and
  ``rss_file_mib`` the file-backed part of it (mapped files: the libraries, and the database's pages when a
  connection reads it through a memory map);
- ``commit_ms``: the median of ``--commits`` one-document commits (a document of 5 passages added, then deleted
  by the next commit, alternately), and ``search_after_commit_ms``: the median of the search that follows each
  (with ``memory``: the table brought up to the new generation).

Results go to ``<out>/hit-rows-memory.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import REPO
from benchmarks.common.report import OUT, write_json
from benchmarks.common.revision import extract_package
from benchmarks.common.timing import loadavg
from benchmarks.common.vectors import mixture


def worker(path: str, mode: str, queries_path: str, n_queries: int, n_commits: int) -> None:
    """One setting in a fresh process: open, query, commit; one JSON line on stdout."""
    import resource
    from pathlib import Path

    import rag_hier
    from rag_hier.corpus import Passage
    from rag_hier.retrieval import DenseRetriever
    from rag_hier.store import HierStore

    def rss_mib(field: str = "VmRSS") -> float:
        with Path("/proc/self/status").open(encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 if field == "VmRSS" else float("nan")

    q = np.load(queries_path, allow_pickle=False)
    pc = time.perf_counter
    options = {} if mode in ("sqlite", "anchor") else {"hit_rows": mode}
    t0 = pc()
    store = HierStore.open(path, **options)
    open_s = pc() - t0
    rss_open = rss_mib()
    retriever = DenseRetriever(store)
    t0 = pc()
    retriever.search_vectors(q[:1], top_k=10)
    first_s = pc() - t0
    times = []
    for i in range(1, n_queries + 1):
        t0 = pc()
        hits = retriever.search_vectors(q[i : i + 1], top_k=10)
        times.append(pc() - t0)
        if len(hits[0]) != 10:
            raise SystemExit(f"short hits: {len(hits[0])}")
    rss = rss_mib()
    rss_file = rss_mib("RssFile")
    rng = np.random.default_rng(5)
    commits, after = [], []
    for c in range(n_commits):
        doc = f"bench-commit-{c // 2}"
        t0 = pc()
        if c % 2 == 0:
            vectors = rng.standard_normal((5, q.shape[1])).astype(np.float32)
            passages = [Passage(f"{doc}#{k}", doc, k, f"a new passage {k} of {doc}") for k in range(5)]
            store.add_passages(passages, vectors)
        else:
            store.delete_documents([doc])
        commits.append(pc() - t0)
        t0 = pc()
        retriever.search_vectors(q[c % len(q) : c % len(q) + 1], top_k=10)
        after.append(pc() - t0)
    store.close()
    print(
        json.dumps(
            {
                "engine": rag_hier.__file__,
                "open_s": open_s,
                "first_query_s": first_s,
                "query_ms": float(np.median(times)) * 1e3,
                "rss_open_mib": rss_open,
                "rss_mib": rss,
                "rss_file_mib": rss_file,
                "commit_ms": float(np.median(commits)) * 1e3 if commits else None,
                "search_after_commit_ms": float(np.median(after)) * 1e3 if after else None,
            }
        ),
        flush=True,
    )


def _run(pythonpath: str, args: list[str]) -> dict[str, Any]:
    call = "worker(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))"
    code = f"import json, sys, time\nimport numpy as np\n\n{inspect.getsource(worker)}\n{call}\n"
    env = {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, cwd=tempfile.gettempdir()
    )
    if out.returncode != 0:
        raise SystemExit(f"worker failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000", help="store sizes to build")
    p.add_argument("--stores", default="", help="N=PATH,... stores built beforehand (copied, not changed)")
    p.add_argument("--kind", default="hnsw")
    p.add_argument("--words", type=int, default=100, help="words per passage text")
    p.add_argument("--queries", type=int, default=20, help="queries after the first, before RSS is read")
    p.add_argument("--commits", type=int, default=20, help="one-document commits per worker")
    p.add_argument("--rounds", type=int, default=2, help="workers per setting and size (the order rotates)")
    p.add_argument("--anchor", default="", help="git revision of an engine before the option (default: none)")
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)

    from benchmarks.retrieval.bench_dense import make_passages, store_config
    from rag_hier.store import HierStore

    tmp = Path(tempfile.mkdtemp(prefix="bench-hit-rows-"))
    try:
        given = {int(k): Path(v) for k, v in (item.split("=", 1) for item in a.stores.split(",") if item)}
        sizes = sorted({int(s) for s in a.sizes.split(",") if s} | set(given))
        settings: dict[str, str] = {"sqlite": str(REPO), "memory": str(REPO)}
        if a.anchor:
            extract_package(a.anchor, tmp / "anchor")
            settings = {"anchor": str(tmp / "anchor"), **settings}
        qpath = tmp / "queries.npy"
        np.save(qpath, mixture(max(a.queries + a.commits + 1, 64), 384, seed=2), allow_pickle=False)
        results: dict[str, Any] = {}
        load_before = loadavg()
        for n in sizes:
            source = tmp / f"store-{n}"
            if n in given:
                shutil.copytree(given[n], source)
            else:
                t0 = time.perf_counter()
                store = HierStore.create(source, model=None, dimension=384, index=store_config(a.kind, n))
                store.add_passages(make_passages(n, words=a.words), mixture(n, 384, seed=1))
                store.close()
                print(f"built a {a.kind} store of {n} in {time.perf_counter() - t0:.1f}s", flush=True)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
            names = list(settings)
            for r in range(a.rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    args = [str(source), name, str(qpath), str(a.queries), str(a.commits)]
                    runs[name].append(_run(settings[name], args))
            results[str(n)] = {
                name: {key: float(np.median([r[key] for r in rs])) for key in rs[0] if key != "engine"}
                for name, rs in runs.items()
            }
            for name, figures in results[str(n)].items():
                print(
                    f"n={n:>7} {name:6s} open {figures['open_s']:.3f}s, first query {figures['first_query_s']:.3f}s, "
                    f"query {figures['query_ms']:.3f} ms, RSS {figures['rss_mib']:.0f} MiB (file-backed "
                    f"{figures['rss_file_mib']:.0f}; after open {figures['rss_open_mib']:.0f}), commit "
                    f"{figures['commit_ms']:.1f} ms, search after commit "
                    f"{figures['search_after_commit_ms']:.2f} ms",
                    flush=True,
                )
            shutil.rmtree(source, ignore_errors=True)
        report = {
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "kind": a.kind,
            "words": a.words,
            "anchor": a.anchor or None,
            "rounds": a.rounds,
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
            "results": results,
        }
        out = write_json(a.out / "hit-rows-memory.json", report, indent=2)
        print(f"wrote {out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
