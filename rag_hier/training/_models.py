"""Loading the sentence-transformers model a trainer starts from (HCE, EHI)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["load_base_model"]


def load_base_model(
    model: str | Path | SentenceTransformer, device: str | None, max_seq_length: int | None
) -> SentenceTransformer:
    """``model`` loaded (a name, a path, or a ``SentenceTransformer`` used as is) with ``max_seq_length`` applied.

    Raises:
        RagHierError: The model cannot be loaded (naming it).

    """
    if isinstance(model, str | Path):
        from rag_hier.encoders._st_loading import load_sentence_transformer
        from rag_hier.encoders.dense import resolve_model_path
        from rag_hier.encoders.device import resolve_device

        path = resolve_model_path(str(model))
        loaded = load_sentence_transformer(path, device=resolve_device(device), name=str(model), what="base model")
    else:
        loaded = model
    if max_seq_length is not None:
        loaded.max_seq_length = max_seq_length
    return loaded
