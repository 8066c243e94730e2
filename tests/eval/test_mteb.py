"""The MTEB search adapter: ``mteb.evaluate`` over rag-hier strategies equals ``rag-hier eval``.

Skips without ``mteb`` (the ``mteb`` extra; it is in the ``test`` extra too). Everything runs offline:
the tasks read local BEIR folders (:func:`rag_hier.eval.mteb.beir_task`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rag_hier.cli.main import main
from rag_hier.errors import RagHierError

mteb = pytest.importorskip("mteb")

from rag_hier.eval.mteb import RagHierSearchModel, beir_task, strategy_search  # noqa: E402

TOPICS = ["tides and the moon", "honeybees and wax", "volcanic magma", "compost microbes", "printing presses"]


def _write_beir(root: Path, n_docs: int = 15, n_queries: int = 8) -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = [
        {"_id": f"d{i}", "title": f"Note {i}", "text": f"{TOPICS[i % 5]}, part {i}, with detail {i * 7}"}
        for i in range(n_docs)
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    queries = [{"_id": f"q{i}", "text": f"{TOPICS[i % 5]} part {i}"} for i in range(n_queries)]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    rows = "".join(f"q{i}\td{i}\t1\nq{i}\td{(i + 5) % n_docs}\t{i % 2}\n" for i in range(n_queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return root


def _cli_ndcg(store: Path, beir: Path, tmp_path: Path, *extra: object) -> float:
    out = tmp_path / "metrics.json"
    code = main(
        ["eval", "--store", str(store), "--beir", str(beir), "--metrics", "ndcg@10", "--output", str(out)]
        + [str(e) for e in extra]
        + ["--no-progress"]
    )
    assert code == 0
    return float(json.loads(out.read_text())["metrics"]["ndcg@10"])


def _mteb_ndcg(model: RagHierSearchModel, task) -> float:
    result = mteb.evaluate(model, tasks=[task], cache=None, show_progress_bar=False)
    return float(result.task_results[0].scores["test"][0]["ndcg_at_10"])


def test_is_a_search_protocol() -> None:
    assert isinstance(RagHierSearchModel(strategy="dense"), mteb.models.SearchProtocol)
    meta = RagHierSearchModel(strategy="tree", parameters={"beam": 4}).mteb_model_meta
    assert meta.name == "rag-hier/tree"


@pytest.mark.parametrize(
    ("strategy", "parameters"),
    [("dense", None), ("hierarchical", {"k1": 3}), ("tree", {"beam": 2}), ("svdr-lexical", None)],
)
def test_mteb_equals_rag_hier_eval_on_built_stores(
    strategy: str, parameters, tiny_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    beir = _write_beir(tmp_path / "mini")
    task = beir_task(beir, name="MiniBEIR")
    model = RagHierSearchModel(
        model=tiny_model_path, strategy=strategy, parameters=parameters, store_root=tmp_path / "stores"
    )
    ours_in_mteb = _mteb_ndcg(model, task)
    model.close()
    store = tmp_path / "stores" / "MiniBEIR-default-test"
    assert (store / "manifest.json").is_file()
    flags = {"hierarchical": ["--k1", 3], "tree": ["--beam", 2]}.get(strategy, [])
    cli = _cli_ndcg(store, beir, tmp_path, "--strategy", strategy, *flags)
    assert ours_in_mteb == pytest.approx(cli, abs=1e-3)
    assert 0 < cli <= 1


def test_existing_store_must_hold_the_corpus(tiny_model_path: str, tmp_path: Path, capsys) -> None:
    beir = _write_beir(tmp_path / "mini")
    small = _write_beir(tmp_path / "small", n_docs=6, n_queries=4)
    store = tmp_path / "store"
    assert main(["index", str(small), "--store", str(store), "--model", tiny_model_path, "--no-progress"]) == 0
    task = beir_task(beir, name="MiniBEIR")
    task.load_data()
    split = task.dataset["default"]["test"]
    model = RagHierSearchModel(store=store)
    with pytest.raises(RagHierError, match="lacks 9 of the 15 documents"):
        model.index(split["corpus"], task_metadata=task.metadata, hf_split="test", hf_subset="default")
    with pytest.raises(RagHierError, match="call index"):
        model.search(split["queries"], task_metadata=task.metadata, hf_split="test", hf_subset="default", top_k=5)


def test_unknown_strategy_and_parameters() -> None:
    with pytest.raises(RagHierError, match="unknown strategy 'no-such-strategy'"):
        strategy_search("no-such-strategy")
    with pytest.raises(RagHierError, match=r"unknown parameter.*k1.*it takes beam"):
        strategy_search("tree", {"k1": 3})


def test_beir_task_rejects_a_missing_split(tmp_path: Path) -> None:
    beir = _write_beir(tmp_path / "mini")
    with pytest.raises(RagHierError, match="split 'dev'"):
        beir_task(beir, split="dev")


@pytest.mark.data
@pytest.mark.real_model
def test_scifact_mteb_equals_rag_hier_eval(
    shared_data: Path, real_model_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An MTEB task over (a slice of) SciFact: MTEB's nDCG@10 equals ``rag-hier eval``'s within 0.001."""
    scifact = shared_data / "scifact"
    if not (scifact / "corpus.jsonl.gz").is_file():
        pytest.skip(f"SciFact not found under {scifact}")
    # 25 test queries, their judged documents and the first 200 others (seconds to encode)
    qrels: dict[str, list[str]] = {}
    for line in (scifact / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, _ = line.split("\t")
        if qid in qrels or len(qrels) < 25:
            qrels.setdefault(qid, []).append(doc)
    relevant = {d for docs in qrels.values() for d in docs}
    root = tmp_path / "scifact-slice"
    (root / "qrels").mkdir(parents=True)
    with gzip.open(scifact / "corpus.jsonl.gz", "rt", encoding="utf-8") as src:
        kept = [line for n, line in enumerate(src) if n < 200 or json.loads(line)["_id"] in relevant]
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as dst:
        dst.writelines(kept)
    with (scifact / "queries.jsonl").open(encoding="utf-8") as src:
        (root / "queries.jsonl").write_text(
            "".join(line for line in src if json.loads(line)["_id"] in qrels), encoding="utf-8"
        )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, ds in qrels.items() for d in ds),
        encoding="utf-8",
    )
    store = tmp_path / "store"
    index = ["index", str(root), "--store", str(store), "--model", real_model_path, "--no-progress", "--device", "cpu"]
    assert main(index) == 0
    cli = _cli_ndcg(store, root, tmp_path, "--device", "cpu")
    in_mteb = _mteb_ndcg(RagHierSearchModel(store=store, device="cpu"), beir_task(root, name="SciFactSlice"))
    assert in_mteb == pytest.approx(cli, abs=1e-3)
    assert cli > 0.6  # measured: see docs/evaluation.md
