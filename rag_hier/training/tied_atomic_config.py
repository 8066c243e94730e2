"""Configurations of the Tied-Atomic and DSI-atomic trainers (no torch: the CLI's parser reads their defaults)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DSIAtomicConfig", "TiedAtomicConfig"]


@dataclass(frozen=True)
class _Common:
    base_model: str | None = None
    warm_start_encoder: str = "sentence-transformers/all-MiniLM-L6-v2"
    warm_start_cross_attention: Literal["random", "self_attention"] = "self_attention"
    max_seq_length: int | None = 128
    batch_size: int = 32
    learning_rate: float = 1e-4
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    epochs: int = 1
    max_steps: int | None = None
    max_minutes: float | None = None
    max_passage_words: int = 0
    gradient_accumulation_steps: int = 1
    fp16: bool = False
    bf16: bool = False
    logging_steps: int = 10
    device: str | None = None
    seed: int = 42
    show_progress_bar: bool = False

    def _check_common(self, name: str) -> None:
        for key in ("batch_size", "epochs", "gradient_accumulation_steps", "logging_steps"):
            if getattr(self, key) < 1:
                raise ValueError(f"{name}.{key} must be >= 1, got {getattr(self, key)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"{name}.max_steps must be >= 1 or None, got {self.max_steps}")
        if self.max_minutes is not None and not (self.max_minutes > 0 and math.isfinite(self.max_minutes)):
            raise ValueError(f"{name}.max_minutes must be a positive number or None, got {self.max_minutes}")
        if self.max_seq_length is not None and self.max_seq_length < 1:
            raise ValueError(f"{name}.max_seq_length must be >= 1 or None, got {self.max_seq_length}")
        if not self.learning_rate > 0 or not math.isfinite(self.learning_rate):
            raise ValueError(f"{name}.learning_rate must be a positive number, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"{name}.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.max_passage_words < 0:
            raise ValueError(f"{name}.max_passage_words must be >= 0, got {self.max_passage_words}")
        if self.fp16 and self.bf16:
            raise ValueError(f"{name}: fp16 and bf16 are exclusive")
        if self.warm_start_cross_attention not in ("random", "self_attention"):
            raise ValueError(
                f"{name}.warm_start_cross_attention must be 'random' or 'self_attention', "
                f"got {self.warm_start_cross_attention!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written next to the trained model)."""
        return dataclasses.asdict(self)


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

    epochs: int = 3
    scale: float = 1.0
    bm25_negatives: int = 1
    bm25_depth: int = 10
    bm25_k1: float = 10.0
    bm25_b: float = 0.8
    cross_encoder: str | None = None
    gather_across_devices: bool = True

    def __post_init__(self) -> None:
        self._check_common("TiedAtomicConfig")
        if self.bm25_negatives < 0:
            raise ValueError(f"TiedAtomicConfig.bm25_negatives must be >= 0, got {self.bm25_negatives}")
        if self.bm25_depth < max(self.bm25_negatives, 1):
            raise ValueError(f"TiedAtomicConfig.bm25_depth must be >= bm25_negatives (and >= 1), got {self.bm25_depth}")
        if not self.scale > 0 or not math.isfinite(self.scale):
            raise ValueError(f"TiedAtomicConfig.scale must be a positive number, got {self.scale}")
        if self.bm25_k1 < 0 or not 0 <= self.bm25_b <= 1:
            raise ValueError("TiedAtomicConfig.bm25_k1 must be >= 0 and bm25_b in [0, 1]")
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
        init_std: ``"docid_softmax"`` only: standard deviation of the random initial rows (``"seq2seq"`` starts
            every new token row at the existing rows' mean, ``resize_token_embeddings``' default for added tokens).

    """

    objective: Literal["seq2seq", "docid_softmax"] = "seq2seq"
    docid_learning_rate: float | None = None
    index_documents: bool = True
    retrieval_repeats: int = 1
    init_std: float = 0.02

    def __post_init__(self) -> None:
        self._check_common("DSIAtomicConfig")
        if self.objective not in ("seq2seq", "docid_softmax"):
            raise ValueError(f"DSIAtomicConfig.objective must be 'seq2seq' or 'docid_softmax', got {self.objective!r}")
        if self.objective == "seq2seq" and self.docid_learning_rate is not None:
            raise ValueError(
                "DSIAtomicConfig.docid_learning_rate applies to objective='docid_softmax' only (seq2seq docid tokens "
                "are rows of the vocabulary's embedding matrix)"
            )
        if self.retrieval_repeats < 0:
            raise ValueError(f"DSIAtomicConfig.retrieval_repeats must be >= 0, got {self.retrieval_repeats}")
        if self.docid_learning_rate is not None and not self.docid_learning_rate > 0:
            raise ValueError(f"DSIAtomicConfig.docid_learning_rate must be > 0, got {self.docid_learning_rate}")
        if not self.init_std > 0:
            raise ValueError(f"DSIAtomicConfig.init_std must be > 0, got {self.init_std}")
