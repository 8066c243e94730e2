"""Fixtures for the CLI tests: small corpora in every format, an in-process CLI runner, store helpers."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rag_hier.cli.main import main
from rag_hier.store.store import HierStore

# ------------------------------------------------------------------------------------------------------
# corpora (each document's text is distinctive, so a query equal to a passage's embedding text finds it
# first even with the tiny random model: identical strings give identical vectors)
# ------------------------------------------------------------------------------------------------------
MARKDOWN = {
    "alpha.md": "# Alpha\n\nApples are grown in orchards.\n\n## Growing\n\nTrees need cold winters.\n\n"
    "Bees pollinate the blossom.\n\n## Eating\n\nApples are baked into pies.\n",
    "beta.md": "# Beta\n\nBridges span rivers and valleys.\n\n## Kinds\n\nArch bridges push outwards.\n",
    "sub/gamma.md": "# Gamma\n\nComets have icy nuclei and long tails.\n",
}
TEXTS = {
    "one.txt": "Lighthouses warn ships of rocks.\n\nTheir lamps turn at night.\n",
    "two.txt": "Sourdough rises with wild yeast.\n",
}
BEIR_DOCS = [
    {"_id": "d1", "title": "Tides", "text": "The moon pulls the oceans into two bulges.", "metadata": {"year": 2001}},
    {"_id": "d2", "title": "Bees", "text": "Honeybees store nectar as honey in wax cells.", "metadata": {"year": 2010}},
    {"_id": "d3", "title": "Volcanoes", "text": "Magma rises through cracks in the crust.", "metadata": {"year": 2015}},
    {"_id": "d4", "title": "Compost", "text": "Microbes turn kitchen scraps into humus.", "metadata": {"year": 2020}},
    {
        "_id": "d5",
        "title": "Printing",
        "text": "Movable type made books cheaper to produce.",
        "metadata": {"year": 2022},
    },
]
QA_DOCS = [
    {
        "doc_id": "rivers",
        "title": "Rivers",
        "paragraphs": ["Rivers carry sediment to the sea.", "Deltas form where rivers slow down."],
    },
    {
        "doc_id": "glaciers",
        "title": "Glaciers",
        "paragraphs": ["Glaciers are rivers of ice.", "They carve U-shaped valleys.", "Moraines mark their edges."],
    },
]
QA_QUESTIONS = [
    {
        "qid": "a",
        "question": "Rivers, Deltas form where rivers slow down.",
        "answers": ["deltas"],
        "doc_id": "rivers",
        "paragraph_index": 1,
    },
    {
        "qid": "b",
        "question": "Glaciers, They carve U-shaped valleys.",
        "answers": ["U-shaped"],
        "doc_id": "glaciers",
        "paragraph_index": 1,
    },
    {
        "qid": "c",
        "question": "Glaciers, Moraines mark their edges.",
        "answers": ["moraines"],
        "doc_id": "glaciers",
        "paragraph_index": 2,
    },
]


def write_files(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Corpora:
    """Paths of the small corpora, and the data written into them."""

    markdown: Path
    text: Path
    beir: Path
    """A BEIR directory: corpus.jsonl, queries.jsonl (each query = one document's text), qrels/test.tsv."""
    qa: Path
    """A QA directory: documents.jsonl and questions.jsonl."""
    markdown_files: dict[str, str] = field(default_factory=lambda: dict(MARKDOWN))
    beir_docs: list[dict[str, Any]] = field(default_factory=lambda: list(BEIR_DOCS))
    qa_docs: list[dict[str, Any]] = field(default_factory=lambda: list(QA_DOCS))
    qa_questions: list[dict[str, Any]] = field(default_factory=lambda: list(QA_QUESTIONS))

    @staticmethod
    def beir_embedding_text(doc: dict[str, Any]) -> str:
        """What the encoder sees for a whole BEIR document: ``"<title>, <text>"``."""
        return f"{doc['title']}, {doc['text']}"


def make_corpora(root: Path) -> Corpora:
    """Write every small corpus under ``root``."""
    beir = root / "beir"
    write_jsonl(beir / "corpus.jsonl", BEIR_DOCS)
    write_jsonl(
        beir / "queries.jsonl", [{"_id": f"q{d['_id']}", "text": Corpora.beir_embedding_text(d)} for d in BEIR_DOCS]
    )
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{d['_id']}\t{d['_id']}\t1\n" for d in BEIR_DOCS),
        encoding="utf-8",
    )
    qa = root / "qa"
    write_jsonl(qa / "documents.jsonl", QA_DOCS)
    write_jsonl(qa / "questions.jsonl", QA_QUESTIONS)
    return Corpora(
        markdown=write_files(root / "md", MARKDOWN),
        text=write_files(root / "txt", TEXTS),
        beir=beir,
        qa=qa,
    )


@pytest.fixture()
def corpora(tmp_path: Path) -> Corpora:
    """Fresh small corpora (tests may change them)."""
    return make_corpora(tmp_path / "corpora")


# ------------------------------------------------------------------------------------------------------
# running the CLI
# ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


RunCli = Callable[..., CliResult]


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """Run ``rag-hier`` in-process: ``cli("search", "--store", ...)`` → exit code, stdout, stderr."""

    def run(*argv: Any) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture()
def index_cli(cli: RunCli, tiny_model_path: str) -> RunCli:
    """``rag-hier index CORPUS --store DIR ... --model <tiny> --no-progress``, asserting success."""

    def run(corpus: Path, store: Path, *extra: Any) -> CliResult:
        result = cli("index", corpus, "--store", store, "--model", tiny_model_path, "--no-progress", *extra)
        assert result.code == 0, result.err
        return result

    return run


# ------------------------------------------------------------------------------------------------------
# store helpers
# ------------------------------------------------------------------------------------------------------
class Probe:
    """Looks at stores from outside the CLI."""

    @staticmethod
    def counts(path: Path) -> dict[str, int]:
        """Counts of a store, opened read-only with full checksum verification (so: it is loadable)."""
        with HierStore.open(path, read_only=True, verify_checksums=True) as store:
            return dict(store.manifest["counts"])

    @staticmethod
    def passage_ids(path: Path) -> list[str]:
        with HierStore.open(path, read_only=True) as store:
            return [p.id for p in store.iter_passages()]

    @staticmethod
    def snapshot(path: Path) -> dict[str, str]:
        """SHA-256 of every file in a store directory."""
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}

    @staticmethod
    def copy(src: Path, dst: Path) -> Path:
        shutil.copytree(src, dst)
        return dst


@pytest.fixture()
def probe() -> type[Probe]:
    return Probe


@pytest.fixture(scope="session")
def store_templates(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stores indexed once per session with the tiny model: ``md`` (Markdown, 100 words), ``beir``."""
    root = tmp_path_factory.mktemp("cli-store-templates")
    corpora = make_corpora(root / "corpora")
    stores = {"md": root / "md-store", "beir": root / "beir-store"}
    for name, source in (("md", corpora.markdown), ("beir", corpora.beir)):
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(
                ["index", str(source), "--store", str(stores[name]), "--model", tiny_model_path, "--no-progress"]
            )
        assert code == 0
    return stores


@pytest.fixture()
def md_store(store_templates: dict[str, Path], tmp_path: Path) -> Path:
    """A fresh copy of the Markdown store (3 documents, 6 passages), free to change."""
    return Probe.copy(store_templates["md"], tmp_path / "md-store")


@pytest.fixture()
def beir_store(store_templates: dict[str, Path], tmp_path: Path) -> Path:
    """A fresh copy of the BEIR store (5 whole documents), free to change."""
    return Probe.copy(store_templates["beir"], tmp_path / "beir-store")


@pytest.fixture(scope="session")
def tiny16_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second tiny model, 16-d (its dimension differs from ``tiny_model_path``'s 32)."""
    from rag_hier.testing import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-model-16"), dimension=16))
