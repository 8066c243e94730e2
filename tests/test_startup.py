"""Startup stays light: the package, the CLI's parser, ``--help``, ``--version`` and ``info`` import no model library.

Checked in a fresh interpreter (``sys.modules`` after the import), since this test process may have imported
torch already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HEAVY = ("torch", "transformers", "sentence_transformers")


def _imported_after(code: str) -> list[str]:
    probe = code + f"\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_package_import_loads_no_model_library() -> None:
    assert _imported_after("import rag_hier") == []


def test_package_import_loads_no_numpy_faiss_or_store() -> None:
    # every public name of rag_hier loads on first use
    probe = (
        "import json, sys, rag_hier\n"
        "print(json.dumps([m for m in ('numpy', 'faiss', 'scipy', 'sqlite3', 'rag_hier.store.store') "
        "if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    probe = "import rag_hier\nprint(rag_hier.HierStore.__name__, rag_hier.TuneConfig().dev_split)\n"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.split()[0] == "HierStore"


def test_cli_parser_loads_no_model_library() -> None:
    # build_parser() imports every plugin (the train sub-commands read their configuration dataclasses)
    assert _imported_after("from rag_hier.cli.main import build_parser\nbuild_parser()") == []


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["train", "hce", "--help"]])
def test_help_and_version_load_no_model_library(argv: list[str]) -> None:
    code = (
        "import contextlib, io, sys\nfrom rag_hier.cli.main import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main({argv!r})\n"
        "    except SystemExit as exc:\n        assert exc.code == 0, exc.code\n"
    )
    assert _imported_after(code) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        [],
        ["info", "--help"],
        ["migrate", "--help"],
        ["index", "--help"],
        ["search", "--help"],
        ["eval", "--help"],
        ["compare", "--help"],
        ["tune", "--help"],
        ["train", "--help"],
        *(["train", method, "--help"] for method in ("hce", "dhr", "svdr", "ehi", "tied-atomic")),
    ],
)
def test_these_commands_load_no_numpy(argv: list[str]) -> None:
    # only the sub-command asked for is built: the others are listed by their help line
    code = (
        "import contextlib, io, json, sys\nfrom rag_hier.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass\n"
        "print(json.dumps([m for m in ('numpy', 'faiss', 'scipy', 'torch') if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_command_is_listed_with_its_own_help_line() -> None:
    from rag_hier.cli.main import _COMMAND_HELP, build_parser

    full = build_parser()
    (sub,) = [a for a in full._actions if a.dest == "command"]
    assert {c.dest: c.help for c in sub._choices_actions} == _COMMAND_HELP
    assert build_parser("").format_help() == full.format_help()  # the listing does not depend on what was built


def test_info_loads_no_model_library(tmp_path: Path) -> None:
    from rag_hier import HierStore, Passage

    with HierStore.create(tmp_path / "s", model=None, dimension=4) as store:
        store.add_passages([Passage(id="p", doc_id="d", position=0, text="t")], np.ones((1, 4), np.float32))
    argv = ["info", "--store", str(tmp_path / "s")]
    code = (
        "import contextlib, io\nfrom rag_hier.cli.main import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({argv!r}) == 0\n"
    )
    assert _imported_after(code) == []


def test_version_imports_no_numpy_or_faiss() -> None:
    probe = (
        "import contextlib, io, json, sys\nfrom rag_hier.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n    code = main(['--version'])\n"
        "heavy = [m for m in ('numpy', 'faiss', 'scipy') if m in sys.modules]\n"
        "print(json.dumps([code, out.getvalue().strip(), heavy]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    code, printed, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert code == 0 and printed.startswith("rag-hier ") and heavy == []


def test_building_a_token_index_without_vectors_imports_no_model_library(tmp_path: Path, tiny_model_path: str) -> None:
    # `rag-hier index --token-index --no-dense` needs a tokenizer only: neither PyTorch (about 2 s of start-up)
    # nor transformers (0.7 s) nor sentence-transformers
    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Tides\n\nThe moon pulls the oceans.\n", encoding="utf-8")
    code = (
        "from rag_hier.cli.main import main\n"
        f"assert main(['index', {str(corpus)!r}, '--store', {str(tmp_path / 's')!r}, '--token-index', "
        f"'--model', {tiny_model_path!r}, '--no-dense', '--no-progress']) == 0\n"
    )
    assert _imported_after(code) == []


def test_train_methods_are_listed_as_their_modules_define_them() -> None:
    import importlib

    from rag_hier.cli.main import build_parser
    from rag_hier.cli.plugins import PLUGIN_MODULES, TRAIN_METHODS

    def methods(parser: object) -> dict[str, str]:
        (train,) = [a for a in parser._actions if a.dest == "command"]  # type: ignore[attr-defined]
        (sub,) = [a for a in train.choices["train"]._actions if a.dest == "method"]
        return {c.dest: c.help for c in sub._choices_actions}

    assert methods(build_parser()) == {name: help_line for name, (_, help_line) in TRAIN_METHODS.items()}
    assert methods(build_parser("train", "")) == methods(build_parser())  # the listing alone says the same
    with_train = {m for m in PLUGIN_MODULES if hasattr(importlib.import_module(m), "add_train_parser")}
    assert with_train == {module for module, _ in TRAIN_METHODS.values()}


@pytest.mark.parametrize("method", ["hce", "dhr", "svdr", "ehi", "tied-atomic"])
def test_train_method_help_imports_no_method_module(method: str) -> None:
    # the flags come from the generated tables: not even the method's own plugin module is imported
    from rag_hier.cli.plugins import TRAIN_METHODS

    code = (
        "import contextlib, io, json, sys\nfrom rag_hier.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    try:\n        main(['train', {method!r}, '--help'])\n    except SystemExit:\n        pass\n"
        "print(json.dumps(['--' in out.getvalue(), sorted(m for m in sys.modules if m.startswith('rag_hier.cli.'))]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    has_flags, modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert has_flags and not {module for module, _ in TRAIN_METHODS.values()} & set(modules)


LIGHT = {"rag_hier", "rag_hier._version", "rag_hier.cli", "rag_hier.cli.main", "rag_hier.cli._base", "__future__"}
"""What ``--version`` and every ``--help`` may import beyond what argparse itself needs to print a help (and the
import system's own ``importlib``)."""


def _all_help_commands() -> list[list[str]]:
    from rag_hier.cli._base import COMMAND_HELP
    from rag_hier.cli._tables import TRAIN_METHODS

    return [
        ["--version"],
        ["--help"],
        [],
        *([name, "--help"] for name in COMMAND_HELP),
        *(["train", method, "--help"] for method in TRAIN_METHODS),
        ["train"],
        ["index"],
    ]


@pytest.mark.parametrize("argv", _all_help_commands(), ids=" ".join)
def test_help_imports_only_argparse_and_the_cli_entry(argv: list[str]) -> None:
    # no numpy, no dataclasses/inspect (the flags' declarations), no logging (the package's NullHandler waits for
    # it), no typing, no plugin, registry or training configuration: argparse and the tables of the command asked
    code = (
        "import argparse, contextlib, io, json, sys\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    p = argparse.ArgumentParser(prog='x')\n    p.add_argument('--y', type=int)\n"
        "    p.add_subparsers(dest='c', required=True).add_parser('z')\n    p.format_help()\n"
        "    try:\n        p.parse_args(['--y', 'q'])\n    except SystemExit:\n        pass\n"
        "argparse_needs = set(sys.modules)\n"
        "from rag_hier.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass\n"
        "print(json.dumps(sorted(set(sys.modules) - argparse_needs)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    imported = set(json.loads(out.stdout.strip().splitlines()[-1]))
    tables = {m for m in imported if m.startswith("rag_hier.cli._tables")}
    rest = {m for m in imported - tables if m != "importlib" and not m.startswith("importlib._bootstrap")}
    assert rest <= LIGHT, sorted(rest - LIGHT)
    assert len(tables) <= 2  # the package and, for a sub-command's help, that command's module
    for heavy in ("numpy", "inspect", "dataclasses", "logging", "typing", "rag_hier.index.methods"):
        assert heavy not in imported


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)


def test_the_package_logger_has_its_null_handler_once_logging_loads() -> None:
    # `import rag_hier` does not import logging; when logging loads, rag_hier's logger gets its NullHandler before
    # anything can log through it: a warning of a rag_hier logger is not printed by logging's last resort
    code = (
        "import sys, rag_hier\n"
        "assert 'logging' not in sys.modules\n"
        "import logging\n"
        "handlers = logging.getLogger('rag_hier').handlers\n"
        "assert [type(h) for h in handlers] == [logging.NullHandler], handlers\n"
        "assert not [f for f in sys.meta_path if 'NullHandler' in type(f).__name__], sys.meta_path\n"
        "loader = logging.__loader__\n"
        "assert loader is logging.__spec__.loader and 'NullHandler' not in type(loader).__name__, loader\n"
        "logging.getLogger('rag_hier.store').warning('not shown')\n"
        "import logging.handlers\n"
        "logging.getLogger('elsewhere').warning('shown')\n"
    )
    assert _run(code).stderr == "shown\n"


def test_the_package_logger_has_its_null_handler_when_logging_was_loaded_first() -> None:
    code = (
        "import logging, sys, rag_hier\n"
        "assert [type(h) for h in logging.getLogger('rag_hier').handlers] == [logging.NullHandler]\n"
        "assert not [f for f in sys.meta_path if 'NullHandler' in type(f).__name__], sys.meta_path\n"
        "from rag_hier.cli.main import main\n"
        "logging.getLogger('rag_hier.cli').warning('not shown')\n"
    )
    assert _run(code).stderr == ""


def test_verbose_still_configures_logging(tmp_path: Path) -> None:
    # -v: the error's details are logged (logging configured by the command line, after parsing)
    argv = ["-v", "info", "--store", str(tmp_path / "missing")]
    code = f"import sys\nfrom rag_hier.cli.main import main\nsys.exit(main({argv!r}))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "rag-hier info: error:" in out.stderr and "ERROR rag_hier.cli: details" in out.stderr


STORE_HEAVY = ("torch", "transformers", "sentence_transformers", "faiss", "scipy", "pymilvus", "rag_hier.store.milvus")
"""What importing the store class (or a framework adapter) must not load: models, FAISS, SciPy, the Milvus backend
(each loads when a store is opened, searched or asked for it)."""


def _added_by(before: str, code: str) -> list[str]:
    """The modules of :data:`STORE_HEAVY` that ``code`` imports beyond those ``before`` did (fresh interpreter)."""
    probe = (
        f"import json, sys\n{before}\nloaded = set(sys.modules)\n{code}\n"
        f"print(json.dumps([m for m in {STORE_HEAVY!r} if m in sys.modules and m not in loaded]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_store_class_loads_no_torch_faiss_or_scipy() -> None:
    assert _added_by("", "import rag_hier\nfrom rag_hier import HierStore, Passage, open_store") == []


def test_faiss_loads_when_a_store_is_opened_and_searched(tmp_path: Path) -> None:
    from rag_hier import HierStore, Passage

    with HierStore.create(tmp_path / "s", model=None, dimension=4) as store:
        store.add_passages([Passage(id="p", doc_id="d", position=0, text="t")], np.ones((1, 4), np.float32))
    code = (
        "from rag_hier import DenseRetriever, HierStore\n"
        f"with HierStore.open({str(tmp_path / 's')!r}) as s:\n"
        "    (hits,) = DenseRetriever(s).search_vectors([[1.0, 0.0, 0.0, 0.0]], top_k=1)\n"
        "    assert [h.passage_id for h in hits] == ['p']\n"
    )
    assert _added_by("", code) == ["faiss"]


ADAPTERS = {
    "haystack": (
        "import haystack",
        "import haystack_integrations.document_stores.rag_hier\n"
        "import haystack_integrations.components.retrievers.rag_hier\n"
        "import haystack_integrations.components.embedders.rag_hier",
    ),
    "llama_index": (
        "import llama_index.core",
        "import llama_index.vector_stores.rag_hier\nimport llama_index.retrievers.rag_hier\n"
        "import llama_index.embeddings.rag_hier",
    ),
}


@pytest.mark.parametrize("framework", sorted(ADAPTERS))
def test_importing_an_adapter_loads_nothing_heavy_beyond_its_framework(framework: str) -> None:
    # the adapter's import cost stays close to the framework's own: FAISS, SciPy, the Milvus backend and the model
    # libraries load when a store is opened or an embedder warms up, not at import
    pytest.importorskip(framework if framework == "haystack" else "llama_index.core")
    framework_import, adapter_import = ADAPTERS[framework]
    assert _added_by(framework_import, adapter_import) == []
