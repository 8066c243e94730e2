"""Hybrid search: dense + lexical fusion on SciFact and XQuAD-en, weights chosen on dev.

Components (each ranks its ``--depth`` best passages per query):

* ``dense``   — the store's ``dense`` strategy, offline all-MiniLM-L6-v2 (the default model, 256 tokens);
* ``lexical`` — the store's ``svdr-lexical`` strategy (idf-weighted overlap of binary token sets over the
  model's WordPiece vocabulary; no model), the ``fusion`` strategy's default lexical component;
* ``bm25``    — the store's ``bm25`` strategy when it has one (else bm25s outside the store): Lucene BM25,
  k1 = 1.5, b = 0.75, English stopwords and the Snowball stemmer (PyStemmer) when installed.

Fusions (``rag_hier.retrieval.fusion.FUSIONS``, the functions the ``fusion`` strategy uses): plain RRF (k = 60,
equal weights: the strategy's default), weighted RRF (k ∈ {10, 60}, dense weight w ∈ 0.1 … 0.9), relative
score (min-max, LlamaIndex's alpha), DBSF, and a convex combination of raw scores (lexical weight on a log
grid). Ties are broken as the strategy breaks them (first appearance in the component lists).

Splits (nothing is trained, so dev is only where the weights are chosen):

* SciFact: dev = the 809 queries of ``qrels/train.tsv``; test = the 300 of ``qrels/test.tsv``; documents
  kept whole; primary metric nDCG@10 (then Recall@100).
* XQuAD-en: the 48 documents halved with ``random.Random(0)`` (:func:`benchmarks.common.halves`, as
  ``bench_dhr_xquad.py``); dev = the questions of the first 24, test = those of the other 24; retrieval from all 240
  paragraphs; primary metric top-1 paragraph accuracy (then top-5).

One default for both: among the configurations that do not depend on the components' score scales (RRF,
relative score, DBSF: not the convex combination of raw scores, whose weight is only valid for the corpus, model
and query style it was tuned on), the one with the highest mean of the two dev primaries; it replaces plain RRF
as the strategy's default only if it beats plain RRF on both dev sets. ``best-mean`` is the same choice with
the convex combination allowed. Test is touched once, at the end:
paired bootstrap intervals against plain RRF and the better single component.

Usage::

    python -m benchmarks.retrieval.bench_fusion            # both data sets; stores cached in benchmarks/out/fusion/
    python -m benchmarks.retrieval.bench_fusion --datasets xquad --threads 1

Data from the data folder (``--data``, see ``benchmarks/README.md``). Results: ``<out>/results.json`` and
``results.md`` (``--out``, default ``benchmarks/out/fusion``, git-ignored).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import data as common_data
from benchmarks.common.data import add_data_argument, data_dir
from benchmarks.common.report import out_path, write_json

DATA: Path | None = None
"""The data folder (``--data``; resolved by :func:`benchmarks.common.data_dir`)."""
OUT = out_path("fusion")
"""Stores and results (``--out``)."""
MODEL: str | None = None
"""The dense model (``--model``; default: the store's default, the offline all-MiniLM-L6-v2)."""
RRF_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(1, 10))
ALPHAS = tuple(round(0.1 * i, 1) for i in range(0, 11))
CONVEX = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)

log = logging.getLogger("bench_fusion")


# ---------------------------------------------------------------------------------------------------- data
class Split:
    """Queries of one split: ids, texts, qrels (id → {passage or document id → grade})."""

    def __init__(self, qids: list[str], texts: list[str], qrels: dict[str, dict[str, int]]) -> None:
        self.qids, self.texts, self.qrels = qids, texts, qrels


def load_scifact() -> tuple[list[Any], dict[str, Split], str]:
    d = common_data.load_scifact(DATA)
    splits = {}
    for name, qrels in (("dev", d.train_qrels), ("test", d.qrels)):
        qids = [q for q in qrels if q in d.queries]
        splits[name] = Split(qids, [d.queries[q] for q in qids], {q: qrels[q] for q in qids})
    return d.documents, splits, "doc"


def load_xquad() -> tuple[list[Any], dict[str, Split], str]:
    xquad = common_data.load_xquad(DATA)
    first, _ = common_data.halves(xquad.documents)
    splits = {}
    for name, keep in (("dev", True), ("test", False)):
        qs = [q for q in xquad.questions if (q.doc_id in first) == keep and q.paragraph_index is not None]
        splits[name] = Split(
            [q.qid for q in qs], [q.question for q in qs], {q.qid: {f"{q.doc_id}#{q.paragraph_index}": 1} for q in qs}
        )
    return xquad.documents, splits, "passage"


DATASETS = {"scifact": load_scifact, "xquad": load_xquad}
PRIMARY = {"scifact": ("ndcg@10", "recall@100"), "xquad": ("top1", "top5")}


def open_store(name: str, docs: list[Any]) -> Any:
    """The data set's store (default model, whole documents / paragraphs, token index, BM25 index), built once."""
    from rag_hier import HierStore

    path = OUT / f"{name}-store"
    if not (path / "manifest.json").exists():  # built under another name, renamed once complete
        t = time.perf_counter()
        partial = OUT / f"{name}-store.partial"
        if partial.exists():
            shutil.rmtree(partial)
        options = {} if MODEL is None else {"model": MODEL}
        store = HierStore.create(partial, corpus={"max_passage_words": 0}, **options)
        store.add_documents(docs, max_passage_words=0)
        store.ensure_extension("token-index")
        store.close()
        partial.rename(path)
        log.info("%s: indexed %d documents in %.0f s", name, len(docs), time.perf_counter() - t)
    store = HierStore.open(path)
    store.ensure_extension("token-index")
    from rag_hier.retrieval.registry import strategy_names

    if "bm25" in strategy_names():  # the store strategy bm25 needs its extension (built once, then kept)
        store.ensure_extension("bm25")
    return store


# ------------------------------------------------------------------------------------------- components
Ranked = list[tuple[np.ndarray, np.ndarray]]
"""Per query: (passage numbers, scores), best first."""


def store_component(store: Any, strategy: str, texts: Sequence[str], depth: int, number: dict[str, int]) -> Ranked:
    from rag_hier.retrieval import Queries, build_retriever

    retriever = build_retriever(strategy, store)
    out = []
    for result in retriever.run(Queries(texts=list(texts)), top_k=depth):
        # a token component's 0 (nothing in common with the query) is not a candidate, as in the fusion strategy
        hits = [h for h in result.hits if retriever.over_vectors or h.score != 0]
        ids = np.array([number[h.passage_id] for h in hits], np.int64)
        out.append((ids, np.array([h.score for h in hits], np.float64)))
    return out


def bm25s_component(passages: list[tuple[str, str]], texts: Sequence[str], depth: int) -> tuple[Ranked, str]:
    """bm25s over the passages' texts (as encoded, title path included), outside the store."""
    import bm25s

    try:
        import Stemmer

        stemmer, stem_name = Stemmer.Stemmer("english"), "snowball english (PyStemmer)"
    except ImportError:
        stemmer, stem_name = None, "none"
    index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    index.index(bm25s.tokenize([t for _, t in passages], stopwords="en", stemmer=stemmer, show_progress=False))
    tokens = bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False)
    ids, scores = index.retrieve(tokens, k=min(depth, len(passages)), show_progress=False)
    out = []
    for row, srow in zip(ids, scores, strict=True):
        keep = srow > 0  # no term in common: not a candidate (as the fusion strategy treats lexical zeros)
        out.append((row[keep].astype(np.int64), srow[keep].astype(np.float64)))
    return out, stem_name


# ----------------------------------------------------------------------------------------------- fusion
def fuse(lists: Ranked, method: str, weights: Sequence[float], rrf_k: int) -> np.ndarray:
    """Passage numbers ranked by the fused score, ties as the ``fusion`` strategy breaks them."""
    from rag_hier.retrieval.fusion import FUSIONS

    ids, fused = FUSIONS[method](lists, weights, rrf_k)
    listed = np.concatenate([r for r, _ in lists]) if lists else np.zeros(0, np.int64)
    seen, first = np.unique(listed, return_index=True)
    position = first[np.searchsorted(seen, ids)]
    order = np.lexsort((position, -np.asarray(fused)))
    return np.asarray(ids)[order]


def configurations() -> list[tuple[str, str, tuple[float, float], int]]:
    """(label, method, (dense weight, lexical weight), rrf_k)."""
    out = [("rrf k60 (1,1)", "rrf", (1.0, 1.0), 60)]
    for k in (10, 60):
        out += [(f"rrf k{k} w{w}", "rrf", (w, round(1 - w, 1)), k) for w in RRF_WEIGHTS if not (k == 60 and w == 0.5)]
    out += [(f"relative_score a{a}", "relative_score", (a, round(1 - a, 1)), 60) for a in ALPHAS[1:-1]]
    out += [(f"dbsf a{a}", "dbsf", (a, round(1 - a, 1)), 60) for a in ALPHAS[1:-1]]
    out += [(f"convex {w}", "convex", (1.0, w), 60) for w in CONVEX]
    return out


# ---------------------------------------------------------------------------------------------- metrics
def per_query(ranked: list[np.ndarray], split: Split, names: list[str], owner: list[str], level: str, depth: int):
    """Per-query metric values: {metric: np.ndarray over split.qids}."""
    from rag_hier.eval.metrics import evaluate_per_query

    run: dict[str, dict[str, float]] = {}
    for qid, ids in zip(split.qids, ranked, strict=True):
        keys = [owner[i] if level == "doc" else names[i] for i in ids[:depth].tolist()]
        row: dict[str, float] = {}
        for r, key in enumerate(keys):
            row.setdefault(key, float(depth - r))  # scores that keep our order (pytrec_eval re-sorts)
        run[qid] = row
    if level == "doc":
        values = evaluate_per_query(run, split.qrels, ["ndcg@10", "recall@100", "recall@10"])
        return {m: np.array([v[q] for q in split.qids]) for m, v in values.items()}
    out: dict[str, np.ndarray] = {}
    gold_rank = []
    for qid in split.qids:
        keys = list(run[qid])
        gold = next(iter(split.qrels[qid]))
        gold_rank.append(keys.index(gold) + 1 if gold in keys else 10**9)
    g = np.array(gold_rank)
    for k in (1, 5, 20):
        out[f"top{k}"] = (g <= k).astype(np.float64)
    out["mrr@10"] = np.where(g <= 10, 1.0 / g, 0.0)
    return out


def means(values: dict[str, np.ndarray]) -> dict[str, float]:
    return {m: round(float(v.mean()), 4) for m, v in values.items()}


# ------------------------------------------------------------------------------------------------- main
def run_dataset(name: str, depth: int, check_strategy: bool) -> dict[str, Any]:
    from rag_hier.retrieval.registry import strategy_names

    docs, splits, level = DATASETS[name]()
    store = open_store(name, docs)
    passages = [(p.id, p.embedding_text) for p in store.iter_passages()]
    names = [pid for pid, _ in passages]
    number = {pid: i for i, pid in enumerate(names)}
    owner = [pid.rsplit("#", 1)[0] for pid in names]
    result: dict[str, Any] = {"passages": len(passages), "level": level, "depth": depth, "splits": {}}
    lexicals = ["lexical", "bm25"]
    for split_name, split in splits.items():
        t = time.perf_counter()
        comp: dict[str, Ranked] = {
            "dense": store_component(store, "dense", split.texts, depth, number),
            "lexical": store_component(store, "svdr-lexical", split.texts, depth, number),
        }
        if "bm25" in strategy_names():
            comp["bm25"] = store_component(store, "bm25", split.texts, depth, number)
            result["bm25"] = "store strategy bm25"
        else:
            comp["bm25"], stem = bm25s_component(passages, split.texts, depth)
            result["bm25"] = f"bm25s outside the store, stemmer {stem}"
        log.info("%s/%s: %d queries, components in %.0f s", name, split_name, len(split.qids), time.perf_counter() - t)
        rows_out: dict[str, Any] = {}
        values: dict[str, dict[str, np.ndarray]] = {}
        for c, ranked in comp.items():
            values[c] = per_query([r for r, _ in ranked], split, names, owner, level, depth)
        for lex in lexicals:
            for label, method, weights, k in configurations():
                ranked = [fuse([d, x], method, weights, k) for d, x in zip(comp["dense"], comp[lex], strict=True)]
                values[f"dense+{lex} {label}"] = per_query(ranked, split, names, owner, level, depth)
        if check_strategy and split_name == "dev":
            result["strategy_check"] = _check_strategy(store, split, comp, number, depth)
        for key, v in values.items():
            rows_out[key] = means(v)
        result["splits"][split_name] = {"queries": len(split.qids), "metrics": rows_out}
        result["splits"][split_name]["_values"] = values  # dropped before writing
    store.close()
    return result


def _check_strategy(store: Any, split: Split, comp: dict[str, Ranked], number: dict[str, int], depth: int) -> str:
    """The store's ``fusion`` strategy ranks as :func:`fuse` does (dense + svdr-lexical, two configurations)."""
    from rag_hier.retrieval import Queries, build_retriever

    texts = split.texts[:50]
    for method, weights, k in (("rrf", (1.0, 1.0), 60), ("relative_score", (0.7, 0.3), 60)):
        r = build_retriever(
            "fusion", store, strategies=("dense", "svdr-lexical"), method=method, weights=weights, rrf_k=k, depth=depth
        )
        for i, res in enumerate(r.run(Queries(texts=texts), top_k=10)):
            mine = fuse([comp["dense"][i], comp["lexical"][i]], method, weights, k)[:10]
            theirs = np.array([number[h.passage_id] for h in res.hits])
            if not np.array_equal(mine, theirs):
                return f"MISMATCH at query {i} ({method})"
    return "the fusion strategy's top 10 equals the offline fusion (50 dev queries, rrf and relative_score)"


def choose(results: dict[str, Any]) -> dict[str, Any]:
    """Per data set and lexical component the best dev configuration; one default over both data sets."""
    chosen: dict[str, Any] = {}
    common: dict[str, list[float]] = {}
    for name, res in results.items():
        primary, secondary = PRIMARY[name]
        dev = res["splits"]["dev"]["metrics"]
        for lex in ("lexical", "bm25"):
            keys = [k for k in dev if k.startswith(f"dense+{lex} ")]
            best = max(keys, key=lambda k: (dev[k][primary], dev[k][secondary]))
            chosen[f"{name}/{lex}"] = best
            for k in keys:
                common.setdefault(k.split(" ", 1)[1] + f" [{lex}]", []).append(dev[k][primary])
    both = {k: float(np.mean(v)) for k, v in common.items() if len(v) == len(results)}
    for lex in ("lexical", "bm25"):
        keys = [k for k in both if k.endswith(f"[{lex}]")]
        if keys:
            chosen[f"best-mean/{lex}"] = max(keys, key=lambda k: both[k]).rsplit(" [", 1)[0]
            # a default must not depend on the components' score scales (unknown corpus, model, query length):
            # the convex combination of raw scores is left out
            free = [k for k in keys if not k.startswith("convex")]
            chosen[f"default/{lex}"] = max(free, key=lambda k: both[k]).rsplit(" [", 1)[0]
    return chosen


def report(results: dict[str, Any], chosen: dict[str, Any]) -> tuple[dict[str, Any], str]:
    from rag_hier.eval.compare import paired_difference

    lines = ["# Dense + lexical fusion (dev-chosen weights, test once)", ""]
    tables: dict[str, Any] = {}
    for name, res in results.items():
        primary, _ = PRIMARY[name]
        test = res["splits"]["test"]
        vals = test["_values"]
        metrics = list(next(iter(test["metrics"].values())))
        lines += [f"## {name} (test: {test['queries']} queries; dev: {res['splits']['dev']['queries']})", ""]
        lines += [f"lexical = svdr-lexical; bm25 = {res['bm25']}", ""]
        lines += [f"| system | dev {primary} | " + " | ".join(metrics) + " |", "|---|---:|" + "---:|" * len(metrics)]
        dev = res["splits"]["dev"]["metrics"]
        rows = ["dense", "lexical", "bm25"]
        for lex in ("lexical", "bm25"):
            rows += [f"dense+{lex} rrf k60 (1,1)", f"dense+{lex} {chosen[f'{name}/{lex}'].split(' ', 1)[1]}"]
            rows.append(f"dense+{lex} {chosen[f'best-mean/{lex}']}")
            rows.append(f"dense+{lex} {chosen[f'default/{lex}']}")
        seen = []
        for r in rows:
            if r in seen:
                continue
            seen.append(r)
            m = test["metrics"][r]
            lines.append(f"| {r} | {dev[r][primary]:.4f} | " + " | ".join(f"{m[k]:.4f}" for k in metrics) + " |")
        lines += ["", f"Paired differences on test ({primary}; bootstrap 95 % CI, 10,000 resamples, seed 42):", ""]
        lines += ["| baseline → system | Δ | 95 % CI | wins / losses / ties |", "|---|---:|---|---|"]
        pairs = []
        for lex in ("lexical", "bm25"):
            best_single = max(("dense", lex), key=lambda c: dev[c][primary])
            systems = [
                f"dense+{lex} {chosen[f'{name}/{lex}'].split(' ', 1)[1]}",
                f"dense+{lex} {chosen[f'default/{lex}']}",
            ]
            for sysname in dict.fromkeys(systems):
                pairs.append((f"dense+{lex} rrf k60 (1,1)", sysname))
                pairs.append((best_single, sysname))
            pairs.append((best_single, f"dense+{lex} rrf k60 (1,1)"))
        out_pairs = []
        for a, b in pairs:
            d = paired_difference(vals[a][primary], vals[b][primary])
            out_pairs.append({"baseline": a, "system": b, **d})
            lines.append(
                f"| {a} → {b} | {d['delta']:+.4f} | [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] | "
                f"{int(d['wins'])} / {int(d['losses'])} / {int(d['ties'])} |"
            )
        lines.append("")
        tables[name] = {"test": test["metrics"], "dev": dev, "paired": out_pairs}
    lines += ["Chosen on dev: " + json.dumps(chosen, indent=1), ""]
    return tables, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global DATA, OUT, MODEL  # the data folder, --out and --model, read by the loaders and open_store
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="scifact,xquad")
    add_data_argument(p)
    p.add_argument("--out", type=Path, default=OUT, help="stores (built once, then kept) and results")
    p.add_argument("--model", default=None, help="the dense model (default: the offline all-MiniLM-L6-v2)")
    p.add_argument("--depth", type=int, default=100, help="candidates per component (the strategy's default)")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    DATA, OUT, MODEL = data_dir(a.data), a.out, a.model
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import faiss
    import torch

    torch.set_num_threads(a.threads)
    faiss.omp_set_num_threads(a.threads)
    OUT.mkdir(parents=True, exist_ok=True)
    names = [n for n in a.datasets.split(",") if n]
    missing = [n for n in names if not (DATA / ("scifact" if n == "scifact" else "xquad_en")).is_dir()]
    if missing:
        print(f"SKIP: data for {missing} not found under {DATA}")
        return 0
    results = {n: run_dataset(n, a.depth, check_strategy=True) for n in names}
    chosen = choose(results)
    tables, md = report(results, chosen)
    for res in results.values():
        for s in res["splits"].values():
            s.pop("_values", None)
    write_json(OUT / "results.json", {"results": results, "chosen": chosen, "tables": tables})
    (OUT / "results.md").write_text(md + "\n", encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
