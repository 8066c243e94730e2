"""EHIConfig: every hyper-parameter of EHI training, validated at construction."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from rag_hier.training.config import TrainingConfig, shared_field, train_field

MinedNegativeTerms = Literal["all", "siamese"]
MINED_NEGATIVE_TERMS: tuple[str, ...] = ("all", "siamese")
"""How mined hard negatives enter the loss: in every term, or the siamese term only."""

EncoderScope = Literal["all", "last"]
ENCODER_SCOPES: tuple[str, ...] = ("all", "last")
"""Which encoder parameters joint training updates: every one, or the last transformer layer's only (the paper's)."""


__all__ = [
    "ENCODER_SCOPES",
    "INIT_METHODS",
    "ITEMS_PER_LEAF",
    "MINE_SOURCES",
    "EHIConfig",
    "EncoderScope",
    "Init",
    "MineFrom",
    "auto_branching",
]

Init = Literal["random", "kmeans"]
MineFrom = Literal["leaves", "exact"]
INIT_METHODS: tuple[str, ...] = ("random", "kmeans")
MINE_SOURCES: tuple[str, ...] = ("leaves", "exact")
ITEMS_PER_LEAF = 32
"""Items per leaf aimed at by :func:`auto_branching` (chosen on SciFact dev queries, ``docs/ehi.md``)."""


def auto_branching(n_items: int, height: int) -> int:
    """``B`` such that ``B^H`` is about ``n_items / 32`` leaves (at least 2 per level)."""
    leaves = max(2, round(n_items / ITEMS_PER_LEAF))
    return max(2, round(leaves ** (1.0 / height)))


@dataclass(frozen=True)
class EHIConfig(TrainingConfig):
    """Hyper-parameters of EHI training (defaults: the paper's SciFact row of its Table 4 where it gives one).

    Args:
        branching: ``B``, children per tree node; ``None`` (default): about 32 documents per leaf
            (:func:`auto_branching`; chosen on SciFact dev queries: 160 leaves scored 0.91 Recall@100 at 10 % of
            the corpus where the paper's 40 scored 0.84). The paper uses 40 leaves for SciFact.
        height: ``H``; the tree has ``B^H`` leaves.
        lambda_siamese: ``λ₁``, weight of the encoder triplet loss (paper, SciFact: 0.2).
        lambda_indexing: ``λ₂``, weight of the path-embedding triplet loss (0.8).
        lambda_intra: ``λ₃``, weight of the intra-leaf loss (0.2).
        margin: ``γ`` of every triplet loss (0.3).
        intra_threshold: ``L_intra`` only for document pairs of encoder cosine below this (0.9).
        mined_negative_terms: Which terms the mined hard negative enters: ``"all"`` (Eq. 6) or
            ``"siamese"`` (one reading of Alg. 1); in-batch negatives enter all three.
        in_batch_negatives: Other rows' positives (not relevant to the query) are negatives too.
        lambda_balance: ``λ_b``, weight of a load-balancing term on the leaves of each batch's documents (not in the
            paper; :func:`~rag_hier.training.ehi.loss.leaf_balance`; 0 trains the paper's loss). Default 0.01, chosen
            on SciFact dev with ``remine_every=1`` (docs/ehi.md): indexer alone on frozen vectors, Recall@100 at
            10 % scored 0.925 vs 0.912 (3 seeds, each better), largest leaf 62-78 vs 146-184 documents; 0.1 lowered
            it to 0.895.
        encoder_lr: AdamW learning rate of the encoder (2e-5, chosen on a SciFact dev split for MiniLM: 1e-4
            unbalanced the tree and lowered exact recall; the paper's 4e-4 is for DistilBERT; docs/ehi.md).
        indexer_lr: AdamW learning rate of the indexer (paper, SciFact: 0.016).
        weight_decay: AdamW weight decay of the encoder's weights (not of biases, norms or the indexer).
        warmup_ratio: Linear warm-up over this fraction of the planned steps, then linear decay to 0.
        batch_size: Training pairs per device and step (paper, SciFact: 64).
        epochs: Passes over the training pairs (paper: 100).
        refit_epochs: After joint training, fit a new indexer (k-means start, as ``init``) for this many epochs on
            the final encoder's vectors with the encoder frozen, and keep it instead of the jointly trained one
            (0: keep the jointly trained indexer, the paper's). Default 20, chosen on SciFact dev (the figures:
            docs/ehi.md, "the index kept after joint training").
        warmup_epochs: Before joint training, train the indexer alone (encoder frozen) for this many epochs on the
            starting encoder's vectors, then train it jointly with the encoder from there (0: the joint training
            starts from the initialisation, the paper's). Default 20, chosen on SciFact dev (not in the paper): on
            a short joint budget the indexer otherwise sees only that budget's steps (the figures: docs/ehi.md, "the
            indexer the joint training starts from").
        refresh_every: ``r``: every ``r`` epochs re-encode the corpus (not with a frozen encoder), reassign
            documents to leaves and re-mine hard negatives (paper: 5).
        remine_every: Between refreshes, every this many optimizer steps route the documents and the training
            queries through the *current* indexer (with the vectors of the last re-encode) and re-mine the hard
            negatives, so that negatives come from a fresh indexer as Alg. 1 has it (``None``: only at each refresh).
            Default 1 (every step), chosen on SciFact dev with ``lambda_balance`` (the figures: docs/ehi.md,
            "freshness of routes and hard negatives"). Each re-mining routes the whole corpus through the indexer,
            a cost that grows with the corpus (docs/ehi.md measures it): raise it for large corpora.
        mine_from: ``"leaves"`` (paper: hard negatives drawn from the documents in the query's top leaves)
            or ``"exact"`` (from the query's exact nearest documents: the dual-encoder baseline's negatives).
        mine_leaves: Top leaves (by beam search) of each query the hard negatives are drawn from; with
            ``mine_from="exact"`` the pool is the ``mine_leaves · N / B^H`` nearest documents.
        init: ``"kmeans"`` (default: classifiers fitted to a hierarchical k-means tree of the starting document
            vectors) or ``"random"`` (paper; on SciFact it collapsed to 6 non-empty leaves of 40 and of 160,
            ``docs/ehi.md``).
        init_steps: Adam steps of the k-means fit.
        freeze_encoder: Train the indexer only, on fixed vectors (the siamese term is then constant).
        encoder_scope: Which encoder parameters joint training updates: ``"all"`` (default: every parameter of
            the sentence-transformers model) or ``"last"`` (the paper's: only the last transformer layer; the
            token embeddings, every earlier layer, an unused BERT pooler and any module after the transformer,
            e.g. a Dense projection, stay frozen; mean pooling and normalisation have no weights). The frozen
            flags are restored after training, so a model passed in loaded is left trainable as it came.
        leaves_per_document: Leaves each document is assigned to when mining (the paper's d2l, 1 = top leaf).
        max_steps: Stop after this many optimizer steps in total (``None``: ``epochs`` passes).
        max_minutes: Stop the joint training after this many minutes (after the current step; one process
            only: under torch.distributed ``max_steps`` bounds a run). The indexer refit then runs as usual.
        max_seq_length: Truncate texts to this many tokens (``None``: the model's own limit).
        fp16: Mixed precision (float16) encoder training; GPU only.
        bf16: Mixed precision (bfloat16) encoder training.
        gather_across_devices: Gather in-batch negatives across processes under torch.distributed.
        encode_batch_size: Batch size for encoding the corpus and the queries.
        seed: Seed for the indexer's initialisation, sampling and data order.
        logging_steps: Log the training loss every this many steps (encoder training).

    """

    branching: int | None = train_field(
        None,
        help="B: children per node (default: B^H = about one leaf per 32 passages; the paper used 40 for SciFact)",
        minimum=2,
        allowed=">= 2 (or None: automatic)",
    )
    height: int = train_field(1, help="H: tree levels, B^H leaves", minimum=1)
    lambda_siamese: float = train_field(0.2, help="lambda1: weight of the encoder triplet loss", minimum=0)
    lambda_indexing: float = train_field(0.8, help="lambda2: weight of the path-embedding triplet loss", minimum=0)
    lambda_intra: float = train_field(0.2, help="lambda3: weight of the intra-leaf loss", minimum=0)
    margin: float = train_field(0.3, help="triplet margin gamma", minimum=0)
    intra_threshold: float = train_field(
        0.9, help="L_intra only for document pairs of encoder cosine below this", minimum=-1, maximum=1, cli=False
    )
    mined_negative_terms: MinedNegativeTerms = train_field(
        "all", help="loss terms the mined hard negative enters: all (Eq. 6) or siamese only"
    )
    in_batch_negatives: bool = train_field(
        True, help="other rows' positives (not relevant to the query) are negatives too", cli=False
    )
    lambda_balance: float = train_field(
        0.01, help="weight of a leaf load-balancing term (not in the paper; 0: the paper's loss)", minimum=0
    )
    encoder_lr: float = train_field(2e-5, help="encoder learning rate", above=0)
    indexer_lr: float = train_field(0.016, help="indexer learning rate", above=0)
    weight_decay: float = shared_field("weight_decay", 0.01)
    warmup_ratio: float = shared_field("warmup_ratio", 0.1)
    batch_size: int = shared_field("batch_size", 64, help="pairs per step and device", minimum=2)
    epochs: int = shared_field("epochs", 100, help="passes over the training pairs")
    refit_epochs: int = train_field(
        20,
        help="after joint training, fit a new indexer on the final vectors for this many epochs and keep it "
        "instead of the jointly trained one (0: keep the jointly trained indexer, as the paper does)",
        minimum=0,
    )
    warmup_epochs: int = train_field(
        20,
        help="before joint training, train the indexer alone on the starting encoder's vectors for this many "
        "epochs (0: the joint training starts from the initialisation, as the paper's)",
        minimum=0,
    )
    refresh_every: int = train_field(
        5, help="r: re-encode, reassign leaves and re-mine negatives every r epochs", minimum=1
    )
    remine_every: int | None = train_field(
        1,
        help="between refreshes, re-route documents and queries through the current indexer and re-mine "
        "negatives every this many steps (0: only at each refresh)",
        minimum=1,
        flag_none="zero",
    )
    mine_from: MineFrom = train_field(
        "leaves", help="hard negatives from the query's top leaves (EHI) or its exact nearest documents"
    )
    mine_leaves: int = train_field(1, help="top leaves mined per query")  # 1..B^H: checked in __post_init__
    init: Init = train_field(
        "kmeans", help="indexer initialisation: kmeans (fitted to a k-means tree) or random (paper)"
    )
    init_steps: int = train_field(
        300, help="--init kmeans: Adam steps fitting the classifiers to the k-means tree", minimum=0
    )
    freeze_encoder: bool = train_field(False, help="train the indexer alone, on the encoder's fixed vectors")
    encoder_scope: EncoderScope = train_field(
        "all", help="encoder parameters joint training updates: all, or last (the last transformer layer, the paper's)"
    )
    leaves_per_document: int = train_field(1, help="leaves each document is assigned to (the paper's d2l)")
    max_steps: int | None = shared_field("max_steps", None, help="stop after this many optimizer steps")
    max_minutes: float | None = shared_field(
        "max_minutes", None, help="stop the joint training after this many minutes"
    )
    max_seq_length: int | None = shared_field("max_seq_length", None)
    fp16: bool = shared_field("fp16", False)
    bf16: bool = shared_field("bf16", False)
    gather_across_devices: bool = shared_field("gather_across_devices", True)
    encode_batch_size: int = shared_field(
        "encode_batch_size", 64, help="batch size for encoding the corpus and the queries"
    )
    seed: int = shared_field("seed", 42)
    logging_steps: int = shared_field("logging_steps", 10)

    def __post_init__(self) -> None:
        super().__post_init__()
        leaves = self.branching**self.height if self.branching is not None else 1 << 24
        if leaves > 1 << 24:
            self._invalid("branching", "such that branching ** height <= 2^24")
        if not 1 <= self.mine_leaves <= leaves:
            self._invalid("mine_leaves", "in 1..branching ** height")
        if not 1 <= self.leaves_per_document <= leaves:
            self._invalid("leaves_per_document", "in 1..branching ** height")

    @property
    def n_leaves(self) -> int:
        """``B^H`` (the configuration must be :meth:`resolved` when ``branching`` is automatic)."""
        if self.branching is None:
            raise ValueError("EHIConfig.branching is automatic: call resolved(n_items) first")
        return int(self.branching**self.height)

    def resolved(self, n_items: int) -> EHIConfig:
        """The configuration with an automatic ``branching`` fixed for a corpus of ``n_items``."""
        if self.branching is not None:
            return self
        return replace(self, branching=auto_branching(n_items, self.height))

    @property
    def lambdas(self) -> tuple[float, float, float]:
        """``(λ₁, λ₂, λ₃)``."""
        return (self.lambda_siamese, self.lambda_indexing, self.lambda_intra)
