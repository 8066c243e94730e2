"""Attention-probability dropout during training: why the trainers turn it off by default.

With dropout on the attention probabilities, PyTorch's ``scaled_dot_product_attention`` cannot use its fused
(flash) CPU kernel and falls back to the math path, which materialises the ``(batch, heads, length, length)``
scores, their softmax and a dropout mask for the backward pass. Measured on the 2-core CPU host with
all-MiniLM-L6-v2, forward + backward of 32 texts of 256 tokens: 59.2 s and 3.63 GB of activations with the
model's attention dropout 0.1, 35.7 s and 0.54 GB with 0 (``benchmarks/training/bench_attention_dropout.py``,
``docs/hce.md``). The hidden-state dropout (and so SimCSE's noise) is untouched. Only the dropout modules of
attention layers change, only while training runs; the saved model's configuration is the original one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["attention_dropout"]

_ATTRIBUTES = ("dropout", "attn_dropout", "attention_dropout")


def _attention_dropouts(model: Any) -> list[Any]:
    from torch import nn

    found = []
    for module in model.modules():
        if "attention" not in type(module).__name__.lower():
            continue
        for attr in _ATTRIBUTES:
            d = getattr(module, attr, None)
            if isinstance(d, nn.Dropout):
                found.append(d)
    return found


@contextmanager
def attention_dropout(model: Any, p: float | None) -> Iterator[int]:
    """Set the attention-probability dropout of ``model`` to ``p`` inside the block (``None``: leave it).

    Yields the number of dropout modules changed; their original rates are restored on exit.
    """
    if p is None:
        yield 0
        return
    if not 0.0 <= p < 1.0:
        raise ValueError(f"attention dropout must be in [0, 1), got {p}")
    modules = _attention_dropouts(model)
    saved = [d.p for d in modules]
    for d in modules:
        d.p = p
    try:
        yield len(modules)
    finally:
        for d, rate in zip(modules, saved, strict=True):
            d.p = rate
