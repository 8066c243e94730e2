"""Configurations of the Tied-Atomic and DSI-atomic trainers (no NumPy or torch: the CLI's parser reads them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from rag_hier.training.config import TrainingConfig, shared_field, train_field

__all__ = ["DSIAtomicConfig", "TiedAtomicConfig"]

_POSITIVE: dict[str, Any] = {"above": 0, "below": math.inf, "allowed": "a positive number"}
"""A finite number above 0 (the learning rate, the scale)."""


@dataclass(frozen=True)
class _Common(TrainingConfig):
    """The fields both trainers share (documented on :class:`TiedAtomicConfig`)."""

    base_model: str | None = train_field(
        None,
        help="encoder-decoder to start from: t5-small, t5-base, google/flan-t5-base, facebook/bart-base, a "
        "directory (default: warm-start from --warm-start-encoder)",
    )
    warm_start_encoder: str = train_field(
        "sentence-transformers/all-MiniLM-L6-v2",
        help="without --base-model: the BERT-style encoder the encoder-decoder is built from (offline)",
    )
    warm_start_cross_attention: Literal["random", "self_attention"] = train_field(
        "self_attention",
        help="without --base-model: start the cross-attention random or as a copy of each layer's self-attention",
    )
    max_seq_length: int | None = shared_field("max_seq_length", 128, help="tokens kept", minimum=1)
    batch_size: int = shared_field("batch_size", 32, help="queries per step")
    learning_rate: float = shared_field("learning_rate", 1e-4, **_POSITIVE)
    weight_decay: float = shared_field("weight_decay", 0.01)
    max_steps: int | None = shared_field("max_steps", None, help="optimizer steps in total (overrides --epochs)")
    max_minutes: float | None = shared_field("max_minutes", None, below=math.inf, allowed="a positive number or None")
    max_passage_words: int = train_field(
        0, help="how documents are cut into training items (0: paragraphs and BEIR documents whole)", minimum=0
    )
    gradient_accumulation_steps: int = shared_field("gradient_accumulation_steps", 1)
    fp16: bool = shared_field("fp16", False)
    bf16: bool = shared_field("bf16", False)
    logging_steps: int = shared_field("logging_steps", 10)
    device: str | None = shared_field("device", None)
    show_progress_bar: bool = shared_field("show_progress_bar", False)


@dataclass(frozen=True)
class TiedAtomicConfig(_Common):
    """How :class:`TiedAtomicTrainer` trains.

    Args:
        base_model: An encoder-decoder to start from: a Hugging Face name or directory (``t5-small``,
            ``t5-base``: the paper's models; ``google/flan-t5-base``, ``facebook/bart-base``, ...) or a
            Tied-Atomic sentence-transformers directory. ``None``: build one from ``warm_start_encoder``
            (:func:`~rag_hier.encoders.encdec.build_warm_started_encoder_decoder`).
        warm_start_encoder: The BERT-style encoder of that warm start (default: the offline MiniLM).
        warm_start_cross_attention: How the warm start's cross-attention begins: ``"self_attention"``
            (default; copied from each layer's self-attention) or ``"random"`` (as
            ``from_encoder_decoder_pretrained`` leaves it). Chosen on a SciFact dev split: after 44 steps
            dev nDCG@10 0.682 vs 0.538 (docs/tied_atomic.md).
        max_seq_length: Input tokens kept (queries and documents); ``None``: the model's limit.
        batch_size: Queries per step and process (each with its positive and BM25 negatives).
        learning_rate: Peak learning rate (AdamW, linear warm-up and decay).
        warmup_ratio: Fraction of steps for warm-up.
        weight_decay: AdamW weight decay.
        epochs: Passes over the training pairs (when ``max_steps`` is ``None``). Default 3, chosen on a SciFact
            dev split (25 % of the training queries held out; MiniLM itself 0.6791 nDCG@10 there): 1 epoch
            0.6448, 2 epochs 0.6821, 3 epochs 0.7270 (docs/tied_atomic.md).
        max_steps: Optimizer steps in total (overrides ``epochs``).
        max_minutes: Stop training after this many minutes (after the current step; the model is saved).
        max_passage_words: How documents are cut into training items, as the store will cut them (0:
            paragraphs whole, BEIR documents whole).
        scale: Inverse temperature on the raw dot products (paper: none stated, i.e. 1).
        bm25_negatives: BM25 negatives per query.
        bm25_depth: Negatives are drawn uniformly from the BM25 top-``bm25_depth`` (relevant ones excluded);
            ``bm25_depth == bm25_negatives`` takes the top ones.
        bm25_k1: BM25 ``k1`` of the retrieval that draws the negatives (default 10; bm25s' default is 1.5). The
            paper gives k1 = 10, b = 0.8 for its BM25 *baseline* (tuned on NQ320k) and does not state the settings
            of the BM25 that drew its training negatives: using them here is this implementation's choice.
        bm25_b: BM25 ``b`` of that retrieval (default 0.8; see ``bm25_k1``).
        cross_encoder: A sentence-transformers CrossEncoder (name or path): train with MarginMSE against its
            score margins instead of InfoNCE.
        gather_across_devices: Under torch.distributed, use every process's embeddings as in-batch negatives.
        gradient_accumulation_steps: Micro-batches per optimizer step (each has its own in-batch negatives).
        fp16: float16 mixed precision (GPU). bf16: bfloat16 mixed precision.
        logging_steps: Log the loss every this many steps.
        device: ``"cpu"``, ``"cuda"``, ...; ``None``: CUDA when available.
        seed: Seed of negative sampling, warm start and training.
        show_progress_bar: Progress bars.

    """

    epochs: int = shared_field("epochs", 3, help="passes over the training pairs")
    scale: float = train_field(1.0, help="InfoNCE inverse temperature on dot products", **_POSITIVE)
    bm25_negatives: int = train_field(1, help="per query", minimum=0)
    bm25_depth: int = train_field(10, help="draw BM25 negatives from this top-k")  # >= bm25_negatives: below
    bm25_k1: float = train_field(10.0, help="BM25 k1 for negatives", minimum=0)
    bm25_b: float = train_field(0.8, help="BM25 b for negatives", minimum=0, maximum=1)
    cross_encoder: str | None = train_field(
        None, help="a sentence-transformers CrossEncoder: train with MarginMSE on its score margins instead of InfoNCE"
    )
    gather_across_devices: bool = shared_field("gather_across_devices", True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bm25_depth < max(self.bm25_negatives, 1):
            self._invalid("bm25_depth", ">= bm25_negatives (and >= 1)")
        if self.cross_encoder is not None and self.bm25_negatives < 1:
            raise ValueError("MarginMSE (cross_encoder) needs bm25_negatives >= 1")


@dataclass(frozen=True)
class DSIAtomicConfig(_Common):
    """How :class:`DSIAtomicTrainer` trains the untied DSI-atomic baseline.

    Args:
        objective: ``"seq2seq"`` (default; the paper's DSI baseline): each docid is a new token of the
            encoder-decoder's vocabulary, the target is ``[docid, end-of-sequence]``, teacher forcing,
            cross-entropy over the whole vocabulary (``DSIAtomicSeq2SeqModel``). ``"docid_softmax"``: a free
            ``(n_docids, dim)`` matrix over the Tied-Atomic embedding, cross-entropy over the docids only
            (``DSIAtomicModel``).
        base_model / warm_start_encoder / max_seq_length / batch_size / learning_rate / warmup_ratio /
            weight_decay / epochs / max_steps / max_passage_words / ...: as :class:`TiedAtomicConfig`
            (``epochs`` count passes over the retrieval and indexing examples together; default 1).
        docid_learning_rate: ``"docid_softmax"`` only: learning rate of the free output rows (``None``:
            ``learning_rate``). In ``"seq2seq"`` the docid rows are rows of the vocabulary's embedding matrix and
            share its learning rate.
        index_documents: Train the indexing task (document text → its docid) next to the retrieval task.
        retrieval_repeats: Copies of every (query → docid) example per epoch.
        init_std: ``"docid_softmax"`` only: standard deviation of the random initial rows.
        docid_init: ``"seq2seq"`` only: how the new docid token rows start. ``"random"`` (default): drawn by the
            model's own weight initializer, bias 0 (the docids start apart); ``"mean"``:
            ``resize_token_embeddings``' default for added tokens, every row at the existing rows' mean (every
            docid starts with the same logit). With ``"mean"`` training can collapse the decoder's first state to
            one state for every input and stay at chance; docs/tied_atomic.md ("Where DSI-atomic learns")
            measures both.

    """

    objective: Literal["seq2seq", "docid_softmax"] = train_field(
        "seq2seq", help="seq2seq: docids as new vocabulary tokens (the paper's); docid_softmax: free output rows"
    )
    docid_learning_rate: float | None = train_field(
        None, help="docid_softmax: learning rate of the free output rows (default: the learning rate)", above=0
    )
    index_documents: bool = train_field(True, help="train the indexing task (document text -> docid) too")
    retrieval_repeats: int = train_field(1, help="copies of every (query -> docid) example per epoch", minimum=0)
    init_std: float = train_field(0.02, help="docid_softmax: standard deviation of the initial rows", above=0)
    docid_init: Literal["random", "mean"] = train_field(
        "random", help="seq2seq: new docid rows drawn by the model's initializer, or at the vocabulary's mean"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective == "seq2seq" and self.docid_learning_rate is not None:
            raise ValueError(
                "DSIAtomicConfig.docid_learning_rate applies to objective='docid_softmax' only (seq2seq docid tokens "
                "are rows of the vocabulary's embedding matrix)"
            )
        if self.objective == "docid_softmax" and self.docid_init != "random":
            raise ValueError(
                "DSIAtomicConfig.docid_init applies to objective='seq2seq' only (docid_softmax rows start at "
                "N(0, init_std²))"
            )
