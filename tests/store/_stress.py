"""Worker processes of the multi-process consistency test (run as ``python _stress.py ROLE STORE OUT ...``)."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import numpy as np

DIM = 8


def vector(doc: int, part: int) -> np.ndarray:
    rng = np.random.default_rng(doc * 7 + part)
    return rng.standard_normal(DIM).astype(np.float32)


def writer(path: str, out: str, n_writes: int) -> None:
    from rag_hier import HierStore, Passage

    store = HierStore.open(path)
    log = open(out, "w", encoding="utf-8")  # noqa: SIM115 - appended to as writes are acknowledged
    errors: list[str] = []
    start = 1000
    for i in range(n_writes):
        doc = start + i
        try:
            if i % 10 == 9:  # delete an earlier document of this run
                victim = start + i - 5
                store.delete_documents([f"d{victim}"])
                log.write(json.dumps({"op": "delete", "doc": victim}) + "\n")
            else:
                passages = [
                    Passage(
                        f"d{doc}#{k}",
                        f"d{doc}",
                        k,
                        f"word{doc % 13} text {doc} part {k}",
                        meta={"g": doc % 5, "doc": doc},
                    )
                    for k in range(2)
                ]
                store.add_passages(passages, np.stack([vector(doc, k) for k in range(2)]))
                log.write(json.dumps({"op": "add", "doc": doc}) + "\n")
            log.flush()
            os.fsync(log.fileno())
        except Exception:  # every failure is a finding
            errors.append(traceback.format_exc(limit=3))
    store.close()
    log.close()
    with open(out + ".errors.json", "w", encoding="utf-8") as f:
        json.dump(errors, f)


def reader(path: str, out: str, stop_file: str, hit_rows: str = "sqlite") -> None:
    from rag_hier import HierStore
    from rag_hier.retrieval import DenseRetriever, Queries, build_retriever

    errors: list[str] = []
    ops = 0
    last_generation = -1
    long_lived = HierStore.open(path, read_only=True, hit_rows=hit_rows)  # type: ignore[arg-type]
    rng = np.random.default_rng(os.getpid())

    def check(store: HierStore) -> None:
        nonlocal ops, last_generation
        counts = store.manifest["counts"]
        assert counts["passages"] == 2 * counts["documents"], counts
        assert store.count_passages() % 2 == 0
        g = int(rng.integers(0, 5))
        same = store.filter_passages({"field": "meta.g", "operator": "==", "value": g})
        per_doc: dict[str, int] = {}
        for p in same:
            per_doc[p.doc_id] = per_doc.get(p.doc_id, 0) + 1
        assert all(v == 2 for v in per_doc.values()), per_doc
        q = Queries(texts=[f"word{g}"], vectors=rng.standard_normal((1, DIM)).astype(np.float32))
        for name in ("dense", "hierarchical", "svdr-lexical"):
            hits = build_retriever(name, store).run(q, top_k=10)[0].hits
            assert len(hits) == 10, (name, len(hits))
            assert [h.rank for h in hits] == list(range(1, 11))
        # the dense search path (hit rows from SQLite or from memory): a full list of hits, each the row of
        # its own passage (text and metadata of its document)
        hits = DenseRetriever(store).search_vectors(q.vectors, top_k=40)[0]
        assert len(hits) == 40, len(hits)
        for h in hits:
            doc = int(h.doc_id[1:])
            assert h.meta == {"g": doc % 5, "doc": doc} and h.text.startswith(f"word{doc % 13} text {doc} part ")
        gen = store.generation
        if store is long_lived:
            assert gen >= last_generation
            last_generation = gen
        ops += 1

    while not os.path.exists(stop_file):
        try:
            check(long_lived)
            fresh = HierStore.open(path, read_only=True, hit_rows=hit_rows)  # type: ignore[arg-type]
            try:
                check(fresh)
            finally:
                fresh.close()
        except Exception:
            errors.append(traceback.format_exc(limit=4))
            if len(errors) > 20:
                break
        time.sleep(0.001)
    long_lived.close()
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"ops": ops, "errors": errors}, f)


if __name__ == "__main__":
    role = sys.argv[1]
    if role == "writer":
        writer(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        reader(sys.argv[2], sys.argv[3], sys.argv[4], *sys.argv[5:6])
