"""DHR training configuration (importable without NumPy or torch: ``rag-hier train dhr --help`` reads it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rag_hier.corpus.summary import DEFAULT_ABSTRACT_WORDS
from rag_hier.encoders.identity import DEFAULT_MODEL
from rag_hier.training.config import TrainingConfig, shared_field, train_field

__all__ = ["LEVELS", "DHRTrainingConfig", "Level"]

Level = Literal["document", "passage"]
LEVELS: tuple[str, ...] = ("document", "passage")


@dataclass(frozen=True)
class DHRTrainingConfig(TrainingConfig):
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
        batch_size: Questions per training step (each with its positive and negatives).
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
            CPU attention kernel applies: faster, with a fraction of the activation memory; ``None``
            keeps the model's own rate). Hidden-state dropout is unchanged.
        abstract_words: Words of the abstract in a document summary (match the DocumentIndex).
        include_toc: Put the table of contents in a summary (match the DocumentIndex).
        max_seq_length: Override the model's maximum sequence length.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` picks CUDA when available.
        seed: Seed of sampling and training.
        show_progress_bar: Show progress bars.

    """

    base_model: str = train_field(DEFAULT_MODEL, help="model to start from")
    shared_encoder: bool = train_field(
        True,
        help="train a document and a passage model (DIR/document, DIR/passage) instead of one shared model",
        flag="--separate-encoders",
    )
    levels: tuple[Level, ...] = train_field(("document", "passage"), help="levels to train: document,passage")
    max_passage_words: int = train_field(
        100, help="cut passages as `rag-hier index` will (0 = whole paragraphs)", minimum=0
    )
    epochs: int = shared_field("epochs", 1, help="epochs per iteration")
    max_steps: int | None = shared_field("max_steps", None, help="stop each iteration after N optimizer steps")
    max_minutes: float | None = shared_field("max_minutes", None)
    batch_size: int = shared_field(
        "batch_size", 16, help="questions per training step, each with its positive and negatives (not encoding)"
    )
    learning_rate: float = shared_field("learning_rate", 2e-5)
    scale: float = train_field(
        20.0, help="inverse temperature of the InfoNCE loss on cosine similarities", above=0, cli=False
    )
    bm25_negatives: int = train_field(1, help="per question: BM25-ranked passages of other documents", minimum=0)
    in_doc_negatives: int = train_field(
        1, help="per question: passages of the gold document without the answer (the paper's)", minimum=0
    )
    in_sec_negatives: int = train_field(
        0, help="per question: passages of the gold passage's section, else of its document", minimum=0
    )
    doc_negatives: int = train_field(1, help="document level: BM25-ranked document negatives per question", minimum=0)
    doc_negative_text: Literal["summary", "full_text", "alternate"] = train_field(
        "summary", help="what document negatives are BM25-ranked on (summary: the paper's Table 3)"
    )
    iterations: int = train_field(1, help="2: retrain with mined negatives", choices=(1, 2))
    negatives_model: str | None = train_field(
        None, help="mine negatives with this trained model instead of BM25 (DHR's second iteration on its own)"
    )
    mined_negatives: Literal["add", "replace"] = train_field(
        "add",
        help="iteration 2 / --negatives-model: add the mined negatives to the BM25 and In-Doc ones (paper) or "
        "replace them",
    )
    mini_batch_size: int | None = shared_field("mini_batch_size", 32)
    attention_dropout: float | None = shared_field("attention_dropout", 0.0)
    abstract_words: int = train_field(
        DEFAULT_ABSTRACT_WORDS, help="words of the abstract in a document summary", minimum=0, cli=False
    )
    include_toc: bool = train_field(True, help="put the table of contents in a summary", cli=False)
    max_seq_length: int | None = shared_field("max_seq_length", None)
    device: str | None = shared_field("device", None)
    show_progress_bar: bool = shared_field("show_progress_bar", False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.levels or any(lv not in LEVELS for lv in self.levels):
            self._invalid("levels", f"a non-empty subset of {', '.join(LEVELS)}")
        if self.negatives_model is not None and self.iterations != 1:
            raise ValueError("DHRTrainingConfig.negatives_model replaces the first iteration; use iterations=1 with it")
