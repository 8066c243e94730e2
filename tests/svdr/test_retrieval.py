"""SvdrRetriever: every mode against a brute-force numpy oracle; the β+rerank cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_hier import Document, HierStore, Passage
from rag_hier.encoders.vocab import VocabEncoder
from rag_hier.errors import StoreError
from rag_hier.retrieval.svdr import SvdrRetriever, encode_missing_vectors
from rag_hier.store.extensions.svdr_vectors import SparseVectorExtension
from rag_hier.store.extensions.token_index import TokenIndexExtension

QUERIES = ["honey bees and blossom", "what carves valleys?", "the moon and the tides", "printing books"]


def _corpus(store: HierStore) -> tuple[np.ndarray, list[str]]:
    rowids = store.passage_rowids()
    recs = store.records(rowids.tolist())
    texts = [Passage(r["id"], r["doc_id"], 0, r["content"], r["title_path"]).embedding_text for r in recs.values()]
    return np.asarray(list(recs), dtype=np.int64), texts


def _ranking(scores: np.ndarray, ids: np.ndarray, k: int) -> list[list[int]]:
    return [[int(ids[j]) for j in sorted(range(len(ids)), key=lambda j: (-row[j], ids[j]))[:k]] for row in scores]


def _hit_rowids(store: HierStore, hits: list[list]) -> list[list[int]]:
    by_pid = {r["id"]: rid for rid, r in store.records(store.passage_rowids().tolist()).items()}
    return [[by_pid[h.passage_id] for h in row] for row in hits]


def test_modes_match_brute_force_oracles(token_store: HierStore, vocab_encoder: VocabEncoder) -> None:
    ids, texts = _corpus(token_store)
    eq = vocab_encoder.encode_queries(QUERIES).toarray()
    tq = vocab_encoder.token_vectors(QUERIES, "query").toarray()
    ed = vocab_encoder.encode_documents(texts).toarray()
    td = vocab_encoder.token_vectors(texts, "document").toarray()
    k = 5
    expected = {
        "full": eq @ ed.T,
        "alpha": tq @ ed.T,
        "beta": eq @ td.T,
    }
    for mode, scores in expected.items():
        retriever = SvdrRetriever(token_store, mode, encoder=vocab_encoder)  # type: ignore[arg-type]
        hits = retriever.search(QUERIES, top_k=k)
        assert _hit_rowids(token_store, hits) == _ranking(scores, ids, k), mode
        np.testing.assert_allclose([h.score for h in hits[0]], np.sort(scores[0])[::-1][:k], rtol=1e-4)
    # β+rerank(m): the β top m re-ordered by <E(q), E(d)>, the rest of β after them
    beta = _ranking(expected["beta"], ids, len(ids))
    full = expected["full"]
    pos = {int(r): j for j, r in enumerate(ids)}
    for m in (1, 3, len(ids)):
        retriever = SvdrRetriever(token_store, "beta-rerank", encoder=vocab_encoder, rerank_m=m)
        hits = retriever.search(QUERIES, top_k=k)
        for q, row in enumerate(_hit_rowids(token_store, hits)):
            head = sorted(beta[q][:m], key=lambda r: (-full[q, pos[r]], r))
            assert row == (head + beta[q][m:])[:k]
            scores = [h.score for h in hits[q]]
            assert scores == sorted(scores, reverse=True)  # tail scores shifted below the re-ranked ones
            assert set(hits[q][0].scores) == {"beta", "rerank"}


def test_lexical_and_filters_and_doc_aggregation(token_store: HierStore) -> None:
    lexical = SvdrRetriever(token_store, "lexical")
    (hit,) = lexical.search("honeybees nectar", top_k=1)
    assert hit.doc_id == "d1" and lexical._encoder is None  # no model loaded at all
    hits = lexical.search("bees", top_k=10, filters={"field": "meta.group", "operator": "==", "value": "even"})
    assert hits and all(h.meta["group"] == "even" for h in hits)
    assert lexical.search("bees", top_k=3, filters={"field": "meta.n", "operator": ">", "value": 99}) == []
    docs = lexical.search("bees", top_k=3, aggregate="doc")
    assert len({h.doc_id for h in docs}) == len(docs) == 3


def test_beta_rerank_cache_fills_in_and_persists(token_store: HierStore, vocab_encoder: VocabEncoder) -> None:
    assert token_store.extension("svdr-vectors") is None
    retriever = SvdrRetriever(token_store, "beta-rerank", encoder=vocab_encoder, rerank_m=3)
    first = retriever.search(QUERIES[:1], top_k=3)
    ext = token_store.extension("svdr-vectors")
    assert isinstance(ext, SparseVectorExtension) and len(ext.index) == 3
    assert ext.fingerprint == vocab_encoder.fingerprint
    retriever.search(QUERIES, top_k=3)
    cached = set(ext.index.ids().tolist())
    assert len(cached) > 3
    path = token_store.path
    token_store.close()
    again = HierStore.open(path)
    ext2 = again.extension("svdr-vectors")
    assert isinstance(ext2, SparseVectorExtension) and set(ext2.index.ids().tolist()) == cached
    # cached vectors give the same results as fresh ones; deleting passages drops their vectors
    assert SvdrRetriever(again, "beta-rerank", encoder=vocab_encoder, rerank_m=3).search(QUERIES[:1], top_k=3) == first
    again.delete_documents(["d1"])
    assert len(ext2.index) == len(cached) - (1 if 2 in cached else 0)
    # full search encodes the rest, after which alpha needs no model
    encode_missing_vectors(again, vocab_encoder)
    assert len(again.extension("svdr-vectors").index) == again.count_passages()
    alpha = SvdrRetriever(again, "alpha")
    assert alpha.search("honey", top_k=2) and alpha._encoder is None
    again.close()


def test_read_only_store_caches_in_memory_only(token_store: HierStore, vocab_encoder: VocabEncoder) -> None:
    path = token_store.path
    token_store.close()
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    ro = HierStore.open(path, read_only=True)
    retriever = SvdrRetriever(ro, "beta-rerank", encoder=vocab_encoder, rerank_m=4)
    a = retriever.search(QUERIES, top_k=4)
    assert retriever.search(QUERIES, top_k=4) == a
    ids, rows = retriever.take_unsaved()
    assert rows.shape[0] == ids.shape[0] > 0
    ro.close()
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before


def test_full_without_vectors_and_other_encoders(
    token_store: HierStore, vocab_encoder: VocabEncoder, tmp_path: Path
) -> None:
    with pytest.raises(StoreError, match="missing"):
        SvdrRetriever(token_store, "full", encoder=vocab_encoder, encode_missing=False).search("x")
    encode_missing_vectors(token_store, vocab_encoder)
    other = VocabEncoder(vocab_encoder.model_name, top_k=16, device="cpu")
    with pytest.raises(StoreError, match="another encoder"):
        encode_missing_vectors(token_store, other)
    # a different encoder never mixes its vectors with the stored ones (and never overwrites them)
    hits = SvdrRetriever(token_store, "full", encoder=other).search(QUERIES[0], top_k=2)
    assert len(hits) == 2
    assert token_store.extension("svdr-vectors").fingerprint == vocab_encoder.fingerprint
    with pytest.raises(ValueError, match="mode"):
        SvdrRetriever(token_store, "gamma")  # type: ignore[arg-type]


def test_vocabulary_mismatch_is_a_clear_error(tmp_path: Path, tiny_model_path: str) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "alpha", "beta", "gamma"])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    small = tmp_path / "small-vocab"
    PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    ).save_pretrained(small)
    config = BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=1, intermediate_size=32)
    BertModel(config).save_pretrained(small)
    other = VocabEncoder(small, top_k=0, device="cpu")
    assert other.encode(["alpha gamma"]).indices.tolist() == [5, 7]  # a working encoder, just another vocabulary
    store = HierStore.create(tmp_path / "s", model=None)
    store.add_extension(TokenIndexExtension(model=tiny_model_path))
    store.add_documents([Document("a", "A", ("alpha beta",))], encode=False)
    with pytest.raises(StoreError, match="tokenizes differently"):
        SvdrRetriever(store, "beta", encoder=other).search("alpha")
    store.close()
