"""``rag-hier eval`` conventions (identical ids, qrels hygiene, --beir, --per-query, provenance) and ``compare``."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rag_hier.corpus.readers import read_qrels
from rag_hier.eval import evaluate, read_per_query, read_run

from .conftest import BEIR_DOCS, Corpora, write_jsonl


def assert_fails(result, *fragments: str) -> str:
    assert result.code == 2, (result.out, result.err)
    lines = result.err_lines
    assert len(lines) == 1, result.err
    line = lines[0]
    assert line.startswith("rag-hier ") and ": error: " in line, line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def _metrics_from_stdout(out: str) -> dict[str, float]:
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines()[1:] if line.strip()}


@pytest.fixture()
def self_beir(tmp_path: Path) -> Path:
    """A BEIR folder whose queries are corpus documents (same id, same text), judged against another one."""
    root = tmp_path / "self-beir"
    write_jsonl(root / "corpus.jsonl", BEIR_DOCS)
    write_jsonl(root / "queries.jsonl", [{"_id": d["_id"], "text": Corpora.beir_embedding_text(d)} for d in BEIR_DOCS])
    ids = [d["_id"] for d in BEIR_DOCS]
    (root / "qrels").mkdir()
    rows = "".join(f"{q}\t{ids[(i + 1) % len(ids)]}\t1\n" for i, q in enumerate(ids))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return root


@pytest.fixture()
def self_store(self_beir: Path, index_cli, tmp_path: Path) -> Path:
    store = tmp_path / "self-store"
    index_cli(self_beir, store)
    return store


def _eval(cli, store: Path, *extra) -> tuple:
    result = cli("eval", "--store", store, *extra, "--no-progress")
    assert result.code == 0, result.err
    return result


# ------------------------------------------------------------------------------------------------------
# identical ids
# ------------------------------------------------------------------------------------------------------
def test_identical_ids_removed_and_top_k_kept(self_store: Path, self_beir: Path, cli, tmp_path: Path) -> None:
    out, run_file = tmp_path / "m.json", tmp_path / "run.trec"
    result = _eval(
        cli, self_store, "--beir", self_beir, "--top-k", 3, "--metrics", "ndcg@3,mrr@3", "--output", out,
        "--run-output", run_file,
    )  # fmt: skip
    assert "removed 5 hits whose id equals the query id, from 5 queries" in result.err
    report = json.loads(out.read_text())
    assert report["identical_ids"] == {
        "rule": "removed",
        "removed_hits": 5,
        "queries_affected": 5,
        "fetched_per_query": 4,
    }
    run = read_run(run_file)
    assert all(len(hits) == 3 and q not in hits for q, hits in run.items())  # still top 3 each
    qrels = read_qrels(self_beir / "qrels" / "test.tsv")
    assert report["metrics"]["ndcg@3"] == pytest.approx(evaluate(run, qrels, ["ndcg@3"])["ndcg@3"], abs=1e-6)

    kept_out, kept_run = tmp_path / "kept.json", tmp_path / "kept.trec"
    result = _eval(
        cli, self_store, "--beir", self_beir, "--top-k", 4, "--metrics", "ndcg@3,mrr@3", "--output", kept_out,
        "--run-output", kept_run, "--keep-identical-ids",
    )  # fmt: skip
    assert "removed" not in result.err
    kept = json.loads(kept_out.read_text())
    assert kept["identical_ids"]["rule"] == "kept" and kept["identical_ids"]["removed_hits"] == 0
    raw = read_run(kept_run)
    assert all(next(iter(hits)) == q for q, hits in raw.items())  # each query finds itself first
    assert kept["metrics"]["mrr@3"] < report["metrics"]["mrr@3"] or report["metrics"]["mrr@3"] == 0
    # BEIR scores the kept top-4 run by popping the identical ids: the same figures as ours (top 3)
    beir = pytest.importorskip("beir.retrieval.evaluation")
    ndcg, *_ = beir.EvaluateRetrieval.evaluate(qrels, raw, [3])
    assert round(report["metrics"]["ndcg@3"], 5) == pytest.approx(ndcg["NDCG@3"], abs=1e-9)


def test_no_extra_hit_fetched_when_no_query_id_is_stored(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    result = _eval(cli, beir_store, "--beir", corpora.beir, "--output", out)
    report = json.loads(out.read_text())
    assert report["identical_ids"] == {
        "rule": "removed",
        "removed_hits": 0,
        "queries_affected": 0,
        "fetched_per_query": 100,
    }
    assert "removed" not in result.err


# ------------------------------------------------------------------------------------------------------
# --beir, gzip, splits
# ------------------------------------------------------------------------------------------------------
def test_beir_folder_gzipped_equals_plain_flags(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    gz = tmp_path / "gz-beir"
    (gz / "qrels").mkdir(parents=True)
    for src, dst in (
        (corpora.beir / "queries.jsonl", gz / "queries.jsonl.gz"),
        (corpora.beir / "qrels" / "test.tsv", gz / "qrels" / "dev.tsv.gz"),
    ):
        with src.open("rb") as f, gzip.open(dst, "wb") as g:
            shutil.copyfileobj(f, g)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _eval(cli, beir_store, "--beir", gz, "--split", "dev", "--output", a)
    _eval(
        cli, beir_store, "--queries", corpora.beir / "queries.jsonl", "--qrels", corpora.beir / "qrels" / "test.tsv",
        "--output", b,
    )  # fmt: skip
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ra["metrics"] == rb["metrics"]
    assert ra["inputs"]["beir"] == {"folder": str(gz), "split": "dev"}
    assert ra["inputs"]["qrels"]["path"] == str(gz / "qrels" / "dev.tsv.gz")


def test_beir_folder_without_the_split(beir_store: Path, corpora, cli) -> None:
    result = cli("eval", "--store", beir_store, "--beir", corpora.beir, "--split", "dev", "--no-progress")
    assert_fails(result, str(corpora.beir), "split 'dev'", "it has test")


def test_beir_and_queries_are_exclusive(beir_store: Path, corpora, cli) -> None:
    result = cli(
        "eval", "--store", beir_store, "--beir", corpora.beir, "--queries", corpora.beir / "queries.jsonl",
        "--no-progress",
    )  # fmt: skip
    assert_fails(result, "--beir")
    assert_fails(cli("eval", "--store", beir_store, "--no-progress"), "--queries", "--beir")


# ------------------------------------------------------------------------------------------------------
# qrels hygiene
# ------------------------------------------------------------------------------------------------------
def test_qrels_hygiene_warnings_and_json(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text(
        "query-id\tcorpus-id\tscore\n"
        "qd1\td1\t1\n"
        "qd1\td1\t1\n"  # repeated row (line 3)
        "qd2\tgone-1\t1\n"  # absent from the corpus: qd2 cannot score
        "qd2\td4\t0\n"  # grade 0
        "qd3\td3\t1\n"
        "qd3\tgone-2\t2\n"
        "nope\td5\t1\n",  # judged, but not in the queries file
        encoding="utf-8",
    )
    out = tmp_path / "m.json"
    result = _eval(cli, beir_store, "--queries", corpora.beir / "queries.jsonl", "--qrels", qrels, "--output", out)
    hygiene = json.loads(out.read_text())["qrels_hygiene"]
    assert hygiene["judged_queries"] == 4 and hygiene["judgements"] == 6 and hygiene["zero_grade"] == 1
    assert hygiene["missing_ids"] == 2 and hygiene["missing_examples"] == ["gone-1", "gone-2"]
    assert hygiene["queries_unanswerable"] == 1 and hygiene["unanswerable_examples"] == ["qd2"]
    assert hygiene["queries_without_text"] == 1 and hygiene["without_text_examples"] == ["nope"]
    assert hygiene["duplicate_rows"] == 1 and "line 3, first on line 2" in hygiene["duplicate_examples"][0]
    assert "2 judged documents are not in the store (e.g. gone-1, gone-2)" in result.err
    assert "1 judged queries have no relevant document in the store" in result.err
    assert "not in the queries file" in result.err and "repeat an earlier row" in result.err
    assert json.loads(out.read_text())["queries"] == 3  # qd1, qd2, qd3: "nope" has no text


# ------------------------------------------------------------------------------------------------------
# per-query output and provenance
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", [".tsv", ".json"])
def test_per_query_file_and_provenance(beir_store: Path, corpora, cli, tmp_path: Path, suffix: str) -> None:
    queries, qrels = corpora.beir / "queries.jsonl", corpora.beir / "qrels" / "test.tsv"
    out, per = tmp_path / "m.json", tmp_path / f"per{suffix}"
    result = _eval(cli, beir_store, "--queries", queries, "--qrels", qrels, "--output", out, "--per-query", per)
    report = json.loads(out.read_text())
    values = read_per_query(per)
    assert list(values) == ["ndcg@10", "recall@10", "recall@100", "mrr@10"]
    printed = _metrics_from_stdout(result.out)
    for name, by_query in values.items():
        assert set(by_query) == {f"q{d['_id']}" for d in BEIR_DOCS}
        assert sum(by_query.values()) / len(by_query) == pytest.approx(report["metrics"][name], abs=1e-6)
        assert printed[name] == pytest.approx(report["metrics"][name], abs=1e-4)
    import rag_hier

    assert report["rag_hier_version"] == rag_hier.__version__
    assert isinstance(report["store"]["generation"], int) and report["store"]["path"] == str(beir_store)
    model = report["model"]
    assert model["weights_sha256"] and len(model["weights_sha256"]) == 64 and model["weight_files"] >= 1
    assert report["strategy"] == "dense"
    assert report["strategy_parameters"]["name"] == "dense"
    assert report["top_k"] == 100 and report["queries"] == 5 and report["level"] == "doc"
    assert report["inputs"]["queries"]["sha256"] == hashlib.sha256(queries.read_bytes()).hexdigest()
    assert report["inputs"]["qrels"]["sha256"] == hashlib.sha256(qrels.read_bytes()).hexdigest()
    assert report["search_seconds"] >= 0 and report["queries_per_second"] > 0
    assert report["device"]["used"] == "cpu"


def test_strategy_parameters_record_the_flags_given(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    from rag_hier.cli.evaluate import strategy_parameters
    from rag_hier.cli.main import build_parser

    args = build_parser().parse_args(
        ["eval", "--store", "s", "--queries", "q", "--strategy", "hierarchical", "--k1", "7", "--lambda", "0.5"]
    )
    params = strategy_parameters(args)
    assert params["name"] == "hierarchical"
    assert params["parameters"]["k1"] == 7 and params["parameters"]["lambda_"] == 0.5
    assert set(params["given"]) == {"k1", "lambda_"}
    args = build_parser().parse_args(["eval", "--store", "s", "--queries", "q", "--strategy", "tree", "--beam", "4"])
    assert strategy_parameters(args)["parameters"] == {"beam": 4}


# ------------------------------------------------------------------------------------------------------
# bad input
# ------------------------------------------------------------------------------------------------------
def test_qrels_and_queries_share_no_id(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("other\td1\t1\n", encoding="utf-8")
    result = cli(
        "eval", "--store", beir_store, "--queries", corpora.beir / "queries.jsonl", "--qrels", qrels, "--no-progress"
    )
    assert_fails(result, str(qrels), str(corpora.beir / "queries.jsonl"), "share no query id")


# ------------------------------------------------------------------------------------------------------
# compare
# ------------------------------------------------------------------------------------------------------
@pytest.fixture()
def two_systems(beir_store: Path, corpora, cli, tmp_path: Path) -> dict[str, Path]:
    """Two runs of the same store (top 1 and top 3) with their per-query files."""
    qrels = tmp_path / "qrels.tsv"
    # judge a second, lower-ranked document too, so that top 1 and top 3 differ on recall
    rows = "".join(f"q{d['_id']}\t{d['_id']}\t1\n" for d in BEIR_DOCS) + "qd1\td2\t1\nqd3\td5\t2\n"
    qrels.write_text(rows, encoding="utf-8")
    paths = {"qrels": qrels}
    for name, k in (("top1", 1), ("top3", 3)):
        paths[name] = tmp_path / f"{name}.trec"
        paths[f"{name}-per"] = tmp_path / f"{name}.tsv"
        _eval(
            cli, beir_store, "--queries", corpora.beir / "queries.jsonl", "--qrels", qrels, "--top-k", k,
            "--metrics", "recall@3,ndcg@3", "--run-output", paths[name], "--per-query", paths[f"{name}-per"],
        )  # fmt: skip
    return paths


def test_compare_runs_and_per_query_files_agree(two_systems: dict[str, Path], cli, tmp_path: Path) -> None:
    from rag_hier.eval import paired_difference

    out_runs, out_per, md = tmp_path / "runs.json", tmp_path / "per.json", tmp_path / "cmp.md"
    p = two_systems
    result = cli(
        "compare", p["top1"], p["top3"], "--qrels", p["qrels"], "--metrics", "recall@3,ndcg@3", "--output", out_runs,
        "--markdown", md,
    )  # fmt: skip
    assert result.code == 0, result.err
    assert result.out == md.read_text()
    assert "| recall@3 | top3.trec |" in result.out and "baseline: top1.trec" in result.out
    result = cli(
        "compare", p["top1-per"], p["top3-per"], "--metrics", "recall@3,ndcg@3", "--names", "top1,top3",
        "--output", out_per,
    )  # fmt: skip
    assert result.code == 0, result.err
    runs, per = json.loads(out_runs.read_text()), json.loads(out_per.read_text())
    for a, b in zip(runs["differences"], per["differences"], strict=True):
        for key in ("delta", "ci_low", "ci_high", "mean_baseline", "mean_system"):
            assert a[key] == pytest.approx(b[key], abs=1e-6), key
        assert (a["wins"], a["losses"], a["ties"]) == (b["wins"], b["losses"], b["ties"])
    top1, top3 = read_per_query(p["top1-per"]), read_per_query(p["top3-per"])
    qids = list(top1["recall@3"])
    direct = paired_difference([top1["recall@3"][q] for q in qids], [top3["recall@3"][q] for q in qids])
    recall = next(d for d in per["differences"] if d["metric"] == "recall@3")
    assert recall["delta"] == pytest.approx(direct["delta"]) and recall["delta"] > 0
    assert recall["wins"] == direct["wins"] and per["queries"] == 5


def test_compare_three_systems_uses_holm(two_systems: dict[str, Path], cli, tmp_path: Path) -> None:
    p = two_systems
    third = tmp_path / "third.tsv"
    shutil.copy(p["top3-per"], third)
    out = tmp_path / "c.json"
    result = cli("compare", p["top1-per"], p["top3-per"], third, "--metrics", "recall@3", "--output", out)
    assert result.code == 0, result.err
    body = json.loads(out.read_text())
    assert body["holm"] is True and "p (Holm)" in result.out
    assert [d["system"] for d in body["differences"]] == ["top3.tsv", "third.tsv"]


def test_compare_bad_input(two_systems: dict[str, Path], cli, tmp_path: Path) -> None:
    p = two_systems
    dup = tmp_path / "dup.trec"
    lines = p["top3"].read_text().splitlines()
    dup.write_text("\n".join([*lines, lines[0]]) + "\n", encoding="utf-8")
    assert_fails(
        cli("compare", p["top1"], dup, "--qrels", p["qrels"]), f"{dup}:{len(lines) + 1}:", "twice", "first on line 1"
    )
    assert_fails(cli("compare", p["top1"], p["top3"]), "--qrels")
    assert_fails(cli("compare", p["top1"], p["top3"], "--qrels", p["qrels"], "--metrics", "bleu@4"), "'bleu@4'")
    assert_fails(cli("compare", p["top1"]), "at least two")
    bad = tmp_path / "bad.tsv"
    bad.write_text("recall@3\tqd1\t0.5\nrecall@3\tqd2\n", encoding="utf-8")
    assert_fails(cli("compare", p["top1-per"], bad), f"{bad}:2:", "3 columns")
    other_qrels = tmp_path / "other.tsv"
    other_qrels.write_text("x\ty\t1\n", encoding="utf-8")
    assert_fails(cli("compare", p["top1"], p["top3"], "--qrels", other_qrels), "share no query id")
    assert_fails(cli("compare", p["top1-per"], p["top3-per"], "--metrics", "mrr@10"), "has no values of 'mrr@10'")
    assert_fails(cli("compare", p["top1-per"], tmp_path / "missing.tsv"), "missing.tsv", "does not exist")
