"""Where the models a Milvus collection holds live: their ``C__files`` names, and the clients' local copies.

:mod:`.switching` writes and reads them; :mod:`.generations` keeps the files every kept encoder names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rag_hier.store.models import KEPT_ENCODERS

__all__ = ["REL_NAME", "model_cache", "stored_files"]

REL_NAME = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")
"""A model file's relative name that can be a ``C__files`` name (no quotes, no ``..`` tricks: checked below)."""


def model_cache() -> Path:
    """Where clients keep their copies of models stored in Milvus collections."""
    root = os.environ.get("RAG_HIER_CACHE") or str(Path.home() / ".cache" / "rag-hier")
    return Path(root) / "milvus-models"


def stored_files(state: Mapping[str, Any]) -> dict[str, int]:
    """``C__files`` name → generation of every model file a kept encoder (current, previous, original) names."""
    out: dict[str, int] = {}
    for key in KEPT_ENCODERS:
        enc = state.get(key) or {}
        if enc.get("stored"):
            name = str(enc["model"]).split("/", 1)[1]
            out.update({f"model/{name}/{rel}": int(i["gen"]) for rel, i in (enc.get("files") or {}).items()})
    return out
