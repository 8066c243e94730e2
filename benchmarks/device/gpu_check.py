"""The engine's GPU paths on one machine: encoding precisions, exact search on 1M vectors, a store, a training step.

Sections (each writes into one ``gpu_check.json``, with the machine's name and versions):

* ``encode``: SciFact's corpus through :class:`~rag_hier.encoders.DenseEncoder` on the device in float16 (the
  CUDA default), bfloat16 and float32, and on the CPU (all its cores, a subset); documents per second, how far
  each precision's vectors are from float32's, and test nDCG@10 of each (exact search, pytrec_eval).
* ``search``: 1M clustered 384-d unit vectors, 1,000 queries, top 10: FAISS ``IndexFlatIP`` on the CPU (all
  cores), FAISS on the GPU when this FAISS build has one, and an exact matrix-product top-k in PyTorch on the
  device (float32 and float16); queries per second and recall@10 against FAISS's exact result.
* ``store``: a :class:`~rag_hier.HierStore` built with the encoder on the device (documents per second,
  end to end), searched with the 300 test queries; then reopened with queries encoded on the CPU: nDCG@10 of
  both and how many of the top 10 agree.
* ``train``: seconds per HCE supervised step (batch 32, 4 tree negatives, 128 tokens, GradCache mini-batches of
  32) on the device in float32 and bfloat16, and on the CPU.

Run (repository root)::

    python -m benchmarks.device.gpu_check --data ../shared/data --out benchmarks/out/device
    python -m benchmarks.device.gpu_check --smoke --out /tmp/smoke      # CPU, tiny model, seconds

Expected: about 3 minutes on one H100 (SciFact, 1M vectors), after the setup of ``benchmarks/device/run.sh``.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import load_scifact
from benchmarks.device.common import Deadline, add_common_arguments, machine, resolve, write_result

logger = logging.getLogger("gpu_check")


def _scifact(data: Path) -> tuple[list[Any], list[str], list[str], dict[str, str], dict, dict]:
    d = load_scifact(data)
    texts = [f"{doc.title}, {' '.join(p for s in doc.sections for p in s.paragraphs)}" for doc in d.documents]
    return d.documents, [doc.doc_id for doc in d.documents], texts, d.queries, d.qrels, d.train_qrels


def _ndcg(q: np.ndarray, qids: list[str], c: np.ndarray, ids: list[str], qrels: dict) -> float:
    from rag_hier.eval import evaluate

    scores = q @ c.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {qid: {ids[j]: float(scores[i, j]) for j in top[i]} for i, qid in enumerate(qids)}
    return round(evaluate(run, qrels, ["ndcg@10"])["ndcg@10"], 4)


def _encode(
    model: str, device: str, precision: str, texts: list[str], *, query: bool = False, passes: int = 1
) -> tuple[np.ndarray, list[float], str]:
    """Vectors, the seconds of each pass over ``texts`` (the first one cold), the attention implementation."""
    from rag_hier.encoders import DenseEncoder

    enc = DenseEncoder(model, device=device, precision=precision, batch_size=128)  # type: ignore[arg-type]
    enc.encode_documents(texts[:8])  # load
    seconds = []
    for _ in range(passes):
        _sync(device)
        t = time.perf_counter()
        out = enc.encode_queries(texts) if query else enc.encode_documents(texts)
        _sync(device)
        seconds.append(time.perf_counter() - t)
    config = getattr(getattr(enc.model[0], "auto_model", None), "config", None)
    return out, seconds, str(getattr(config, "_attn_implementation", "?"))


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def section_encode(args: argparse.Namespace, texts: list[str], queries: dict, test: dict, ids: list[str]) -> dict:
    qids = [q for q in test if q in queries]
    qtexts = [queries[q] for q in qids]
    out: dict[str, Any] = {"documents": len(texts), "queries": len(qids)}
    vectors: dict[str, np.ndarray] = {}
    precisions = ["float32", "float16", "bfloat16"] if args.device != "cpu" else ["float32"]
    for precision in precisions:
        c, seconds, attention = _encode(args.model, args.device, precision, texts, passes=2)
        q, _, _ = _encode(args.model, args.device, precision, qtexts, query=True)
        vectors[precision] = c
        out[f"device_{precision}"] = {
            "docs_per_s_cold": round(len(texts) / seconds[0], 1),
            "docs_per_s": round(len(texts) / seconds[-1], 1),
            "attention": attention,
            "ndcg@10": _ndcg(q, qids, c, ids, test),
        }
    ref = vectors["float32"]
    args.corpus_vectors = ref  # the train section's tree starts from these (no CPU re-encoding of the corpus)
    for precision, c in vectors.items():
        cos = np.sum(c * ref, axis=1)
        out[f"device_{precision}"]["cosine_to_float32"] = {
            "min": round(float(cos.min()), 6),
            "mean": round(float(cos.mean()), 6),
        }
    n_cpu = min(len(texts), args.cpu_docs)
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    c_cpu, cpu_seconds, _ = _encode(args.model, "cpu", "float32", texts[:n_cpu])
    cos = np.sum(c_cpu * ref[:n_cpu], axis=1)
    out["cpu_subset_float32"] = {
        "documents": n_cpu,
        "threads": torch.get_num_threads(),
        "docs_per_s": round(n_cpu / cpu_seconds[0], 1),
        "cosine_to_device_float32": {"min": round(float(cos.min()), 6), "mean": round(float(cos.mean()), 6)},
    }
    if args.device != "cpu":
        cpu_rate = out["cpu_subset_float32"]["docs_per_s"]
        out["speedup_float16_vs_cpu"] = round(out["device_float16"]["docs_per_s"] / cpu_rate, 1)
    return out


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((max(n // 1000, 8), dim)).astype(np.float32)
    x = centers[rng.integers(0, len(centers), n)] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def section_search(args: argparse.Namespace) -> dict:
    import faiss
    import torch

    n, nq, k, dim = args.vectors, args.search_queries, 10, 384
    x = _clustered(n, dim, 0)
    rng = np.random.default_rng(1)
    q = x[rng.integers(0, n, nq)] + 0.3 * rng.standard_normal((nq, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    out: dict[str, Any] = {"vectors": n, "queries": nq, "dim": dim, "k": k}
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    index = faiss.IndexFlatIP(dim)
    index.add(x)
    index.search(q[:10], k)
    t = time.perf_counter()
    _, exact = index.search(q, k)
    seconds = time.perf_counter() - t
    out["faiss_cpu_flat"] = {"threads": faiss.omp_get_max_threads(), "qps": round(nq / seconds, 1)}

    def recall(found: np.ndarray) -> float:
        return round(
            float(np.mean([len(set(a) & set(b)) / k for a, b in zip(found.tolist(), exact.tolist(), strict=True)])), 4
        )

    if out_gpus := (faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0):
        gindex = faiss.index_cpu_to_all_gpus(index)
        gindex.search(q[:10], k)
        t = time.perf_counter()
        _, found = gindex.search(q, k)
        out["faiss_gpu_flat"] = {
            "gpus": out_gpus,
            "qps": round(nq / (time.perf_counter() - t), 1),
            "recall@10": recall(found),
        }
    else:
        out["faiss_gpu_flat"] = "not measured: this FAISS build has no GPU support"
    if args.device != "cpu":
        for dtype in (torch.float32, torch.float16):
            xs = torch.from_numpy(x).to(args.device, dtype)
            qs = torch.from_numpy(q).to(args.device, dtype)
            torch.topk(qs[:10] @ xs.T, k, dim=1)
            _sync(args.device)
            t = time.perf_counter()
            found = torch.cat([torch.topk(qs[i : i + 256] @ xs.T, k, dim=1).indices for i in range(0, nq, 256)])
            found_np = found.cpu().numpy()
            seconds = time.perf_counter() - t
            name = f"torch_{args.device}_{str(dtype).split('.')[-1]}"
            out[name] = {"qps": round(nq / seconds, 1), "recall@10": recall(found_np)}
            del xs, qs
        torch.cuda.empty_cache()
        out["torch_float16_vs_faiss_cpu"] = round(
            out[f"torch_{args.device}_float16"]["qps"] / out["faiss_cpu_flat"]["qps"], 1
        )
    return out


def section_store(args: argparse.Namespace, docs: list[Any], queries: dict, test: dict) -> dict:
    from rag_hier import HierStore
    from rag_hier.encoders import DenseEncoder
    from rag_hier.eval import evaluate

    qids = [q for q in test if q in queries]
    out: dict[str, Any] = {}
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store"
        store = HierStore.create(path, encoder=DenseEncoder(args.model, device=args.device, batch_size=128))
        t = time.perf_counter()
        store.add_documents(docs)
        seconds = time.perf_counter() - t
        out["build"] = {
            "documents": len(docs),
            "passages": store.count_passages(),
            "docs_per_s": round(len(docs) / seconds, 1),
        }
        for device in dict.fromkeys([args.device, "cpu"]):
            if device != args.device:
                store.close()
                store = HierStore.open(path, device=device)
            store.search([queries[q] for q in qids[:4]], top_k=10)  # load and warm up
            t = time.perf_counter()
            hits = store.search([queries[q] for q in qids], top_k=100)
            seconds = time.perf_counter() - t
            run: dict[str, dict[str, float]] = {}
            for qid, row in zip(qids, hits, strict=True):
                for h in row:
                    run.setdefault(qid, {}).setdefault(h.doc_id, float(h.score))
            runs[device] = run
            out[f"queries_on_{device}"] = {
                "qps": round(len(qids) / seconds, 1),
                "ndcg@10": round(evaluate(run, test, ["ndcg@10"])["ndcg@10"], 4),
            }
        store.close()
    if len(runs) == 2:
        a, b = runs.values()

        def top10(r: dict[str, float]) -> set[str]:
            return set(sorted(r, key=lambda d: -r[d])[:10])

        out["top10_agreement"] = round(float(np.mean([len(top10(a[q]) & top10(b[q])) / 10 for q in a if q in b])), 4)
    return out


def section_train(args: argparse.Namespace, docs: list[Any], queries: dict, train: dict, deadline: Deadline) -> dict:
    from rag_hier.corpus import split_documents
    from rag_hier.training.hce import HCEConfig, HCETrainer

    passages = split_documents(docs, 0)
    out: dict[str, Any] = {"batch_size": args.train_batch, "max_seq_length": 128, "n_negatives": 4}
    runs = (
        [(args.device, "float32", args.train_steps), (args.device, "bfloat16", args.train_steps)]
        if args.device != "cpu"
        else []
    )
    runs.append(("cpu", "float32", args.cpu_train_steps))
    for device, precision, steps in runs:
        if deadline.left() < (0 if args.smoke else 60):
            out[f"{device}_{precision}"] = "skipped: deadline"
            continue
        cfg = HCEConfig(
            mode="supervised",
            n_negatives=4,
            batch_size=args.train_batch,
            mini_batch_size=32,
            max_seq_length=128,
            max_steps=steps,
            steps_per_epoch=steps,
            epochs=1,
            recluster="never",
            dev_fraction=0.0,
            bf16=precision == "bfloat16",
            seed=0,
        )
        with tempfile.TemporaryDirectory() as tmp:
            trainer = HCETrainer(cfg, model=args.model, device=device, show_progress_bar=False)
            t = time.perf_counter()
            result = trainer.train(
                passages,
                Path(tmp) / "model",
                queries=queries,
                qrels=train,
                corpus_embeddings=getattr(args, "corpus_vectors", None),
            )
            total = time.perf_counter() - t
        trained = [e for e in result.history if e.epoch > 0]  # epoch 0 is the starting model
        out[f"{device}_{precision}"] = {
            "steps": result.steps,
            "seconds_per_step": round(sum(e.seconds for e in trained) / max(result.steps, 1), 4),
            "total_seconds_incl_setup": round(total, 1),
        }
    cpu = out.get("cpu_float32")
    for key in (f"{args.device}_float32", f"{args.device}_bfloat16"):
        if args.device != "cpu" and isinstance(out.get(key), dict) and isinstance(cpu, dict):
            out[f"speedup_{key}_vs_cpu"] = round(cpu["seconds_per_step"] / out[key]["seconds_per_step"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, default_out="device")
    p.add_argument("--vectors", type=int, default=1_000_000, help="search: database size")
    p.add_argument("--search-queries", type=int, default=1000)
    p.add_argument("--cpu-docs", type=int, default=1000, help="encode: documents encoded on the CPU")
    p.add_argument("--train-steps", type=int, default=40, help="train: steps on the device")
    p.add_argument("--cpu-train-steps", type=int, default=3, help="train: steps on the CPU")
    p.add_argument("--train-batch", type=int, default=32)
    p.add_argument("--sections", nargs="+", default=["encode", "search", "store", "train"])
    args = p.parse_args(argv)
    if args.smoke:
        args.vectors, args.search_queries, args.cpu_docs, args.train_steps, args.cpu_train_steps = 5000, 50, 20, 2, 2
        args.train_batch = 8
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("transformers", "sentence_transformers", "httpx", "datasets", "faiss", "rag_hier"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args = resolve(args)
    deadline = Deadline(args.seconds)
    docs, ids, texts, queries, test, train = _scifact(args.data)
    result: dict[str, Any] = {
        "machine": machine(),
        "device": args.device,
        "model": str(args.model),
        "smoke": args.smoke,
    }
    sections = {
        "encode": lambda: section_encode(args, texts, queries, test, ids),
        "search": lambda: section_search(args),
        "store": lambda: section_store(args, docs, queries, test),
        "train": lambda: section_train(args, docs, queries, train, deadline),
    }
    for name in args.sections:
        if deadline.left() < (0 if args.smoke else 30):
            result[name] = "skipped: deadline"
            continue
        t = time.perf_counter()
        try:
            result[name] = sections[name]()
        except Exception as exc:  # one failed section must not lose the others' figures
            logger.exception("section %s failed", name)
            result[name] = f"failed: {type(exc).__name__}: {exc}"
        logger.info("%s done in %.1f s", name, time.perf_counter() - t)
        write_result(args.out, "gpu_check", result)
    print(write_result(args.out, "gpu_check", result).read_text())
    return 0 if not any(isinstance(v, str) and v.startswith("failed") for v in result.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
