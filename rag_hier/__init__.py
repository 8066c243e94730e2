"""rag-hier: hierarchical retrieval components for RAG on one engine (FAISS + SQLite store).

The engine imports neither Haystack nor LlamaIndex; adapters live in the ``haystack_integrations`` and
``llama_index`` namespaces.
"""

from __future__ import annotations

import sys

from rag_hier._version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing, which `rag-hier --help` does not need
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    from rag_hier.corpus import Document, Passage, Section, split_document
    from rag_hier.encoders import DEFAULT_MODEL, DenseEncoder
    from rag_hier.errors import RagHierError
    from rag_hier.index import DenseIndex, IndexConfig
    from rag_hier.retrieval import DenseRetriever, Hit
    from rag_hier.store import HierStore, ModelSwitch, WriteSummary, create_store, open_store
    from rag_hier.tuning import TuneConfig, TuneReport

_LAZY = {
    "Document": "corpus",
    "Passage": "corpus",
    "Section": "corpus",
    "split_document": "corpus",
    "DEFAULT_MODEL": "encoders",
    "DenseEncoder": "encoders",
    "RagHierError": "errors",
    "DenseIndex": "index",
    "IndexConfig": "index",
    "DenseRetriever": "retrieval",
    "Hit": "retrieval",
    "HierStore": "store",
    "ModelSwitch": "store",
    "WriteSummary": "store",
    "create_store": "store",
    "open_store": "store",
    "TuneConfig": "tuning",
    "TuneReport": "tuning",
}


def __getattr__(name: str) -> Any:
    """Every public name loads on first use (PEP 562): ``import rag_hier`` stays light (no NumPy, FAISS, SQLite)."""
    from rag_hier._lazy import lazy_getattr

    return lazy_getattr(__name__, _LAZY, globals())(name)


# The library's logger gets its NullHandler (records of rag_hier's loggers are not printed by logging's
# last-resort handler unless the application configures logging). `logging` is not imported here, so that
# `import rag_hier` and `rag-hier --help` stay light: the handler is added now if `logging` is loaded, else as
# `logging` finishes loading, before any of rag_hier's modules can log.
def _add_null_handler(logging: ModuleType) -> None:
    logging.getLogger(__name__).addHandler(logging.NullHandler())


class _NullHandlerOnLoggingImport:
    """A meta path finder that waits for ``import logging``, lets the other finders find it, then adds the handler.

    It removes itself at that import; it finds nothing itself.
    """

    def __init__(self, loader: Any = None) -> None:
        self.loader = loader

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != "logging":
            return None
        for finder in list(sys.meta_path):
            if isinstance(finder, cls):
                sys.meta_path.remove(finder)
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = cls(spec.loader)  # type: ignore[assignment]
                return spec
        return None

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        _add_null_handler(module)


if "logging" in sys.modules:
    _add_null_handler(sys.modules["logging"])
elif not any(isinstance(f, _NullHandlerOnLoggingImport) for f in sys.meta_path):
    sys.meta_path.insert(0, _NullHandlerOnLoggingImport())


__all__ = [
    "DEFAULT_MODEL",
    "DenseEncoder",
    "DenseIndex",
    "DenseRetriever",
    "Document",
    "HierStore",
    "Hit",
    "IndexConfig",
    "ModelSwitch",
    "Passage",
    "RagHierError",
    "Section",
    "TuneConfig",
    "TuneReport",
    "WriteSummary",
    "__version__",
    "create_store",
    "open_store",
    "split_document",
]
