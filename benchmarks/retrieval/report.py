"""Print the Markdown tables of docs/benchmarks.md from the JSON files under benchmarks/out/.

Usage::

    python -m benchmarks.retrieval.report [benchmarks/out/scifact.json] [benchmarks/out/dense-*.json ...]

Numbers are printed as measured (3-4 significant decimals), never rounded to a goal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.common.report import OUT


def scifact(path: Path) -> None:
    d = json.loads(path.read_text())
    print(f"SciFact test ({d['queries']} queries, {d['corpus_docs']} documents), run {d['date']}\n")
    print("| run | nDCG@10 | Recall@10 | Recall@100 | MRR@10 |")
    print("|---|---:|---:|---:|---:|")
    for name, m in d["runs"].items():
        print(f"| {name} | {m['ndcg@10']:.4f} | {m['recall@10']:.4f} | {m['recall@100']:.4f} | {m['mrr@10']:.4f} |")
    print()
    t = d["timings_s"]
    print("| timing | seconds |")
    print("|---|---:|")
    for k, v in t.items():
        print(f"| {k} | {v:.2f} |")
    if "store_index_total" in t and "raw_encode_comma" in t:
        print(f"| store index / raw encode | {t['store_index_total'] / t['raw_encode_comma']:.3f}x |")
    print()
    for key in ("model", "tokens", "tokens_space_join", "bm25", "store_vs_raw_vectors_max_abs_diff"):
        if key in d:
            print(f"- {key}: {d[key]}")
    print()


def dense(path: Path) -> None:
    d = json.loads(path.read_text())
    n = d["n"]
    print(
        f"N={n:,} x {d['dim']}-d, {d['centers']} centres, noise {d['noise']}, {d['queries']} queries, "
        f"FAISS {d['faiss']}, {d['threads']} threads\n"
    )
    print(
        "| index | params | recall@10 raw / store | build s raw / store (ratio) | single median ms raw / store "
        "(ratio) | p95 ms raw / store | store index-layer median ms | batch QPS raw / store (ratio) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for kind, r in d["kinds"].items():
        params = ", ".join(f"{k}={v}" for k, v in r.get("param", {}).items()) or "exact"
        print(
            f"| {kind} | {params} | {r['raw_recall@10']:.4f} / {r['store_recall@10']:.4f} | "
            f"{r['raw_build_s']:.1f} / {r['store_build_s']:.1f} ({r['build_ratio']:.2f}x) | "
            f"{r['raw_median_ms']:.3f} / {r['store_median_ms']:.3f} ({r['ratio_median']:.2f}x) | "
            f"{r['raw_p95_ms']:.3f} / {r['store_p95_ms']:.3f} | {r['store_index_median_ms']:.3f} | "
            f"{r['raw_batch_qps']:.0f} / {r['store_batch_qps']:.0f} ({r['batch_ratio']:.2f}x) |"
        )
    print()
    if any("memory" in r for r in d["kinds"].values()) or "haystack_inmemory" in d:
        print("| index | RSS delta raw MiB (x f32) | RSS delta store MiB (x f32) | store files on disk MiB |")
        print("|---|---:|---:|---:|")
        for kind, r in d["kinds"].items():
            m = r.get("memory")
            if not m:
                continue
            mib = 2**20
            print(
                f"| {kind} | {m['raw']['delta_bytes'] / mib:.0f} ({m['raw']['ratio_to_raw_f32']:.3f}x) | "
                f"{m['store']['delta_bytes'] / mib:.0f} ({m['store']['ratio_to_raw_f32']:.3f}x) | "
                f"{r['store_disk_bytes'] / mib:.0f} |"
            )
        h = d.get("haystack_inmemory")
        if h:
            print(
                f"| Haystack InMemoryDocumentStore | - | {(h['rss_after'] - h['rss_before']) / 2**20:.0f} "
                f"({h['ratio_to_raw_f32']:.3f}x); {h['query_ms']:.0f} ms/query | - |"
            )
        print()
    for kind, r in d["kinds"].items():
        if r.get("tuning"):
            sweep = ", ".join(f"{s['param']}: {s['recall@10']:.4f}" for s in r["tuning"])
            print(f"- {kind} tuning (raw recall@10): {sweep}")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, help="JSON files (default: scifact.json, dense-*.json in --out)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON files are (default %(default)s)")
    args = parser.parse_args(argv)
    out = args.out
    paths = args.files or [out / "scifact.json", *sorted(out.glob("dense-*.json"))]
    for p in paths:
        if not p.exists():
            print(f"(missing {p})\n")
            continue
        print(f"### {p.name}\n")
        (scifact if p.name.startswith("scifact") else dense)(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
