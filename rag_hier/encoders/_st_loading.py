"""How rag-hier loads sentence-transformers directories that use rag-hier's own module classes.

sentence-transformers (>= 6) refuses to import a module class outside its own namespace unless the
caller passes ``trust_remote_code=True``: a ``modules.json`` may name any importable class, and
importing it runs code. rag-hier's Tied-Atomic models are ordinary sentence-transformers directories
whose single module is :class:`rag_hier.encoders.encdec.EncoderDecoderEmbedding`, code that is already
installed with rag-hier. :func:`st_load_kwargs` grants the flag for exactly those directories: every
module named in ``modules.json`` must be one of rag-hier's (listed here) or a sentence-transformers
module that loads no code (``Normalize``, ``Dense``, ...). Any other directory is loaded with
sentence-transformers' own rule. rag-hier's modules never pass the flag on to ``transformers``, so a
``config.json`` that asks for remote code (``auto_map``) is still refused.

This module imports nothing heavy: ``rag_hier.encoders.dense`` uses it before sentence-transformers loads.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "LOAD_ERRORS",
    "RAG_HIER_MODULES",
    "check_reachable",
    "load_sentence_transformer",
    "module_types",
    "quiet_trainer_setup",
    "quiet_weight_loading",
    "st_load_kwargs",
]

HUB_PROBE_TIMEOUT_S = 5.0
"""How long :func:`check_reachable` waits for the Hugging Face Hub before calling it unreachable."""

LOAD_ERRORS: tuple[type[BaseException], ...] = (Exception,)
"""What loading a model directory may raise, reported as one line naming the model: the loaders are other
libraries', and a damaged or unexpected directory fails in many ways (a missing file, an unknown key in
``sentence_bert_config.json``, weights of other shapes, a ``pytorch_model.bin`` that torch's weights-only loader
refuses without running it). Interrupts (``KeyboardInterrupt``) are not caught."""

RAG_HIER_MODULES: frozenset[str] = frozenset({"rag_hier.encoders.encdec.EncoderDecoderEmbedding"})
"""``modules.json`` types that are rag-hier's own, installed module classes."""

# sentence-transformers modules that never import code named by the directory (a Transformer may, through
# its Hugging Face config's ``auto_map``, so a directory with one is left to sentence-transformers' rule).
_CODE_FREE_ST_MODULES = frozenset({"Normalize", "Dense", "Pooling", "LayerNorm", "Dropout", "WeightedLayerPooling"})


def module_types(path: str | Path) -> list[str] | None:
    """The ``type`` of every module listed in a local directory's ``modules.json`` (``None``: no readable file)."""
    file = Path(path) / "modules.json"
    if not file.is_file():
        return None
    try:
        entries = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(entries, list):
        return None
    return [str(e.get("type", "")) if isinstance(e, dict) else "" for e in entries]


def st_load_kwargs(path: str | Path) -> dict[str, Any]:
    """Extra ``SentenceTransformer(path, ...)`` arguments for a directory built from rag-hier's module classes.

    Returns ``{"trust_remote_code": True}`` when ``path`` is a local sentence-transformers directory whose
    modules are rag-hier's own classes plus code-free sentence-transformers modules, else ``{}``.
    """
    types = module_types(path)
    if not types or not any(t in RAG_HIER_MODULES for t in types):
        return {}
    for t in types:
        if t in RAG_HIER_MODULES:
            continue
        if t.startswith("sentence_transformers.") and t.rsplit(".", 1)[-1] in _CODE_FREE_ST_MODULES:
            continue
        return {}
    return {"trust_remote_code": True}


@contextlib.contextmanager
def quiet_weight_loading() -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar (printed on every model load) for the block."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def quiet_trainer_setup() -> Iterator[None]:
    """Hide the bars sentence-transformers and transformers print while a trainer is built or a model saved.

    Building a ``SentenceTransformerTrainer`` computes the model card's widget examples (a "Computing widget
    examples" bar, whatever ``generate_widget_examples`` says), and saving a model shows a "Writing model
    shards" bar: neither tells a user anything. Warnings and errors still reach the logs.
    """
    with quiet_weight_loading(), contextlib.redirect_stderr(io.StringIO()):
        yield


def check_reachable(model: str, *, timeout: float = HUB_PROBE_TIMEOUT_S) -> None:
    """Fail fast when ``model`` can only come from the Hugging Face Hub and the Hub cannot be reached.

    A local directory, a model in the local Hugging Face cache, and ``HF_HUB_OFFLINE`` (the hub library then
    answers at once) pass without a probe. Otherwise one request for the model's metadata, with ``timeout``,
    tells an unreachable Hub (no network, DNS, a proxy refusing) from one that answers, even "not found"
    (the loader then reports that itself): without the probe the loader retries for more than a minute.

    Raises:
        RagHierError: The Hub cannot be reached (the message names the model and what to do).

    """
    import os

    from rag_hier.errors import RagHierError

    if Path(model).exists() or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return
    try:
        from huggingface_hub import HfApi, constants, try_to_load_from_cache

        if isinstance(try_to_load_from_cache(model, "config.json"), str):
            return
    except Exception:  # an id the hub library cannot parse: the loader names the problem
        return
    try:
        HfApi().model_info(model, timeout=timeout)
    except Exception as exc:
        if getattr(exc, "response", None) is not None:  # the Hub answered (not found, gated, ...)
            return
        raise RagHierError(
            f"cannot load model {model!r}: it is not a local directory or in the Hugging Face cache, and "
            f"{constants.ENDPOINT} cannot be reached ({type(exc).__name__}: {str(exc).strip()[:120]}); check the "
            "network or proxy, or pass a local model directory (HF_HUB_OFFLINE=1 skips this check)"
        ) from None


def _one_line(exc: BaseException) -> str:
    """An exception as one line: its type, and the first line of its message when it has one."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_sentence_transformer(path: str, *, device: str, name: str, what: str = "model", **kwargs: Any) -> Any:
    """``SentenceTransformer(path, device=device, **kwargs)``, loaded the way rag-hier loads every model.

    The Hub is probed first (:func:`check_reachable`), the weight-loading bar is hidden, and any failure is one
    :class:`~rag_hier.errors.RagHierError` line naming ``name`` (``what``: "model", "base model"). The model
    card computes no widget examples (a progress bar on stderr whenever a trainer is built on the model).
    """
    from sentence_transformers import SentenceTransformer

    from rag_hier.errors import RagHierError

    check_reachable(path)
    try:
        with quiet_weight_loading():
            model = SentenceTransformer(path, device=device, **kwargs)
    except LOAD_ERRORS as exc:
        raise RagHierError(f"cannot load {what} {name!r}: {_one_line(exc)}") from exc
    card = getattr(model, "model_card_data", None)
    if card is not None and hasattr(card, "generate_widget_examples"):
        card.generate_widget_examples = False
    return model
