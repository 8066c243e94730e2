"""EHI on SciFact (BEIR): recall against the *measured* fraction of the corpus scored, vs exact / IVF / HCE tree.

Usage (every stage writes JSON under ``--out``, default ``benchmarks/out/ehi/``; SciFact from the data folder, see
``benchmarks/README.md``; run long stages in the background with nice)::

    E="python -m benchmarks.retrieval.bench_ehi"
    $E encode                     # base MiniLM vectors (128 tokens), cached
    $E sweep --split dev  --branching 40 --height 1 --seeds 0 1 2 [EHI options]
    $E train --kind joint --split test --branching 40 --height 1 --seed 0 --steps 60
    $E train --kind de    --split test --seed 0 --steps 60   # dual-encoder baseline
    $E sweep --split test --vectors joint-test-B40H1-s0 --indexer-of joint-test-B40H1-s0
    $E incremental --split test --branching 40 --height 1 --seeds 0 1 2
    $E report                     # markdown tables + docs/img/ehi_recall_vs_scored.png
    $E paired --split dev --vectors A B --indexer-of A B   # per-query B - A, paired bootstrap 95 % intervals

Protocol. Corpus = SciFact ``corpus.jsonl.gz`` (5,183 documents kept whole, ``"<title>, <text>"`` as the store
encodes them), max_seq_length 128. ``--split dev``: 25 % of the *training* queries (``qrels/train.tsv``, seed 0)
are held out for evaluation and the rest train; ``--split test``: all training queries train, the 300 test
queries evaluate (touched once, after the choices were made on dev). Recall@100 / Recall@10 / nDCG@10 through
:func:`rag_hier.eval.evaluate` (pytrec_eval). "Fraction scored" is measured per query: the number of documents
whose vectors were compared with the query (the sizes of the leaves / inverted lists reached) over the corpus
size, averaged over the evaluation queries. Methods:

* ``exact``: inner product with every document (fraction 1);
* ``ivf``: FAISS ``IndexIVFFlat`` with ``nlist`` = the EHI tree's leaves, nprobe swept, k-means seed = run seed;
* ``tree``: the HCE cluster tree (:class:`rag_hier.index.tree.ClusterTree`, automatic branching), beam swept;
* ``ehi-frozen``: the EHI indexer trained alone on the (frozen) vectors, beam swept;
* ``ehi-joint``: the indexer trained jointly with the encoder that produced the vectors (``--indexer-of``).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import REPO, add_data_argument, load_scifact, scifact_dir
from benchmarks.common.report import out_path, paired_bootstrap, write_json

OUT = out_path("ehi")
"""Where results, vectors and models go (``--out``)."""
IMG = REPO / "docs" / "img"
BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MAX_LEN = 128
METRICS = ("recall@100", "recall@10", "ndcg@10")


# -- data ---------------------------------------------------------------------------------------------
def load(split: str, data: Path | None) -> tuple[list[Any], dict[str, str], dict, dict]:
    """Passages, queries, evaluation qrels, training qrels (``dev``: 25 % of the training queries held out, seed 0)."""
    d = load_scifact(data, dev=0.25 if split == "dev" else 0.0, seed=0)
    return d.passages(), d.queries, d.qrels, d.train_qrels


def encode_with(
    model_path: str, name: str, data: Path | None, corpus: np.ndarray | None = None, device: str = "cpu"
) -> dict[str, Any]:
    """Encode the corpus and every query with a model; cache as ``<name>_corpus.npy`` / ``<name>_queries.npy``.

    ``corpus``: the corpus vectors, when the trainer already computed them with the final model.
    """
    from sentence_transformers import SentenceTransformer

    from rag_hier.corpus import read_beir_corpus, read_queries, split_documents
    from rag_hier.encoders.dense import resolve_model_path

    root = scifact_dir(data)
    passages = split_documents(read_beir_corpus(root), 0)
    queries = read_queries(root / "queries.jsonl")
    model = SentenceTransformer(resolve_model_path(model_path), device=device)
    model.max_seq_length = MAX_LEN
    t = time.perf_counter()
    q = model.encode_query(list(queries.values()), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
    c = corpus
    if c is None:
        c = model.encode_document(
            [p.embedding_text for p in passages], batch_size=32, normalize_embeddings=True, convert_to_numpy=True
        )
    save_vectors(name, c, q, list(queries))
    return {"name": name, "model": model_path, "encode_seconds": round(time.perf_counter() - t, 1)}


def save_vectors(name: str, corpus: np.ndarray, queries: np.ndarray, query_ids: list[str]) -> None:
    """``<name>_corpus.npy`` / ``<name>_queries.npy`` (whole files only, also if killed meanwhile) and the query ids."""
    for part, arr in (("corpus", corpus), ("queries", queries)):
        np.save(OUT / f"{name}_{part}.tmp.npy", np.asarray(arr, np.float32), allow_pickle=False)
        (OUT / f"{name}_{part}.tmp.npy").replace(OUT / f"{name}_{part}.npy")
    (OUT / "query_ids.json").write_text(json.dumps(query_ids))


def vectors(name: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    c = np.load(OUT / f"{name}_corpus.npy", allow_pickle=False)
    q = np.load(OUT / f"{name}_queries.npy", allow_pickle=False)
    qids = json.loads((OUT / "query_ids.json").read_text())
    return c, dict(zip(qids, q, strict=True))


def evaluate_run(ids: np.ndarray, scores: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict) -> dict:
    from rag_hier.eval import evaluate

    run = {
        q: {doc_ids[int(j)]: float(s) for s, j in zip(scores[i], ids[i], strict=True) if j >= 0}
        for i, q in enumerate(qids)
    }
    return {k: round(v, 4) for k, v in evaluate(run, qrels, METRICS).items()}


# -- indexes ------------------------------------------------------------------------------------------
def beams_for(n_leaves: int) -> list[int]:
    cand = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    return sorted({b for b in cand if b < n_leaves} | {n_leaves})


def sweep_exact(c: np.ndarray, q: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict) -> dict:
    t = time.perf_counter()
    s = q @ c.T
    top = np.argsort(-s, axis=1, kind="stable")[:, :100]
    ms = 1000 * (time.perf_counter() - t) / len(qids)
    m = evaluate_run(top, np.take_along_axis(s, top, axis=1), qids, doc_ids, qrels)
    return {"method": "exact", "param": 0, "fraction": 1.0, **m, "ms_per_query": round(ms, 3)}


def sweep_ivf(
    c: np.ndarray, q: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict, nlist: int, seed: int
) -> tuple[list[dict], dict]:
    import faiss

    t = time.perf_counter()
    quant = faiss.IndexFlatIP(c.shape[1])
    ivf = faiss.IndexIVFFlat(quant, c.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = seed
    ivf.train(c)
    ivf.add(c)
    build = time.perf_counter() - t
    sizes = np.array([ivf.invlists.list_size(i) for i in range(nlist)])
    rows = []
    for nprobe in beams_for(nlist):
        ivf.nprobe = nprobe
        t = time.perf_counter()
        scores, ids = ivf.search(q, 100)
        ms = 1000 * (time.perf_counter() - t) / len(qids)
        _, probed = quant.search(q, nprobe)
        frac = float(sizes[probed].sum(axis=1).mean() / len(c))
        m = evaluate_run(ids, scores, qids, doc_ids, qrels)
        rows.append(
            {
                "method": "ivf",
                "seed": seed,
                "param": nprobe,
                "fraction": round(frac, 5),
                **m,
                "ms_per_query": round(ms, 3),
            }
        )
    return rows, {"build_seconds": round(build, 3), "leaf_sizes": leaf_stats(sizes)}


def sweep_tree(
    c: np.ndarray, q: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict, seed: int
) -> tuple[list[dict], dict]:
    from rag_hier.index.tree import ClusterTree, TreeBuildConfig

    t = time.perf_counter()
    tree = ClusterTree.build(c, config=TreeBuildConfig(seed=seed))
    build = time.perf_counter() - t
    rows = []
    for beam in beams_for(max(tree.level_sizes)):
        t = time.perf_counter()
        res = tree.search(q, beam=beam, top_k=100, vectors_of=lambda pos: c[pos])
        ms = 1000 * (time.perf_counter() - t) / len(qids)
        m = evaluate_run(res.ids, res.scores, qids, doc_ids, qrels)
        frac = round(float(res.fraction_scored.mean()), 5)
        rows.append(
            {"method": "tree", "seed": seed, "param": beam, "fraction": frac, **m, "ms_per_query": round(ms, 3)}
        )
    return rows, {
        "build_seconds": round(build, 3),
        "tree": tree.describe(),
        "leaf_sizes": leaf_stats(tree.leaf_sizes()),
    }


def sweep_ehi(
    method: str, indexer: Any, leaves: np.ndarray, c: np.ndarray, q: np.ndarray, qids: list[str], doc_ids: list[str],
    qrels: dict, seed: int,
) -> list[dict]:  # fmt: skip
    from rag_hier.index.ehi import LeafAssignment, ehi_search

    assignment = LeafAssignment(leaves, indexer.n_leaves)
    rows = []
    for beam in beams_for(indexer.n_leaves):
        t = time.perf_counter()
        res = ehi_search(indexer, q, c, assignment, beam=beam, top_k=100)
        ms = 1000 * (time.perf_counter() - t) / len(qids)
        m = evaluate_run(res.ids, res.scores, qids, doc_ids, qrels)
        frac = round(float(res.fraction_scored.mean()), 5)
        rows.append(
            {"method": method, "seed": seed, "param": beam, "fraction": frac, **m, "ms_per_query": round(ms, 3)}
        )
    return rows


def leaf_stats(sizes: np.ndarray) -> dict[str, Any]:
    sizes = np.asarray(sizes, np.int64)
    n = max(int(sizes.sum()), 1)
    return {
        "leaves": int(sizes.size),
        "nonempty": int((sizes > 0).sum()),
        "max": int(sizes.max()),
        "min": int(sizes.min()),
        "mean": round(float(sizes.mean()), 1),
        "cv": round(float(sizes.std() / max(sizes.mean(), 1e-9)), 3),
        "expected_fraction_one_leaf": round(float((sizes.astype(np.float64) ** 2).sum() / n**2), 5),
        "sorted": sorted(sizes.tolist(), reverse=True),
    }


def ehi_config(args: argparse.Namespace, seed: int, **overrides: Any) -> Any:
    from rag_hier.training.ehi import EHIConfig

    values = {
        "branching": args.branching,
        "height": args.height,
        "lambda_siamese": args.lambdas[0],
        "lambda_indexing": args.lambdas[1],
        "lambda_intra": args.lambdas[2],
        "indexer_lr": args.indexer_lr,
        "encoder_lr": args.encoder_lr,
        "epochs": args.epochs,
        "refit_epochs": args.refit_epochs,
        "warmup_epochs": getattr(args, "warmup_epochs", 0),
        "refresh_every": args.refresh_every,
        "remine_every": getattr(args, "remine_every", None),
        "lambda_balance": getattr(args, "lambda_balance", 0.0),
        "encoder_scope": getattr(args, "encoder_scope", "all"),
        "init": args.init,
        "mined_negative_terms": args.mined_negative_terms,
        "mine_leaves": args.mine_leaves,
        "batch_size": args.batch_size,
        "max_seq_length": MAX_LEN,
        "seed": seed,
        "logging_steps": 1,
    }
    values.update(overrides)
    return EHIConfig(**values)


def train_frozen(args: argparse.Namespace, seed: int, passages: list[Any], queries: dict, train_qrels: dict,
                 c: np.ndarray, qv: dict) -> Any:  # fmt: skip
    from rag_hier.training.ehi import EHITrainer

    cfg = ehi_config(args, seed, freeze_encoder=True)
    trainer = EHITrainer(cfg, model=args.base_model, device="cpu", show_progress_bar=False)
    return trainer.train(passages, None, queries=queries, qrels=train_qrels, corpus_embeddings=c, query_embeddings=qv)


# -- stages -------------------------------------------------------------------------------------------
def stage_encode(args: argparse.Namespace) -> dict[str, Any]:
    return encode_with(args.model or args.base_model, args.name or f"base_len{MAX_LEN}", args.data, device=args.device)


def stage_sweep(args: argparse.Namespace) -> dict[str, Any]:
    """Exact, IVF, HCE tree and EHI (indexer alone on these vectors; and the joint indexer) on one set of vectors."""
    from rag_hier.index.ehi import EHIIndexer

    passages, queries, eval_qrels, train_qrels = load(args.split, args.data)
    name = args.vectors or f"base_len{MAX_LEN}"
    c, qv = vectors(name)
    doc_ids = [p.doc_id for p in passages]
    qids = [q for q in eval_qrels if q in qv]
    q = np.stack([qv[x] for x in qids])
    n_leaves = args.branching**args.height
    rows: list[dict] = [sweep_exact(c, q, qids, doc_ids, eval_qrels)]
    info: dict[str, Any] = {"ivf": {}, "tree": {}, "ehi-frozen": {}, "ehi-joint": {}}
    for seed in args.seeds:
        r, i = sweep_ivf(c, q, qids, doc_ids, eval_qrels, n_leaves, seed)
        rows += r
        info["ivf"][seed] = i
        if not args.no_tree:
            r, i = sweep_tree(c, q, qids, doc_ids, eval_qrels, seed)
            rows += r
            info["tree"][seed] = i
        if not args.no_frozen:
            t = time.perf_counter()
            res = train_frozen(args, seed, passages, queries, train_qrels, c, qv)
            train_s = time.perf_counter() - t
            t = time.perf_counter()
            leaves = res.indexer.assign(c, top_k=args.leaves_per_document)
            assign_s = time.perf_counter() - t
            rows += sweep_ehi("ehi-frozen", res.indexer, leaves, c, q, qids, doc_ids, eval_qrels, seed)
            info["ehi-frozen"][seed] = {
                "train_seconds": round(train_s, 2),
                "assign_seconds": round(assign_s, 3),
                "steps": res.steps,
                "leaf_sizes": leaf_stats(np.bincount(leaves[:, 0], minlength=n_leaves)),
                "history": [
                    {"epoch": p.first_epoch, "loss": p.loss, "leaf_max": p.leaves["leaf_size_max"],
                     "nonempty": p.leaves["leaves_nonempty"], "fallback": p.fallback_negatives}
                    for p in res.history
                ],
            }  # fmt: skip
        logging.info("seed %d done", seed)
    for joint in args.indexer_of or []:
        indexer = EHIIndexer.from_pretrained(OUT / "models" / joint)
        leaves = indexer.assign(c, top_k=args.leaves_per_document)
        seed = int(re.search(r"-s(\d+)", joint).group(1))  # name: <kind>-<split>-B<b>H<h>-s<seed>[tag]
        rows += sweep_ehi("ehi-joint", indexer, leaves, c, q, qids, doc_ids, eval_qrels, seed)
        info["ehi-joint"][joint] = {"leaf_sizes": leaf_stats(np.bincount(leaves[:, 0], minlength=indexer.n_leaves))}
    return {
        "split": args.split,
        "vectors": name,
        "branching": args.branching,
        "height": args.height,
        "n_leaves": n_leaves,
        "queries": len(qids),
        "ehi_config": ehi_config(args, 0).to_dict(),
        "leaves_per_document": args.leaves_per_document,
        "rows": rows,
        "info": info,
    }


def stage_train(args: argparse.Namespace) -> dict[str, Any]:
    """Joint EHI (``--kind joint``) or the dual-encoder baseline (``--kind de``: siamese triplet loss only,
    hard negatives from the exact nearest documents) from the base encoder, the same budget; then encode."""
    import torch

    from rag_hier.training.ehi import EHITrainer

    passages, queries, _, train_qrels = load(args.split, args.data)
    c, _ = vectors(f"base_len{MAX_LEN}")
    seed = args.seeds[0]
    name = f"{args.kind}-{args.split}-B{args.branching}H{args.height}-s{seed}{args.tag}"
    overrides: dict[str, Any] = {"max_steps": args.steps}
    if args.kind == "de":
        overrides.update(lambda_siamese=1.0, lambda_indexing=0.0, lambda_intra=0.0, mine_from="exact")
    cfg = ehi_config(args, seed, **overrides)
    torch.manual_seed(seed)
    t = time.perf_counter()
    trainer = EHITrainer(cfg, model=args.base_model, device=args.device, show_progress_bar=False)
    on_period = None
    if args.checkpoint:  # a long run cut short still leaves its last finished period's vectors and indexer
        texts = [p.embedding_text for p in passages]

        def on_period(period: Any, indexer: Any) -> None:
            model = trainer.model
            q = model.encode_query(list(queries.values()), batch_size=256, normalize_embeddings=True)
            cv = model.encode_document(texts, batch_size=256, normalize_embeddings=True)
            save_vectors(name, cv, q, list(queries))
            epochs_done = period.first_epoch + period.epochs - 1
            indexer.save_pretrained(OUT / "models" / name, info={"checkpoint_epochs": epochs_done})
            done = {
                "name": name,
                "epochs_done": epochs_done,
                "seconds": round(time.perf_counter() - t, 1),
                "loss": period.loss,
                "leaf_max": period.leaves["leaf_size_max"],
                "nonempty": period.leaves["leaves_nonempty"],
            }
            with (OUT / f"{name}_checkpoints.jsonl").open("a") as fh:
                fh.write(json.dumps(done) + "\n")

    res = trainer.train(
        passages, OUT / "models" / name, queries=queries, qrels=train_qrels, corpus_embeddings=c, on_period=on_period
    )
    train_s = time.perf_counter() - t
    enc = encode_with(str(OUT / "models" / name), name, args.data, corpus=res.corpus_embeddings, device=args.device)
    return {
        "name": name,
        "kind": args.kind,
        "split": args.split,
        "config": cfg.to_dict(),
        "steps": res.steps,
        "train_seconds": round(train_s, 1),
        "encode_seconds": enc["encode_seconds"],
        "leaf_stats": res.leaf_stats,
        "history": [
            {"epoch": p.first_epoch, "steps": p.steps, "seconds": p.seconds, "loss": p.loss,
             "leaf_max": p.leaves["leaf_size_max"], "nonempty": p.leaves["leaves_nonempty"]}
            for p in res.history
        ],
        "warmup_seconds": round(sum(p.seconds for p in res.warmup_history), 1),
    }  # fmt: skip


def stage_incremental(args: argparse.Namespace) -> dict[str, Any]:
    """Train the indexer on 90 % of the documents, route the other 10 % afterwards (no retraining).

    Evaluation queries are split into those with a relevant document among the added 10 % ("new") and the
    others ("old"); Recall@100 of each group by beam, against exact search (same vectors) and an IVF trained
    on the same 90 % with the 10 % added afterwards.
    """
    import faiss

    from rag_hier.index.ehi import LeafAssignment, ehi_search

    passages, queries, eval_qrels, train_qrels = load(args.split, args.data)
    name = args.vectors or f"base_len{MAX_LEN}"
    c, qv = vectors(name)
    doc_ids = [p.doc_id for p in passages]
    qids = [q for q in eval_qrels if q in qv]
    q = np.stack([qv[x] for x in qids])
    n_leaves = args.branching**args.height
    out_rows: list[dict] = []
    groups_info: dict[int, Any] = {}
    for seed in args.seeds:
        rng = np.random.default_rng(1000 + seed)
        new = np.zeros(len(passages), bool)
        new[rng.choice(len(passages), size=round(0.1 * len(passages)), replace=False)] = True
        new_ids = {doc_ids[i] for i in np.flatnonzero(new)}
        old_pos = np.flatnonzero(~new)
        old_passages = [passages[i] for i in old_pos]
        old_train = {qid: {d: g for d, g in rel.items() if d not in new_ids} for qid, rel in train_qrels.items()}
        old_train = {k: v for k, v in old_train.items() if any(g > 0 for g in v.values())}
        t = time.perf_counter()
        res = train_frozen(args, seed, old_passages, queries, old_train, c[old_pos], qv)
        train_s = time.perf_counter() - t
        leaves = np.zeros((len(passages), 1), np.int64)
        leaves[old_pos] = res.indexer.assign(c[old_pos])
        leaves[new] = res.indexer.assign(c[new])  # routed afterwards, no retraining
        assignment = LeafAssignment(leaves, n_leaves)
        group = {
            qid: ("new" if any(d in new_ids for d, g in eval_qrels[qid].items() if g > 0) else "old") for qid in qids
        }
        groups_info[seed] = {g: sum(1 for v in group.values() if v == g) for g in ("new", "old")}
        quant = faiss.IndexFlatIP(c.shape[1])
        ivf = faiss.IndexIVFFlat(quant, c.shape[1], n_leaves, faiss.METRIC_INNER_PRODUCT)
        ivf.cp.seed = seed
        ivf.train(c[old_pos])
        ivf.add_with_ids(c[old_pos], old_pos.astype(np.int64))
        ivf.add_with_ids(c[new], np.flatnonzero(new).astype(np.int64))
        sizes = np.array([ivf.invlists.list_size(i) for i in range(n_leaves)])

        def grouped(
            method: str, param: int, ids: np.ndarray, scores: np.ndarray, frac: float, group=group, seed=seed
        ) -> None:
            for g in ("new", "old"):
                sel = [i for i, x in enumerate(qids) if group[x] == g]
                sub_q = [qids[i] for i in sel]
                m = evaluate_run(ids[sel], scores[sel], sub_q, doc_ids, {x: eval_qrels[x] for x in sub_q})
                out_rows.append({"method": method, "seed": seed, "param": param, "group": g,
                                 "fraction": round(frac, 5), **m})  # fmt: skip

        s = q @ c.T
        top = np.argsort(-s, axis=1, kind="stable")[:, :100]
        grouped("exact", 0, top, np.take_along_axis(s, top, axis=1), 1.0)
        for beam in beams_for(n_leaves):
            r = ehi_search(res.indexer, q, c, assignment, beam=beam, top_k=100)
            grouped("ehi-frozen", beam, r.ids, r.scores, float(r.fraction_scored.mean()))
            ivf.nprobe = beam
            scores, ids = ivf.search(q, 100)
            _, probed = quant.search(q, beam)
            grouped("ivf", beam, ids, scores, float(sizes[probed].sum(axis=1).mean() / len(c)))
        groups_info[seed].update(
            train_seconds=round(train_s, 1),
            leaf_sizes_new=leaf_stats(np.bincount(leaves[new, 0], minlength=n_leaves)),
            leaf_sizes_all=leaf_stats(assignment.sizes()),
        )
        logging.info("incremental seed %d done", seed)
    return {
        "split": args.split,
        "vectors": name,
        "branching": args.branching,
        "height": args.height,
        "ehi_config": ehi_config(args, 0).to_dict(),
        "rows": out_rows,
        "groups": groups_info,
    }


# -- report -------------------------------------------------------------------------------------------
def _agg(rows: list[dict], method: str, key: str = "recall@100") -> list[tuple[int, float, float, float, float, int]]:
    """(param, mean fraction, sd fraction, mean metric, sd metric, seeds) per parameter value."""
    out = []
    for param in sorted({r["param"] for r in rows if r["method"] == method}):
        sel = [r for r in rows if r["method"] == method and r["param"] == param]
        f = np.array([r["fraction"] for r in sel])
        v = np.array([r[key] for r in sel])
        out.append((param, float(f.mean()), float(f.std()), float(v.mean()), float(v.std()), len(sel)))
    return out


def interp_at(rows: list[dict], method: str, x: float, key: str = "recall@100") -> float | None:
    """The metric at a measured fraction ``x``, linear between the two nearest operating points (None outside)."""
    agg = _agg(rows, method, key)
    if not agg:
        return None
    f = np.array([a[1] for a in agg])
    v = np.array([a[3] for a in agg])
    order = np.argsort(f)
    if x < f.min() - 1e-9 or x > f.max() + 1e-9:
        return None
    return float(np.interp(x, f[order], v[order]))


def best_at_most(rows: list[dict], method: str, x: float, key: str = "recall@100") -> tuple[float, float] | None:
    """(metric, fraction) of the best operating point scoring at most ``x`` of the corpus on average."""
    ok = [(a[3], a[1]) for a in _agg(rows, method, key) if a[1] <= x + 1e-9]
    return max(ok) if ok else None


def _goal_lines(res: dict) -> list[str]:
    """The goals on one sweep: EHI at <= 10 % scored vs exact and vs IVF at the same measured fraction."""
    rows = res["rows"]
    exact = next(r for r in rows if r["method"] == "exact")["recall@100"]
    out = []
    for method in ("ehi-joint", "ehi-frozen"):
        best = best_at_most(rows, method, 0.10)
        if best is None:
            continue
        value, frac = best
        ivf = interp_at(rows, "ivf", frac)
        tree = interp_at(rows, "tree", frac)
        ivf_txt = f"IVF at {100 * frac:.1f} %: {ivf:.4f} (EHI {value - ivf:+.4f})" if ivf is not None else "IVF: n/a"
        tree_txt = f", tree {tree:.4f}" if tree is not None else ""
        out.append(
            f"- {method}: best operating point scoring <= 10 %: Recall@100 {value:.4f} at {100 * frac:.1f} % = "
            f"{value / exact:.3f} x exact ({exact:.4f}); {ivf_txt}{tree_txt}"
        )
    return out


def _leaf_lines(res: dict) -> list[str]:
    out = []
    for method in ("ivf", "tree", "ehi-frozen", "ehi-joint"):
        per = res["info"].get(method, {})
        stats = [v["leaf_sizes"] for v in per.values() if "leaf_sizes" in v]
        if not stats:
            continue
        mx = np.array([x["max"] for x in stats])
        cv = np.array([x["cv"] for x in stats])
        ef = np.array([x["expected_fraction_one_leaf"] for x in stats])
        empty = np.array([x["leaves"] - x["nonempty"] for x in stats])
        out.append(
            f"| {method} | {stats[0]['leaves']} | {mx.mean():.0f} ± {mx.std():.0f} | {empty.mean():.1f} | "
            f"{cv.mean():.2f} ± {cv.std():.2f} | {100 * ef.mean():.2f} % |"
        )
    if out:
        out = ["| index | leaves | largest leaf | empty leaves | size CV | E[fraction], 1 leaf |",
               "|---|---:|---:|---:|---:|---:|", *out]  # fmt: skip
    return out


def _time_lines(res: dict) -> list[str]:
    rows = res["rows"]
    ivf_build = [v["build_seconds"] for v in res["info"].get("ivf", {}).values()]
    ehi = res["info"].get("ehi-frozen", {})
    out = []
    if ivf_build and ehi:
        train = np.mean([v["train_seconds"] for v in ehi.values()])
        assign = np.mean([v["assign_seconds"] for v in ehi.values()])
        b = float(np.mean(ivf_build))
        out.append(
            f"build: IVF {b:.2f} s (k-means + add); EHI indexer-only {train:.1f} s training + {assign:.2f} s "
            f"assignment = {(train + assign) / b:.0f}x IVF; assignment alone {assign / b:.2f}x"
        )
    for method in ("ehi-frozen", "ehi-joint", "tree"):
        best = best_at_most(rows, method, 0.10)
        if best is None:
            continue
        agg = {round(a[1], 6): a for a in _agg(rows, method, "ms_per_query")}
        ms = agg[round(best[1], 6)][3] if round(best[1], 6) in agg else None
        ivf_ms = interp_at(rows, "ivf", best[1], "ms_per_query")
        if ms is not None and ivf_ms:
            out.append(f"search at {100 * best[1]:.1f} % scored: {method} {ms:.2f} ms/query, IVF {ivf_ms:.2f} "
                       f"ms/query: {ms / ivf_ms:.1f}x")  # fmt: skip
    return out


def _incremental_lines(path: Path) -> list[str]:
    res = json.loads(path.read_text())["result"]
    rows = res["rows"]
    groups = res["groups"]
    n_new = np.mean([g["new"] for g in groups.values()])
    n_old = np.mean([g["old"] for g in groups.values()])
    lines = [
        f"\n### {path.stem}: B={res['branching']} H={res['height']}, {len(groups)} seeds, "
        f"{n_new:.0f} new-document / {n_old:.0f} old-document queries\n",
        "| method | param | scored | Recall@100 new | Recall@100 old | new / old |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for method in ("exact", "ehi-frozen", "ivf"):
        for param in sorted({r["param"] for r in rows if r["method"] == method}):
            sel = [r for r in rows if r["method"] == method and r["param"] == param]
            new = np.array([r["recall@100"] for r in sel if r["group"] == "new"])
            old = np.array([r["recall@100"] for r in sel if r["group"] == "old"])
            frac = np.mean([r["fraction"] for r in sel])
            ratio = new / np.maximum(old, 1e-9)
            lines.append(f"| {method} | {param} | {100 * frac:.1f} % | {new.mean():.4f} ± {new.std():.4f} | "
                         f"{old.mean():.4f} ± {old.std():.4f} | {ratio.mean():.3f} ± {ratio.std():.3f} |")  # fmt: skip
    return lines


def _per_query(ids: np.ndarray, scores: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict) -> dict:
    """Recall@100 and Recall@10 of every evaluation query (pytrec_eval), as arrays in ``qids`` order."""
    import pytrec_eval

    run = {
        q: {doc_ids[int(j)]: float(s) for s, j in zip(scores[i], ids[i], strict=True) if j >= 0}
        for i, q in enumerate(qids)
    }
    got = pytrec_eval.RelevanceEvaluator(qrels, {"recall.10,100"}).evaluate(run)
    return {m: np.array([got[q][f"recall_{k}"] for q in qids]) for m, k in (("recall@100", 100), ("recall@10", 10))}


def stage_paired(args: argparse.Namespace) -> dict[str, Any]:
    """Two trained models (``--vectors A B``, with ``--indexer-of A B`` their jointly trained indexers) on the
    same evaluation queries: exact Recall@100 / @10, and Recall@100 through each one's own indexer at every
    beam, per query; ``B - A`` with a paired bootstrap 95 % interval over queries (10,000 resamples, seed 0)."""
    from rag_hier.index.ehi import EHIIndexer, LeafAssignment, ehi_search

    if not args.vectors or len(args.vectors) != 2:
        raise SystemExit("paired: give --vectors A B (two cached vector sets)")
    names = list(args.vectors)
    joint = list(args.indexer_of or [])
    if joint and len(joint) != 2:
        raise SystemExit("paired: give --indexer-of A B (one jointly trained indexer per vector set) or none")
    passages, _, eval_qrels, _ = load(args.split, args.data)
    doc_ids = [p.doc_id for p in passages]
    per: list[dict[str, Any]] = []
    qids: list[str] | None = None
    for i, name in enumerate(names):
        c, qv = vectors(name)
        qids = qids or [q for q in eval_qrels if q in qv]
        q = np.stack([qv[x] for x in qids])
        s = q @ c.T
        top = np.argsort(-s, axis=1, kind="stable")[:, :100]
        got: dict[str, Any] = {
            f"exact {m}": v
            for m, v in _per_query(top, np.take_along_axis(s, top, axis=1), qids, doc_ids, eval_qrels).items()
        }
        if joint:
            indexer = EHIIndexer.from_pretrained(OUT / "models" / joint[i])
            assignment = LeafAssignment(indexer.assign(c, top_k=args.leaves_per_document), indexer.n_leaves)
            for beam in beams_for(indexer.n_leaves):
                res = ehi_search(indexer, q, c, assignment, beam=beam, top_k=100)
                got[f"joint beam {beam} recall@100"] = _per_query(res.ids, res.scores, qids, doc_ids, eval_qrels)[
                    "recall@100"
                ]
                got[f"joint beam {beam} fraction"] = res.fraction_scored.astype(np.float64)
        per.append(got)
    rows = []
    for key in per[0]:
        if key in per[1] and not key.endswith("fraction"):
            row = {"measure": key, **paired_bootstrap(per[0][key], per[1][key])}
            frac = key.replace("recall@100", "fraction")
            if frac != key and frac in per[0]:
                row["fraction"] = [round(float(per[0][frac].mean()), 4), round(float(per[1][frac].mean()), 4)]
            rows.append(row)
    for r in rows:
        logging.info("%s", r)
    return {"split": args.split, "a": names[0], "b": names[1], "indexers": joint, "queries": len(qids or []),
            "rows": rows}  # fmt: skip


def stage_report(args: argparse.Namespace) -> dict[str, Any]:
    files = sorted(OUT.glob("sweep-*.json"))
    lines = []
    for path in files:
        res = json.loads(path.read_text())["result"]
        rows = res["rows"]
        exact = next(r for r in rows if r["method"] == "exact")
        lines.append(f"\n### {path.stem}: {res['vectors']} vectors, B={res['branching']} H={res['height']}, "
                     f"{res['split']} ({res['queries']} queries)\n")  # fmt: skip
        lines.append(f"exact: Recall@100 {exact['recall@100']:.4f}, Recall@10 {exact['recall@10']:.4f}\n")
        lines.append("| method | param | scored | Recall@100 | Recall@10 | ms/query |")
        lines.append("|---|---:|---:|---:|---:|---:|")
        for method in ("ehi-joint", "ehi-frozen", "ivf", "tree"):
            agg100 = _agg(rows, method)
            agg10 = {a[0]: a for a in _agg(rows, method, "recall@10")}
            ms = {a[0]: a for a in _agg(rows, method, "ms_per_query")}
            for param, fm, fs, vm, vs, _ in agg100:
                a10 = agg10[param]
                lines.append(
                    f"| {method} | {param} | {100 * fm:.1f} ± {100 * fs:.1f} % | {vm:.4f} ± {vs:.4f} | "
                    f"{a10[3]:.4f} ± {a10[4]:.4f} | {ms[param][3]:.2f} |"
                )
        for x in (0.05, 0.10, 0.20):
            vals = {m: interp_at(rows, m, x) for m in ("ehi-joint", "ehi-frozen", "ivf", "tree")}
            lines.append(f"\nRecall@100 interpolated at {x:.0%} scored: " + ", ".join(
                f"{m} {v:.4f}" for m, v in vals.items() if v is not None))  # fmt: skip
        lines += ["", *_goal_lines(res), "", *_leaf_lines(res), "", *_time_lines(res)]
    for path in sorted(OUT.glob("incremental-*.json")):
        lines += _incremental_lines(path)
    for path in sorted(OUT.glob("train-*.json")):
        r = json.loads(path.read_text())["result"]
        lines.append(f"\ntrain {r['name']}: {r['steps']} steps in {r['train_seconds']:.0f} s; leaves "
                     f"{r['leaf_stats']['leaves_nonempty']} non-empty, largest {r['leaf_stats']['leaf_size_max']}; "
                     f"periods {[(h['epoch'], h['steps'], h['loss']) for h in r['history']]}")  # fmt: skip
    text = "\n".join(lines)
    print(text)
    if args.plot:
        plot(args.plot)
    return {"files": [p.name for p in files]}


def plot(specs: list[str]) -> None:
    """One panel per ``sweep-*.json`` stem given; one line per method (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"exact": "k--", "ivf": "C0-o", "tree": "C2-^", "ehi-frozen": "C1-s", "ehi-joint": "C3-D"}
    fig, axes = plt.subplots(1, len(specs), figsize=(5.5 * len(specs), 4.2), squeeze=False)
    for ax, spec in zip(axes[0], specs, strict=True):
        stem, _, title = spec.partition("=")
        res = json.loads((OUT / f"{stem}.json").read_text())["result"]
        rows = res["rows"]
        for method in ("ivf", "tree", "ehi-frozen", "ehi-joint"):
            agg = _agg(rows, method)
            if agg:
                ax.errorbar([100 * a[1] for a in agg], [a[3] for a in agg], yerr=[a[4] for a in agg],
                            fmt=styles[method], ms=4, capsize=2, label=method)  # fmt: skip
        exact = next(r for r in rows if r["method"] == "exact")["recall@100"]
        ax.axhline(exact, color="k", ls="--", lw=1, label="exact")
        ax.set_xscale("log")
        ax.set_xlabel("documents scored per query (% of corpus, measured)")
        ax.set_ylabel("Recall@100")
        ax.set_title(title or stem, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMG / "ehi_recall_vs_scored.png", dpi=110)


# -- main ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    global OUT  # --out: every stage reads and writes there
    from rag_hier.training.ehi.config import EHIConfig

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["encode", "sweep", "train", "incremental", "report", "paired"])
    add_data_argument(p)
    p.add_argument("--out", type=Path, default=OUT, help="results, cached vectors and models (default %(default)s)")
    p.add_argument("--split", choices=["dev", "test"], default="dev")
    p.add_argument("--model", default=None, help="encode: model path")
    p.add_argument("--name", default=None, help="encode: cache name")
    p.add_argument("--vectors", nargs="+", default=None, help="cached vectors to use (default: base; paired: two)")
    p.add_argument("--indexer-of", nargs="*", default=None, help="sweep: jointly trained models whose indexer to use")
    p.add_argument("--kind", choices=["joint", "de"], default="joint")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--branching", type=int, default=40)
    p.add_argument("--height", type=int, default=1)
    p.add_argument("--lambdas", type=float, nargs=3, default=[0.2, 0.8, 0.2])
    p.add_argument("--indexer-lr", type=float, default=0.016)
    p.add_argument("--encoder-lr", type=float, default=EHIConfig.encoder_lr)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--refresh-every", type=int, default=5)
    p.add_argument(
        "--refit-epochs",
        type=int,
        default=0,
        help="train: refit the indexer on the final vectors (0: keep the joint one; the sweep refits)",
    )
    p.add_argument(
        "--warmup-epochs", type=int, default=0, help="train: indexer alone on the starting vectors first (epochs)"
    )
    p.add_argument("--remine-every", type=int, default=None, help="re-mine with the current indexer every N steps")
    p.add_argument("--lambda-balance", type=float, default=0.0, help="weight of the leaf load-balancing term")
    p.add_argument("--init", choices=["random", "kmeans"], default="random")
    p.add_argument("--mined-negative-terms", choices=["all", "siamese"], default="all")
    p.add_argument("--mine-leaves", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--leaves-per-document", type=int, default=1)
    p.add_argument("--steps", type=int, default=None, help="train: optimizer steps (budget)")
    p.add_argument(
        "--encoder-scope", choices=["all", "last"], default="all", help="train: encoder parameters that train"
    )
    p.add_argument("--no-tree", action="store_true")
    p.add_argument("--no-frozen", action="store_true")
    p.add_argument("--tag", default="")
    p.add_argument("--base-model", default=BASE_MODEL, help="encode/train: the starting encoder (name or path)")
    p.add_argument("--device", default="cpu", help="encode/train: torch device (cpu, cuda)")
    p.add_argument(
        "--checkpoint",
        action="store_true",
        help="train: after every refresh period, write the current vectors and indexer (long runs)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plot", nargs="*", default=None, help="report: sweep stems (stem=title) to plot")
    args = p.parse_args(argv)
    if args.vectors and args.stage != "paired":
        if len(args.vectors) != 1:
            p.error("--vectors: one vector set (two only for the paired stage)")
        args.vectors = args.vectors[0]
    OUT = args.out
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    stages = {"encode": stage_encode, "sweep": stage_sweep, "train": stage_train,
              "incremental": stage_incremental, "report": stage_report, "paired": stage_paired}  # fmt: skip
    result = stages[args.stage](args)
    if args.stage in ("report", "encode"):
        return 0
    if args.stage == "train":
        stem = f"train-{result['name']}"
    elif args.stage == "paired":
        stem = f"paired-{args.split}-{result['a']}-vs-{result['b']}"
    else:
        stem = f"{args.stage}-{args.split}-{args.vectors or 'base'}-B{args.branching}H{args.height}{args.tag}"
    record = {
        "stage": args.stage,
        "argv": argv if argv is not None else __import__("sys").argv[1:],
        "seconds": round(time.perf_counter() - t0, 1),
        "host": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "threads": args.threads,
            "device": args.device,
            "gpu": torch.cuda.get_device_name() if "cuda" in args.device else None,
        },
        "result": result,
    }
    logging.info("wrote %s", write_json(OUT / f"{stem}.json", record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
