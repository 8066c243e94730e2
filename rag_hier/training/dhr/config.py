"""DHR training configuration (importable without NumPy or torch: ``rag-hier train dhr --help`` reads it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from rag_hier.corpus.summary import DEFAULT_ABSTRACT_WORDS
from rag_hier.encoders.identity import DEFAULT_MODEL

__all__ = ["DHRTrainingConfig", "Level"]

Level = Literal["document", "passage"]
_LEVELS: tuple[str, ...] = ("document", "passage")


@dataclass(frozen=True)
class DHRTrainingConfig:
    """How :class:`DHRTrainer` trains.

    Args:
        base_model: Sentence-transformers model to start from (name or path).
        shared_encoder: One model for both levels (default; what the store's document index,
            :class:`~rag_hier.store.extensions.doc_index.DocumentIndex`, uses without ``model=``), or a document
            and a passage model.
        levels: Levels to train (``"document"``, ``"passage"``).
        max_passage_words: How documents are cut into passages (as ``rag-hier index --max-passage-words``).
        epochs: Epochs per iteration.
        max_steps: Stop each iteration after this many optimizer steps (``None``: ``epochs`` decide).
        max_minutes: Stop training after this many minutes in all (the model trained so far is saved).
        batch_size: Questions per batch (each with its positive and negatives).
        learning_rate: Peak learning rate (linear warm-up and decay).
        warmup_ratio: Fraction of steps for warm-up.
        scale: Inverse temperature of the InfoNCE loss on cosine similarities.
        bm25_negatives: BM25 passage negatives per question (from other documents).
        in_doc_negatives: In-Doc negatives per question: passages of the gold document without the answer,
            BM25-ranked. The defaults (1 BM25 + 1 In-Doc) are the paper's passage-level setting
            (``--hard_negatives 1 --insec_negatives 1``, whose "insec" negatives are drawn from the whole gold
            document in the public code) and its best negative type.
        in_sec_negatives: In-Sec negatives per question (passages of the gold passage's own section; In-Doc ones
            fill in when the section has none, e.g. in a corpus without sections).
        doc_negatives: Document negatives per question (BM25-ranked, see ``doc_negative_text``).
        doc_negative_text: What the BM25 document negatives are ranked on: ``"summary"`` (the document's abstract
            representation: title, abstract, table of contents; the paper's better choice, its Table 3),
            ``"full_text"``, or ``"alternate"`` (summary, then full text, in turn).
        iterations: 1, or 2 to re-train from ``base_model`` with negatives mined by the first model added to
            the first iteration's (BM25) ones.
        negatives_model: Mine negatives with this trained model (a directory from an earlier run, with
            ``document/`` and ``passage/`` when separate): DHR's second iteration, run on its own.
        mined_negatives: ``"add"`` (paper): mined negatives come on top of the BM25 / In-Doc ones, so a second
            iteration trains on twice as many negatives per question; ``"replace"``: only the mined ones.
        mini_batch_size: Compute the loss with sentence-transformers' cached (GradCache) variant in
            mini-batches of this many texts: the same loss with memory bounded by the mini-batch, for one extra
            forward pass (``None``: plain in-batch loss; memory grows with ``batch_size`` x columns x sequence
            length).
        attention_dropout: Dropout on the attention probabilities while training (default 0: PyTorch's fused
            CPU attention kernel applies, 1.7x faster with 1/7 of the activation memory at 256 tokens; ``None``
            keeps the model's own rate). Hidden-state dropout is unchanged.
        abstract_words: Words of the abstract in a document summary (match the DocumentIndex).
        include_toc: Put the table of contents in a summary (match the DocumentIndex).
        max_seq_length: Override the model's maximum sequence length.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` picks CUDA when available.
        seed: Seed of sampling and training.
        show_progress_bar: Show progress bars.

    """

    base_model: str = DEFAULT_MODEL
    shared_encoder: bool = True
    levels: tuple[Level, ...] = ("document", "passage")
    max_passage_words: int = 100
    epochs: int = 1
    max_steps: int | None = None
    max_minutes: float | None = None
    batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    scale: float = 20.0
    bm25_negatives: int = 1
    in_doc_negatives: int = 1
    in_sec_negatives: int = 0
    doc_negatives: int = 1
    doc_negative_text: Literal["summary", "full_text", "alternate"] = "summary"
    iterations: int = 1
    negatives_model: str | None = None
    mined_negatives: Literal["add", "replace"] = "add"
    mini_batch_size: int | None = 32
    attention_dropout: float | None = 0.0
    abstract_words: int = DEFAULT_ABSTRACT_WORDS
    include_toc: bool = True
    max_seq_length: int | None = None
    device: str | None = None
    seed: int = 42
    show_progress_bar: bool = False

    def __post_init__(self) -> None:
        if not self.levels or any(lv not in _LEVELS for lv in self.levels):
            raise ValueError(f"levels must be a non-empty subset of {_LEVELS}; got {self.levels!r}")
        for name in ("epochs", "batch_size", "iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"DHRTrainingConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"DHRTrainingConfig.max_steps must be >= 1 or None, got {self.max_steps}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"DHRTrainingConfig.max_minutes must be > 0 or None, got {self.max_minutes}")
        if self.doc_negative_text not in ("summary", "full_text", "alternate"):
            raise ValueError(
                "DHRTrainingConfig.doc_negative_text must be 'summary', 'full_text' or 'alternate', "
                f"got {self.doc_negative_text!r}"
            )
        if self.iterations > 2:
            raise ValueError(f"DHRTrainingConfig.iterations must be 1 or 2, got {self.iterations}")
        for name in ("bm25_negatives", "in_doc_negatives", "in_sec_negatives", "doc_negatives", "max_passage_words"):
            if getattr(self, name) < 0:
                raise ValueError(f"DHRTrainingConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"DHRTrainingConfig.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.learning_rate <= 0 or self.scale <= 0:
            raise ValueError("DHRTrainingConfig.learning_rate and scale must be > 0")
        if self.attention_dropout is not None and not 0 <= self.attention_dropout < 1:
            raise ValueError(
                f"DHRTrainingConfig.attention_dropout must be in [0, 1) or None, got {self.attention_dropout}"
            )
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise ValueError(f"DHRTrainingConfig.mini_batch_size must be >= 1 or None, got {self.mini_batch_size}")
        if self.mined_negatives not in ("add", "replace"):
            raise ValueError(
                f"DHRTrainingConfig.mined_negatives must be 'add' or 'replace', got {self.mined_negatives!r}"
            )
        if self.negatives_model is not None and self.iterations != 1:
            raise ValueError("DHRTrainingConfig.negatives_model replaces the first iteration; use iterations=1 with it")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written next to the trained model)."""
        out = dataclasses.asdict(self)
        out["levels"] = list(self.levels)
        return out
