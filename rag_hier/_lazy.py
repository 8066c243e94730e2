"""Module attributes imported on first use (PEP 562).

For packages whose heavy modules (torch) must not load with the package:
``__getattr__ = lazy_getattr(__name__, {"Name": "submodule", ...}, globals())``; for a module that uses a heavy
library only when called (FAISS, SciPy): ``faiss = LazyModule("faiss")`` in place of ``import faiss``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["LazyModule", "lazy_getattr"]


def lazy_getattr(package: str, table: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``package.<table[name]>`` on first access and caches the value."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__


class LazyModule(ModuleType):
    """A stand-in for a heavy module (``faiss = LazyModule("faiss")``) that imports it on first attribute use.

    Each attribute is copied onto the stand-in when first read, so later reads are plain attribute lookups (a
    search path that reads ``faiss.SearchParameters`` pays nothing per call). ``import rag_hier.index.dense``
    then costs no FAISS start-up until an index is built, read or searched.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        module = importlib.import_module(self.__dict__["_lazy_target"])
        value = getattr(module, attr)
        self.__dict__[attr] = value
        return value
