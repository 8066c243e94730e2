"""HCE on SciFact (BEIR): base vs +CT vs HCE-U/S/J at one step budget; the tree index vs FAISS IVF; tree build time.

Usage (each stage writes ``<out>/<stage>.json``, ``--out`` default ``benchmarks/out/hce``; the data folder as in
``benchmarks/README.md``; run them in the background with nohup)::

    H="python -m benchmarks.retrieval.bench_hce"
    $H base            # encode the corpus with the base model (cached) + test metrics
    $H ct              # +CT: MultipleNegativesRankingLoss (symmetric, scale 1/tau)
    $H ct --ct-negatives bm25 --negatives 4 --tag=-bm25   # +CT with BM25 hard negatives
    $H hce-u           # HCE unsupervised (ICT)
    $H hce-s           # HCE supervised
    $H hce-j           # HCE joint (supervised + alpha * ICT)
    $H tree            # tree beam search vs FAISS IVF: Recall@100 by fraction scored
    $H build --n 1000000 --compare-flat  # tree build: two-level vs flat k-means
    $H compare --compare base ct hce-s hce-j   # paired per-query differences
    $H compare --compare ct hce-s --per-query-dir DIR   # + files for rag-hier compare

Protocol: corpus = SciFact ``corpus.jsonl.gz`` (5,183 documents kept whole, encoded as ``"<title>, <text>"``
like the store), training pairs = ``qrels/train.tsv``, evaluation = the 300 queries of ``qrels/test.tsv``,
nDCG@10 / Recall@100 through :func:`rag_hier.eval.evaluate` (pytrec_eval). Every model starts from the
offline all-MiniLM-L6-v2 and gets the same budget (``--steps`` optimizer steps of ``--batch-size`` pairs,
``--max-seq-length`` tokens, lr, tau); the budget is recorded in every JSON file.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import data as common_data
from benchmarks.common.data import add_data_argument
from benchmarks.common.report import out_path, write_json

OUT = out_path("hce")  # --out
BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
METRICS = ("ndcg@10", "recall@100", "recall@10", "mrr@10")


def load_scifact(data: Path | None, dev: float = 0.0, seed: int = 0) -> tuple[list[Any], dict[str, str], dict, dict]:
    """Passages, queries, evaluation qrels, training qrels.

    With ``dev > 0`` the evaluation qrels are that share of the *training* queries (held out, seeded) and
    the training qrels are the rest: hyper-parameters are chosen there, never on the test queries.
    """
    d = common_data.load_scifact(data, dev=dev, seed=seed)
    return d.passages(), d.queries, d.qrels, d.train_qrels


def load_xquad(dev: float, data: Path | None) -> tuple[list[Any], dict[str, str], dict, dict]:
    """XQuAD-en for HCE-U (``--dataset xquad``): the 240 paragraphs, and the questions of one half of the documents.

    The 48 documents are halved with :func:`benchmarks.common.halves` (as ``bench_dhr_xquad.py`` and
    ``bench_fusion.py``): with ``--dev`` the questions of the first 24 documents are evaluated, otherwise those of
    the other 24. The unsupervised model trains on all paragraphs and sees no question; evaluation is at paragraph
    level.
    """
    from rag_hier.corpus import split_documents

    xquad = common_data.load_xquad(data)
    first, _ = common_data.halves(xquad.documents)
    keep = [q for q in xquad.questions if (q.doc_id in first) == bool(dev) and q.paragraph_index is not None]
    qrels = {q.qid: {f"{q.doc_id}#{q.paragraph_index}": 1} for q in keep}
    return split_documents(xquad.documents, 0), {q.qid: q.question for q in keep}, qrels, {}


def load_data(args: argparse.Namespace) -> tuple[list[Any], dict[str, str], dict, dict]:
    """Passages, queries, evaluation qrels, training qrels of ``--dataset``."""
    if args.dataset == "xquad":
        return load_xquad(args.dev, args.data)
    return load_scifact(args.data, args.dev, args.dev_seed)


def eval_ids(args: argparse.Namespace, passages: list[Any]) -> list[str]:
    """The ids runs are scored on: documents (SciFact keeps them whole) or paragraphs (XQuAD)."""
    return [p.id if args.dataset == "xquad" else p.doc_id for p in passages]


def encode(model: Any, texts: list[str], *, query: bool, batch_size: int = 32) -> np.ndarray:
    fn = getattr(model, "encode_query" if query else "encode_document", model.encode)
    emb = fn(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(emb, dtype=np.float32)


def evaluate_embeddings(q_emb: np.ndarray, qids: list[str], c_emb: np.ndarray, doc_ids: list[str], qrels: dict) -> dict:
    from rag_hier.eval import evaluate

    scores = q_emb @ c_emb.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(qids)}
    return {k: round(v, 4) for k, v in evaluate(run, qrels, METRICS).items()}


def base_embeddings(args: argparse.Namespace, passages: list[Any]) -> np.ndarray:
    path = OUT / f"base_corpus_len{args.max_seq_length}.npy"
    if path.exists():
        return np.load(path, allow_pickle=False)
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders.dense import resolve_model_path

    model = SentenceTransformer(resolve_model_path(BASE_MODEL), device=args.device)
    model.max_seq_length = args.max_seq_length
    t = time.perf_counter()
    emb = encode(model, [p.embedding_text for p in passages], query=False)
    np.save(path, emb, allow_pickle=False)
    logging.info("encoded the corpus with the base model in %.0fs", time.perf_counter() - t)
    return emb


def budget(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length,
        "learning_rate": args.lr,
        "temperature": args.temperature,
        "n_negatives": args.negatives,
        "levels_m": args.levels_m,
        "alpha": args.alpha,
        "joint_schedule": args.joint_schedule,
        "ict_remove_rate": args.ict_remove_rate,
        "unsupervised_task": args.unsupervised_task,
        "ict_unit": args.ict_unit,
        "epochs": args.epochs,
        "level_weight": args.level_weight,
        "direction_reduction": args.direction_reduction,
        "mini_batch_size": args.mini_batch_size,
        "ct_negatives": args.ct_negatives,
        "attention_dropout": args.attention_dropout,
        "evaluation": f"dev: {args.dev:.0%} of train queries (seed {args.dev_seed})" if args.dev else "test",
        "seed": args.seed,
        "threads": args.threads,
    }


def hard_negative_pools(args: argparse.Namespace, corpus: Any, pairs: list[Any], c_base: np.ndarray) -> list[list[int]]:
    """Per training pair: the top ``--negative-depth`` documents not judged relevant to its query.

    ``--ct-negatives bm25``: bm25s (Lucene, English stopwords) over the document texts; ``mined``: the base
    model's nearest documents (its cached corpus vectors), as ANCE's first mining round.
    """
    depth = args.negative_depth
    queries = [p.query for p in pairs]
    if args.ct_negatives == "bm25":
        import bm25s

        index = bm25s.BM25()
        index.index(bm25s.tokenize(list(corpus.texts), stopwords="en", show_progress=False), show_progress=False)
        tokens = bm25s.tokenize(queries, stopwords="en", show_progress=False)
        ranked, scores = index.retrieve(tokens, k=depth + 20, show_progress=False)
        ranked = [row[s > 0] for row, s in zip(ranked, scores, strict=True)]  # no shared term: not a hard negative
    else:
        from sentence_transformers import SentenceTransformer

        from rag_hier.encoders.dense import resolve_model_path

        model = SentenceTransformer(resolve_model_path(BASE_MODEL), device=args.device)
        model.max_seq_length = args.max_seq_length
        q = encode(model, queries, query=True)
        ranked = np.argsort(-(q @ c_base.T), axis=1)[:, : depth + 20]
    pools = [[int(i) for i in row if int(i) not in p.relevant][:depth] for row, p in zip(ranked, pairs, strict=True)]
    rng = np.random.default_rng(args.seed + 1)
    for pool, p in zip(pools, pairs, strict=True):
        while not pool:  # a query sharing no term with any document: random documents
            pool.extend(int(i) for i in rng.choice(len(corpus), size=depth) if int(i) not in p.relevant)
    return pools


def stage_base(args: argparse.Namespace) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders.dense import resolve_model_path

    passages, queries, test_qrels, _ = load_data(args)
    t = time.perf_counter()
    c_emb = base_embeddings(args, passages)
    model = SentenceTransformer(resolve_model_path(BASE_MODEL), device=args.device)
    model.max_seq_length = args.max_seq_length
    qids = [q for q in test_qrels if q in queries]
    q_emb = encode(model, [queries[q] for q in qids], query=True)
    metrics = evaluate_embeddings(q_emb, qids, c_emb, eval_ids(args, passages), test_qrels)
    return {"method": "base", "metrics": metrics, "eval_seconds": round(time.perf_counter() - t, 1)}


def stage_train(args: argparse.Namespace, method: str) -> dict[str, Any]:
    import torch
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders.dense import resolve_model_path
    from rag_hier.training.hce import HCEConfig, HCETrainer

    passages, queries, test_qrels, train_qrels = load_data(args)
    c_base = base_embeddings(args, passages)
    out_dir = OUT / f"model-{method}{args.tag}"
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    if method == "ct":
        from datasets import Dataset
        from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers

        from rag_hier.training.hce import TrainingCorpus
        from rag_hier.training.hce.data import resolve_pairs

        corpus = TrainingCorpus.from_passages(passages)
        pairs = resolve_pairs(corpus, queries, train_qrels)
        rng = np.random.default_rng(args.seed)
        cols: dict[str, list[str]] = {"anchor": [], "positive": []}
        n_neg = args.negatives if args.ct_negatives != "none" else 0
        for j in range(n_neg):
            cols[f"negative_{j + 1}"] = []
        pools = hard_negative_pools(args, corpus, pairs, c_base) if n_neg else None
        rows = args.steps * args.batch_size
        while len(cols["anchor"]) < rows:  # one shuffled pass after another, fresh negatives in each pass
            for i in rng.permutation(len(pairs)):
                cols["anchor"].append(pairs[i].query)
                cols["positive"].append(corpus.texts[pairs[i].positive])
                if pools is not None:
                    pool = pools[i]
                    picks = rng.choice(len(pool), size=n_neg, replace=len(pool) < n_neg)
                    for j, k in enumerate(picks):
                        cols[f"negative_{j + 1}"].append(corpus.texts[pool[int(k)]])
        ds = Dataset.from_dict(cols)
        info["ct_negatives"] = args.ct_negatives
        if pools is not None:
            info["negative_pool_size_mean"] = round(float(np.mean([len(p) for p in pools])), 1)
        model = SentenceTransformer(resolve_model_path(BASE_MODEL), device=args.device)
        model.max_seq_length = args.max_seq_length
        mnrl_kwargs = {
            "scale": 1.0 / args.temperature,
            "directions": ("query_to_doc", "doc_to_query"),
            "partition_mode": "per_direction",
        }
        if args.mini_batch_size:  # the same GradCache mini-batches as the HCE runs (same memory bound)
            from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

            loss = CachedMultipleNegativesRankingLoss(model, mini_batch_size=args.mini_batch_size, **mnrl_kwargs)
        else:
            loss = MultipleNegativesRankingLoss(model, **mnrl_kwargs)
        targs = SentenceTransformerTrainingArguments(
            output_dir=str(OUT / "scratch-ct"),
            max_steps=args.steps,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.lr,
            warmup_ratio=0.1,
            seed=args.seed,
            batch_sampler=BatchSamplers.NO_DUPLICATES,
            save_strategy="no",
            logging_steps=1,
            report_to="none",
            disable_tqdm=True,
            use_cpu=args.device == "cpu",
        )
        from rag_hier.training._attention import attention_dropout
        from rag_hier.training.time_limit import TimeLimit

        trainer = SentenceTransformerTrainer(
            model=model, args=targs, train_dataset=ds, loss=loss, callbacks=[TimeLimit(args.max_minutes).callback()]
        )
        with attention_dropout(model, args.attention_dropout):  # as the HCE trainer does
            trainer.train()
        model.save(str(out_dir))
        info["steps_done"] = int(trainer.state.global_step)
    else:
        mode = {"hce-u": "unsupervised", "hce-s": "supervised", "hce-j": "joint"}[method]
        cfg = HCEConfig(
            mode=mode,  # type: ignore[arg-type]
            unsupervised_task=args.unsupervised_task,
            levels_m=args.levels_m,
            n_negatives=args.negatives,
            temperature=args.temperature,
            alpha=args.alpha,
            joint_schedule=args.joint_schedule,
            ict_remove_rate=args.ict_remove_rate,
            ict_unit=args.ict_unit,
            level_weight=args.level_weight,
            direction_reduction=args.direction_reduction,
            mini_batch_size=args.mini_batch_size or None,
            attention_dropout=args.attention_dropout,
            learning_rate=args.lr,
            batch_size=args.batch_size,
            epochs=args.epochs,
            max_steps=args.steps,
            max_minutes=args.max_minutes,
            steps_per_epoch=-(-args.steps // args.epochs),
            recluster="always" if args.epochs > 1 else "never",  # EM: re-embed and re-cluster between epochs
            dev_fraction=0.0,
            dev_size=0,
            max_seq_length=args.max_seq_length,
            seed=args.seed,
            logging_steps=1,
        )
        trainer = HCETrainer(cfg, model=BASE_MODEL, device=args.device, show_progress_bar=False)
        result = trainer.train(
            passages,
            out_dir,
            queries=queries if mode != "unsupervised" else None,
            qrels=train_qrels if mode != "unsupervised" else None,
            corpus_embeddings=c_base,
        )
        info["steps_done"] = result.steps
        info["tree"] = result.history[0].tree
        info["epochs"] = [
            {"epoch": e.epoch, "steps": e.steps, "seconds": e.seconds, "loss": e.train_loss, "recluster": e.reclustered}
            for e in result.history
        ]
    train_seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    model = SentenceTransformer(str(out_dir), device=args.device)
    model.max_seq_length = args.max_seq_length
    c_emb = encode(model, [p.embedding_text for p in passages], query=False)
    qids = [q for q in test_qrels if q in queries]
    q_emb = encode(model, [queries[q] for q in qids], query=True)
    metrics = evaluate_embeddings(q_emb, qids, c_emb, eval_ids(args, passages), test_qrels)
    # kept for the tree stage (tree vs IVF on this model's vectors): float32 arrays, no pickle
    prefix = "dev-" if args.dev else ""
    np.save(OUT / f"{prefix}corpus-{method}{args.tag}.npy", c_emb, allow_pickle=False)
    np.save(OUT / f"{prefix}queries-{method}{args.tag}.npy", q_emb, allow_pickle=False)
    return {
        "method": method,
        "metrics": metrics,
        "train_seconds": round(train_seconds, 1),
        "eval_seconds": round(time.perf_counter() - t1, 1),
        "budget": budget(args),
        **info,
    }


def stage_tree(args: argparse.Namespace) -> dict[str, Any]:
    import faiss
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders.dense import resolve_model_path
    from rag_hier.eval import evaluate
    from rag_hier.index.tree import ClusterTree

    passages, queries, test_qrels, _ = load_data(args)
    doc_ids = eval_ids(args, passages)
    qids = [q for q in test_qrels if q in queries]
    if args.vectors_of:  # a trained model's vectors, saved by its train stage (test queries, same order)
        c_emb = np.load(OUT / f"corpus-{args.vectors_of}.npy", allow_pickle=False)
        q_emb = np.load(OUT / f"queries-{args.vectors_of}.npy", allow_pickle=False)
    else:
        c_emb = base_embeddings(args, passages)
        model = SentenceTransformer(resolve_model_path(BASE_MODEL), device=args.device)
        model.max_seq_length = args.max_seq_length
        q_emb = encode(model, [queries[q] for q in qids], query=True)

    def run_of(scores: np.ndarray, ids: np.ndarray) -> dict:
        return {
            q: {doc_ids[int(j)]: float(s) for s, j in zip(scores[i], ids[i], strict=True) if j >= 0}
            for i, q in enumerate(qids)
        }

    exact = evaluate_embeddings(q_emb, qids, c_emb, doc_ids, test_qrels)
    t = time.perf_counter()
    tree = ClusterTree.build(c_emb, branching=args.branching)
    build_s = time.perf_counter() - t
    rows = []
    for beam in args.beams:
        t = time.perf_counter()
        res = tree.search(q_emb, beam=beam, top_k=100, vectors_of=lambda pos: c_emb[pos])
        m = evaluate(run_of(res.scores, res.ids), test_qrels, ("recall@100", "ndcg@10"))
        rows.append(
            {
                "index": "tree",
                "beam": beam,
                "fraction_scored": round(float(res.fraction_scored.mean()), 4),
                "recall@100": round(m["recall@100"], 4),
                "ndcg@10": round(m["ndcg@10"], 4),
                "ms_per_query": round(1000 * (time.perf_counter() - t) / len(qids), 2),
            }
        )
    nlist = tree.n_leaves
    quant = faiss.IndexFlatIP(c_emb.shape[1])
    ivf = faiss.IndexIVFFlat(quant, c_emb.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = args.seed
    ivf.train(c_emb)
    ivf.add(c_emb)
    list_sizes = np.array([ivf.invlists.list_size(i) for i in range(nlist)])
    for nprobe in args.nprobes:
        ivf.nprobe = nprobe
        _, probed = quant.search(q_emb, nprobe)
        frac = float(list_sizes[probed].sum(axis=1).mean() / len(c_emb))
        scores, ids = ivf.search(q_emb, 100)
        m = evaluate(run_of(scores, ids), test_qrels, ("recall@100", "ndcg@10"))
        rows.append(
            {
                "index": "faiss-ivf",
                "nprobe": nprobe,
                "fraction_scored": round(frac, 4),
                "recall@100": round(m["recall@100"], 4),
                "ndcg@10": round(m["ndcg@10"], 4),
            }
        )
    return {
        "vectors": args.vectors_of or "base",
        "exact": exact,
        "tree": tree.describe(),
        "tree_build_seconds": round(build_s, 2),
        "ivf_nlist": nlist,
        "rows": rows,
        "max_seq_length": args.max_seq_length,
    }


def stage_compare(args: argparse.Namespace) -> dict[str, Any]:
    """Paired per-query comparison of the models whose train stages saved their vectors (``--compare A B ...``).

    For every pair (in the order given) over the same evaluation queries: mean difference of per-query
    nDCG@10, a seeded paired bootstrap 95 % interval, a paired t-test and wins/losses/ties, all from
    :func:`rag_hier.eval.paired_difference` (what ``rag-hier compare`` uses). ``base`` is the base model
    (cached corpus vectors; the queries are encoded here). ``--per-query-dir DIR`` also writes each
    model's per-query nDCG@10 (``DIR/<name>.tsv``) and TREC run (``DIR/<name>.trec``), so the same
    figures come back from ``rag-hier compare DIR/a.tsv DIR/b.tsv``.
    """
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders.dense import resolve_model_path
    from rag_hier.eval import evaluate_per_query, paired_difference, write_per_query, write_run

    passages, queries, eval_qrels, _ = load_data(args)
    doc_ids = eval_ids(args, passages)
    qids = [q for q in eval_qrels if q in queries]
    prefix = "dev-" if args.dev else ""
    per: dict[str, np.ndarray] = {}
    for name in args.compare:
        if name == "base":
            c_emb = base_embeddings(args, passages)
            model = SentenceTransformer(resolve_model_path(BASE_MODEL), device=args.device)
            model.max_seq_length = args.max_seq_length
            q_emb = encode(model, [queries[q] for q in qids], query=True)
        else:
            c_emb = np.load(OUT / f"{prefix}corpus-{name}.npy", allow_pickle=False)
            q_emb = np.load(OUT / f"{prefix}queries-{name}.npy", allow_pickle=False)
        scores = q_emb @ c_emb.T
        top = np.argsort(-scores, axis=1)[:, :100]
        run = {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(qids)}
        ndcg = evaluate_per_query(run, eval_qrels, ("ndcg@10",))["ndcg@10"]
        per[name] = np.asarray([ndcg.get(q, 0.0) for q in qids])
        if args.per_query_dir:
            args.per_query_dir.mkdir(parents=True, exist_ok=True)
            write_per_query(
                {"ndcg@10": {q: float(v) for q, v in zip(qids, per[name], strict=True)}},
                args.per_query_dir / f"{prefix}{name}.tsv",
            )
            write_run(run, args.per_query_dir / f"{prefix}{name}.trec", tag=name)
    # pair the queries in id order, as rag-hier compare does, so that `rag-hier compare` on the files of
    # --per-query-dir gives these very figures
    order = sorted(range(len(qids)), key=qids.__getitem__)
    per = {name: values[order] for name, values in per.items()}
    rows = []
    names = list(args.compare)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            # one implementation: rag_hier.eval.compare (scipy's percentile bootstrap over queries, seeded
            # with default_rng(seed) = the same resamples this stage drew itself before; paired t-test)
            r = paired_difference(per[a], per[b], test="t", seed=args.seed, n_resamples=10_000)
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "ndcg@10_a": round(r["mean_baseline"], 4),
                    "ndcg@10_b": round(r["mean_system"], 4),
                    "delta": round(r["delta"], 4),
                    "ci95": [round(r["ci_low"], 4), round(r["ci_high"], 4)],
                    "p_ttest": round(r["p_value"], 4),
                    "b_wins": int(r["wins"]),
                    "b_losses": int(r["losses"]),
                    "ties": int(r["ties"]),
                }
            )
    return {"queries": len(qids), "evaluation": "dev" if args.dev else "test", "pairs": rows}


def stage_report(args: argparse.Namespace) -> dict[str, Any]:
    """Print the Markdown tables of docs/hce.md and docs/benchmarks.md from the JSON files (numbers as measured)."""
    names = {
        "base": "base (all-MiniLM-L6-v2)",
        "ct": "+CT (MNRL, in-batch)",
        "hce-s": "HCE-S",
        "hce-j": "HCE-J",
        "hce-u": "HCE-U",
    }

    def row(path: Path) -> str | None:
        if not path.is_file():
            return None
        d = json.loads(path.read_text())
        m, b = d["metrics"], d.get("budget", {})
        label = names.get(d["method"], d["method"]) + path.stem.removeprefix("dev-").removeprefix(d["method"])
        setting = "–"
        if d["method"].startswith("hce"):
            setting = f"n_NS {b['n_negatives']}, level_weight {b['level_weight']}, EM epochs {b['epochs']}"
            if d["method"] != "hce-s":
                setting += f", ICT removal {b['ict_remove_rate']}"
            if d["method"] == "hce-j":
                setting += f", alpha {b['alpha']} ({b['joint_schedule']})"
        train = f"{d['train_seconds']:.0f} s" if "train_seconds" in d else "–"
        return f"| {label} | {setting} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | {m['mrr@10']:.4f} | {train} |"

    for prefix, title in (("", "test (300 queries)"), ("dev-", "dev (25 % of the train queries, held out)")):
        print(f"\nSciFact {title}\n")
        print("| model | HCE settings | nDCG@10 | Recall@100 | MRR@10 | train |")
        print("|---|---|---:|---:|---:|---:|")
        for path in sorted(OUT.glob(f"{prefix}*.json")):
            stem = path.stem.removeprefix(prefix)
            if (not prefix and stem.startswith("dev-")) or stem.split("-")[0] not in ("base", "ct", "hce"):
                continue
            line = row(path)
            if line:
                print(line)
    comp = OUT / "compare.json"
    if comp.is_file():
        d = json.loads(comp.read_text())
        print(f"\nPaired per-query nDCG@10 differences ({d['queries']} {d['evaluation']} queries; b − a)\n")
        print("| a | b | a | b | Δ | 95 % CI (bootstrap) | p (paired t) | b better / worse / tied |")
        print("|---|---|---:|---:|---:|---|---:|---|")
        for r in d["pairs"]:
            p_value = "< 0.0001" if r["p_ttest"] < 1e-4 else f"{r['p_ttest']:.4f}"
            print(
                f"| {r['a']} | {r['b']} | {r['ndcg@10_a']:.4f} | {r['ndcg@10_b']:.4f} | {r['delta']:+.4f} | "
                f"[{r['ci95'][0]:+.4f}, {r['ci95'][1]:+.4f}] | {p_value} | "
                f"{r['b_wins']} / {r['b_losses']} / {r['ties']} |"
            )
    for path in sorted(OUT.glob("tree*.json")):
        d = json.loads(path.read_text())
        print(
            f"\nTree vs IVF on {d.get('vectors', 'base')} vectors (exact: Recall@100 {d['exact']['recall@100']:.4f}, "
            f"nDCG@10 {d['exact']['ndcg@10']:.4f}; tree {d['tree']['level_sizes']})\n"
        )
        print("| tree beam | scored | Recall@100 | nDCG@10 | IVF nprobe | scored | Recall@100 | nDCG@10 |")
        print("|---|---|---|---|---|---|---|---|")
        trees = [r for r in d["rows"] if r["index"] == "tree"]
        ivfs = [r for r in d["rows"] if r["index"] == "faiss-ivf"]
        for t, v in zip(trees, ivfs, strict=False):
            print(
                f"| {t['beam']} | {100 * t['fraction_scored']:.1f} % | {t['recall@100']:.4f} | {t['ndcg@10']:.4f} | "
                f"{v['nprobe']} | {100 * v['fraction_scored']:.1f} % | {v['recall@100']:.4f} | {v['ndcg@10']:.4f} |"
            )
    return {}


def _synthetic(args: argparse.Namespace) -> np.ndarray:
    """Unit vectors: ``random`` (isotropic) or ``clustered`` (``n / 20`` random centres, 20 noisy copies each)."""
    rng = np.random.default_rng(args.seed)
    if args.kind == "random":
        x = rng.standard_normal((args.n, args.dim), dtype=np.float32)
    else:
        per = 20
        centres = rng.standard_normal((args.n // per, args.dim), dtype=np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        x = np.repeat(centres, per, axis=0)
        del centres
        noise = rng.standard_normal(x.shape, dtype=np.float32)
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        x += noise
        del noise
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def stage_build(args: argparse.Namespace) -> dict[str, Any]:
    """Tree build time and quality on synthetic vectors; ``--compare-flat`` adds flat k-means in the same run."""
    from rag_hier.index.tree import ClusterTree, TreeBuildConfig

    x = _synthetic(args)
    variants = [
        (
            "default",
            TreeBuildConfig(
                branching=args.branching,
                niter=args.niter,
                max_points_per_centroid=args.max_points_per_centroid,
                seed=args.seed,
                two_level_min_clusters=args.two_level_min_clusters,
                refine_iterations=args.refine_iterations,
                refine_nprobe=args.refine_nprobe,
            ),
        )
    ]
    if args.compare_flat:
        variants.append(
            (
                "flat",
                TreeBuildConfig(
                    branching=args.branching,
                    niter=args.flat_niter,
                    max_points_per_centroid=args.flat_max_points_per_centroid,
                    seed=args.seed,
                    two_level_min_clusters=0,
                ),
            )
        )
    rows = []
    for name, cfg in variants:
        t = time.perf_counter()
        tree = ClusterTree.build(x, config=cfg)
        seconds = time.perf_counter() - t
        leaf = tree.centroids[-1][tree.item_leaf] if tree.depth else np.zeros_like(x)
        mean_cos = float(np.einsum("ij,ij->i", x, leaf).mean())
        rows.append(
            {
                "variant": name,
                "config": cfg.to_dict(),
                "seconds": round(seconds, 1),
                "mean_cos_to_leaf": round(mean_cos, 4),
                "tree": tree.describe(),
            }
        )
        logging.info("%s: %.1fs, mean cos to leaf %.4f, %s", name, seconds, mean_cos, tree.describe())
        del tree, leaf
    out: dict[str, Any] = {"n": args.n, "dim": args.dim, "kind": args.kind, "rows": rows}
    if len(rows) == 2:
        out["flat_over_default_seconds"] = round(rows[1]["seconds"] / max(rows[0]["seconds"], 1e-9), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    global OUT, BASE_MODEL
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("stage", choices=("base", "ct", "hce-u", "hce-s", "hce-j", "tree", "build", "compare", "report"))
    add_data_argument(p)
    p.add_argument(
        "--dataset",
        choices=("scifact", "xquad"),
        default="scifact",
        help="xquad: HCE-U (and base) on XQuAD-en paragraphs",
    )
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument(
        "--max-minutes", type=float, default=None, help="stop training after this many minutes (a device deadline)"
    )
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--temperature", type=float, default=0.01)
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--levels-m", type=int, default=2)
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--level-weight", type=float, default=1.0)
    p.add_argument("--direction-reduction", choices=("sum", "mean"), default="sum")
    p.add_argument("--mini-batch-size", type=int, default=32, help="GradCache mini-batch (HCE and ct); 0: off")
    p.add_argument(
        "--attention-dropout", type=float, default=0.0, help="attention-probability dropout while training (ct, HCE)"
    )
    p.add_argument("--ct-negatives", choices=("none", "bm25", "mined"), default="none", help="ct: hard negatives")
    p.add_argument("--negative-depth", type=int, default=30, help="ct: hard negatives drawn from the top N")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="where models train and encode (cpu, cuda, ...)")
    p.add_argument("--base-model", default=BASE_MODEL, help="the model every run starts from (directory or hub id)")
    p.add_argument("--out", type=Path, default=OUT, help="where results, vectors and models go")
    p.add_argument("--branching", type=int, default=None)
    p.add_argument("--beams", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--nprobes", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--niter", type=int, default=20)
    p.add_argument("--max-points-per-centroid", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1, help="HCE: EM epochs within --steps (re-cluster between them)")
    p.add_argument("--joint-schedule", choices=("sum", "alternate"), default="sum")
    from rag_hier.training.hce.config import HCEConfig  # dataclasses only: no torch

    p.add_argument("--ict-remove-rate", type=float, default=HCEConfig.ict_remove_rate)
    p.add_argument("--ict-unit", choices=("tokens", "sentence"), default="tokens", help="ICT pseudo-query unit")
    p.add_argument("--unsupervised-task", choices=("ict", "simcse"), default="ict", help="HCE-U/J pseudo-queries")
    p.add_argument("--dev", type=float, default=0.0, help="evaluate on this share of the train queries, held out")
    p.add_argument("--dev-seed", type=int, default=0)
    p.add_argument("--tag", default="", help="suffix of the output files (variants of one stage)")
    p.add_argument("--vectors-of", default=None, help="tree: use the vectors a train stage saved (e.g. hce-s)")
    p.add_argument("--compare", nargs="+", default=["base", "ct", "hce-s"], help="compare: methods (+ tags)")
    p.add_argument("--per-query-dir", type=Path, default=None, help="compare: also write per-query files and runs")
    p.add_argument("--kind", choices=("random", "clustered"), default="clustered", help="build: synthetic vectors")
    p.add_argument("--two-level-min-clusters", type=int, default=4096)
    p.add_argument("--refine-iterations", type=int, default=4)
    p.add_argument("--refine-nprobe", type=int, default=16)
    p.add_argument("--compare-flat", action="store_true", help="build: also time flat k-means in the same run")
    p.add_argument("--flat-niter", type=int, default=10)
    p.add_argument("--flat-max-points-per-centroid", type=int, default=32)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("transformers", "sentence_transformers", "httpx", "datasets", "faiss"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    OUT, BASE_MODEL = args.out, args.base_model
    if args.dataset == "xquad":
        if args.stage not in ("base", "hce-u", "compare", "report"):
            p.error("--dataset xquad runs the base, hce-u, compare and report stages (no training queries are used)")
        if args.out == out_path("hce"):
            OUT = out_path("hce-xquad")
    OUT.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    if args.stage == "base":
        result = stage_base(args)
    elif args.stage == "tree":
        result = stage_tree(args)
    elif args.stage == "build":
        result = stage_build(args)
    elif args.stage == "compare":
        result = stage_compare(args)
    elif args.stage == "report":
        stage_report(args)
        return 0
    else:
        result = stage_train(args, args.stage)
    result["total_seconds"] = round(time.perf_counter() - t, 1)
    result["machine"] = f"{platform.processor() or platform.machine()}, {args.threads} threads (shared 2-core host)"
    if args.device != "cpu":
        import torch

        result["machine"] = f"{torch.cuda.get_device_name(args.device)} ({args.device}), {args.threads} CPU threads"
    name = (args.stage if args.stage != "build" else f"build-{args.kind}-{args.n}") + args.tag
    if args.dev and args.stage != "build":
        name = f"dev-{name}"
    write_json(OUT / f"{name}.json", result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
