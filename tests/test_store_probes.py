"""No code outside the store probes a store for a member by name: it asks for a named capability instead.

A *store probe* is a ``getattr(obj, name, ...)`` or ``hasattr(obj, name)`` call, in the package or an integration
but outside ``rag_hier/store/``, where

- ``name`` is a string naming a public member of a store backend (:class:`~rag_hier.store.contract.StoreBackend`,
  the optional capabilities of :mod:`rag_hier.store.capabilities`, ``EngineExtensions``, or a member
  :class:`~rag_hier.store.HierStore` or :class:`~rag_hier.store.milvus.MilvusStore` defines), or
- ``obj`` is spelled as a store (``store``, ``self.store``, ``self._store``, ``writable_store``...: its last name is
  ``store`` or ends in ``_store``), whatever ``name`` is (a member no backend has yet is a probe too).

Such code asks :func:`rag_hier.store.capabilities.supports` or :func:`~rag_hier.store.capabilities.require`
instead. :data:`ALLOWED` lists the calls that match but probe something else, each with why.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = [ROOT / "rag_hier", ROOT / "integrations"]
STORE_DIR = ROOT / "rag_hier" / "store"

ALLOWED: dict[tuple[str, str, str], str] = {
    (
        "rag_hier/encoders/encdec.py",
        "getattr(decoder, 'bert', decoder)",
        "encoder",
    ): "a transformers decoder's encoder layers, not a store's encoder",
    (
        "integrations/haystack/src/haystack_integrations/components/embedders/rag_hier/text_embedder.py",
        "document_store",
        "query_encoder",
    ): "a Haystack document store given to the embedder: is it rag-hier's (whose query encoder it shares)?",
    (
        "integrations/llama_index/src/llama_index/embeddings/rag_hier/base.py",
        "vector_store",
        "query_encoder",
    ): "a LlamaIndex vector store given to the embedding: is it rag-hier's (whose query encoder it shares)?",
}
"""``(file, object as written, member)`` → why the call is not a store probe."""


def _store_members() -> frozenset[str]:
    from rag_hier.store import capabilities
    from rag_hier.store.contract import EngineExtensions, StoreBackend
    from rag_hier.store.milvus.store import MilvusStore
    from rag_hier.store.store import HierStore

    names: set[str] = set()
    for proto in (StoreBackend, EngineExtensions, *capabilities.CAPABILITIES):
        names.update(capabilities.capability_members(proto))
    for cls in (HierStore, MilvusStore):
        for klass in inspect.getmro(cls):
            if klass is object:
                continue
            names.update(n for n in vars(klass) if not n.startswith("_"))
    return frozenset(names)


def _spelled_as_store(node: ast.expr) -> bool:
    last = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return last in ("store", "_store") or last.endswith("_store")


def _scan(rel: str, source: str, members: frozenset[str]) -> list[tuple[str, int, str, str, str]]:
    """The store probes in one file's source: ``(file, line, getattr|hasattr, object as written, member)``."""
    found = []
    for node in ast.walk(ast.parse(source, rel)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
        ):
            continue
        obj, name = node.args[0], node.args[1]
        literal = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
        if (literal is not None and literal in members) or _spelled_as_store(obj):
            found.append((rel, node.lineno, node.func.id, ast.unparse(obj), literal or f"<{ast.unparse(name)}>"))
    return sorted(found)


def _probes() -> list[tuple[str, int, str, str, str]]:
    members = _store_members()
    found = []
    for base in SCANNED:
        for f in sorted(base.rglob("*.py")):
            if f.is_relative_to(STORE_DIR) or "tests" in f.relative_to(ROOT).parts:
                continue
            found.extend(_scan(f.relative_to(ROOT).as_posix(), f.read_text(encoding="utf-8"), members))
    return found


def test_no_store_probe_outside_the_store() -> None:
    probes = [p for p in _probes() if (p[0], p[3], p[4]) not in ALLOWED]
    assert not probes, (
        "getattr/hasattr of a store member outside rag_hier/store/ (ask supports()/require() of "
        "rag_hier.store.capabilities for a named capability instead, or list a call that probes no store in "
        "ALLOWED with why):\n"
        + "\n".join(f"  {f}:{line}: {call}({obj}, {name!r})" for f, line, call, obj, name in probes)
    )


def test_every_allowed_call_exists() -> None:
    seen = {(f, obj, name) for f, _, _, obj, name in _probes()}
    assert not set(ALLOWED) - seen, f"ALLOWED lists calls that are gone: {sorted(set(ALLOWED) - seen)}"


def test_the_scan_finds_the_probes_it_exists_for() -> None:
    """Probes as they were written before the capabilities had names are found; other getattr calls are not."""
    source = """
before = getattr(self.store, "encoder_key", None)
fetch = getattr(self.store, "hit_rows", None)
search = getattr(self.store, "search_dense_hits", None)
if not hasattr(store, "check_switchable"): pass
reopen = getattr(store, "reopen", None)
info = getattr(store, "model_info", None)
if not hasattr(store, "rollback_model"): pass
optimize = getattr(backend, "optimize", None)
value = getattr(self._store, name)
device = getattr(torch, "xpu", None)
encode = getattr(model, "encode_query", model.encode)
size = getattr(self, field)
"""
    found = [(call, obj, name) for _, _, call, obj, name in _scan("x.py", source, _store_members())]
    assert found == [
        ("getattr", "self.store", "encoder_key"),
        ("getattr", "self.store", "hit_rows"),
        ("getattr", "self.store", "search_dense_hits"),
        ("hasattr", "store", "check_switchable"),
        ("getattr", "store", "reopen"),
        ("getattr", "store", "model_info"),
        ("hasattr", "store", "rollback_model"),
        ("getattr", "backend", "optimize"),
        ("getattr", "self._store", "<name>"),
    ]
