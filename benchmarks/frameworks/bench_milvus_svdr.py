"""SVDR full and β+rerank on Milvus Lite: ``svdr-vectors`` as a file in ``C__files`` (before) vs ``C__sparse`` rows.

    OMP_NUM_THREADS=1 python -m benchmarks.frameworks.bench_milvus_svdr 1000 20 [--data DIR]   # N passages, queries

The first N SciFact abstracts (from the data folder, see ``benchmarks/README.md``) with the offline
all-MiniLM-L6-v2 vocabulary encoder (``--model``; E(d) encoded once on a local store, then migrated into both
layouts); per layout and mode: a fresh read-only handle's open + first query, then the median / p95 latency of
one query at a time, and whether the top 10 equals the local store's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common.data import add_data_argument, scifact_dir
from benchmarks.common.timing import percentile
from benchmarks.frameworks.bench_milvus_fields import read_corpus


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", type=int, help="passages (the first N SciFact abstracts)")
    ap.add_argument("queries", type=int, help="queries (the first ones of queries.jsonl)")
    add_data_argument(ap)
    ap.add_argument("--model", default=None, help="the vocabulary encoder's model (default: the offline MiniLM)")
    args = ap.parse_args(argv)
    import torch

    from rag_hier import HierStore
    from rag_hier.encoders.dense import DEFAULT_MODEL, resolve_model_path
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.retrieval.svdr import SvdrRetriever, encode_missing_vectors
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.milvus import MilvusStore
    from rag_hier.store.milvus import store as ms
    from rag_hier.store.milvus.migrate import local_to_milvus

    torch.set_num_threads(1)
    model = str(resolve_model_path(args.model or DEFAULT_MODEL))
    passages, texts = read_corpus(scifact_dir(args.data), args.n, args.queries)
    enc = VocabEncoder(model, device="cpu")
    tmp = Path(tempfile.mkdtemp(prefix="bench-svdr-"))
    try:
        local = HierStore.create(tmp / "local", model=None, dimension=4)
        vectors = np.random.default_rng(0).standard_normal((len(passages), 4)).astype(np.float32)
        local.add_passages(passages, vectors)
        local.add_extension(TokenIndexExtension(model=model))
        t = time.perf_counter()
        encode_missing_vectors(local, enc)
        print("encode E(d)", round(time.perf_counter() - t, 1), "s", flush=True)
        saved = ms.engine_data
        ms.engine_data = lambda name: "files" if name == "svdr-vectors" else saved(name)  # before: a file in C__files
        try:
            local_to_milvus(local, f"{tmp / 'm.db'}#files").close()
        finally:
            ms.engine_data = saved
        local_to_milvus(local, f"{tmp / 'm.db'}#fields").close()
        want = {}
        for mode in ("full", "beta-rerank"):
            r = SvdrRetriever(local, mode=mode, encoder=enc)
            want[mode] = [[h.passage_id for h in r.search(t, top_k=10)] for t in texts]
        local.close()
        for kind in ("files", "fields"):
            for mode in ("full", "beta-rerank"):
                t0 = time.perf_counter()
                h = MilvusStore.open(f"{tmp / 'm.db'}#{kind}", read_only=True)
                r = SvdrRetriever(h, mode=mode, encoder=enc)
                r.search(texts[0], top_k=10)
                open_first = time.perf_counter() - t0
                lat, got = [], []
                for t in texts:
                    t1 = time.perf_counter()
                    got.append([x.passage_id for x in r.search(t, top_k=10)])
                    lat.append((time.perf_counter() - t1) * 1000)
                same = got == want[mode]
                print(
                    f"{kind:6s} {mode:12s} median {statistics.median(lat):7.1f} ms  p95 {percentile(lat, 95):7.1f} ms"
                    f"  open+first {open_first:5.2f} s  in_engine={h.extension_in_engine('svdr-vectors')}"
                    f"  same_top10={same}",
                    flush=True,
                )
                h.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
