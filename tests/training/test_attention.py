"""The trainers' attention-dropout switch: which modules it touches, and that it restores them."""

from __future__ import annotations

import pytest
import torch

from rag_hier.training._attention import attention_dropout


def test_attention_dropout_is_set_inside_the_block_and_restored(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(tiny_model_path, device="cpu")
    rates = {n: m.p for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)}
    with attention_dropout(model, 0.0) as changed:
        now = {n: m.p for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)}
        touched = {n for n in now if now[n] != rates[n]}
        assert changed >= 1 and touched and all(".attention.self." in f"{n}." for n in touched)
        assert all(now[n] == 0.0 for n in touched)
        assert any(now[n] > 0 for n in now if n not in touched)  # hidden-state dropout stays (SimCSE needs it)
    assert {n: m.p for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)} == rates
    with attention_dropout(model, None) as changed:
        assert changed == 0
    with pytest.raises(ValueError, match="attention dropout"), attention_dropout(model, 1.0):
        pass
