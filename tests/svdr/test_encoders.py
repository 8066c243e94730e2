"""T(x) and E(x): the binarizer and the vocabulary encoder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rag_hier.encoders.binarizer import TokenBinarizer, resolve_backbone_dir, to_sparse_vectors
from rag_hier.encoders.vocab import VocabEncoder
from rag_hier.errors import RagHierError

from .conftest import TEXTS


# ------------------------------------------------------------------------------------------------------
# T(x)
# ------------------------------------------------------------------------------------------------------
def test_binarizer_matches_a_set_oracle_and_drops_specials(tiny_model_path: str) -> None:
    b = TokenBinarizer(tiny_model_path, max_length=None)
    # BERT uncased: ids 0..998 are [PAD], [unusedN], [UNK], [CLS], [SEP], [MASK]; the reference's 29,523 dims
    assert b.vocab_size == 30522 and len(b.kept_ids) == 29523 and b.kept_ids[0] == 999
    tok = b.tokenizer
    m = b.transform([*TEXTS, "", "[CLS] [SEP] [MASK] [PAD]"])
    for i, text in enumerate([*TEXTS, "", "[CLS] [SEP] [MASK] [PAD]"]):
        oracle = {t for t in tok(text, add_special_tokens=True)["input_ids"] if t >= 999}
        assert set(m[i].indices.tolist()) == oracle
        assert (m[i].data == 1).all()
    assert m[len(TEXTS)].nnz == 0 and m[len(TEXTS) + 1].nnz == 0


def test_binarizer_truncates_like_the_encoder(tiny_model_path: str) -> None:
    text = " ".join(f"word{i}" for i in range(200))
    short = TokenBinarizer(tiny_model_path, max_length=8).transform([text])
    ids = TokenBinarizer(tiny_model_path).tokenizer(text, truncation=True, max_length=8)["input_ids"]
    assert set(short.indices.tolist()) == {t for t in ids if t >= 999}
    assert TokenBinarizer(tiny_model_path, max_length=None).transform([text]).nnz > short.nnz
    with pytest.raises(ValueError, match="max_length"):
        TokenBinarizer(tiny_model_path, max_length=1)


def test_sparse_vectors_and_backbone_resolution(tiny_model_path: str, tmp_path: Path) -> None:
    b = TokenBinarizer(tiny_model_path)
    (v,) = b.sparse_vectors(["honey bees"])
    assert v.indices.dtype == np.int32 and v.values.dtype == np.float32 and (np.diff(v.indices) > 0).all()
    assert v.to_dict()["values"] == [1.0] * len(v)
    assert resolve_backbone_dir(tiny_model_path) == tiny_model_path  # ST module at the root
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "modules.json").write_text(json.dumps([{"path": "", "type": "x.Pooling"}]))
    with pytest.raises(RagHierError, match="no Transformer"):
        resolve_backbone_dir(tmp_path / "bad")


def test_fingerprint_ignores_call_settings(tiny_model_path: str) -> None:
    a = TokenBinarizer(tiny_model_path)
    before = a.fingerprint
    a.transform(["x " * 500])  # enables truncation on the backend tokenizer
    b = TokenBinarizer(tiny_model_path, max_length=None)
    b._fingerprint = None
    assert b.fingerprint == before


# ------------------------------------------------------------------------------------------------------
# E(x)
# ------------------------------------------------------------------------------------------------------
def _pooled_dense(encoder: VocabEncoder, texts: list[str], *, mask_padding: bool) -> np.ndarray:
    """Reference E(x) before sparsification, over the kept vocabulary, computed the long way."""
    module = encoder.module
    batch = encoder._tokenize(texts, "document")
    with torch.inference_mode():
        h = module.hidden(batch)
        weight, _ = module.vocab_weight()
        logits = torch.nn.functional.elu(h @ weight[module.kept_ids].T) + 1
        if mask_padding:
            logits = logits.masked_fill(~batch["attention_mask"].bool()[:, :, None], 0)
        return logits.amax(dim=1).numpy()


def test_masked_pooling_makes_vectors_independent_of_batch_padding(vocab_encoder: VocabEncoder) -> None:
    short, long = "honey bees", " ".join(TEXTS)
    alone = vocab_encoder.encode([short])
    batched = vocab_encoder.encode([short, long])
    assert batched[0].nnz == alone.nnz and set(batched[0].indices) == set(alone.indices)
    assert abs(batched[0] - alone).max() < 1e-4
    # the reference's unmasked max-pool would not be: padding positions leak into the short text's vector
    unmasked = _pooled_dense(vocab_encoder, [short, long], mask_padding=False)[0]
    masked = _pooled_dense(vocab_encoder, [short, long], mask_padding=True)[0]
    alone_dense = _pooled_dense(vocab_encoder, [short], mask_padding=False)[0]
    assert np.abs(masked - alone_dense).max() < 1e-4
    assert np.abs(unmasked - alone_dense).max() > 1e-2


def test_top_k_and_lexical_activation_against_the_dense_oracle(tiny_model_path: str) -> None:
    texts = TEXTS[:3]
    full = VocabEncoder(tiny_model_path, top_k=None, device="cpu")
    dense = full.encode(texts).toarray()
    assert (dense[:, :999] == 0).all() and (dense[:, 999:] > 0).all()  # every kept dim, nothing else
    binar = full.token_vectors(texts)
    for k, lexical in ((50, True), (50, False), (0, True)):
        enc = VocabEncoder(tiny_model_path, top_k=k, activate_lexical=lexical, device="cpu")
        out = enc.encode(texts)
        for i in range(len(texts)):
            top = set(np.argsort(-dense[i], kind="stable")[:k].tolist()) if k else set()
            own = set(binar[i].indices.tolist()) if lexical else set()
            assert set(out[i].indices.tolist()) == top | own
            np.testing.assert_allclose(out[i].data, dense[i, out[i].indices], rtol=1e-5)
    with pytest.raises(ValueError, match="activate_lexical"):
        VocabEncoder(tiny_model_path, top_k=0, activate_lexical=False)


def test_chunking_and_training_path_give_the_same_vectors(vocab_encoder: VocabEncoder, tiny_model_path: str) -> None:
    texts = [*TEXTS[:4], "", "x " * 300]
    reference = vocab_encoder.encode(texts)
    small = VocabEncoder(tiny_model_path, device="cpu", chunk_elements=3 * 29523)
    assert abs(small.encode(texts) - reference).max() < 1e-5
    train = vocab_encoder.encode_for_training(texts, "document")
    assert abs(vocab_encoder.kept_to_csr(train.values.detach().numpy()) - reference).max() < 1e-5
    assert train.values.requires_grad
    lex = vocab_encoder.kept_to_csr(train.lexical.numpy())
    assert (lex != vocab_encoder.token_vectors(texts)).nnz == 0


def test_bfloat16_selection_keeps_exact_values(tiny_model_path: str, vocab_encoder: VocabEncoder) -> None:
    fast = VocabEncoder(tiny_model_path, device="cpu", selection_precision="bfloat16")
    a, b = vocab_encoder.encode(TEXTS[:3]), fast.encode(TEXTS[:3])
    for i in range(3):
        common = np.intersect1d(a[i].indices, b[i].indices)
        assert len(common) > 0.9 * a[i].nnz
        np.testing.assert_allclose(a[i, common].toarray(), b[i, common].toarray(), rtol=1e-5)
    assert fast.fingerprint != vocab_encoder.fingerprint


def test_sparse_vector_api(vocab_encoder: VocabEncoder) -> None:
    q = vocab_encoder.query_vector("what pulls the tides?")
    d = vocab_encoder.document_vector(TEXTS[0])
    assert len(q) >= 768 and (np.diff(q.indices) > 0).all() and (q.values > 0).all()
    assert set(vocab_encoder.token_vectors(["what pulls the tides?"], "query").indices) <= set(q.indices)
    m = vocab_encoder.encode_queries(["what pulls the tides?"])
    assert to_sparse_vectors(m)[0].indices.tolist() == q.indices.tolist()
    assert len(d) >= 768
    with pytest.raises(TypeError):
        vocab_encoder.encode("a string")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        vocab_encoder.encode(["x"], "passage")  # type: ignore[arg-type]
    assert vocab_encoder.encode([]).shape == (0, 30522)


def test_save_and_load_roundtrip_without_pickle(vocab_encoder: VocabEncoder, tmp_path: Path) -> None:
    out = vocab_encoder.save(tmp_path / "enc")
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {
        "vocab_encoder.json",
        "vocab_head.safetensors",
        "backbone/config.json",
        "backbone/model.safetensors",
    } <= files
    assert not any(f.endswith((".bin", ".pt", ".pkl", ".pickle")) for f in files)
    again = VocabEncoder(out, device="cpu")
    assert again.config.projection == "tied-embeddings" and again.top_k == 768
    assert again.fingerprint == vocab_encoder.fingerprint
    assert abs(again.encode(TEXTS[:2]) - vocab_encoder.encode(TEXTS[:2])).max() == 0
    assert VocabEncoder(out, top_k=10).top_k == 10  # explicit settings override the saved ones
    (out / "vocab_encoder.json").write_text('{"format": "other"}')
    with pytest.raises(RagHierError, match="not a rag-hier"):
        VocabEncoder(out)


def test_mlm_head_is_used_when_present(tmp_path: Path, tiny_model_path: str) -> None:
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    mlm_dir = tmp_path / "mlm"
    BertForMaskedLM(config).save_pretrained(mlm_dir)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(mlm_dir)
    auto = VocabEncoder(mlm_dir, device="cpu")
    assert auto.config.projection == "mlm-head"
    assert auto.module.norm is None and auto.module.vocab_weight()[1] is not None
    out = auto.encode(TEXTS[:2])
    assert out.shape == (2, 30522) and out.nnz >= 2 * 768
    train = auto.encode_for_training(TEXTS[:2], "document")
    assert abs(auto.kept_to_csr(train.values.detach().numpy()) - out).max() < 1e-5
    saved = VocabEncoder(auto.save(tmp_path / "saved"), device="cpu")
    assert saved.config.projection == "mlm-head" and abs(saved.encode(TEXTS[:2]) - out).max() == 0
    tied = VocabEncoder(mlm_dir, projection="tied-embeddings", device="cpu")
    assert tied.config.projection == "tied-embeddings"
    with pytest.raises(RagHierError, match="no MLM head"):
        VocabEncoder(tiny_model_path, projection="mlm-head").module  # noqa: B018


@pytest.mark.real_model
def test_real_minilm_uses_tied_embeddings(real_model_path: str) -> None:
    enc = VocabEncoder(real_model_path, device="cpu")
    assert enc.config.projection == "tied-embeddings"
    q = enc.encode_queries(["what causes ocean tides?", "how do bees make honey?"])
    d = enc.encode_documents(["The moon's gravity pulls the oceans and causes tides.", "Bees make honey from nectar."])
    scores = (q @ d.T).toarray()
    assert scores[0, 0] > scores[0, 1] and scores[1, 1] > scores[1, 0]
    alone = enc.encode_queries(["what causes ocean tides?"])
    assert abs(alone[0] - q[0]).max() < 1e-3


def test_the_light_tokenizer_loads_the_same_tokenization_as_the_auto_class(tiny_model_path: str) -> None:
    import gzip

    from transformers import AutoTokenizer

    light, auto = TokenBinarizer(tiny_model_path), TokenBinarizer(tiny_model_path, light=False)
    assert type(auto.tokenizer) is type(AutoTokenizer.from_pretrained(resolve_backbone_dir(tiny_model_path)))
    assert type(light.tokenizer) is not type(auto.tokenizer)  # tokenizer.json run by `tokenizers` alone
    assert sorted(light.tokenizer.all_special_ids) == sorted(auto.tokenizer.all_special_ids)
    lt, at = light.tokenizer, auto.tokenizer  # the id/token conversions agree too
    words = ["honey", "the", "zzqqxx"]
    assert lt.convert_tokens_to_ids(words) == at.convert_tokens_to_ids(words)
    assert lt.convert_tokens_to_ids("honey") == at.convert_tokens_to_ids("honey")
    assert lt.convert_ids_to_tokens([101, 2000, 102]) == at.convert_ids_to_tokens([101, 2000, 102])
    ids = at("Bees store honey.")["input_ids"]
    assert lt.decode(ids, skip_special_tokens=True) == at.decode(ids, skip_special_tokens=True)
    assert light.fingerprint == auto.fingerprint
    assert np.array_equal(light.dropped_ids, auto.dropped_ids) and light.vocab_size == auto.vocab_size
    texts = [*TEXTS, "UPPER case, accents: café naïve; numbers 3.14 and [brackets]", "x " * 400]
    data = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact" / "corpus.jsonl.gz"
    if data.exists():  # real abstracts when the data is there
        with gzip.open(data, "rt", encoding="utf-8") as fh:
            texts += [json.loads(next(fh))["text"] for _ in range(200)]
    assert light.input_ids(texts) == auto.input_ids(texts)
    a, b = light.transform(texts), auto.transform(texts)
    assert a.has_sorted_indices and (a != b).nnz == 0 and set(np.unique(a.data)) == {1.0}


def test_a_tokenizer_config_that_disagrees_with_its_file_loads_the_ordinary_way(
    tiny_model_path: str, tmp_path: Path
) -> None:
    import shutil

    from rag_hier.encoders.binarizer import _light_tokenizer

    folder = Path(resolve_backbone_dir(tiny_model_path))
    assert _light_tokenizer(str(folder)) is not None
    copy = tmp_path / "tok"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    assert _light_tokenizer(str(copy)) is None  # the file lowercases; the config says not to
    (copy / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "RobertaTokenizer"}))
    assert _light_tokenizer(str(copy)) is None  # not a BERT-family class: the auto class decides


def test_a_token_index_built_with_the_auto_class_tokenizer_still_opens(
    tiny_model_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_hier.encoders import binarizer as module
    from rag_hier.errors import StoreCorruptedError
    from rag_hier.index.token import TokenIndex

    real = module._tokenizer_fingerprint

    def by_loader(tokenizer, kept):  # make the two loaders' fingerprints differ, as they could for some tokenizer
        return ("light-" if isinstance(tokenizer, module._TokenizerFile) else "auto-") + real(tokenizer, kept)

    monkeypatch.setattr(module, "_tokenizer_fingerprint", by_loader)
    auto_fp = TokenBinarizer(tiny_model_path, light=False).fingerprint
    index = TokenIndex(tiny_model_path, fingerprint=auto_fp)
    assert index.binarizer.fingerprint == auto_fp  # retried with the auto class, which matches
    with pytest.raises(StoreCorruptedError, match="another tokenizer"):
        TokenIndex(tiny_model_path, fingerprint="0" * 64).binarizer  # noqa: B018
