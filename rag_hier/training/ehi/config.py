"""EHIConfig: every hyper-parameter of EHI training, validated at construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

MinedNegativeTerms = Literal["all", "siamese"]
MINED_NEGATIVE_TERMS: tuple[str, ...] = ("all", "siamese")
"""How mined hard negatives enter the loss: in every term, or the siamese term only."""


__all__ = ["INIT_METHODS", "ITEMS_PER_LEAF", "MINE_SOURCES", "EHIConfig", "Init", "MineFrom", "auto_branching"]

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
class EHIConfig:
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
            paper; :func:`~rag_hier.training.ehi.loss.leaf_balance`). 0 trains the paper's loss.
        encoder_lr: AdamW learning rate of the encoder (2e-5, chosen on a SciFact dev split for MiniLM: 1e-4
            unbalanced the tree and lowered exact recall; the paper's 4e-4 is for DistilBERT; docs/ehi.md).
        indexer_lr: AdamW learning rate of the indexer (paper, SciFact: 0.016).
        weight_decay: AdamW weight decay of the encoder's weights (not of biases, norms or the indexer).
        warmup_ratio: Linear warm-up over this fraction of the planned steps, then linear decay to 0.
        batch_size: Training pairs per device and step (paper, SciFact: 64).
        epochs: Passes over the training pairs (paper: 100).
        refit_epochs: After joint training, fit a new indexer (k-means start, as ``init``) for this many epochs on
            the final encoder's vectors with the encoder frozen, and keep it instead of the jointly trained one
            (0: keep the jointly trained indexer, the paper's). Default 20, chosen on SciFact dev: the jointly
            trained indexer's leaves grow unbalanced as the encoder moves the documents (Recall@100 at ≤ 10 %
            scored 0.812 jointly trained vs 0.924 refit after 1,760 GPU steps; 0.876 vs 0.905 after 44; docs/ehi.md).
        refresh_every: ``r``: every ``r`` epochs re-encode the corpus (not with a frozen encoder), reassign
            documents to leaves and re-mine hard negatives (paper: 5).
        remine_every: Between refreshes, every this many optimizer steps route the documents and the training
            queries through the *current* indexer (with the vectors of the last re-encode) and re-mine the hard
            negatives, so that negatives come from a fresh indexer as Alg. 1 has it (``None``: only at each refresh).
        mine_from: ``"leaves"`` (paper: hard negatives drawn from the documents in the query's top leaves)
            or ``"exact"`` (from the query's exact nearest documents: the dual-encoder baseline's negatives).
        mine_leaves: Top leaves (by beam search) of each query the hard negatives are drawn from; with
            ``mine_from="exact"`` the pool is the ``mine_leaves · N / B^H`` nearest documents.
        init: ``"kmeans"`` (default: classifiers fitted to a hierarchical k-means tree of the starting document
            vectors) or ``"random"`` (paper; on SciFact it collapsed to 6 non-empty leaves of 40 and of 160,
            ``docs/ehi.md``).
        init_steps: Adam steps of the k-means fit.
        freeze_encoder: Train the indexer only, on fixed vectors (the siamese term is then constant).
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

    branching: int | None = None
    height: int = 1
    lambda_siamese: float = 0.2
    lambda_indexing: float = 0.8
    lambda_intra: float = 0.2
    margin: float = 0.3
    intra_threshold: float = 0.9
    mined_negative_terms: MinedNegativeTerms = "all"
    in_batch_negatives: bool = True
    lambda_balance: float = 0.0
    encoder_lr: float = 2e-5
    indexer_lr: float = 0.016
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    batch_size: int = 64
    epochs: int = 100
    refit_epochs: int = 20
    refresh_every: int = 5
    remine_every: int | None = None
    mine_from: MineFrom = "leaves"
    mine_leaves: int = 1
    init: Init = "kmeans"
    init_steps: int = 300
    freeze_encoder: bool = False
    leaves_per_document: int = 1
    max_steps: int | None = None
    max_minutes: float | None = None
    max_seq_length: int | None = None
    fp16: bool = False
    bf16: bool = False
    gather_across_devices: bool = True
    encode_batch_size: int = 64
    seed: int = 42
    logging_steps: int = 10

    def __post_init__(self) -> None:
        def need(cond: bool, name: str, allowed: str) -> None:
            if not cond:
                raise ValueError(f"EHIConfig.{name} must be {allowed}; got {getattr(self, name)!r}")

        need(self.branching is None or self.branching >= 2, "branching", ">= 2 (or None: automatic)")
        need(self.height >= 1, "height", ">= 1")
        leaves = self.branching**self.height if self.branching is not None else 1 << 24
        need(leaves <= 1 << 24, "branching", "such that branching ** height <= 2^24")
        for name in ("lambda_siamese", "lambda_indexing", "lambda_intra", "lambda_balance", "margin"):
            need(getattr(self, name) >= 0, name, ">= 0")
        need(-1 <= self.intra_threshold <= 1, "intra_threshold", "in [-1, 1]")
        need(
            self.mined_negative_terms in MINED_NEGATIVE_TERMS, "mined_negative_terms", " or ".join(MINED_NEGATIVE_TERMS)
        )
        need(self.encoder_lr > 0, "encoder_lr", "> 0")
        need(self.indexer_lr > 0, "indexer_lr", "> 0")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio", "in [0, 1)")
        need(self.batch_size >= 2, "batch_size", ">= 2")
        need(self.epochs >= 1, "epochs", ">= 1")
        need(self.refit_epochs >= 0, "refit_epochs", ">= 0")
        need(self.refresh_every >= 1, "refresh_every", ">= 1")
        need(self.remine_every is None or self.remine_every >= 1, "remine_every", ">= 1 or None")
        need(self.mine_from in MINE_SOURCES, "mine_from", " or ".join(MINE_SOURCES))
        need(1 <= self.mine_leaves <= leaves, "mine_leaves", "in 1..branching ** height")
        need(self.init in INIT_METHODS, "init", " or ".join(INIT_METHODS))
        need(self.init_steps >= 0, "init_steps", ">= 0")
        need(
            1 <= self.leaves_per_document <= leaves,
            "leaves_per_document",
            "in 1..branching ** height",
        )
        need(self.max_steps is None or self.max_steps >= 1, "max_steps", ">= 1 or None")
        need(self.max_minutes is None or self.max_minutes > 0, "max_minutes", "> 0 or None")
        need(self.max_seq_length is None or self.max_seq_length >= 8, "max_seq_length", ">= 8 or None")
        need(not (self.fp16 and self.bf16), "fp16", "False when bf16 is True")
        need(self.encode_batch_size >= 1, "encode_batch_size", ">= 1")
        need(self.logging_steps >= 1, "logging_steps", ">= 1")

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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written next to the trained model)."""
        return asdict(self)
