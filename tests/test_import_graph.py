"""The package's import graph: no cycle, and no lower layer importing a higher one.

Every import statement counts, wherever it stands: module level, under ``TYPE_CHECKING``, inside functions.
``importlib.import_module`` is not an import statement: every such load is listed in :data:`BY_NAME` with why it
is there, and a load not listed (or a listed one that is gone) fails :func:`test_every_load_by_name_is_listed`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rag_hier"

# Layers, lowest first: a module may import only from its own layer or lower ones.
LAYERS = [
    {
        "rag_hier._version",
        "rag_hier.errors",
        "rag_hier._logging",
        "rag_hier._compat",
        "rag_hier._limits",
        "rag_hier._lazy",
        "rag_hier._arrays",
    },
    {"rag_hier.corpus"},
    {"rag_hier.encoders"},
    {"rag_hier.index"},
    {"rag_hier.store"},
    {"rag_hier.retrieval"},
    {"rag_hier.eval", "rag_hier.training", "rag_hier.testing"},
    {"rag_hier.tuning"},
    {"rag_hier.cli", "rag_hier", "rag_hier.__main__"},
]


BY_NAME = {
    ("rag_hier._lazy", "<f'{package}.{module}'>"): "PEP 562 lazy attributes: a package loads its own submodules",
    ("rag_hier._lazy", "<self.__dict__['_lazy_target']>"): "LazyModule: a third-party module loaded on first use",
    ("rag_hier.cli.main", "<train_methods()[name][0]>"): "the registered trainers' CLI modules",
    ("rag_hier.cli.main", "<module_name(name)>"): "the generated parser tables of a command",
    ("rag_hier.cli.main", "<module_name('train', name)>"): "the generated parser tables of a trainer",
    ("rag_hier.cli.plugins", "<m>"): "the registered method plugins of the CLI",
    ("rag_hier.cli.tune", "<module_name>"): "the user's --generator MODULE:FUNCTION",
    ("rag_hier.retrieval.registry", "<module>"): "the registered retrieval strategies",
    ("rag_hier.training.registry", "<module>"): "the registered trainers and their configurations",
    ("rag_hier.tuning.recipes", "<module>"): "the registered tuning recipes' training functions",
    ("rag_hier.store.extensions.base", "<spec.module>"): "the registered store extensions",
    # the store reaching up by name: the places the layering is bent on purpose
    ("rag_hier.store.search_hook", "rag_hier.retrieval.dense"): "HierStore.search runs the dense retriever",
    ("rag_hier.store.store", "rag_hier.store.factory"): "HierStore.create/open with uri= go through the factory",
    ("rag_hier.store.store", "rag_hier.tuning"): "HierStore.tune runs rag_hier.tuning.store_tune",
    ("rag_hier.store.milvus.store", "rag_hier.tuning"): "MilvusStore.tune runs rag_hier.tuning.store_tune",
}
"""Every ``importlib.import_module`` call in the package, ``(module, target)``, with why it is there: a literal or
module-level constant target is named as such, any other as ``<its source>``."""


def _modules() -> dict[str, Path]:
    mods = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        here = m if f.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                if t.split(".")[0] == "rag_hier" and (r := resolve(t)) and r != m:
                    graph[m].add(r)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> int:
    best, level = -1, len(LAYERS)
    for i, group in enumerate(LAYERS):
        for prefix in group:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), i
    return level


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_cycle_detection_finds_a_planted_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_lower_layer_imports_a_higher_one() -> None:
    offenders = [f"{m} -> {t}" for m, targets in _graph().items() for t in targets if _layer(t) > _layer(m)]
    assert offenders == []


@pytest.mark.parametrize("framework", ["haystack", "haystack_integrations", "llama_index"])
def test_the_engine_imports_no_framework(framework: str) -> None:
    for f in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n == framework or n.startswith(framework + ".") for n in names), f"{f} imports {framework}"


def test_framework_adapters_use_the_store_contract_not_backend_classes() -> None:
    # capabilities (filter_pushdown, can_forget_dimension, path, connection_options) replace isinstance checks
    # on a backend class and reads of a backend's private state
    root = Path(__file__).resolve().parents[1] / "integrations"
    found = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"isinstance\([^)]*\b(HierStore|MilvusStore)\b|\._conn\b", line):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert found == []


def test_the_local_store_imports_no_other_backend_at_run_time() -> None:
    # opening or creating another backend goes through rag_hier.store.factory (open_store / create_store)
    tree = ast.parse((ROOT / "store" / "store.py").read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            return  # type annotations only
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rag_hier.store.milvus"):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        if isinstance(node, ast.Import):
            found.extend(f"line {node.lineno}: import {a.name}" for a in node.names if "milvus" in a.name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    assert found == []


def _loads_by_name() -> set[tuple[str, str]]:
    found = set()
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        constants = {}
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            target = node.target if isinstance(node, ast.AnnAssign) else target
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                constants[target.id] = value.value
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule" and node.args:
                arg = node.args[0]
                name = arg.value if isinstance(arg, ast.Constant) else ast.unparse(arg)
                if str(name).split(".")[0] not in ("faiss", "scipy", "torch", "numpy"):
                    found.add((module, f"LazyModule({name})"))  # a rag_hier module hidden behind a stand-in
                continue
            if not (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", None))
                in (
                    "import_module",
                    "__import__",
                )
            ):
                continue
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and arg.value == "types":
                continue  # the standard library's types module (``types.UnionType``)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add((module, arg.value))
            elif isinstance(arg, ast.Name) and arg.id in constants:
                found.add((module, constants[arg.id]))
            else:
                found.add((module, f"<{ast.unparse(arg) if arg is not None else ''}>"))
    return found


def test_every_load_by_name_is_listed() -> None:
    found = _loads_by_name()
    assert sorted(found - BY_NAME.keys()) == [], "a new load by name: list it in BY_NAME with its reason"
    assert sorted(BY_NAME.keys() - found) == [], "a listed load by name is gone: remove it from BY_NAME"
