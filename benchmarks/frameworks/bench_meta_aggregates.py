"""Haystack metadata aggregates: the Python scan over every Document (before) vs the store's aggregates (after).

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.frameworks.bench_meta_aggregates [--n 20000] [--repeats 5] [--milvus]

Setup (one run, one process): ``n`` Documents written through ``RagHierDocumentStore`` (no embeddings) with
``meta = {"category": "c<i % 50>", "year": 1990 + i % 30, "score": float, "flag": bool, "tags": [...]}``. Each
row times, interleaved, the adapter's former code (``_matching_metas`` + the scan it ran) and the method as built
(``count_unique_metadata_by_filter`` etc., answered by ``count_unique_meta`` / ``meta_min_max`` /
``meta_field_types`` of the store), and checks both give the same answer. Milliseconds of the first call after a
write (nothing cached: the local store's record cache and Milvus' rows of the last aggregate are of an older
generation) and the median of ``repeats`` calls after it (both sides may reuse what the first call cached).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIELDS = ["category", "year", "score", "flag", "tags"]
FILTER = {"field": "meta.category", "operator": "in", "value": ["c1", "c2", "c3"]}


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return frozenset((k, _hashable(v)) for k, v in value.items())
    return value


def _before_unique(store: Any, filters: dict[str, Any]) -> dict[str, int]:
    metas = store._matching_metas(filters)
    return {f: len({_hashable(m[f]) for m in metas if m.get(f) is not None}) for f in FIELDS}


def _before_min_max(store: Any, field: str) -> dict[str, Any]:
    values = [m[field] for m in store._matching_metas(None) if isinstance(m.get(field), int | float | str)]
    return {"min": min(values), "max": max(values)}


def _before_info(store: Any) -> dict[str, dict[str, str]]:
    kinds: dict[str, str] = {}
    for meta in store._matching_metas(None):
        for key, value in meta.items():
            if isinstance(value, bool):
                kinds[key] = "boolean"
            elif isinstance(value, int):
                kinds[key] = "int"
            elif isinstance(value, float):
                kinds[key] = "float"
            elif value is not None:
                kinds[key] = "keyword"
    return {k: {"type": t} for k, t in kinds.items()}


def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """(first call, median of the next ``repeats``) in ms: the first reads the store, the next may reuse caches."""
    start = time.perf_counter()
    fn()
    first = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1000)
    return first, statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--milvus", action="store_true", help="a Milvus Lite collection instead of a directory")
    args = parser.parse_args()

    from haystack import Document
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore

    with tempfile.TemporaryDirectory() as tmp:
        where: dict[str, Any] = {"path": str(Path(tmp) / "store")}
        if args.milvus:  # Milvus fixes the dimension at creation (the documents carry no embeddings)
            where = {"uri": f"{Path(tmp) / 'm.db'}#bench", "dimension": 8}
        store = RagHierDocumentStore(**where)
        docs = [
            Document(
                id=f"d{i}",
                content=f"document {i}",
                meta={
                    "category": f"c{i % 50}",
                    "year": 1990 + i % 30,
                    "score": (i % 997) / 7.0,
                    "flag": i % 3 == 0,
                    "tags": [f"t{i % 5}", f"t{i % 7}"],
                },
            )
            for i in range(args.n)
        ]
        start = time.perf_counter()
        for k in range(0, len(docs), 5000):
            store.write_documents(docs[k : k + 5000])
        backend = "milvus" if args.milvus else "local"
        print(f"{args.n} documents written in {time.perf_counter() - start:.1f} s ({backend})")
        rows = [
            (
                "count_unique_metadata_by_filter({})",
                lambda: _before_unique(store, {}),
                lambda: store.count_unique_metadata_by_filter({}, FIELDS),
            ),
            (
                "count_unique_metadata_by_filter(category in 3 of 50)",
                lambda: _before_unique(store, FILTER),
                lambda: store.count_unique_metadata_by_filter(FILTER, FIELDS),
            ),
            (
                "get_metadata_field_min_max('score')",
                lambda: _before_min_max(store, "score"),
                lambda: store.get_metadata_field_min_max("score"),
            ),
            ("get_metadata_fields_info()", lambda: _before_info(store), store.get_metadata_fields_info),
        ]
        print(f"{'method':56s} {'first: before':>14s} {'after':>8s} {'repeated: before':>17s} {'after':>8s}")
        for name, before, after in rows:
            store.write_documents([Document(id="extra", content="x", meta={"category": "c0"})])  # a new generation
            first_before, ms_before, out_before = _time(before, args.repeats)
            store.delete_documents(["extra"])
            first_after, ms_after, out_after = _time(after, args.repeats)
            assert out_before == out_after, (name, out_before, out_after)
            print(f"{name:56s} {first_before:14.1f} {first_after:8.1f} {ms_before:17.1f} {ms_after:8.1f}")
        store.close()


if __name__ == "__main__":
    main()
