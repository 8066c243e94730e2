"""What opening a local store costs and reads, and what importing the store class and the adapters costs.

Usage::

    python -m benchmarks.frameworks.bench_store_open [--n 100000] [--dim 384] [--rounds 5] [--anchor-tree DIR]

**Open.** One store of ``n`` passages (100-word texts, metadata, ``dim``-d vectors, Flat index) is built once; then,
round after round, fresh processes open it with ``HierStore.open(path)`` (checksums verified, the default) and with
``verify_checksums=False``, and report the open call's wall and CPU seconds and the bytes the process read from files
while opening (``rchar`` of ``/proc/self/io``: the page cache serves most of it, but every byte is copied). With
``--anchor-tree DIR`` (a checkout of another version, e.g. before the rowid index existed) the same opens run with
that checkout's ``rag_hier`` first on ``PYTHONPATH``, on a copy of the store without the rowid index (an older
version refuses a database object it does not know).

**Imports.** In fresh processes, interleaved round by round: ``import rag_hier; from rag_hier import HierStore``,
``import haystack`` and ``import haystack`` then the rag-hier Haystack document store and retrievers, and the same
for ``llama_index.core`` and the LlamaIndex adapters (those installed); the CPU seconds of each import (less exposed
to a shared machine than the wall time) and the modules it loaded. The adapters' figure is the difference from
their framework alone, in the same process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.data import REPO
from benchmarks.common.report import machine, out_path, write_json

OPEN_PROBE = """
import json, sys, time
def rchar():
    try:
        return int(dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())['rchar'])
    except OSError:
        return -1
from rag_hier import HierStore
import faiss, numpy
verify = sys.argv[2] == '1'
r0, c0, t0 = rchar(), time.process_time(), time.perf_counter()
store = HierStore.open(sys.argv[1], verify_checksums=verify)
print(json.dumps({'wall_s': time.perf_counter() - t0, 'cpu_s': time.process_time() - c0,
                  'read_mb': (rchar() - r0) / 1e6,
                  'passages': store.count_passages()}))
"""

IMPORT_PROBE = """
import json, sys, time
before = sys.argv[1]
after = sys.argv[2]
c0 = time.process_time(); n0 = len(sys.modules)
exec(before)
c1 = time.process_time(); n1 = len(sys.modules)
loaded = set(sys.modules)
exec(after)
c2 = time.process_time(); n2 = len(sys.modules)
heavy = [m for m in ('torch', 'faiss', 'scipy', 'rag_hier.store.milvus') if m in sys.modules and m not in loaded]
print(json.dumps({'before_cpu_s': c1 - c0, 'after_cpu_s': c2 - c1, 'before_modules': n1 - n0,
                  'after_modules': n2 - n1, 'heavy_loaded': heavy}))
"""

IMPORTS = {
    "from rag_hier import HierStore": ("", "import rag_hier\nfrom rag_hier import HierStore"),
    "Haystack adapters (beyond import haystack)": (
        "import haystack",
        "import haystack_integrations.document_stores.rag_hier\n"
        "import haystack_integrations.components.retrievers.rag_hier\n"
        "import haystack_integrations.components.embedders.rag_hier",
    ),
    "LlamaIndex adapters (beyond import llama_index.core)": (
        "import llama_index.core",
        "import llama_index.vector_stores.rag_hier\nimport llama_index.retrievers.rag_hier\n"
        "import llama_index.embeddings.rag_hier",
    ),
}


def build(path: Path, n: int, dim: int) -> None:
    """A Flat store of ``n`` passages as ``bench_embedded_stores`` writes them, generated 100,000 at a time."""
    from benchmarks.common.texts import passage_texts
    from benchmarks.common.vectors import mixture
    from benchmarks.frameworks._embedded import meta_of
    from rag_hier import HierStore, Passage

    store = HierStore.create(path, model=None, dimension=dim, similarity="dot_product", index={"kind": "flat"})
    store.index_meta_field("group")
    store.index_meta_field("year")
    block = 100_000
    for start in range(0, n, block):
        m = min(block, n - start)
        vectors = mixture(m, dim, seed=start)
        texts = passage_texts(m, 100, seed=start)
        for s in range(0, m, 10_000):
            stop = min(m, s + 10_000)
            passages = [
                Passage(f"p{start + i}", f"d{(start + i) // 10}", i % 10, texts[i], meta=meta_of(start + i))
                for i in range(s, stop)
            ]
            store.add_passages(passages, embeddings=vectors[s:stop])
    store.close()


def without_rowid_index(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)
    db = sqlite3.connect(dst / "store.sqlite")
    db.execute("DROP INDEX IF EXISTS passages_with_vector")
    db.commit()
    db.execute("VACUUM")
    db.close()
    manifest = json.loads((dst / "manifest.json").read_text())
    info = manifest["files"]["store.sqlite"]
    info["bytes"] = (dst / "store.sqlite").stat().st_size
    if info.get("sha256") is not None:
        info["sha256"] = hashlib.sha256((dst / "store.sqlite").read_bytes()).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(manifest))


def child(code: str, args: list[str], tree: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    paths = [tree] if tree else [str(REPO)]
    for sub in ("integrations/haystack/src", "integrations/llama_index/src"):
        paths.append(str(Path(tree or REPO) / sub))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd="/", timeout=600, check=False
    )
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="passages of the store opened")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--anchor-tree", default=None, help="a checkout of another version, timed beside this one")
    parser.add_argument(
        "--store", type=Path, default=None, help="the store to open (built there first if missing; default: temporary)"
    )
    parser.add_argument("--no-imports", action="store_true", help="skip the import timings")
    parser.add_argument("--out", type=Path, default=out_path("store_open.json"))
    args = parser.parse_args(argv)

    tmp = tempfile.TemporaryDirectory(prefix="bench-store-open-")
    store = args.store or Path(tmp.name) / "store"
    if not store.exists():
        t = time.perf_counter()
        build(store, args.n, args.dim)
        print(f"built {args.n} passages in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    variants: dict[str, tuple[str | None, Path, str]] = {
        "this, verify_checksums=True": (None, store, "1"),
        "this, verify_checksums=False": (None, store, "0"),
    }
    if args.anchor_tree:
        old = Path(tmp.name) / "store-without-rowid-index"
        without_rowid_index(store, old)
        variants["anchor, verify_checksums=True"] = (args.anchor_tree, old, "1")
        variants["anchor, verify_checksums=False"] = (args.anchor_tree, old, "0")
    opens: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    trees = {"this": None, **({"anchor": args.anchor_tree} if args.anchor_tree else {})}
    imports: dict[str, list[dict[str, Any]]] = {f"{t}: {name}": [] for t in trees for name in IMPORTS}
    for r in range(args.rounds):
        names = list(variants)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            tree, path, verify = variants[name]
            opens[name].append(child(OPEN_PROBE, [str(path), verify], tree))
        if not args.no_imports:
            for name, (before, after) in IMPORTS.items():
                for label, tree in trees.items():
                    imports[f"{label}: {name}"].append(child(IMPORT_PROBE, [before, after], tree))
    result: dict[str, Any] = {
        "n": args.n,
        "dim": args.dim,
        "rounds": args.rounds,
        "machine": machine(),
        "open": {},
        "imports": {},
    }
    print(f"\n### Opening a {args.n}-passage store (median of {args.rounds} fresh processes)\n")
    print("| open | wall s | CPU s | MB read |")
    print("|---|---:|---:|---:|")
    for name, rows in opens.items():
        errors = [r["error"] for r in rows if "error" in r]
        row = {k: median(rows, k) for k in ("wall_s", "cpu_s", "read_mb")}
        result["open"][name] = {**row, "errors": errors[:1], "runs": rows}
        if errors:
            print(f"| {name} | failed: {errors[0]} | | |")
        else:
            print(f"| {name} | {row['wall_s']:.3f} | {row['cpu_s']:.3f} | {row['read_mb']:.1f} |")
    if not args.no_imports:
        print(f"\n### Imports (CPU s, median of {args.rounds} fresh processes)\n")
        print("| import | framework alone | adapter beyond it | modules beyond it | heavy modules it loads |")
        print("|---|---:|---:|---:|---|")
        for name, rows in imports.items():
            ok = [r for r in rows if "error" not in r]
            if not ok:
                print(f"| {name} | not installed | | | |")
                result["imports"][name] = {"error": rows[0].get("error") if rows else None}
                continue
            row = {k: median(ok, k) for k in ("before_cpu_s", "after_cpu_s", "after_modules")}
            row["heavy_loaded"] = ok[-1]["heavy_loaded"]
            result["imports"][name] = row
            print(
                f"| {name} | {row['before_cpu_s']:.3f} | {row['after_cpu_s']:.3f} | {row['after_modules']:.0f} | "
                f"{', '.join(row['heavy_loaded']) or '–'} |"
            )
    write_json(args.out, result)
    print(f"\nresults in {args.out}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
