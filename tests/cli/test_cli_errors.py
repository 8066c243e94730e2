"""Bad input to the ``rag-hier`` CLI: exit status 2, one clear line on stderr, existing stores left intact."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest


def assert_fails(result, *fragments: str) -> str:
    """Exit status 2 and exactly one stderr line, naming the command and containing ``fragments``."""
    assert result.code == 2, (result.out, result.err)
    lines = result.err_lines
    assert len(lines) == 1, result.err
    line = lines[0]
    assert line.startswith("rag-hier ") and ": error: " in line, line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


@pytest.fixture()
def store(md_store: Path) -> Path:
    return md_store


@pytest.fixture()
def intact(store: Path, probe):
    """Checks on teardown that ``store`` has the same files, counts and checksums as before the test."""
    counts, files = probe.counts(store), probe.snapshot(store)
    yield store
    assert probe.counts(store) == counts
    assert probe.snapshot(store) == files


# ------------------------------------------------------------------------------------------------------
# index: corpus problems
# ------------------------------------------------------------------------------------------------------
def test_missing_corpus(intact: Path, cli, tiny_model_path: str, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = cli("index", missing, "--store", intact, "--model", tiny_model_path)
    assert_fails(result, str(missing), "does not exist")


def test_missing_corpus_creates_no_store(cli, tiny_model_path: str, tmp_path: Path) -> None:
    result = cli("index", tmp_path / "nope.jsonl", "--store", tmp_path / "new", "--model", tiny_model_path)
    assert_fails(result, "nope.jsonl")
    assert not (tmp_path / "new").exists()


def test_malformed_jsonl_names_file_and_line(intact: Path, cli, tiny_model_path: str, tmp_path: Path) -> None:
    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"_id": "a", "text": "fine"}\n\n{"_id": "b", "text": oops}\n', encoding="utf-8")
    result = cli("index", bad, "--store", intact, "--model", tiny_model_path, "--no-progress")
    assert_fails(result, f"{bad}:3:", "JSON")


def test_malformed_record_names_file_and_line(cli, tiny_model_path: str, tmp_path: Path) -> None:
    bad = tmp_path / "docs" / "documents.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"doc_id": "a", "paragraphs": ["x"]}\n{"doc_id": "b", "paragraphs": "not a list"}\n')
    result = cli("index", bad.parent, "--store", tmp_path / "new", "--model", tiny_model_path)
    assert_fails(result, f"{bad}:2:", "paragraphs")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("layout", ["beir-dir", "jsonl-file", "markdown-dir"])
def test_empty_corpus(intact: Path, cli, tiny_model_path: str, tmp_path: Path, layout: str) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    if layout == "beir-dir":
        (root / "corpus.jsonl").write_text("", encoding="utf-8")
        corpus, extra = root, []
    elif layout == "jsonl-file":
        (root / "c.jsonl").write_text("\n\n", encoding="utf-8")
        corpus, extra = root / "c.jsonl", []
    else:
        corpus, extra = root, ["--format", "markdown"]
    result = cli("index", corpus, "--store", intact, "--model", tiny_model_path, *extra)
    line = assert_fails(result, str(root))
    assert "no " in line or "holds no" in line


def test_undetectable_format(cli, tiny_model_path: str, tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "data.csv").write_text("a,b\n", encoding="utf-8")
    assert_fails(
        cli("index", tmp_path / "c", "--store", tmp_path / "s", "--model", tiny_model_path),
        "cannot detect the corpus format",
    )


def test_negative_max_passage_words(corpora, cli, tiny_model_path: str, tmp_path: Path) -> None:
    result = cli(
        "index", corpora.markdown, "--store", tmp_path / "new", "--model", tiny_model_path, "--max-passage-words", "-1"
    )
    assert_fails(result, "--max-passage-words", "-1")
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------------------------------------------
# index: model / store mismatches
# ------------------------------------------------------------------------------------------------------
def test_model_of_other_dimension_on_existing_store(intact: Path, corpora, cli, tiny16_model_path: str) -> None:
    result = cli("index", corpora.markdown, "--store", intact, "--model", tiny16_model_path, "--no-progress")
    assert_fails(result, tiny16_model_path, "model")


def test_other_model_of_same_dimension_on_existing_store(
    intact: Path, corpora, cli, tiny_model_path: str, tmp_path: Path
) -> None:
    other = shutil.copytree(tiny_model_path, tmp_path / "other-model")
    result = cli("index", corpora.markdown, "--store", intact, "--model", other, "--no-progress")
    assert_fails(result, f"got --model '{other}'", tiny_model_path)


def test_store_model_replaced_by_one_of_other_dimension(
    corpora, index_cli, cli, probe, tiny_model_path: str, tiny16_model_path: str, tmp_path: Path
) -> None:
    # the store records a model path; what lives there now outputs 16-d vectors instead of 32-d
    model = shutil.copytree(tiny_model_path, tmp_path / "model")
    store = tmp_path / "store"
    result = cli("index", corpora.markdown, "--store", store, "--model", model, "--no-progress")
    assert result.code == 0, result.err
    counts, files = probe.counts(store), probe.snapshot(store)
    shutil.rmtree(model)
    shutil.copytree(tiny16_model_path, model)
    # refused by the weights digest the store recorded, before the dimension could even differ
    result = cli("search", "--store", store, "--query", "apples", "--no-progress")
    assert_fails(result, str(model), "weights")
    (corpora.markdown / "new.md").write_text("# New\n\nSomething to encode.\n", encoding="utf-8")
    result = cli("index", corpora.markdown, "--store", store, "--model", model, "--no-progress")
    assert_fails(result, str(model), "weights")
    assert probe.counts(store) == counts
    assert probe.snapshot(store) == files


def test_other_index_kind_on_existing_store(intact: Path, corpora, cli, tiny_model_path: str) -> None:
    result = cli("index", corpora.markdown, "--store", intact, "--model", tiny_model_path, "--index", "hnsw")
    assert_fails(result, "'flat'", "hnsw")


def test_unloadable_model(corpora, cli, tmp_path: Path) -> None:
    (tmp_path / "not-a-model").mkdir()
    result = cli(
        "index", corpora.markdown, "--store", tmp_path / "new", "--model", tmp_path / "not-a-model", "--no-progress"
    )
    assert_fails(result)
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------------------------------------------
# corrupted stores
# ------------------------------------------------------------------------------------------------------
def _flip_faiss(store: Path) -> None:
    path = store / "dense.faiss"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate_sqlite(store: Path) -> None:
    path = store / "store.sqlite"
    os.truncate(path, path.stat().st_size // 2)


def _delete_manifest(store: Path) -> None:
    (store / "manifest.json").unlink()


def _invalid_manifest(store: Path) -> None:
    (store / "manifest.json").write_text('{"format": "rag-hier-store", ', encoding="utf-8")


def _edit_manifest_counts(store: Path) -> None:
    path = store / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["counts"]["passages"] += 1
    path.write_text(json.dumps(manifest), encoding="utf-8")


def _delete_faiss(store: Path) -> None:
    (store / "dense.faiss").unlink()


def _manifest_sqlite_size(store: Path) -> None:
    path = store / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["files"]["store.sqlite"]["bytes"] += 1
    path.write_text(json.dumps(manifest), encoding="utf-8")


CORRUPTIONS = {
    "flipped-faiss": (_flip_faiss, "dense.faiss"),
    "truncated-sqlite": (_truncate_sqlite, "store.sqlite"),
    "deleted-manifest": (_delete_manifest, "manifest.json"),
    "invalid-manifest": (_invalid_manifest, "manifest.json"),
    "edited-manifest-counts": (_edit_manifest_counts, "manifest.json"),
    "deleted-faiss": (_delete_faiss, "dense.faiss"),
    "manifest-sqlite-size": (_manifest_sqlite_size, "store.sqlite"),
}


@pytest.mark.parametrize("command", ["info", "search", "eval", "index"])
@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupted_store_fails_with_one_line_naming_the_file(
    store: Path, corpora, cli, probe, tiny_model_path: str, tmp_path: Path, corruption: str, command: str
) -> None:
    corrupt, file_name = CORRUPTIONS[corruption]
    corrupt(store)
    before = probe.snapshot(store)
    argv = {
        "info": ["info", "--store", store],
        "search": ["search", "--store", store, "--query", "apples", "--no-progress"],
        "eval": [
            "eval",
            "--store",
            store,
            "--queries",
            corpora.beir / "queries.jsonl",
            "--qrels",
            corpora.beir / "qrels" / "test.tsv",
            "--no-progress",
        ],
        "index": ["index", corpora.markdown, "--store", store, "--model", tiny_model_path, "--no-progress"],
    }[command]
    line = assert_fails(cli(*argv))
    assert file_name in line
    assert str(store) in line
    assert probe.snapshot(store) == before  # a failed command does not touch the files


def test_flipped_faiss_bytes_pass_without_checksum_verification(store: Path, cli) -> None:
    # documents what --no-verify means: only sizes and counts are checked
    _flip_faiss(store)
    assert cli("info", "--store", store, "--no-verify").code == 0
    assert_fails(cli("info", "--store", store), "dense.faiss", "checksum")


@pytest.mark.parametrize("command", ["info", "search", "eval"])
def test_missing_store_dir(cli, corpora, tmp_path: Path, command: str) -> None:
    missing = tmp_path / "no-store"
    argv = {
        "info": ["info", "--store", missing],
        "search": ["search", "--store", missing, "--query", "x"],
        "eval": [
            "eval",
            "--store",
            missing,
            "--queries",
            corpora.beir / "queries.jsonl",
            "--qrels",
            corpora.beir / "qrels" / "test.tsv",
        ],
    }[command]
    assert_fails(cli(*argv), str(missing), "does not exist")
    assert not missing.exists()


def test_directory_that_is_not_a_store(cli, corpora) -> None:
    assert_fails(cli("info", "--store", corpora.markdown), "not a rag-hier store", "manifest.json")


# ------------------------------------------------------------------------------------------------------
# search / eval arguments
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("filters", "fragment"),
    [
        ("{not json", "--filters is not valid JSON"),
        ("[1, 2]", "--filters must be a JSON object"),
        ('{"operator": "XOR", "conditions": []}', "XOR"),
        ('{"field": "meta.year", "operator": "~", "value": 1}', "~"),
    ],
)
def test_bad_filters(intact: Path, cli, filters: str, fragment: str) -> None:
    assert_fails(cli("search", "--store", intact, "--query", "x", "--filters", filters, "--no-progress"), fragment)


def test_bad_filters_in_eval(intact: Path, corpora, cli) -> None:
    result = cli(
        "eval",
        "--store",
        intact,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--qrels",
        corpora.beir / "qrels" / "test.tsv",
        "--filters",
        "{",
        "--no-progress",
    )
    assert_fails(result, "--filters")


@pytest.mark.parametrize("top_k", ["0", "-3"])
def test_search_top_k_must_be_positive(intact: Path, cli, corpora, tmp_path: Path, top_k: str) -> None:
    assert_fails(
        cli("search", "--store", intact, "--query", "x", "--top-k", top_k, "--no-progress"),
        f"--top-k must be >= 1, got {top_k}",
    )
    out = tmp_path / "run.trec"
    result = cli(
        "search",
        "--store",
        intact,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--top-k",
        top_k,
        "--output",
        out,
        "--no-progress",
    )
    assert_fails(result, "--top-k")
    assert not out.exists()


@pytest.mark.parametrize("top_k", ["0", "-1"])
def test_eval_top_k_must_be_positive(intact: Path, cli, corpora, tmp_path: Path, top_k: str) -> None:
    out = tmp_path / "m.json"
    result = cli(
        "eval",
        "--store",
        intact,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--qrels",
        corpora.beir / "qrels" / "test.tsv",
        "--top-k",
        top_k,
        "--output",
        out,
        "--no-progress",
    )
    assert_fails(result, f"--top-k must be >= 1, got {top_k}")
    assert not out.exists()


@pytest.mark.parametrize(
    ("metrics", "fragment"),
    [
        ("ndcg@10,bleu@4", "unknown metric 'bleu@4'"),
        ("ndcg", "unknown metric 'ndcg'"),
        ("recall@x", "unknown metric 'recall@x'"),
        ("ndcg@0", "'ndcg@0'"),  # trec_eval would abort the process on a zero cut-off
    ],
)
def test_eval_unknown_metric(intact: Path, cli, corpora, metrics: str, fragment: str) -> None:
    result = cli(
        "eval",
        "--store",
        intact,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--qrels",
        corpora.beir / "qrels" / "test.tsv",
        "--metrics",
        metrics,
        "--no-progress",
    )
    assert_fails(result, fragment)


def test_eval_queries_without_judgements(intact: Path, cli, corpora, tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("other\tdoc\t1\n", encoding="utf-8")
    result = cli(
        "eval", "--store", intact, "--queries", corpora.beir / "queries.jsonl", "--qrels", qrels, "--no-progress"
    )
    assert_fails(result, "no query", "judgements")


def test_eval_without_qrels_needs_qa_questions(intact: Path, cli, corpora) -> None:
    result = cli("eval", "--store", intact, "--queries", corpora.beir / "queries.jsonl", "--no-progress")
    assert_fails(result, "--qrels is required")


def test_eval_paragraph_judgements_need_whole_paragraphs(corpora, index_cli, cli, tmp_path: Path) -> None:
    # paragraph judgements name "<doc>#<paragraph index>", which are passage ids only with
    # --max-passage-words 0; with passages of 100 words the scores would silently be wrong
    store = tmp_path / "qa-store"
    index_cli(corpora.qa, store, "--max-passage-words", "100")
    result = cli("eval", "--store", store, "--queries", corpora.qa / "questions.jsonl", "--no-progress")
    assert_fails(result, "--max-passage-words 0", "--aggregate doc")
    result = cli(
        "eval", "--store", store, "--queries", corpora.qa / "questions.jsonl", "--aggregate", "doc", "--no-progress"
    )
    assert result.code == 0, result.err


def test_malformed_queries_file(intact: Path, cli, tmp_path: Path) -> None:
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": "1", "text": "ok"}\n{"_id": "2"}\n', encoding="utf-8")
    assert_fails(cli("search", "--store", intact, "--queries", queries, "--no-progress"), f"{queries}:2:", "text")


def test_malformed_qrels_file(intact: Path, cli, corpora, tmp_path: Path) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nqd1\td1\t1\nqd2\td2\tyes\n", encoding="utf-8")
    result = cli(
        "eval", "--store", intact, "--queries", corpora.beir / "queries.jsonl", "--qrels", qrels, "--no-progress"
    )
    assert_fails(result, f"{qrels}:3:", "integer")


@pytest.mark.parametrize(("flag", "value", "name"), [("--nlist", "0", "nlist"), ("--nprobe", "0", "nprobe")])
def test_invalid_index_parameters_are_refused(
    cli, tiny_model_path: str, tmp_path: Path, flag: str, value: str, name: str
) -> None:
    corpus = tmp_path / "c.md"
    corpus.write_text("# T\n\nsome text\n", encoding="utf-8")
    result = cli("index", corpus, "--store", tmp_path / "s", "--model", tiny_model_path, "--index", "ivf", flag, value)
    assert_fails(result, name)
    assert not (tmp_path / "s" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--strategy", "dense", "--k1", "5"], "--k1 does not apply to --strategy dense"),
        (["--strategy", "hierarchical", "--k1", "0"], "--k1 must be >= 1"),
        (["--strategy", "tree", "--beam", "0"], "--beam must be >= 1"),
        (["--strategy", "fusion", "--fusion", "average"], "--fusion must be one of"),
    ],
)
def test_strategy_flags_are_checked_by_the_strategy(intact: Path, cli, args: list[str], fragment: str) -> None:
    result = cli("search", "--store", intact, "--query", "x", *args)
    assert_fails(result, fragment)
