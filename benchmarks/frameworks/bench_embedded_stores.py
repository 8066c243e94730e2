"""Embedded, persistent stores side by side: rag-hier against Chroma, LanceDB, Qdrant local and FAISS + a docstore.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.frameworks.bench_embedded_stores [--n 100000] [--dim 384] [--queries 100]
    python -m benchmarks.frameworks.bench_embedded_stores --n 2000 --dim 32 --queries 10   # a quick look
    python -m benchmarks.frameworks.bench_embedded_stores --engines "rag-hier flat,Chroma" --frameworks

Every engine stores the same ``n`` passages: a 100-word text (``benchmarks.common.texts``), the metadata
``{"group": "g<i % 100>", "year": 1990 + i % 30}`` and a 384-d float32 unit vector given with it (clustered random
vectors, ``benchmarks.common.vectors.mixture``, so that approximate indexes can reach a high recall; no model runs).
The engines (skipped, and said so, when their package is not installed):

* rag-hier Flat, HNSW and IVF, each with the hit rows read from SQLite (default) and kept in memory
  (``hit_rows="memory"``, a copy of the same store); the metadata fields are indexed (``index_meta_field``);
* FAISS + docstore: an ``IndexIDMap2(IndexFlatIP)`` and a JSON docstore written by ``save()``, filters by a Python
  scan of the metadata then FAISS's ID selector (what one writes by hand);
* Chroma (``PersistentClient``, HNSW in inner-product space), LanceDB (no ANN index: an exact scan, with
  ``prefilter=True``), Qdrant's local mode (``QdrantClient(path=...)``, an exact NumPy scan);
* with ``--frameworks``: the same stores through their Haystack document stores and LlamaIndex vector stores
  (rag-hier's own adapters, chroma-haystack, qdrant-haystack, llama-index-vector-stores-chroma/-lancedb/-qdrant,
  and LlamaIndex's ``FaissVectorStore``, which has no filters and no text), each written through its framework.

Measured per engine:

* **ingestion**: wall and CPU seconds to write every passage (vectors given) in batches of 10,000 (one run: a build
  cannot be interleaved; the load averages are reported beside it);
* **bytes on disk** of the store's folder;
* **cold open**, in a fresh process: the seconds of the open call and of the first query; the process's resident
  memory after opening and answering queries of the three kinds, less that after importing the engine;
* **query latency**: p50 and p99 of one query vector at a time, top 10, unfiltered, under a selective filter
  (``group == "g7"``, 1 %) and a broad one (``year < 2005``, 50 %), every engine opened in this process and the
  engines interleaved query by query (the order rotating) so that the machine's noise hits all alike;
* **recall@10** against exact search (NumPy over the same vectors, the filter applied first), and **completeness**
  under each filter: results returned / ``min(10, passages matching)``: a post-filtering engine returns fewer;
* **durability**: a fresh process writes one passage, prints once the engine returned, and is killed (``kill -9``)
  at once; another process reopens the store: is the passage there?

The tables (one per measure, engines as columns) go to stdout; the JSON to ``--out``. ``--smoke`` is the tiny
setting the test suite runs with whatever engines are installed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import machine, out_path, write_json
from benchmarks.common.texts import passage_texts
from benchmarks.common.timing import interleaved, loadavg, percentile
from benchmarks.common.vectors import mixture
from benchmarks.frameworks._embedded import FILTERS, Data, Engine, copy_store, folder_bytes, matches, meta_of

SMOKE_ENGINES = ("rag-hier flat", "FAISS + docstore", "Chroma", "LanceDB", "Qdrant local")
"""The engines of ``--smoke`` (those installed)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def engines(frameworks: bool) -> list[type[Engine]]:
    from benchmarks.frameworks._embedded import NATIVE

    out = list(NATIVE)
    if frameworks:
        from benchmarks.frameworks._embedded_frameworks import FRAMEWORK

        out += FRAMEWORK
    return out


def by_name(name: str) -> type[Engine]:
    for frameworks in (False, True):
        for cls in engines(frameworks):
            if cls.name == name:
                return cls
    raise SystemExit(f"unknown engine {name!r}")


def missing(cls: type[Engine]) -> list[str]:
    return [
        m
        for m in cls.requires
        if importlib.util.find_spec(m.split(".")[0]) is None or importlib.util.find_spec(m) is None
    ]


def rss_mb() -> tuple[float, float]:
    """The process's resident memory now and at its peak, in MB (Linux ``/proc/self/status``)."""
    now = peak = float("nan")
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:  # pragma: no cover - not Linux
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return now, peak


def folder_name(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower())


# ------------------------------------------------------------------------------------------------------------
# the child processes: cold open and memory, an acknowledged write then kill -9, the check after it
# ------------------------------------------------------------------------------------------------------------
def child(mode: str, name: str, path: Path, dim: int, seed: int) -> None:
    cls = by_name(name)
    if importlib.util.find_spec("faiss"):
        import faiss

        faiss.omp_set_num_threads(1)
    for module in cls.requires:
        importlib.import_module(module)
    engine = cls(path, dim)
    rng = np.random.default_rng(seed + 99)
    q = rng.standard_normal((30, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    if mode == "open":
        base, _ = rss_mb()
        t = time.perf_counter()
        engine.open()
        open_s = time.perf_counter() - t
        t = time.perf_counter()
        engine.search(q[0], 10, None)
        first_s = time.perf_counter() - t
        for i in range(1, 30):
            try:
                engine.search(q[i], 10, list(FILTERS.values())[i % 3])
            except Exception as exc:  # a kind of query the engine cannot answer (LlamaIndex's FAISS store: filters)
                if type(exc).__name__ != "Unsupported":
                    raise
        now, peak = rss_mb()
        print(
            json.dumps(
                {
                    "open_s": open_s,
                    "first_query_s": first_s,
                    "rss_mb": now - base,
                    "rss_total_mb": now,
                    "rss_peak_mb": peak,
                }
            )
        )
    elif mode == "write":
        engine.open()
        engine.write_one("durable-0", q[0], "written then killed", {"group": "gw", "year": 1900})
        print("ACK", flush=True)
        time.sleep(120)
    elif mode == "check":
        engine.open()
        print(json.dumps({"present": engine.has("durable-0")}))
        engine.close()


def run_child(mode: str, name: str, path: Path, dim: int, seed: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.frameworks.bench_embedded_stores",
        "--child",
        mode,
        "--engine",
        name,
        "--dir",
        str(path),
        "--dim",
        str(dim),
        "--seed",
        str(seed),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def durability(name: str, path: Path, dim: int, seed: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.frameworks.bench_embedded_stores",
        "--child",
        "write",
        "--engine",
        name,
        "--dir",
        str(path),
        "--dim",
        str(dim),
        "--seed",
        str(seed),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    acked = False
    for line in proc.stdout:
        if line.strip() == "ACK":
            acked = True
            os.kill(proc.pid, signal.SIGKILL)  # at once: whatever the engine still does in the background is lost
            break
    proc.wait()
    if not acked:
        return {"acknowledged": False, "present": None}
    return {"acknowledged": True, **run_child("check", name, path, dim, seed)}


# ------------------------------------------------------------------------------------------------------------
# the figures
# ------------------------------------------------------------------------------------------------------------
def exact_answers(data: Data, queries: np.ndarray, k: int) -> dict[str, list[list[str]]]:
    scores = queries @ data.vectors.T
    out: dict[str, list[list[str]]] = {}
    for kind, flt in FILTERS.items():
        mask = np.array([matches(m, flt) for m in data.metas])
        s = np.where(mask[None, :], scores, -np.inf)
        top = np.argsort(-s, axis=1)[:, :k]
        out[kind] = [[data.ids[j] for j in row if np.isfinite(s[i, j])] for i, row in enumerate(top)]
    return out


def table(title: str, rows: dict[str, dict[str, Any]], names: list[str], fmt: str = "{:.2f}") -> str:
    lines = [f"\n### {title}\n", "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    keys = list(dict.fromkeys(k for r in rows.values() for k in r))
    for key in keys:
        cells = []
        for name in names:
            v = rows.get(name, {}).get(key)
            cells.append("–" if v is None else (fmt.format(v) if isinstance(v, float) else str(v)))
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_tables(report: dict[str, Any]) -> None:
    """The Markdown tables of a results file: one per measure, the engines as columns."""
    results, names = report["results"], list(report["results"])
    k = report["k"]
    durable = any("durability" in r for r in results.values())
    tables = [
        table(
            "Ingestion (s, vectors given)",
            {
                n: {
                    "wall s": r["ingest"].get("wall_s"),
                    "CPU s": r["ingest"].get("cpu_s"),
                    "copy of": r["ingest"].get("copy_of"),
                }
                for n, r in results.items()
            },
            names,
        ),
        table("Bytes on disk (MB)", {n: {"MB": r["bytes"] / 1e6} for n, r in results.items()}, names, "{:.1f}"),
        table(
            "Cold open, fresh process",
            {
                n: {
                    "open s": r["cold"].get("open_s"),
                    "first query s": r["cold"].get("first_query_s"),
                    "RSS MB (store)": r["cold"].get("rss_mb"),
                    "RSS MB (process)": r["cold"].get("rss_total_mb"),
                }
                for n, r in results.items()
            },
            names,
            "{:.3f}",
        ),
    ]
    for kind in FILTERS:
        tables.append(
            table(
                f"Query, {kind} (ms; recall@{k}; completeness)",
                {
                    n: {
                        "p50 ms": r[kind].get("p50_ms"),
                        "p99 ms": r[kind].get("p99_ms"),
                        "recall": r[kind].get("recall"),
                        "completeness": r[kind].get(
                            "completeness", "unsupported" if "unsupported" in r[kind] else None
                        ),
                    }
                    for n, r in results.items()
                    if kind in r
                },
                names,
                "{:.3f}",
            )
        )
    if durable:
        tables.append(
            table(
                "Durability (kill -9 after an acknowledged write)",
                {
                    n: {"there after reopening": r["durability"].get("present", r["durability"].get("error"))}
                    for n, r in results.items()
                    if "durability" in r
                },
                names,
            )
        )
    print("\n".join(tables))
    if report.get("skipped"):
        print("\nSkipped: " + "; ".join(f"{n} ({why})" for n, why in report["skipped"].items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="passages")
    parser.add_argument("--dim", type=int, default=384, help="vector dimension")
    parser.add_argument("--queries", type=int, default=100, help="query vectors (each answered under each filter)")
    parser.add_argument("--k", type=int, default=10, help="results per query")
    parser.add_argument("--engines", default="", help="comma-separated engine names (default: every one installed)")
    parser.add_argument("--frameworks", action="store_true", help="also the Haystack and LlamaIndex integrations")
    parser.add_argument("--no-durability", action="store_true", help="skip the kill -9 test")
    parser.add_argument(
        "--threads", type=int, default=1, help="FAISS OpenMP threads (one query at a time: 1 avoids spin-waiting)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the stores (with --dir)")
    parser.add_argument("--smoke", action="store_true", help="the tiny setting of the test suite")
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON results (default: benchmarks/out/embedded_stores.json)"
    )
    parser.add_argument("--report", type=Path, default=None, help="print the tables of a results file and stop")
    parser.add_argument("--child", choices=["open", "write", "check"], help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.engine, args.dir, args.dim, args.seed)
        return 0
    if args.report:
        print_tables(json.loads(args.report.read_text(encoding="utf-8")))
        return 0
    if args.smoke:  # rag-hier's default store, the hand-made baseline and whichever peers are installed
        args.n, args.dim, args.queries = min(args.n, 300), min(args.dim, 16), min(args.queries, 4)
        args.engines = args.engines or ",".join(SMOKE_ENGINES)
    out = args.out or out_path("embedded_stores.json")
    if args.threads and importlib.util.find_spec("faiss"):
        import faiss

        faiss.omp_set_num_threads(args.threads)

    candidates = engines(args.frameworks)
    if args.engines:
        wanted = [e.strip() for e in args.engines.split(",") if e.strip()]
        known = {c.name for c in candidates}
        if unknown := [w for w in wanted if w not in known]:
            parser.error(f"--engines: unknown {unknown}; known: {', '.join(sorted(known))}")
        candidates = [c for c in candidates if c.name in wanted]
    skipped = {c.name: f"not installed: {', '.join(missing(c))}" for c in candidates if missing(c)}
    chosen = [c for c in candidates if not missing(c)]
    for name, why in skipped.items():
        log(f"skipping {name}: {why}")

    tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="bench-embedded-")
    root = args.dir or Path(tmp.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)

    log(f"data: {args.n} passages, {args.dim}-d")
    vectors = mixture(args.n, args.dim, seed=args.seed)
    data = Data(
        [f"p{i}" for i in range(args.n)],
        passage_texts(args.n, 100, seed=args.seed),
        [meta_of(i) for i in range(args.n)],
        vectors,
    )
    queries = mixture(args.queries, args.dim, seed=args.seed + 1)
    exact = exact_answers(data, queries, args.k)
    matching = {kind: sum(matches(m, flt) for m in data.metas) for kind, flt in FILTERS.items()}

    results: dict[str, dict[str, Any]] = {}
    built: dict[str, Path] = {}
    for cls in chosen:
        path = root / folder_name(cls.name)
        if path.exists():
            shutil.rmtree(path)
        r: dict[str, Any] = {"via": cls.via, "notes": cls.notes}
        source = getattr(cls, "copy_of", None)
        if source and source in built:
            copy_store(built[source], path)
            r["ingest"] = {"copy_of": source}
        else:
            engine = cls(path, args.dim)
            load = loadavg()
            c0, t0 = time.process_time(), time.perf_counter()
            try:
                engine.build(data)
            except Exception as exc:  # a peer that cannot take this data: reported, the others go on
                log(f"{cls.name}: build failed: {exc!r}")
                skipped[cls.name] = f"build failed: {exc!r}"
                continue
            r["ingest"] = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "load": load}
            log(f"{cls.name}: built in {r['ingest']['wall_s']:.1f} s")
        built[cls.name] = path
        r["bytes"] = folder_bytes(path)
        r["cold"] = run_child("open", cls.name, path, args.dim, args.seed)
        log(f"{cls.name}: cold {r['cold']}")
        results[cls.name] = r

    # every engine open in this process, the queries interleaved
    opened: dict[str, Engine] = {}
    for name in results:
        engine = by_name(name)(built[name], args.dim)
        engine.open()
        opened[name] = engine
    for kind, flt in FILTERS.items():
        able = {}
        for name, e in opened.items():
            try:
                e.search(queries[0], args.k, flt)
                able[name] = e
            except Exception as exc:
                if type(exc).__name__ != "Unsupported":
                    raise
                results[name][kind] = {"unsupported": str(exc)}
        fns = {name: (lambda i, e=e, f=flt: e.search(queries[i], args.k, f)) for name, e in able.items()}
        run = interleaved(fns, args.queries, warmup=min(2, args.queries))
        for name in able:
            secs = run.seconds[name]
            answers = run.results[name]
            recall = [len(set(a) & set(x)) / max(1, len(x)) for a, x in zip(answers, exact[kind], strict=True)]
            complete = [len(a) / max(1, min(args.k, matching[kind])) for a in answers]
            results[name][kind] = {
                "p50_ms": 1000 * percentile(secs, 50),
                "p99_ms": 1000 * percentile(secs, 99),
                "recall": float(np.mean(recall)),
                "completeness": float(np.mean(complete)),
            }
        log(f"queried: {kind}")
    for engine in opened.values():
        engine.close()
    opened.clear()

    if not args.no_durability:
        for name in results:
            if not getattr(by_name(name), "durable_test", True):
                continue  # an adapter writes through the same storage as the native engine
            results[name]["durability"] = durability(name, built[name], args.dim, args.seed)
            log(f"{name}: durability {results[name]['durability']}")

    report = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.frameworks.bench_embedded_stores "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "n": args.n,
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "vectors": "clustered random unit vectors (benchmarks.common.vectors.mixture), no model",
        "matching": matching,
        "skipped": skipped,
        "machine": machine(),
        "results": results,
    }
    write_json(out, report)
    print_tables(report)
    print(f"\n{args.n} passages, {args.dim}-d, {args.queries} queries; load {loadavg()}; results in {out}")
    if tmp is not None:
        tmp.cleanup()
    elif not args.keep:
        for name in built.values():
            shutil.rmtree(name, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
