"""The CLI on Milvus Lite: ``--store URI`` for index/search/info/eval, ``rag-hier migrate`` both ways, errors.

Skips without ``pymilvus`` and ``milvus-lite`` (``pip install 'rag-hier[milvus]'``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from rag_hier.store.milvus import MilvusStore
from rag_hier.store.store import HierStore


def _ranked(out: str) -> list[tuple[str, float]]:
    rows = [line.split() for line in out.splitlines() if line.strip() and not line.startswith("     ")]
    return [(r[2], float(r[1])) for r in rows]


def test_index_search_info_reindex_on_milvus_lite(corpora, index_cli, cli, tmp_path: Path, tiny_model_path) -> None:
    uri = f"{tmp_path / 'm.db'}#docs"
    result = index_cli(corpora.markdown, uri)
    assert f"created store {uri} from 3 markdown documents" in result.out
    assert "store now holds 3 documents, 6 passages, 6 vectors" in result.out

    found = cli(
        "search", "--store", uri, "--query", "Alpha, Eating, Apples are baked into pies.", "--top-k", 3, "--no-progress"
    )
    assert found.code == 0, found.err
    ranked = _ranked(found.out)
    assert len(ranked) == 3 and ranked[0][0] == "alpha#2"
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)

    only_beta = cli(
        "search",
        "--store",
        uri,
        "--query",
        "Apples",
        "--top-k",
        5,
        "--no-progress",
        "--filters",
        json.dumps({"field": "doc_id", "operator": "==", "value": "beta"}),
    )
    assert only_beta.code == 0, only_beta.err
    assert sorted(pid for pid, _ in _ranked(only_beta.out)) == ["beta#0", "beta#1"]

    info = cli("info", "--store", uri)
    assert info.code == 0, info.err
    assert "(Milvus, format v1" in info.out
    assert f"encoder    {tiny_model_path}  dim=32" in info.out
    assert "counts     3 documents, 6 passages, 6 vectors" in info.out
    as_json = json.loads(cli("info", "--store", uri, "--json").out)
    assert as_json["backend"] == "milvus" and as_json["counts"]["passages"] == 6

    again = index_cli(corpora.markdown, uri)  # same corpus: nothing re-encoded
    assert f"updated store {uri}" in again.out
    assert "passages:  0 encoded and written, 6 unchanged, 0 removed" in again.out


def test_migrate_to_milvus_and_back(md_store: Path, cli, tmp_path: Path) -> None:
    uri = f"{tmp_path / 'm.db'}#moved"
    query = ["--query", "Beta, Kinds, Arch bridges push outwards.", "--top-k", 6, "--no-progress"]
    local = cli("search", "--store", md_store, *query)
    assert local.code == 0, local.err

    moved = cli("migrate", "--store", md_store, "--to", uri)
    assert moved.code == 0, moved.err
    assert "3 documents, 6 passages, 6 vectors" in moved.out
    remote = cli("search", "--store", uri, *query)
    assert remote.code == 0, remote.err
    assert [p for p, _ in _ranked(remote.out)] == [p for p, _ in _ranked(local.out)]
    assert [s for _, s in _ranked(remote.out)] == pytest.approx([s for _, s in _ranked(local.out)], abs=1e-3)

    back = tmp_path / "back"
    returned = cli("migrate", "--store", uri, "--to", back)
    assert returned.code == 0, returned.err
    with HierStore.open(md_store, read_only=True) as a, HierStore.open(back, read_only=True) as b:
        assert {p.id: p for p in a.filter_passages()} == {p.id: p for p in b.filter_passages()}
        assert a.get_embeddings(["alpha#0"])[0].tolist() == b.get_embeddings(["alpha#0"])[0].tolist()
    assert cli("info", "--store", back).code == 0

    again = cli("migrate", "--store", md_store, "--to", uri)  # the target exists: refused, nothing touched
    assert again.code == 2 and len(again.err_lines) == 1, again.err
    with MilvusStore.open(uri, read_only=True) as s:
        assert s.count_passages() == 6


def test_cli_errors_are_one_line(md_store: Path, cli, tmp_path: Path) -> None:
    both_local = cli("migrate", "--store", md_store, "--to", tmp_path / "elsewhere")
    assert both_local.code == 2 and len(both_local.err_lines) == 1
    assert "one of each" in both_local.err

    missing = cli("search", "--store", f"{tmp_path / 'm.db'}#nothing", "--query", "x", "--no-progress")
    assert missing.code == 2 and len(missing.err_lines) == 1, missing.err
    assert "no rag-hier collection 'nothing'" in missing.err

    uri = f"{tmp_path / 'm.db'}#moved"
    assert cli("migrate", "--store", md_store, "--to", uri).code == 0
    bad_field = cli(
        "search",
        "--store",
        uri,
        "--query",
        "x",
        "--no-progress",
        "--filters",
        json.dumps({"field": "meta.a b", "operator": "==", "value": 1}),
    )
    assert bad_field.code == 2 and len(bad_field.err_lines) == 1, bad_field.err
    assert "a b" in bad_field.err


def test_eval_on_milvus_equals_the_local_store(beir_store: Path, corpora, cli, tmp_path: Path) -> None:
    uri = f"{tmp_path / 'm.db'}#beir"
    assert cli("migrate", "--store", beir_store, "--to", uri).code == 0
    reports = {}
    for name, store in (("local", beir_store), ("milvus", uri)):
        out = tmp_path / f"{name}.json"
        result = cli(
            "eval",
            "--store",
            store,
            "--queries",
            corpora.beir / "queries.jsonl",
            "--qrels",
            corpora.beir / "qrels" / "test.tsv",
            "--output",
            out,
            "--no-progress",
        )
        assert result.code == 0, result.err
        reports[name] = json.loads(out.read_text())
    assert reports["milvus"]["metrics"] == pytest.approx(reports["local"]["metrics"], abs=1e-6)
    assert reports["milvus"]["metrics"]["mrr@10"] == pytest.approx(1.0)
