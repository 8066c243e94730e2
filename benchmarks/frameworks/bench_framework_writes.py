"""One-document writes through the frameworks: Haystack ``write_documents`` and LlamaIndex ``add``, by store size.

For each size N, one store of each kind holds N documents (written in bulk first); then, round after round,
each store gets one 5-passage document written and one stored document deleted, the stores interleaved
(the order rotating every round) so that machine noise hits every store alike. Reported: median and p95 ms per
operation, the ratio of the largest N to the smallest for each store, and ours against the framework's own
in-memory store at the same N.

    OMP_NUM_THREADS=1 nice -n 10 python -m benchmarks.frameworks.bench_framework_writes --sizes 10000,100000 --writes 30
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.report import OUT, write_json
from benchmarks.common.timing import interleaved, summary
from benchmarks.common.vectors import unit_vectors


def haystack_stores(n: int, dim: int, root: Path, rng: np.random.Generator) -> dict[str, tuple[Callable, Callable]]:
    from haystack import Document
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.document_stores.types import DuplicatePolicy
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    vectors = unit_vectors(rng, n, dim)
    docs = [
        Document(id=f"p{i}", content=f"passage {i} of document {i // 10}", meta={"doc": i // 10}, embedding=v.tolist())
        for i, v in enumerate(vectors)
    ]
    out: dict[str, tuple[Callable, Callable]] = {}
    for name, store in (
        ("haystack RagHierDocumentStore", RagHierDocumentStore(path=str(root / f"hs-{n}"))),
        ("haystack InMemoryDocumentStore", InMemoryDocumentStore(embedding_similarity_function="dot_product")),
    ):
        for start in range(0, n, 10_000):
            store.write_documents(docs[start : start + 10_000])

        def write(w: int, new: np.ndarray, store: Any = store) -> None:
            store.write_documents(
                [
                    Document(id=f"w{w}-{k}", content=f"written {w} part {k}", meta={"doc": -w}, embedding=v.tolist())
                    for k, v in enumerate(new)
                ],
                policy=DuplicatePolicy.OVERWRITE,
            )

        def delete(w: int, store: Any = store) -> None:
            store.delete_documents([f"p{(w * 7919) % n}"])

        out[name] = (write, delete)
    return out


def llama_stores(n: int, dim: int, root: Path, rng: np.random.Generator) -> dict[str, tuple[Callable, Callable]]:
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores import SimpleVectorStore
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    vectors = unit_vectors(rng, n, dim)
    nodes = [
        TextNode(id_=f"p{i}", text=f"passage {i} of document {i // 10}", embedding=v.tolist())
        for i, v in enumerate(vectors)
    ]
    out: dict[str, tuple[Callable, Callable]] = {}
    for name, store in (
        ("llama_index RagHierVectorStore", RagHierVectorStore(path=str(root / f"li-{n}"))),
        ("llama_index SimpleVectorStore", SimpleVectorStore()),
    ):
        for start in range(0, n, 10_000):
            store.add(nodes[start : start + 10_000])

        def write(w: int, new: np.ndarray, store: Any = store) -> None:
            store.add(
                [
                    TextNode(id_=f"w{w}-{k}", text=f"written {w} part {k}", embedding=v.tolist())
                    for k, v in enumerate(new)
                ]
            )

        def delete(w: int, store: Any = store) -> None:
            store.delete_nodes([f"p{(w * 7919) % n}"])

        out[name] = (write, delete)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--writes", type=int, default=30)
    parser.add_argument("--out-dir", type=Path, default=OUT)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rng = np.random.default_rng(0)
    tmp = tempfile.TemporaryDirectory()
    root = Path(tmp.name)
    ops: dict[tuple[str, int], tuple[Callable, Callable]] = {}
    for n in sizes:
        print(f"-- building stores of {n} documents", flush=True)
        for name, pair in {**haystack_stores(n, args.dim, root, rng), **llama_stores(n, args.dim, root, rng)}.items():
            ops[name, n] = pair
    new = unit_vectors(rng, 5 * args.writes, args.dim)
    keys = list(ops)
    calls: dict[str, Callable[[int], Any]] = {}  # round w: each store writes one document, then deletes one
    for key in keys:
        write, delete = ops[key]
        calls[f"write {key}"] = lambda w, write=write: write(w, new[5 * w : 5 * w + 5])
        calls[f"delete {key}"] = lambda w, delete=delete: delete(w)
    load_before = os.getloadavg()
    run = interleaved(calls, args.writes)  # the stores' order rotates every round
    times = {op: {key: run.seconds[f"{op} {key}"] for key in keys} for op in ("write", "delete")}
    rec: dict[str, Any] = {"sizes": sizes, "writes": args.writes, "load": [load_before, os.getloadavg()], "results": {}}
    names = sorted({name for name, _ in keys})
    for op in ("write", "delete"):
        for name in names:
            row = {str(n): summary(times[op][name, n]) for n in sizes}
            row["largest_over_smallest"] = row[str(sizes[-1])]["median_ms"] / row[str(sizes[0])]["median_ms"]
            rec["results"][f"{op} {name}"] = row
            print(
                f"{op:6} {name:32} "
                + "  ".join(f"{n}: {row[str(n)]['median_ms']:.2f} / {row[str(n)]['p95_ms']:.2f} ms" for n in sizes)
                + f"  ({row['largest_over_smallest']:.2f}x)",
                flush=True,
            )
    out = write_json(args.out_dir / "framework-writes.json", rec, indent=2)
    print(f"wrote {out} (load {rec['load']})", flush=True)
    tmp.cleanup()


if __name__ == "__main__":
    main()
