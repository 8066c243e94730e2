"""The method registry (rag_hier.index.methods): one registration reaches every layer that offers a method."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from rag_hier.index import methods as registry
from rag_hier.index.methods import ExtensionSpec, MethodSpec, StrategySpec, register_method
from rag_hier.retrieval import registry as strategies


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test are forgotten after it (the registries' tables are copies)."""
    monkeypatch.setattr(registry, "_METHODS", dict(registry._METHODS))
    monkeypatch.setattr(strategies, "_ENTRIES", dict(strategies._ENTRIES))
    monkeypatch.setattr(strategies, "_OWNER", dict(strategies._OWNER))


def test_the_built_in_methods_offer_what_they_did() -> None:
    assert strategies.strategy_names() == [
        "dense",
        "hierarchical",
        "tree",
        "ehi",
        "svdr-full",
        "svdr-alpha",
        "svdr-beta",
        "svdr-beta-rerank",
        "svdr-lexical",
        "bm25",
        "sparse-embedding",
        "fusion",
    ]
    from rag_hier.cli.plugins import plugin_modules, train_methods
    from rag_hier.store.extensions.base import known_extensions

    assert set(plugin_modules()) == {f"rag_hier.cli.{m}" for m in ("dhr", "hce", "ehi", "svdr", "tied_atomic", "bm25")}
    assert list(train_methods()) == ["dhr", "hce", "ehi", "svdr", "tied-atomic"]
    assert set(known_extensions()) == {
        "doc-index",
        "tree",
        "ehi",
        "token-index",
        "svdr-vectors",
        "bm25",
        "sparse-embeddings",
        "questions",
    }


def test_every_registered_extension_is_defined_by_its_module_with_the_data_it_declares() -> None:
    from rag_hier.store.extensions.base import extension_class

    for name, spec in registry.extension_specs().items():
        cls = extension_class(name)
        assert cls.__module__ == spec.module and cls.name == name
        if spec.data == "sparse-rows":
            assert all(hasattr(cls, m) for m in ("sparse_rows", "add_sparse_rows", "clear_rows")), name
        if spec.data in ("leaf", "leaves"):
            for m in ("leaf_rows", "routed_total", "route", "leaf_members", "search_here"):
                assert hasattr(cls, m), (name, m)


def test_every_strategy_names_registered_extensions_and_importable_classes() -> None:
    known = set(registry.extension_specs())
    for m in registry.methods():
        for s in m.strategies:
            entry = strategies.strategy(s.name)
            assert set(entry.extensions) <= known
            assert entry.params.field_names() is not None
            assert entry.retriever.__name__


def test_milvus_dispatches_on_the_kind_of_data() -> None:
    from rag_hier.store.milvus.fields import engine_data, leaf_column, leaf_extensions

    assert leaf_extensions() == {"tree": ("tree_leaf", "leaf"), "ehi": ("ehi_leaves", "leaves")}
    assert [engine_data(n) for n in ("token-index", "svdr-vectors", "sparse-embeddings")] == ["sparse-rows"] * 3
    assert [engine_data(n) for n in ("doc-index", "bm25", "questions", "not-registered")] == ["files"] * 4
    assert leaf_column("my-index", "leaves") == "my_index_leaves"


def test_the_registry_imports_no_numpy() -> None:
    import subprocess

    code = (
        "import sys, json\nimport rag_hier.index.methods, rag_hier.retrieval.registry, rag_hier.cli.plugins\n"
        "print(json.dumps([m for m in ('numpy', 'scipy', 'faiss', 'torch') if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_new_method_is_one_registration(isolated: None, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A strategy, an extension (opened by name from a store) and a CLI plugin, from one register_method call."""
    pkg = tmp_path / "my_method"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "retriever.py").write_text(
        "import numpy as np\n"
        "from rag_hier.retrieval.base import Ranking, Retriever\n"
        "class LastRetriever(Retriever):\n"
        "    name = 'last'\n"
        "    def rank(self, queries, k, allowed, *, min_documents=None):\n"
        "        ids = self.store.passage_rowids() if allowed is None else np.asarray(allowed)\n"
        "        ids = np.sort(ids)[::-1][:k]\n"
        "        return [Ranking(ids, -np.arange(ids.size, dtype=np.float64)) for _ in range(len(queries))]\n"
    )
    (pkg / "extension.py").write_text(
        "import json\n"
        "from rag_hier.store.extensions.base import StoreExtension, register_extension\n"
        "@register_extension\n"
        "class Counter(StoreExtension):\n"
        "    name = 'counter'\n"
        "    FILES = ('counter.json',)\n"
        "    def __init__(self): self.n = 0\n"
        "    def write(self, paths): paths['counter.json'].write_text(json.dumps(self.n))\n"
        "    def load(self, store, paths): self.n = json.loads(paths['counter.json'].read_text())\n"
        "    def build(self, store): self.n = store.count_passages()\n"
        "    def on_passages_added(self, store, rowids, passages, vectors): self.n += len(rowids)\n"
    )
    (pkg / "cli.py").write_text("def add_index_arguments(parser):\n    parser.add_argument('--count-passages')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    register_method(
        MethodSpec(
            "my-method",
            strategies=(StrategySpec("last", "my_method.retriever:LastRetriever", "latest passages first"),),
            extensions=(ExtensionSpec("counter", "my_method.extension"),),
            cli="my_method.cli",
        )
    )
    from rag_hier import HierStore, Passage
    from rag_hier.cli.plugins import plugin_modules

    assert "last" in strategies.strategy_names() and "my_method.cli" in plugin_modules()
    with HierStore.create(tmp_path / "s", model=None, dimension=2) as store:
        passages = [Passage(id=f"p{i}", doc_id="d", position=i, text=f"t{i}") for i in range(3)]
        store.add_passages(passages, np.eye(3, 2, dtype=np.float32))
        store.ensure_extension("counter")
        hits = strategies.build_retriever("last", store).search_vectors(np.ones((1, 2)), top_k=2)[0]
        assert [h.passage_id for h in hits] == ["p2", "p1"]
    sys.modules.pop("my_method.extension")
    from rag_hier.store.extensions import base

    base._REGISTRY.pop("counter")  # as in a fresh process: the store names it, the registration finds its module
    with HierStore.open(tmp_path / "s") as store:
        assert store.extension("counter").n == 3  # type: ignore[union-attr]
    base._REGISTRY.pop("counter")
    for name in [m for m in sys.modules if m == "my_method" or m.startswith("my_method.")]:
        del sys.modules[name]


def test_a_clash_registers_nothing(isolated: None) -> None:
    before = (registry.methods(), strategies.strategy_names())
    with pytest.raises(ValueError, match="tree already belongs to 'hce'"):
        register_method(MethodSpec("other", strategies=(StrategySpec("tree", "x:Y", "h"),)))
    with pytest.raises(ValueError, match="already registered"):
        register_method(registry.method("bm25"))
    with pytest.raises(ValueError, match="data must be one of"):
        ExtensionSpec("x", "m", data="rows")  # type: ignore[arg-type]
    assert (registry.methods(), strategies.strategy_names()) == before


def test_replacing_a_method_replaces_its_strategies(isolated: None) -> None:
    old = registry.method("fusion")
    spec = dataclasses.replace(old, strategies=(dataclasses.replace(old.strategies[0], help="another help"),))
    register_method(spec, replace=True)
    assert strategies.strategy("fusion").help == "another help"
