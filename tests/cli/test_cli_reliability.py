"""CLI behaviour from the reliability issue: defaults that fit together, one-line errors for deep nesting,
SQLite failures and unwritable ids, documents without text reported, and a quiet exit on a closed pipe."""

from __future__ import annotations

import io
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rag_hier.cli.main import main
from rag_hier.store.store import HierStore


def assert_fails(result, *fragments: str) -> str:
    """Exit status 2 and exactly one stderr line, naming the command and containing ``fragments``."""
    assert result.code == 2, (result.out, result.err)
    assert len(result.err_lines) == 1, result.err
    line = result.err_lines[0]
    assert line.startswith("rag-hier ") and ": error: " in line, line
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def nested(depth: int) -> str:
    """A filter whose conditions nest ``depth`` logical levels (each level is a dict and a list)."""
    node = '{"field": "meta.year", "operator": "==", "value": 1}'
    for _ in range(depth):
        node = '{"operator": "AND", "conditions": [' + node + "]}"
    return node


# ------------------------------------------------------------------------------------------------------
# QA corpora: index then eval with the defaults
# ------------------------------------------------------------------------------------------------------
def test_qa_corpus_index_then_eval_with_defaults(corpora, index_cli, cli, probe, tmp_path: Path) -> None:
    store = tmp_path / "qa-store"
    index_cli(corpora.qa, store)
    assert probe.passage_ids(store) == ["rivers#0", "rivers#1", "glaciers#0", "glaciers#1", "glaciers#2"]
    with HierStore.open(store, read_only=True) as s:
        assert s.corpus_info["max_passage_words"] == 0
    result = cli("eval", "--store", store, "--queries", corpora.qa / "questions.jsonl", "--no-progress")
    assert result.code == 0, result.err
    assert "3 queries, passage level" in result.out


# ------------------------------------------------------------------------------------------------------
# documents without text
# ------------------------------------------------------------------------------------------------------
def test_index_reports_documents_without_text(
    corpora, index_cli, probe, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (corpora.markdown / "empty.md").write_text("", encoding="utf-8")
    (corpora.markdown / "heading_only.md").write_text("# Only\n\n## Headings\n", encoding="utf-8")
    store = tmp_path / "store"
    with caplog.at_level(logging.WARNING):
        result = index_cli(corpora.markdown, store)
    assert "warning: 2 documents without text, stored with no passages" in result.out
    assert probe.counts(store)["documents"] == 5  # stored (with no passages), not dropped
    no_text = [r for r in caplog.records if "no text" in r.getMessage()]
    # one warning, from the reader, naming the documents; the summary line only counts them
    assert [r.name for r in no_text] == ["rag_hier.corpus.readers"]
    assert "'empty'" in no_text[0].getMessage() and "'heading_only'" in no_text[0].getMessage()
    # the library reports them in the write summary
    with HierStore.open(store) as s:
        summary = s.add_documents(
            [d for d in __import__("rag_hier").corpus.read_markdown(corpora.markdown) if d.doc_id == "empty"]
        )
    assert summary.documents_empty == 1 and summary.passages_added == 0


# ------------------------------------------------------------------------------------------------------
# nesting depth: one line, never a RecursionError
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [200, 400, 2500])
def test_deep_filters_are_one_line(beir_store: Path, cli, depth: int) -> None:
    result = cli("search", "--store", beir_store, "--query", "x", "--filters", nested(depth), "--no-progress")
    assert_fails(result, "100 levels")


def test_deep_filters_in_eval_are_one_line(beir_store: Path, corpora, cli) -> None:
    result = cli(
        "eval",
        "--store",
        beir_store,
        "--queries",
        corpora.beir / "queries.jsonl",
        "--qrels",
        corpora.beir / "qrels" / "test.tsv",
        "--filters",
        nested(5000),
        "--no-progress",
    )
    assert_fails(result, "--filters", "100 levels")


@pytest.mark.parametrize("depth", [400, 5000])
def test_deep_metadata_in_a_corpus_is_one_line(cli, tiny_model_path: str, tmp_path: Path, depth: int) -> None:
    corpus = tmp_path / "corpus.jsonl"
    deep = "[" * depth + "]" * depth
    corpus.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y", "metadata": {"m": ' + deep + "}}\n")
    result = cli("index", corpus, "--store", tmp_path / "store", "--model", tiny_model_path, "--no-progress")
    assert_fails(result, f"{corpus}:2:", "more than 100 levels deep")
    assert not (tmp_path / "store").exists()


def test_recursion_error_never_escapes(monkeypatch: pytest.MonkeyPatch, cli, beir_store: Path) -> None:
    import rag_hier.cli.main as cli_main

    def boom(args):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setitem(cli_main.COMMANDS, "info", boom)
    assert_fails(cli("info", "--store", beir_store), "nested too deeply")


# ------------------------------------------------------------------------------------------------------
# SQLite failures (a read-only directory) are one line, exit 2
# ------------------------------------------------------------------------------------------------------
def test_sqlite_error_is_one_line(corpora, cli, tiny_model_path: str, tmp_path: Path, monkeypatch) -> None:
    # what `rag-hier index` into a read-only directory raised from inside the store (exit 1, a traceback)
    import rag_hier.cli.main as cli_main

    def readonly(args):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setitem(cli_main.COMMANDS, "index", readonly)
    store = tmp_path / "store"
    result = cli("index", corpora.text, "--store", store, "--model", tiny_model_path, "--no-progress")
    assert_fails(result, f"rag-hier index: error: SQLite error in store {store}: attempt to write a readonly database")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a user that permissions apply to")
def test_index_into_a_read_only_directory(corpora, cli, tiny_model_path: str, tmp_path: Path) -> None:
    target = tmp_path / "read-only"
    target.mkdir()
    target.chmod(0o555)
    try:
        result = cli("index", corpora.text, "--store", target, "--model", tiny_model_path, "--no-progress")
    finally:
        target.chmod(0o755)
    assert_fails(result, "rag-hier index: error:")


# ------------------------------------------------------------------------------------------------------
# ids that cannot go into a TREC run
# ------------------------------------------------------------------------------------------------------
def test_run_with_ids_holding_spaces_is_refused(corpora, index_cli, cli, tmp_path: Path) -> None:
    (corpora.markdown / "my notes.md").write_text("# Notes\n\nA note about kites.\n", encoding="utf-8")
    store = tmp_path / "store"
    index_cli(corpora.markdown, store)
    queries = tmp_path / "queries.tsv"
    queries.write_text("q1\tkites\n", encoding="utf-8")
    run = tmp_path / "run.trec"
    result = cli("search", "--store", store, "--queries", queries, "--output", run, "--top-k", "10", "--no-progress")
    assert_fails(result, "cannot write id 'my notes#0' into a TREC run")
    assert not run.exists()
    # the same search printed for a person is fine
    assert cli("search", "--store", store, "--query", "kites", "--no-progress").code == 0


# ------------------------------------------------------------------------------------------------------
# a closed pipe: no traceback, no error message
# ------------------------------------------------------------------------------------------------------
class ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_search_into_a_closed_pipe_is_quiet(beir_store: Path, corpora, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = main(
        ["search", "--store", str(beir_store), "--queries", str(corpora.beir / "queries.jsonl"), "--no-progress"]
    )
    assert code == 141
    assert capsys.readouterr().err == ""


def test_info_json_into_a_closed_pipe_is_quiet(beir_store: Path) -> None:
    # the real thing: the reader closes the pipe before rag-hier writes (as `| head` does when it has enough)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_hier", "info", "--json", "--store", str(beir_store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


@pytest.mark.parametrize("command", ["search", "index"])
@pytest.mark.parametrize("size", ["0", "-3", "two"])
def test_batch_size_below_one_is_a_usage_error(command: str, size: str, capsys, tmp_path: Path) -> None:
    argv = (
        ["search", "--store", str(tmp_path), "--query", "x"] if command == "search" else ["index", "c", "--store", "s"]
    )
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--batch-size", size])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--batch-size: must be an integer >= 1" in err and "Traceback" not in err


@pytest.mark.parametrize("device", ["tpu:9", "cuda:7"])
def test_an_unknown_or_absent_device_is_one_line(beir_store: Path, cli, device: str, monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # this machine's torch may see a GPU
    result = cli("search", "--store", beir_store, "--query", "x", "--device", device, "--no-progress")
    assert_fails(result, repr(device))


class _Payload:
    """Pickled, it would create a file when unpickled by a loader that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_model_directory_that_cannot_load_is_one_line(corpora, cli, tiny_model_path: str, tmp_path: Path) -> None:
    import json
    import shutil

    import torch
    from safetensors.torch import load_file

    odd = tmp_path / "odd-config"
    shutil.copytree(tiny_model_path, odd)
    config = json.loads((odd / "sentence_bert_config.json").read_text())
    (odd / "sentence_bert_config.json").write_text(json.dumps({**config, "trust_remote_code": True}))
    result = cli("index", corpora.beir, "--store", tmp_path / "s1", "--model", odd, "--no-progress")
    assert_fails(result, "cannot load model", str(odd))
    assert not (tmp_path / "s1").exists()
    # weights as a pickle that runs code: torch's weights-only loader refuses it, and nothing runs
    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_model_path, pickled)
    weights = load_file(str(pickled / "model.safetensors"))
    (pickled / "model.safetensors").unlink()
    marker = tmp_path / "code-ran"
    torch.save({**weights, "payload": _Payload(marker)}, str(pickled / "pytorch_model.bin"))
    result = cli("index", corpora.beir, "--store", tmp_path / "s2", "--model", pickled, "--no-progress")
    assert_fails(result, "cannot load model", "UnpicklingError")
    assert not marker.exists() and not (tmp_path / "s2").exists()


def test_an_interrupted_index_keeps_its_commits_and_a_rerun_resumes(
    corpora, cli, index_cli, tiny_model_path: str, tmp_path: Path, monkeypatch
) -> None:
    from rag_hier.cli import main as cli_main

    monkeypatch.setattr(cli_main, "INDEX_COMMIT_DOCUMENTS", 2)
    real = HierStore.add_documents
    calls = {"n": 0}

    def interrupted(self, documents, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # Ctrl-C while the second commit's documents are encoded
            raise KeyboardInterrupt
        return real(self, documents, **kwargs)

    monkeypatch.setattr(HierStore, "add_documents", interrupted)
    store = tmp_path / "store"
    result = cli("index", corpora.beir, "--store", store, "--model", tiny_model_path, "--no-progress")
    assert result.code == 130
    with HierStore.open(store, read_only=True) as s:
        assert s.count_documents() == 2  # the first commit is kept
    monkeypatch.setattr(HierStore, "add_documents", real)
    out = index_cli(corpora.beir, store).out
    assert "2 unchanged" in out and f"{len(corpora.beir_docs) - 2} added" in out  # nothing encoded twice


def test_other_weights_at_a_stores_model_path_are_refused(corpora, cli, tmp_path: Path) -> None:
    import shutil

    from rag_hier.testing import build_tiny_model

    model = build_tiny_model(tmp_path / "model", seed=1)
    store = tmp_path / "store"
    assert cli("index", corpora.beir, "--store", store, "--model", model, "--no-progress").code == 0
    info = cli("info", "--store", store, "--no-verify")
    assert f"loads from {model}" in info.out and "as recorded" in info.out
    # another model of the same shape put at the recorded path: refused with one line naming the path
    shutil.rmtree(model)
    build_tiny_model(model, seed=2)
    info = cli("info", "--store", store, "--no-verify")
    assert info.code == 0 and "it will be refused" in info.out
    result = cli("search", "--store", store, "--query", "moon", "--no-progress")
    assert result.code != 0 and len(result.err_lines) == 1, result.err
    assert str(model) in result.err and "not the ones the store" in result.err
