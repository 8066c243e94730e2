"""DSI-atomic as the paper's baseline: docid tokens in a seq2seq vocabulary, teacher forcing, whole-vocabulary CE."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rag_hier.errors import RagHierError
from rag_hier.retrieval.dsi_seq2seq import DSIAtomicSeq2SeqModel, seq2seq_docid_loss
from rag_hier.retrieval.generative import DSIAtomicModel, UnknownDocidError
from rag_hier.testing import SYNTHETIC_WORDS as WORDS
from rag_hier.training.tied_atomic import DSIAtomicConfig, DSIAtomicTrainer

# eight documents of three words each, no word shared
TOY = {f"d{i}": " ".join(WORDS[3 * i : 3 * i + 3]) for i in range(8)}
TEXTS = ["apple river", "city of banana", "a forest"]


@pytest.fixture(params=["t5", "encdec"])
def base(request: pytest.FixtureRequest, tiny_t5_path: str, tiny_encdec_path: str) -> str:
    """The tiny random T5 (v1.0) and the encoder-decoder warm-started from the tiny random BERT."""
    return tiny_t5_path if request.param == "t5" else tiny_encdec_path


@pytest.fixture()
def one_thread():
    """Tiny models run many small kernels: one torch thread avoids contention on a shared host."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(base: str, docids: list[str], docid_init: str = "random") -> DSIAtomicSeq2SeqModel:
    dsi = DSIAtomicSeq2SeqModel.from_pretrained(
        base,
        docids,
        max_seq_length=32,
        device="cpu",
        seed=0,
        docid_init=docid_init,  # type: ignore[arg-type]
    )
    dsi.model.eval()  # no dropout: the losses below must agree exactly
    return dsi


def test_the_loss_is_transformers_seq2seq_loss_with_docid_and_eos_labels(base):
    dsi = _model(base, ["a", "b", "c", "d", "e"])
    vocab = dsi.first_docid_token + 5
    assert dsi.model.get_output_embeddings().weight.shape[0] == vocab
    docids = ["c", "a", "e"]
    tokens = [dsi.first_docid_token + 2, dsi.first_docid_token, dsi.first_docid_token + 4]
    batch = dsi.batch(TEXTS, docids)
    # target [docid, eos]; the decoder reads it shifted right, after the start token (teacher forcing)
    assert batch["labels"].tolist() == [[t, dsi.eos_token_id] for t in tokens]
    assert batch["decoder_input_ids"].tolist() == [[dsi.decoder_start_token_id, t] for t in tokens]
    labels = batch.pop("labels")
    with torch.no_grad():
        ours = seq2seq_docid_loss(dsi.model(**batch), labels)
        hf = dsi.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
        # by hand: log-softmax over the whole vocabulary (text tokens and docids) at both target positions
        logits = dsi.model(**batch).logits
        assert logits.shape == (3, 2, vocab)
        logp = F.log_softmax(logits.float(), dim=-1)
        by_hand = -torch.stack([logp[i, 0, t] + logp[i, 1, dsi.eos_token_id] for i, t in enumerate(tokens)]).sum() / 6
    assert float(ours) == pytest.approx(float(hf), rel=1e-5)
    assert float(ours) == pytest.approx(float(by_hand), rel=1e-5)
    per_token = dsi.sequence_losses(TEXTS, docids)
    assert per_token.shape == (3, 2) and float(per_token.mean()) == pytest.approx(float(ours), rel=1e-5)
    # an accumulated batch divides by all its target tokens
    assert float(seq2seq_docid_loss({"logits": logits}, labels, num_items_in_batch=12)) == pytest.approx(
        float(ours) / 2, rel=1e-5
    )
    # with docid_init="mean" the new docid rows start at the vocabulary's mean: every docid has the same logit
    assert float(np.ptp(_model(base, ["a", "b", "c", "d", "e"], "mean").logits(TEXTS), axis=1).max()) < 1e-3
    # retrieval: one decoding step from the start token, the docid tokens' logits
    with torch.no_grad():
        start = torch.full((3, 1), dsi.decoder_start_token_id)
        first = dsi.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=start)
    np.testing.assert_allclose(dsi.logits(TEXTS), first.logits[:, 0, -5:].numpy(), rtol=1e-5, atol=1e-5)


def test_t5_v1_0_logits_read_the_scaled_decoder_state(tiny_t5_path):
    dsi = _model(tiny_t5_path, ["a", "b"])
    assert dsi.model.config.scale_decoder_outputs  # the tiny T5 is v1.0 style
    with torch.no_grad():
        enc = dsi._encode(TEXTS)
        start = torch.zeros((3, 1), dtype=torch.long)
        out = dsi.model(**enc, decoder_input_ids=start, output_hidden_states=True)
    h = out.decoder_hidden_states[-1][:, 0].numpy() * 32**-0.5
    np.testing.assert_allclose(dsi.head_inputs(TEXTS), h, rtol=1e-5, atol=1e-6)
    rows = dsi.model.get_output_embeddings().weight.detach().numpy()[-2:]
    np.testing.assert_allclose(dsi.logits(TEXTS), h @ rows.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("which", "steps", "lr"), [("encdec", 150, 5e-3), ("t5", 800, 1e-2)])
def test_training_memorises_the_documents(tmp_path, tiny_t5_path, tiny_encdec_path, which, steps, lr, one_thread):
    """The indexing task alone: after training, each document's own text generates its docid first."""
    base = tiny_t5_path if which == "t5" else tiny_encdec_path
    docids, texts = list(TOY), list(TOY.values())
    untrained = _model(base, docids)
    assert untrained.generate(texts, k=1) != [[d] for d in docids]
    cfg = DSIAtomicConfig(
        base_model=base,
        retrieval_repeats=0,  # indexing only
        batch_size=8,
        max_steps=steps,
        learning_rate=lr,
        warmup_ratio=0.0,
        max_seq_length=16,
        device="cpu",
        logging_steps=10,
    )
    trainer = DSIAtomicTrainer(cfg)
    result = trainer.train(TOY, tmp_path / "dsi", queries={}, qrels={})
    model = trainer.model
    assert isinstance(model, DSIAtomicSeq2SeqModel) and result.rows == 8 and result.steps == steps
    assert model.generate(texts, k=1) == [[d] for d in docids]
    first, last = result.loss_log[0][1], result.loss_log[-1][1]
    assert last < 0.5 * first
    report = json.loads((tmp_path / "dsi" / "dsi_atomic_training.json").read_text())
    assert report["config"]["objective"] == "seq2seq" and report["loss_log"][-1][1] == last


def test_retrieval_and_indexing_examples_are_mixed(tmp_path, tiny_t5_path, corpus, judged):
    queries, qrels = judged
    cfg = DSIAtomicConfig(base_model=tiny_t5_path, max_steps=2, batch_size=4, device="cpu", retrieval_repeats=2)
    trainer = DSIAtomicTrainer(cfg)
    result = trainer.train(
        corpus, tmp_path / "dsi", queries=queries, qrels=qrels, eval_queries=queries, eval_qrels=qrels
    )
    model = trainer.model
    assert result.rows == 2 * 16 + 30 and result.steps == 2 and set(result.metrics) >= {"ndcg@10", "recall@100"}
    texts, labels = DSIAtomicTrainer(cfg).examples(
        *_items_and_pairs(corpus, queries, qrels),
    )
    assert sorted(texts) == sorted([queries[f"q{i}"] for i in range(16)] * 2 + list(corpus.values()))
    assert all(0 <= i < 30 for i in labels)
    assert model.docids == list(corpus)


def _items_and_pairs(corpus, queries, qrels):
    from rag_hier.training.corpus import as_training_corpus
    from rag_hier.training.hce.data import resolve_pairs

    items = as_training_corpus(corpus, 0)
    return items, resolve_pairs(items, queries, qrels)


def test_save_load_round_trip_and_new_docids(tmp_path, base):
    dsi = _model(base, ["a", "b", "c"])
    logits = dsi.logits(TEXTS)
    assert logits.shape == (3, 3)
    path = dsi.save(tmp_path / "dsi")
    meta = json.loads((path / "dsi_atomic.json").read_text())
    assert meta["objective"] == "seq2seq" and meta["docids"] == ["a", "b", "c"]
    assert meta["first_docid_token"] + 3 == meta["vocab_size"]
    assert (path / "model.safetensors").is_file()
    assert not any(p.suffix in (".bin", ".pkl", ".pt", ".pth") for p in path.iterdir())
    again = DSIAtomicSeq2SeqModel.load(path, device="cpu")
    np.testing.assert_allclose(again.logits(TEXTS), logits, rtol=1e-5, atol=1e-5)
    assert again.generate(TEXTS[0], k=2) == dsi.generate(TEXTS[0], k=2)
    again.add_docids(["d"])  # a new random token: untrained
    again.add_docids(["e"], init="tied", texts=[TEXTS[1]])  # row = the head's input for the text, bias 0
    assert again.docids == ["a", "b", "c", "d", "e"] and again.logits(TEXTS).shape == (3, 5)
    v = again.head_inputs([TEXTS[1]])
    assert again.score([TEXTS[1]], ["e"])[0, 0] == pytest.approx(float(np.sum(v**2)), rel=1e-4)
    np.testing.assert_allclose(again.logits(TEXTS)[:, :3], logits, rtol=1e-5, atol=1e-5)  # old rows unchanged
    with pytest.raises(UnknownDocidError):
        again.score(TEXTS, ["zz"])
    with pytest.raises(RagHierError, match="already present"):
        again.add_docids(["a"])
    with pytest.raises(RagHierError, match="appears twice"):
        DSIAtomicSeq2SeqModel.from_pretrained(base, ["a", "a"], device="cpu")


def test_load_checks_what_it_reads(tmp_path, tiny_t5_path):
    path = _model(tiny_t5_path, ["a", "b"]).save(tmp_path / "dsi")
    meta_file = path / "dsi_atomic.json"
    meta = json.loads(meta_file.read_text())

    def load_with(**change):
        meta_file.write_text(json.dumps({**meta, **change}))
        return DSIAtomicSeq2SeqModel.load(path)

    with pytest.raises(RagHierError, match=r"config\.json: the model's LM head has \d+ rows.*3 docids"):
        load_with(docids=["a", "b", "c"], num_docids=3)
    with pytest.raises(RagHierError, match="field 'docids'"):
        load_with(docids=["a", "b"], num_docids=3)
    with pytest.raises(RagHierError, match="field 'docids' repeats"):
        load_with(docids=["a", "a"])
    with pytest.raises(RagHierError, match="field 'eos_token_id' must be an integer"):
        load_with(eos_token_id="102")
    with pytest.raises(RagHierError, match="field 'eos_token_id' is 7"):
        load_with(eos_token_id=7)
    with pytest.raises(RagHierError, match="field 'format_version' is 9"):
        load_with(format_version=9)
    with pytest.raises(RagHierError, match=r"field 'objective' is 'docid_softmax'.*DSIAtomicModel\.load"):
        load_with(objective="docid_softmax")
    with pytest.raises(RagHierError, match="field 'format'"):
        load_with(format="something")
    meta_file.write_text("{oops")
    with pytest.raises(RagHierError, match=r"dsi_atomic\.json: not valid JSON"):
        DSIAtomicSeq2SeqModel.load(path)
    meta_file.write_text(json.dumps(meta))
    # the other DSI model refuses this directory, naming the field and the reader
    with pytest.raises(RagHierError, match=r"field 'objective' is 'seq2seq'.*DSIAtomicSeq2SeqModel\.load"):
        DSIAtomicModel.load(path)
    (path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(RagHierError, match="cannot load model"):
        DSIAtomicSeq2SeqModel.load(path)
    (path / "model.safetensors").unlink()
    with pytest.raises(RagHierError, match=r"model\.safetensors is missing"):
        DSIAtomicSeq2SeqModel.load(path)
    meta_file.unlink()
    with pytest.raises(RagHierError, match=r"dsi_atomic\.json is missing"):
        DSIAtomicSeq2SeqModel.load(path)


def test_configuration_checks():
    assert DSIAtomicConfig().objective == "seq2seq"
    with pytest.raises(ValueError, match="objective"):
        DSIAtomicConfig(objective="classifier")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="docid_learning_rate applies to objective='docid_softmax'"):
        DSIAtomicConfig(docid_learning_rate=1e-2)
    DSIAtomicConfig(objective="docid_softmax", docid_learning_rate=1e-2)


def test_random_docid_rows_start_apart_and_are_seeded(base):
    """``docid_init="random"`` (default): the model's initializer draws each new row (seeded), bias 0; ``"mean"``."""
    docids = ["a", "b", "c", "d", "e"]
    mean = DSIAtomicSeq2SeqModel.from_pretrained(base, docids, device="cpu", seed=0, docid_init="mean")
    first = DSIAtomicSeq2SeqModel.from_pretrained(base, docids, device="cpu", seed=0)
    again = DSIAtomicSeq2SeqModel.from_pretrained(base, docids, device="cpu", seed=0, docid_init="random")
    other = DSIAtomicSeq2SeqModel.from_pretrained(base, docids, device="cpu", seed=1, docid_init="random")

    def rows(dsi: DSIAtomicSeq2SeqModel) -> torch.Tensor:
        return dsi.model.get_output_embeddings().weight.detach()[dsi.first_docid_token :]

    text_rows = mean.model.get_output_embeddings().weight.detach()[: mean.first_docid_token]
    assert float((rows(mean) - rows(mean)[0]).abs().max()) < 1e-3 * float(text_rows.abs().mean())
    assert float(torch.cdist(rows(first), rows(first)).sum()) > 0.5 * 20 * float(rows(first).norm(dim=1).mean())
    torch.testing.assert_close(rows(first), rows(again))
    assert not torch.equal(rows(first), rows(other))
    # the text vocabulary is untouched, and the tied input embeddings hold the same rows
    torch.testing.assert_close(
        first.model.get_output_embeddings().weight.detach()[: first.first_docid_token], text_rows
    )
    head = first.model.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        assert float(head.bias.detach()[first.first_docid_token :].abs().max()) == 0.0
    # every docid no longer starts with the same logit
    assert float(np.ptp(first.logits(TEXTS), axis=1).min()) > 1e-4
    with pytest.raises(ValueError, match="docid_init must be one of random, mean"):
        DSIAtomicSeq2SeqModel.from_pretrained(base, docids, device="cpu", docid_init="zeros")  # type: ignore[arg-type]


def test_docid_init_is_a_seq2seq_setting():
    assert DSIAtomicConfig().docid_init == "random"
    DSIAtomicConfig(docid_init="mean")
    DSIAtomicConfig(objective="docid_softmax")
    with pytest.raises(ValueError, match="docid_init"):
        DSIAtomicConfig(docid_init="zeros")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="docid_init applies to objective='seq2seq'"):
        DSIAtomicConfig(objective="docid_softmax", docid_init="mean")
