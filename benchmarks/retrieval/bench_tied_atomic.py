"""Tied-Atomic on SciFact (BEIR): BM25, MiniLM (base and fine-tuned), DSI-atomic, Tied-Atomic; incremental; throughput.

Usage (each stage writes ``<out>/<stage><tag>.json``, ``--out`` default ``benchmarks/out/tied_atomic``; SciFact from
the data folder, see ``benchmarks/README.md``; run them in the background)::

    T="python -m benchmarks.retrieval.bench_tied_atomic"
    $T bm25                 # bm25s baseline
    $T minilm-base          # all-MiniLM-L6-v2 as is (cosine)
    $T minilm-ft --steps 87 # MiniLM fine-tuned: same rows, steps, batch, lr
    $T tied --steps 87      # Tied-Atomic (MiniLM-warm-started encoder-decoder)
    $T dsi --steps 87       # DSI-atomic (untied, seq2seq as the paper's), same encoder-decoder start
    $T incremental --steps 87   # train on 90 % of the documents, add 10 %
    $T throughput           # encoding docs/s: encoder-decoders vs MiniLM
    $T report               # tables from the JSON files
    $T minilm-ft --steps 87 --minilm-similarity dot --minilm-scale 1 --tag=-dot1   # Tied-Atomic's similarity
    $T paired --compare tied minilm-ft-dot1   # paired per-query nDCG@10 (B - A), bootstrap interval
    $T tied --dataset xquad --steps 50 --tag=-s50     # XQuAD-en paragraphs as docids (writes tied-xquad-s50.json)
    $T dsi --dataset xquad --steps 50 --tag=-s50      # DSI-atomic on the same split and steps
    $T paired --compare dsi-xquad-s50 tied-xquad-s50
    $T dsi --dataset xquad --steps 250 --dsi-init mean --tag=-s250   # DSI's docid rows all at the vocabulary's mean
    $T dsi-probe --dataset xquad --model OUT/model-dsi-xquad-s50   # the probe of a saved DSI model
    $T dsi-probe --dataset xquad --tag=-start                      # ... of the untrained start

Protocol: corpus = SciFact ``corpus.jsonl.gz`` (5,183 documents kept whole, ``"<title>, <text>"`` as the store
encodes them), training pairs = ``qrels/train.tsv``, evaluation = the 300 queries of ``qrels/test.tsv`` (or,
with ``--dev F``, a held-out share F of the *training* queries, seeded, the model trained on the rest: every
choice is made there). ``--dataset xquad``: XQuAD-en's 240 paragraphs are the documents (docid
``<article>:<paragraph>``, one passage each), each paragraph's questions split into training and test questions
(``--xquad-test``, default half; seeded by ``--split-seed``; see :func:`load_xquad_paragraphs`). Metrics through
:func:`rag_hier.eval.evaluate` (pytrec_eval), exact search.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.data import add_data_argument, load_scifact, load_xquad
from benchmarks.common.report import out_path, write_json

OUT = out_path("tied_atomic")  # --out
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
DEVICE = "cpu"  # --device
METRICS = ("ndcg@10", "recall@1", "recall@10", "recall@100", "mrr@10")


# ----------------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------------
def load(args: argparse.Namespace) -> tuple[list[Any], dict[str, str], dict, dict]:
    """Documents, queries, evaluation qrels, training qrels (dev split when ``--dev``; ``--dataset``)."""
    if getattr(args, "dataset", "scifact") == "xquad":
        if args.dev:
            raise SystemExit("--dataset xquad has no --dev split (its questions are split by --xquad-test)")
        return load_xquad_paragraphs(args.data, test_share=args.xquad_test, seed=args.split_seed)
    d = load_scifact(args.data, dev=args.dev, seed=args.dev_seed)
    return d.documents, d.queries, d.qrels, d.train_qrels


def load_xquad_paragraphs(
    data: str | Path | None, *, test_share: float = 0.5, seed: int = 0
) -> tuple[list[Any], dict[str, str], dict, dict]:
    """XQuAD-en with every paragraph as its own docid, each paragraph's questions split into training and test.

    The 240 paragraphs of the 48 articles become 240 documents ``<article>:<paragraph index>`` (title = the
    article's title, one passage each). A paragraph's questions, in file order, are shuffled with
    ``random.Random(f"{seed}:{docid}")``; the first ``round(n * test_share)`` (at least one, at most n - 1 when
    n > 1) are test questions, the rest training questions. Every paragraph is a docid of both sets.
    """
    import random

    from rag_hier.corpus.model import Document

    d = load_xquad(data)
    docs: list[Any] = []
    for doc in d.documents:
        for i, text in enumerate(doc.paragraphs):
            docs.append(Document(doc_id=f"{doc.doc_id}:{i}", title=doc.title, paragraphs=(text,)))
    by_para: dict[str, list[Any]] = {}
    for q in d.questions:
        if q.paragraph_index is None:
            continue
        by_para.setdefault(f"{q.doc_id}:{q.paragraph_index}", []).append(q)
    queries: dict[str, str] = {}
    test: dict[str, dict[str, int]] = {}
    train: dict[str, dict[str, int]] = {}
    for pid in sorted(by_para):
        qs = list(by_para[pid])
        random.Random(f"{seed}:{pid}").shuffle(qs)
        n_test = min(max(1, round(len(qs) * test_share)), max(len(qs) - 1, 1)) if qs else 0
        for j, q in enumerate(qs):
            queries[q.qid] = q.question
            (test if j < n_test else train)[q.qid] = {pid: 1}
    return docs, queries, test, train


def doc_texts(docs: list[Any]) -> tuple[list[str], list[str]]:
    """Document ids and the text the store encodes for each (one passage per document: SciFact, XQuAD paragraphs)."""
    from rag_hier.corpus import split_documents

    passages = split_documents(docs, 0)
    assert len(passages) == len(docs), "documents are expected to be one passage each"
    return [p.doc_id for p in passages], [p.embedding_text for p in passages]


def _top_run(scores: np.ndarray, qids: list[str], doc_ids: list[str]) -> dict[str, dict[str, float]]:
    k = min(100, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return {q: {doc_ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(qids)}


def evaluate_scores(scores: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict) -> dict[str, float]:
    from rag_hier.eval import evaluate

    return {m: round(v, 4) for m, v in evaluate(_top_run(scores, qids, doc_ids), qrels, METRICS).items()}


def per_query_ndcg(scores: np.ndarray, qids: list[str], doc_ids: list[str], qrels: dict) -> dict[str, float]:
    """Query id → nDCG@10 (what the ``paired`` stage compares)."""
    from rag_hier.eval import evaluate_per_query

    per = evaluate_per_query(_top_run(scores, qids, doc_ids), qrels, ["ndcg@10"])["ndcg@10"]
    return {q: round(v, 6) for q, v in per.items()}


def eval_model(path: str, docs: list[Any], queries: dict, qrels: dict, max_seq_length: int) -> dict[str, Any]:
    """Encode corpus and queries with a model directory (its own normalization) and score exactly."""
    from rag_hier.encoders.dense import DenseEncoder

    enc = DenseEncoder(path, device=DEVICE, batch_size=32, max_seq_length=max_seq_length)
    ids, texts = doc_texts(docs)
    qids = [q for q in qrels if q in queries]
    t = time.perf_counter()
    c = enc.encode_documents(texts)
    q = enc.encode_queries([queries[x] for x in qids])
    metrics = evaluate_scores(q @ c.T, qids, ids, qrels)
    return {
        "metrics": metrics,
        "eval_seconds": round(time.perf_counter() - t, 1),
        "normalized": enc.normalize_embeddings,
        "per_query_ndcg@10": per_query_ndcg(q @ c.T, qids, ids, qrels),
    }


def budget(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length,
        "learning_rate": args.lr,
        "bm25_negatives": args.negatives,
        "bm25_depth": args.depth,
        "scale": args.scale,
        "cross_attention_init": args.cross_init,
        "dataset": args.dataset,
        "evaluation": f"dev: {args.dev:.0%} of train queries (seed {args.dev_seed})" if args.dev else "test",
        **({"xquad_test_share": args.xquad_test, "split_seed": args.split_seed} if args.dataset == "xquad" else {}),
        "seed": args.seed,
        "threads": args.threads,
    }


# ----------------------------------------------------------------------------------------------------
# stages
# ----------------------------------------------------------------------------------------------------
def stage_bm25(args: argparse.Namespace) -> dict[str, Any]:
    import bm25s

    docs, queries, qrels, _ = load(args)
    ids, texts = doc_texts(docs)
    t = time.perf_counter()
    index = bm25s.BM25(k1=args.k1, b=args.b)
    index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    qids = [q for q in qrels if q in queries]
    scores = np.zeros((len(qids), len(ids)), np.float32)
    for i, q in enumerate(qids):
        toks = [w for w in bm25s.tokenize([queries[q]], stopwords="en", return_ids=False, show_progress=False)[0]]
        toks = [w for w in toks if w in index.vocab_dict]
        if toks:
            scores[i] = index.get_scores(toks)
    return {
        "method": "bm25",
        "k1": args.k1,
        "b": args.b,
        "metrics": evaluate_scores(scores, qids, ids, qrels),
        "seconds": round(time.perf_counter() - t, 1),
        "per_query_ndcg@10": per_query_ndcg(scores, qids, ids, qrels),
    }


def stage_minilm_base(args: argparse.Namespace) -> dict[str, Any]:
    docs, queries, qrels, _ = load(args)
    return {"method": "minilm-base", **eval_model(MINILM, docs, queries, qrels, args.max_seq_length)}


def _tied_config(args: argparse.Namespace, **over: Any) -> Any:
    from rag_hier.training.tied_atomic import TiedAtomicConfig

    kw: dict[str, Any] = {
        "base_model": args.base_model,
        "max_seq_length": args.max_seq_length,
        "batch_size": args.batch_size,
        "learning_rate": args.lr,
        "max_steps": args.steps,
        "scale": args.scale,
        "bm25_negatives": args.negatives,
        "bm25_depth": args.depth,
        "device": DEVICE,
        "seed": args.seed,
        "logging_steps": 5,
        "max_minutes": args.max_minutes,
    }
    kw.update(over)
    return TiedAtomicConfig(**kw)


def _warm_start(args: argparse.Namespace) -> str:
    """The MiniLM-warm-started encoder-decoder (built once per cross-attention init, cached)."""
    from rag_hier.encoders.encdec import build_warm_started_encoder_decoder

    path = OUT / f"warm-start-{args.cross_init}-len{args.max_seq_length}"
    if not (path / "modules.json").is_file():
        build_warm_started_encoder_decoder(
            path, MINILM, max_seq_length=args.max_seq_length, seed=args.seed, cross_attention_init=args.cross_init
        )
    return str(path)


def stage_tied(args: argparse.Namespace) -> dict[str, Any]:
    from rag_hier.training.tied_atomic import TiedAtomicTrainer

    docs, queries, qrels, train = load(args)
    if args.base_model is None:
        args.base_model = _warm_start(args)
    out = OUT / f"model-tied{args.tag}"
    if args.steps == 0:  # the starting point, untrained
        return {
            "method": "tied",
            "steps_done": 0,
            **eval_model(args.base_model, docs, queries, qrels, args.max_seq_length),
        }
    t = time.perf_counter()
    result = TiedAtomicTrainer(_tied_config(args)).train(docs, out, queries=queries, qrels=train)
    train_s = time.perf_counter() - t
    info = {
        "method": "tied",
        "steps_done": result.steps,
        "rows": result.rows,
        "train_loss": result.train_loss,
        "train_seconds": round(train_s, 1),
    }
    return {**info, **eval_model(str(out), docs, queries, qrels, args.max_seq_length)}


def stage_minilm_ft(args: argparse.Namespace) -> dict[str, Any]:
    """MiniLM fine-tuned on the same rows (query, positive, BM25 negatives), steps, batch and lr.

    ``--minilm-similarity cosine`` (default, scale 20: sentence-transformers' recipe) or ``dot``: the model's
    Normalize module is dropped and the loss scores raw dot products, so that with ``--minilm-scale 1`` the
    dense baseline has Tied-Atomic's similarity and temperature.
    """
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        util,
    )
    from sentence_transformers.models import Normalize
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    from rag_hier.encoders.dense import resolve_model_path
    from rag_hier.training.hce.data import TrainingCorpus, resolve_pairs
    from rag_hier.training.tied_atomic import TiedAtomicTrainer

    docs, queries, qrels, train = load(args)
    out = OUT / f"model-minilm-ft{args.tag}"
    torch.manual_seed(args.seed)
    t = time.perf_counter()
    corpus = TrainingCorpus.from_documents(docs, 0)
    rows = TiedAtomicTrainer(_tied_config(args)).build_rows(corpus, resolve_pairs(corpus, queries, train))
    model = SentenceTransformer(resolve_model_path(MINILM), device=DEVICE)
    model.max_seq_length = args.max_seq_length
    if args.minilm_similarity == "dot":  # raw dot products: no Normalize module, dot-product loss and search
        model = SentenceTransformer(
            modules=[m for m in model if not isinstance(m, Normalize)], device=DEVICE, similarity_fn_name="dot"
        )
        model.max_seq_length = args.max_seq_length
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(OUT / "scratch-minilm-ft"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        weight_decay=0.01,
        warmup_steps=round(0.1 * args.steps),
        max_grad_norm=1.0,
        seed=args.seed,
        data_seed=args.seed,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="no",
        logging_steps=5,
        report_to="none",
        disable_tqdm=True,
        use_cpu=DEVICE == "cpu",
    )
    similarity = util.dot_score if args.minilm_similarity == "dot" else util.cos_sim
    loss = MultipleNegativesRankingLoss(model, scale=args.minilm_scale, similarity_fct=similarity)
    from rag_hier.training.time_limit import TimeLimit

    trainer = SentenceTransformerTrainer(
        model=model,
        args=targs,
        train_dataset=Dataset.from_dict(rows),
        loss=loss,
        callbacks=[TimeLimit(args.max_minutes).callback()],
    )
    outcome = trainer.train()
    model.save(str(out))
    info = {
        "method": "minilm-ft",
        "steps_done": int(trainer.state.global_step),
        "rows": len(rows["anchor"]),
        "train_loss": float(outcome.training_loss),
        "train_seconds": round(time.perf_counter() - t, 1),
        "loss": f"MNRL {args.minilm_similarity} scale {args.minilm_scale}",
    }
    return {**info, **eval_model(str(out), docs, queries, qrels, args.max_seq_length)}


def _dsi_config(args: argparse.Namespace) -> Any:
    from rag_hier.training.tied_atomic import DSIAtomicConfig

    return DSIAtomicConfig(
        objective=args.dsi_objective,
        base_model=args.base_model,
        max_seq_length=args.max_seq_length,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        docid_learning_rate=args.docid_lr,
        **({"docid_init": args.dsi_init} if args.dsi_objective == "seq2seq" else {}),
        max_steps=args.steps,
        retrieval_repeats=args.retrieval_repeats,
        device=DEVICE,
        seed=args.seed,
        logging_steps=5,
        max_minutes=args.max_minutes,
    )


def _dsi_losses(
    model: Any, texts: list[str], targets: list[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One teacher-forced pass: token cross-entropy (n, 2), the docid's CE among docids, whether it ranks first,
    and the decoder's last hidden state at the first position (n, d).

    The first decoder position sees only the start token (causal decoder), so its logits are the retrieval logits.
    """
    import torch
    import torch.nn.functional as F

    lo, hi = model.first_docid_token, model.first_docid_token + len(model.docids)
    ce, among, hit, first = [], [], [], []
    model.model.eval()
    with torch.inference_mode():
        for i in range(0, len(texts), 32):
            batch = {k: v.to(model.device) for k, v in model.batch(texts[i : i + 32], targets[i : i + 32]).items()}
            labels = batch.pop("labels")
            out = model.model(**batch, use_cache=False, output_hidden_states=True)
            logits = out.logits.float()
            ce.append(F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").cpu().numpy())
            docs = logits[:, 0, lo:hi]
            cols = labels[:, 0] - lo
            among.append(F.cross_entropy(docs, cols, reduction="none").cpu().numpy())
            hit.append((docs.argmax(1) == cols).cpu().numpy())
            first.append(out.decoder_hidden_states[-1][:, 0].float().cpu().numpy())
    return np.concatenate(ce), np.concatenate(among), np.concatenate(hit), np.concatenate(first)


def _mean_pairwise_cosine(x: np.ndarray) -> float:
    """Mean cosine between different rows of ``x`` (1.0: every row points the same way)."""
    u = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    s = u @ u.T
    n = len(u)
    return float((s.sum() - np.trace(s)) / (n * n - n)) if n > 1 else 1.0


def _dsi_probe(model: Any, docs: list[Any], queries: dict, train: dict, seed: int, n: int = 128) -> dict[str, Any]:
    """Losses of the seq2seq DSI on a fixed sample of its training examples: n retrieval + n indexing.

    ``docid_ce_vocab`` / ``eos_ce``: teacher-forced cross-entropy of the docid token and of the end-of-sequence token
    over the whole vocabulary (the training loss is their mean); ``docid_ce_docids``: the docid's cross-entropy among
    the docid tokens only (what ranking sees; chance = ln n_docids); ``indexing_hit@1``: the share of sampled
    documents whose own text generates their docid first (memorisation); ``first_state_cosine``: the mean cosine
    between different examples' decoder states at the first position (what the LM head reads to rank docids: 1.0
    means every input gets the same state, so the ranking cannot depend on the input) and ``first_state_std`` their
    standard deviation across examples, averaged over dimensions.
    """
    from rag_hier.training.corpus import as_training_corpus
    from rag_hier.training.hce.data import resolve_pairs

    items = as_training_corpus(docs, 0)
    pairs = resolve_pairs(items, queries, train)
    rng = np.random.default_rng(seed)
    picked_pairs = [pairs[i] for i in rng.choice(len(pairs), size=min(n, len(pairs)), replace=False)]
    picked_docs = rng.choice(len(items.texts), size=min(n, len(items.texts)), replace=False).tolist()
    out: dict[str, Any] = {"examples": {"retrieval": len(picked_pairs), "indexing": len(picked_docs)}}
    for task, texts, targets in (
        ("retrieval", [p.query for p in picked_pairs], [items.ids[p.positive] for p in picked_pairs]),
        ("indexing", [items.texts[i] for i in picked_docs], [items.ids[i] for i in picked_docs]),
    ):
        ce, among, hit, first = _dsi_losses(model, texts, targets)
        out[task] = {
            "first_state_cosine": round(_mean_pairwise_cosine(first), 6),
            "first_state_std": round(float(first.std(0).mean()), 6),
            "docid_ce_vocab": round(float(ce[:, 0].mean()), 4),
            "eos_ce": round(float(ce[:, 1].mean()), 4),
            "loss": round(float(ce.mean()), 4),
            "docid_ce_docids": round(float(among.mean()), 4),
            "hit@1": round(float(hit.mean()), 4),
        }
    out["chance_docid_ce_docids"] = round(float(np.log(len(model.docids))), 4)
    return out


def _dsi_start(args: argparse.Namespace, docs: list[Any], base: str, docid_init: str) -> Any:
    """The untrained seq2seq DSI-atomic model the trainer starts from (same seed: same new rows)."""
    from rag_hier.retrieval.dsi_seq2seq import DSIAtomicSeq2SeqModel
    from rag_hier.training.corpus import as_training_corpus

    ids = as_training_corpus(docs, 0).ids
    return DSIAtomicSeq2SeqModel.from_pretrained(
        base, ids, max_seq_length=args.max_seq_length, device=DEVICE, seed=args.seed, docid_init=docid_init
    )


def _dsi_eval(model: Any, docs: list[Any], queries: dict, qrels: dict) -> dict[str, Any]:
    qids = [q for q in qrels if q in queries]
    t = time.perf_counter()
    logits = model.logits([queries[q] for q in qids])
    doc_ids = [d.split("#", 1)[0] for d in model.docids]
    return {
        "metrics": evaluate_scores(logits, qids, doc_ids, qrels),
        "eval_seconds": round(time.perf_counter() - t, 1),
        "per_query_ndcg@10": per_query_ndcg(logits, qids, doc_ids, qrels),
    }


def stage_dsi(args: argparse.Namespace) -> dict[str, Any]:
    from rag_hier.training.tied_atomic import DSIAtomicTrainer

    docs, queries, qrels, train = load(args)
    if args.base_model is None:
        args.base_model = _warm_start(args)
    out = OUT / f"model-dsi{args.tag}"
    cfg = _dsi_config(args)
    probe: dict[str, Any] = {}
    if cfg.objective == "seq2seq":  # the untrained model the trainer starts from (same seed: same new rows)
        start = _dsi_start(args, docs, args.base_model, cfg.docid_init)
        probe["start"] = _dsi_probe(start, docs, queries, train, args.seed)
        del start
    t = time.perf_counter()
    trainer = DSIAtomicTrainer(cfg)
    result = trainer.train(docs, out, queries=queries, qrels=train)
    model = trainer.model
    info = {
        "method": "dsi",
        "objective": cfg.objective,
        "steps_done": result.steps,
        "rows": result.rows,
        "train_loss": result.train_loss,
        "loss_log": result.loss_log,
        "train_seconds": round(time.perf_counter() - t, 1),
        "docid_lr": args.docid_lr,
        "docid_init": cfg.docid_init if cfg.objective == "seq2seq" else None,
    }
    if probe:
        probe["end"] = _dsi_probe(model, docs, queries, train, args.seed)
        info["probe"] = probe
    return {**info, **_dsi_eval(model, docs, queries, qrels)}


def stage_incremental(args: argparse.Namespace) -> dict[str, Any]:
    """Train on 90 % of the documents; add the other 10 % afterwards; Recall for queries on old vs new documents."""
    import shutil

    from rag_hier.retrieval.generative import TiedAtomicHead
    from rag_hier.store import HierStore
    from rag_hier.training.tied_atomic import DSIAtomicTrainer, TiedAtomicTrainer

    docs, queries, qrels, train = load(args)
    if args.base_model is None:
        args.base_model = _warm_start(args)
    rng = np.random.default_rng(args.split_seed)
    new_ids = set(rng.choice([d.doc_id for d in docs], size=round(0.1 * len(docs)), replace=False).tolist())
    old_docs = [d for d in docs if d.doc_id not in new_ids]
    new_docs = [d for d in docs if d.doc_id in new_ids]
    # training pairs can only name documents that exist at training time
    train_old = {q: {d: g for d, g in r.items() if d not in new_ids} for q, r in train.items()}
    train_old = {q: r for q, r in train_old.items() if any(g > 0 for g in r.values())}
    groups: dict[str, dict] = {"old": {}, "new": {}}
    for q, rels in qrels.items():
        rel = {d for d, g in rels.items() if g > 0}
        if rel and rel <= new_ids:
            groups["new"][q] = rels
        elif rel and not rel & new_ids:
            groups["old"][q] = rels
    out: dict[str, Any] = {
        "method": "incremental",
        "documents": {"old": len(old_docs), "new": len(new_docs)},
        "queries": {k: len(v) for k, v in groups.items()},
        "train_pairs_kept": sum(len(r) for r in train_old.values()),
    }
    metrics = ("recall@10", "recall@100", "ndcg@10")
    # Tied-Atomic: train on old documents, index them in a store, then add the new ones by encoding them.
    tied_dir = OUT / f"model-tied-incr{args.tag}"
    t = time.perf_counter()
    res = TiedAtomicTrainer(_tied_config(args)).train(old_docs, tied_dir, queries=queries, qrels=train_old)
    out["tied_train_seconds"] = round(time.perf_counter() - t, 1)
    out["tied_steps"] = res.steps
    store_dir = OUT / f"store-incr{args.tag}"
    shutil.rmtree(store_dir, ignore_errors=True)
    from rag_hier.encoders.dense import DenseEncoder

    store = HierStore.create(store_dir, encoder=DenseEncoder(str(tied_dir), device=DEVICE, batch_size=32))
    store.add_documents(old_docs)
    t = time.perf_counter()
    store.add_documents(new_docs)
    out["tied_add_seconds"] = round(time.perf_counter() - t, 1)
    head = TiedAtomicHead(store, level="document")
    from rag_hier.eval import evaluate

    def tied_run(group: dict) -> dict:
        qids = list(group)
        logits = head.logits([queries[q] for q in qids])
        return {m: round(v, 4) for m, v in evaluate(_run(logits, qids, list(head.docids)), group, metrics).items()}

    out["tied"] = {g: tied_run(v) for g, v in groups.items() if v}
    out["tied_all_docs_count"] = len(head)
    store.close()
    # DSI-atomic: train on old documents; new docids get rows without training (random: as DSI adds tokens).
    t = time.perf_counter()
    dsi_trainer = DSIAtomicTrainer(_dsi_config(args))
    dsi_trainer.train(old_docs, OUT / f"model-dsi-incr{args.tag}", queries=queries, qrels=train_old)
    dsi = dsi_trainer.model
    out["dsi_train_seconds"] = round(time.perf_counter() - t, 1)
    from rag_hier.training.hce.data import TrainingCorpus

    new_items = TrainingCorpus.from_documents(new_docs, 0)

    def dsi_run(model: Any, group: dict) -> dict:
        qids = list(group)
        logits = model.logits([queries[q] for q in qids])
        ids = [d.split("#", 1)[0] for d in model.docids]
        return {m: round(v, 4) for m, v in evaluate(_run(logits, qids, ids), group, metrics).items()}

    dsi.add_docids(list(new_items.ids), init="random")
    out["dsi_random_rows"] = {g: dsi_run(dsi, v) for g, v in groups.items() if v}
    # the same model, new rows tied to its own text vector: what tying buys an untied model at insertion time
    dsi2 = type(dsi).load(OUT / f"model-dsi-incr{args.tag}", device=DEVICE)  # as trained, before the random rows
    dsi2.add_docids(list(new_items.ids), init="tied", texts=list(new_items.texts))
    out["dsi_tied_rows"] = {g: dsi_run(dsi2, v) for g, v in groups.items() if v}
    return out


def _run(logits: np.ndarray, qids: list[str], ids: list[str]) -> dict[str, dict[str, float]]:
    k = min(100, logits.shape[1])
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    run: dict[str, dict[str, float]] = {}
    for i, q in enumerate(qids):
        best: dict[str, float] = {}
        for j in top[i].tolist():
            d, s = ids[j], float(logits[i, j])
            if d not in best or s > best[d]:
                best[d] = s
        run[q] = best
    return run


def stage_throughput(args: argparse.Namespace) -> dict[str, Any]:
    """Docs/s of MiniLM vs the encoder-decoders on the same SciFact documents, interleaved in one process.

    The T5 rows are t5-small / t5-base *architectures* with random weights on MiniLM's vocabulary (speed
    does not depend on the weights; no pretrained T5 is available offline); token counts are MiniLM's.
    """
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import T5Config, T5ForConditionalGeneration

    from rag_hier.encoders.dense import DenseEncoder, resolve_model_path
    from rag_hier.encoders.encdec import EncoderDecoderEmbedding

    docs, _, _, _ = load(args)
    _, texts = doc_texts(docs)
    texts = texts[: args.n_docs]
    models: dict[str, Any] = {}
    models["minilm"] = DenseEncoder(MINILM, device=DEVICE, batch_size=32, max_seq_length=args.max_seq_length).model
    models["tied-minilm-encdec"] = DenseEncoder(_warm_start(args), device=DEVICE, batch_size=32).model
    src = Path(resolve_model_path(MINILM))
    for name, cfg in (
        ("t5-small-arch", {"d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8}),
        ("t5-base-arch", {"d_model": 768, "d_kv": 64, "d_ff": 3072, "num_layers": 12, "num_heads": 12}),
    ):
        if name not in args.archs:
            continue
        path = OUT / f"throughput-{name}"
        if not (path / "config.json").is_file():
            import shutil

            path.mkdir(parents=True, exist_ok=True)
            torch.manual_seed(0)
            T5ForConditionalGeneration(
                T5Config(vocab_size=30522, pad_token_id=0, eos_token_id=102, decoder_start_token_id=0, **cfg)
            ).save_pretrained(path)
            for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
                if (src / f).exists():
                    shutil.copy(src / f, path / f)
        module = EncoderDecoderEmbedding(str(path), max_seq_length=args.max_seq_length)
        models[name] = SentenceTransformer(modules=[module], device=DEVICE, similarity_fn_name="dot")
    for m in models.values():
        m.max_seq_length = args.max_seq_length
        m.eval()
    secs: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(args.rounds):  # interleave, so load changes hit every model alike
        for name, m in models.items():
            t = time.perf_counter()
            m.encode(texts, batch_size=32, show_progress_bar=False)
            secs[name].append(time.perf_counter() - t)
    best = {k: min(v) for k, v in secs.items()}
    rate = {k: round(len(texts) / v, 1) for k, v in best.items()}
    return {
        "method": "throughput",
        "n_docs": len(texts),
        "rounds": args.rounds,
        "seconds": secs,
        "docs_per_second": rate,
        "ratio_vs_minilm": {k: round(rate[k] / rate["minilm"], 3) for k in rate},
    }


def stage_report(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for f in sorted(OUT.glob("*.json")):
        data = json.loads(f.read_text(encoding="utf-8"))
        m = data.get("metrics")
        if isinstance(m, dict) and "ndcg@10" in m:
            b = data.get("budget", {})
            rows.append(
                f"| {f.stem} | {b.get('evaluation', '')} | {m['ndcg@10']:.4f} | {m['recall@10']:.4f} | "
                f"{m['recall@100']:.4f} | {m['mrr@10']:.4f} | {data.get('train_seconds', '–')} |"
            )
    print("| run | evaluated on | nDCG@10 | Recall@10 | Recall@100 | MRR@10 | train s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    return {}


def stage_dsi_probe(args: argparse.Namespace) -> dict[str, Any]:
    """The DSI probe (see :func:`_dsi_probe`) of a saved seq2seq DSI-atomic model (``--model``), no training.

    Without ``--model``: the untrained model ``dsi`` starts from (``--base-model`` or the MiniLM warm start, docid
    rows as ``--dsi-init``, ``--seed``).
    """
    from rag_hier.retrieval.dsi_seq2seq import DSIAtomicSeq2SeqModel

    docs, queries, _, train = load(args)
    if args.model:
        model = DSIAtomicSeq2SeqModel.load(args.model, device=DEVICE)
        what = str(args.model)
    else:
        base = args.base_model or _warm_start(args)
        model = _dsi_start(args, docs, base, args.dsi_init)
        what = f"untrained start: {base} (docid rows: {args.dsi_init})"
    return {"method": "dsi-probe", "model": what, "probe": _dsi_probe(model, docs, queries, train, args.seed)}


def stage_paired(args: argparse.Namespace) -> dict[str, Any]:
    """Paired per-query nDCG@10 of ``--compare A B`` (result files ``<out>/A.json``, ``<out>/B.json``): B − A."""
    from rag_hier.eval.compare import paired_difference

    if not args.compare or len(args.compare) != 2:
        raise SystemExit("paired: give --compare A B (two result files in --out, without .json)")
    per, budgets = [], {}
    for name in args.compare:
        path = OUT / f"{name}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        if "per_query_ndcg@10" not in data:
            raise SystemExit(f"{path}: no per_query_ndcg@10 (rerun its stage with this version)")
        per.append(data["per_query_ndcg@10"])
        budgets[name] = data.get("budget")
    if set(per[0]) != set(per[1]):
        raise SystemExit(f"{args.compare[0]} and {args.compare[1]} were scored on different queries")
    qids = sorted(per[0])
    stats = paired_difference([per[0][q] for q in qids], [per[1][q] for q in qids], seed=args.seed)
    print(
        f"nDCG@10 {args.compare[1]} - {args.compare[0]}: {stats['delta']:+.4f} "
        f"[{stats['ci_low']:+.4f}, {stats['ci_high']:+.4f}], p {stats['p_value']:.3g}, "
        f"{stats['wins']} better / {stats['losses']} worse, {stats['queries']} queries"
    )
    a, b = args.compare
    # the budgets are the compared runs' own (this stage trains nothing); the seed is the bootstrap's
    return {"method": "paired", "a": a, "b": b, "ndcg@10": stats, "budgets": budgets, "bootstrap_seed": args.seed}


STAGES = {
    "bm25": stage_bm25,
    "minilm-base": stage_minilm_base,
    "minilm-ft": stage_minilm_ft,
    "tied": stage_tied,
    "dsi": stage_dsi,
    "dsi-probe": stage_dsi_probe,
    "incremental": stage_incremental,
    "throughput": stage_throughput,
    "report": stage_report,
    "paired": stage_paired,
}


def main(argv: list[str] | None = None) -> None:
    global OUT, MINILM, DEVICE
    from rag_hier.training.tied_atomic_config import TiedAtomicConfig

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=sorted(STAGES))
    add_data_argument(p)
    p.add_argument(
        "--dataset",
        choices=("scifact", "xquad"),
        default="scifact",
        help="scifact (BEIR) or xquad (XQuAD-en's 240 paragraphs as docids; adds -xquad to every output name)",
    )
    p.add_argument(
        "--xquad-test", type=float, default=0.5, help="xquad: share of each paragraph's questions held out for test"
    )
    p.add_argument("--dev", type=float, default=0.0, help="evaluate on this share of the training queries")
    p.add_argument("--dev-seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=87)
    p.add_argument(
        "--max-minutes", type=float, default=None, help="stop training after this many minutes (a device deadline)"
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--scale", type=float, default=1.0, help="Tied-Atomic InfoNCE inverse temperature (paper: 1)")
    p.add_argument("--minilm-scale", type=float, default=20.0, help="MiniLM fine-tuning: MNRL scale")
    p.add_argument(
        "--minilm-similarity",
        choices=("cosine", "dot"),
        default="cosine",
        help="MiniLM fine-tuning: cosine (normalized vectors) or dot (Normalize dropped: Tied-Atomic's similarity)",
    )
    p.add_argument("--compare", nargs="*", default=None, help="paired: two result names in --out (B - A)")
    p.add_argument(
        "--model",
        default=None,
        help="dsi-probe: a saved seq2seq DSI-atomic model directory (default: the untrained start)",
    )
    p.add_argument("--negatives", type=int, default=1, help="BM25 negatives per query")
    p.add_argument("--depth", type=int, default=10, help="BM25 negatives drawn from this top-k")
    p.add_argument(
        "--cross-init", choices=("random", "self_attention"), default=TiedAtomicConfig.warm_start_cross_attention
    )
    p.add_argument("--base-model", default=None, help="encoder-decoder to start from (default: MiniLM warm start)")
    p.add_argument(
        "--dsi-objective",
        choices=("seq2seq", "docid_softmax"),
        default="seq2seq",
        help="DSI: seq2seq (docid tokens, teacher forcing; the paper's) or docid_softmax (free rows over h(x))",
    )
    p.add_argument("--docid-lr", type=float, default=None, help="DSI docid_softmax: learning rate of the docid rows")
    p.add_argument(
        "--dsi-init",
        choices=("random", "mean"),
        default="random",
        help="DSI seq2seq: new docid rows drawn by the model's initializer (the default) or at the vocabulary's mean",
    )
    p.add_argument("--retrieval-repeats", type=int, default=1, help="DSI: copies of each query example")
    p.add_argument("--k1", type=float, default=1.5, help="BM25 baseline k1 (bm25s default)")
    p.add_argument("--b", type=float, default=0.75, help="BM25 baseline b (bm25s default)")
    p.add_argument(
        "--split-seed",
        type=int,
        default=0,
        help="incremental: which 10 %% of documents are new; xquad: how each paragraph's questions are split",
    )
    p.add_argument("--n-docs", type=int, default=1000, help="throughput: documents encoded per round")
    p.add_argument("--rounds", type=int, default=3, help="throughput: interleaved rounds (best kept)")
    p.add_argument("--archs", nargs="*", default=["t5-small-arch", "t5-base-arch"], help="throughput: T5 shapes")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tag", default="", help="suffix of the output file name")
    p.add_argument("--device", default="cpu", help="where models train and encode (cpu, cuda, ...)")
    p.add_argument("--minilm", default=MINILM, help="the MiniLM every run starts from (directory or hub id)")
    p.add_argument("--out", type=Path, default=OUT, help="where results and models go")
    args = p.parse_args(argv)
    OUT, MINILM, DEVICE = args.out, args.minilm, args.device
    if args.dataset == "xquad" and args.stage not in ("report", "paired"):
        args.tag = f"-xquad{args.tag}"
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    OUT.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    result = STAGES[args.stage](args)
    if args.stage == "report":
        return
    if args.stage != "paired":
        result["budget"] = budget(args)
    result["wall_seconds"] = round(time.perf_counter() - t, 1)
    result["host"] = {"python": platform.python_version(), "load_avg_end": os.getloadavg()}
    name = f"{args.stage}{'-dev' if args.dev else ''}{args.tag}.json"
    write_json(OUT / name, result)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
