"""EHILoss: EHI's three triplet losses (Eq. 2–6) over encoder vectors and path embeddings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rag_hier._compat import embed_columns
from rag_hier.index.ehi import EHI_CITATION, EHIIndexer
from rag_hier.training.distributed import gather_with_local_grad, is_distributed
from rag_hier.training.ehi.config import MINED_NEGATIVE_TERMS, MinedNegativeTerms

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["MINED_NEGATIVE_TERMS", "EHILoss", "MinedNegativeTerms", "leaf_balance", "triplet"]


def triplet(anchor_positive: Tensor, anchor_negative: Tensor, margin: float) -> Tensor:
    """EHI's triplet loss (Eq. 2) from the two inner products: ``[a·n − a·p + γ]₊``."""
    return F.relu(anchor_negative - anchor_positive + margin)


def leaf_balance(paths: Tensor, branching: int, height: int, leaf_share: Tensor | None = None) -> Tensor:
    """Load-balancing term on path embeddings ``T`` of a batch of documents: ``Σ_h N_h Σ_v f_v P_v / H``.

    At every level ``h`` the nodes ``v`` are the ``N_h = B^h`` prefixes of length ``h``; ``P_v`` is the mean over
    the rows of the path probability they give ``v`` (``T``'s level-``h`` block: the probability of the row's own
    argmax prefix times that of each child; nodes under another prefix count 0) and ``f_v`` the share of the
    documents under ``v`` (not differentiable): from ``leaf_share`` (the corpus's documents per leaf, as a fraction,
    from the last assignment) when given, else the fraction of the batch's rows whose argmax path passes through
    ``v``. This is the Switch Transformer's auxiliary loss (Fedus et al., 2021) read level by level; with the
    corpus's shares its gradient lowers the probability of the leaves that hold more than their share of the
    corpus and leaves an evenly filled tree alone (a batch of a few hundred rows is too small an estimate of how
    hundreds of leaves are filled). Its value is 1 when the documents spread evenly.
    """
    n = paths.size(0)
    if n == 0:
        return paths.new_zeros(())
    blocks = paths.float().reshape(n, height, branching)
    choice = blocks.detach().argmax(dim=2)  # (n, H): the argmax child at every level
    share = None if leaf_share is None else leaf_share.to(device=paths.device, dtype=torch.float32)
    total = paths.new_zeros((), dtype=torch.float32)
    node = torch.zeros(n, dtype=torch.long, device=paths.device)
    for h in range(height):
        parent = node * branching  # first child of the row's own prefix at this level
        node = parent + choice[:, h]
        n_nodes = branching ** (h + 1)
        if share is None:
            f = torch.bincount(node, minlength=n_nodes).float() / n
        else:  # the leaves' shares summed up to this level's nodes
            f = share.reshape(n_nodes, -1).sum(dim=1)
        idx = parent[:, None] + torch.arange(branching, device=paths.device)[None, :]
        p = torch.zeros(n_nodes, dtype=torch.float32, device=paths.device)
        p = p.index_add(0, idx.reshape(-1), blocks[:, h, :].reshape(-1)) / n
        total = total + n_nodes * (f * p).sum()
    return total / height


class EHILoss(nn.Module):
    """EHI's loss (Kumar et al., 2023, Eq. 2–6), a sentence-transformers loss module that owns the indexer.

    For a query ``q``, its positive ``d⁺`` and a negative ``d⁻`` (``E`` = encoder, unit-normalised; ``T`` = path
    embedding of the :class:`~rag_hier.index.ehi.EHIIndexer`; ``L(a, p, n) = [a·n − a·p + γ]₊``):

    * ``L_siamese = L(E(q), E(d⁺), E(d⁻))`` (Eq. 3);
    * ``L_indexing = L(T(q), T(d⁺), T(d⁻))`` (Eq. 4);
    * ``L_intra = 1{cos(E(d⁺), E(d⁻)) < τ_intra} · L(T(d⁺), T(d⁺), T(d⁻))`` (Eq. 5, Alg. 1's form): documents
      that are not near-duplicates are pushed apart in the tree;

    total ``λ₁ L_siamese + λ₂ L_indexing + λ₃ L_intra`` (Eq. 6), plus, with ``lambda_balance > 0`` (not in the
    paper), ``λ_b L_balance``: :func:`leaf_balance` over the batch's documents (positives and mined negatives)
    with the corpus's leaf shares of :meth:`set_leaf_share` (the trainer sets them at every re-mining), which
    keeps the leaves from collapsing into a few large ones as the encoder moves. The negatives of row ``i`` are
    its mined hard negative (third input column; ``-1`` label = none) and, with ``in_batch_negatives``, the
    positives of the other rows that are not relevant to ``q_i`` (:meth:`set_relevance`; without it only rows
    with the same positive are excluded). Each term is the **mean** over the (query, negative) pairs it applies to.

    Which terms the mined negative enters is not settled by the paper (Eq. 6 sums every term over every
    negative; Alg. 1 can be read as using the mined negative in the siamese term only):
    ``mined_negative_terms="all"`` (Eq. 6) or ``"siamese"`` (Alg. 1's reading). In-batch negatives always
    enter all three terms.

    Under torch.distributed the embeddings and labels of all processes are gathered
    (:func:`~rag_hier.training.distributed.gather_with_local_grad`): every process computes the loss
    of the global batch, the indexer (not wrapped by DDP) gets the full gradient on every process.

    Args:
        model: The SentenceTransformer being trained (``None``: only :meth:`compute_loss_from_embeddings`,
            e.g. on frozen vectors).
        indexer: The EHI indexer (trainable parameters of this loss).
        lambdas: ``(λ₁, λ₂, λ₃)`` for siamese, indexing and intra (paper, SciFact: 0.2, 0.8, 0.2).
        margin: ``γ`` (paper: 0.3).
        intra_threshold: ``L_intra`` only for pairs whose encoder cosine is below this (paper: 0.9).
        mined_negative_terms: ``"all"`` or ``"siamese"`` (see above).
        in_batch_negatives: Use the other rows' positives as negatives.
        gather_across_devices: Gather across processes when torch.distributed is initialised.
        lambda_balance: Weight of the load-balancing term (0: the paper's loss, no ``"balance"`` key).

    Inputs:
        +-------------------------------------+--------------------------------------------------------+
        | Texts                               | Labels                                                 |
        +=====================================+========================================================+
        | (anchor, positive, negative)        | ``(batch, 3)``: query index, positive and negative     |
        |                                     | corpus positions (``-1`` where unknown / no negative)  |
        +-------------------------------------+--------------------------------------------------------+
        | (anchor, positive)                  | ``(batch, 2)`` or none                                 |
        +-------------------------------------+--------------------------------------------------------+

    Returns:
        ``{"siamese", "indexing", "intra"}`` (and ``"balance"`` when ``lambda_balance > 0``), each already
        multiplied by its λ (the trainer sums them).

    """

    def __init__(
        self,
        model: SentenceTransformer | nn.Module | None,
        indexer: EHIIndexer,
        *,
        lambdas: tuple[float, float, float] = (0.2, 0.8, 0.2),
        margin: float = 0.3,
        intra_threshold: float = 0.9,
        mined_negative_terms: MinedNegativeTerms = "all",
        in_batch_negatives: bool = True,
        gather_across_devices: bool = True,
        lambda_balance: float = 0.0,
    ) -> None:
        super().__init__()
        if lambda_balance < 0:
            raise ValueError(f"lambda_balance must be >= 0, got {lambda_balance}")
        if len(lambdas) != 3 or any(w < 0 for w in lambdas):
            raise ValueError(f"lambdas must be three weights >= 0, got {lambdas!r}")
        if margin < 0:
            raise ValueError(f"margin must be >= 0, got {margin}")
        if mined_negative_terms not in MINED_NEGATIVE_TERMS:
            raise ValueError(
                f"mined_negative_terms must be one of {MINED_NEGATIVE_TERMS}, got {mined_negative_terms!r}"
            )
        self.model = model
        self.indexer = indexer
        self.lambdas = tuple(float(w) for w in lambdas)
        self.margin = float(margin)
        self.intra_threshold = float(intra_threshold)
        self.mined_negative_terms = mined_negative_terms
        self.in_batch_negatives = in_batch_negatives
        self.gather_across_devices = gather_across_devices
        self.lambda_balance = float(lambda_balance)
        self._n_items = 0
        self._relevant = torch.zeros(0, dtype=torch.long)
        self._leaf_share: Tensor | None = None

    def set_leaf_share(self, documents_per_leaf: Tensor | None) -> None:
        """Documents per leaf of the corpus (counts or shares, ``(B^H,)``) for the balance term (``None``: batch's)."""
        if documents_per_leaf is None:
            self._leaf_share = None
            return
        counts = torch.as_tensor(documents_per_leaf, dtype=torch.float32).reshape(-1)
        if counts.numel() != self.indexer.n_leaves or bool((counts < 0).any()) or float(counts.sum()) <= 0:
            raise ValueError(f"documents_per_leaf must be {self.indexer.n_leaves} counts >= 0 with a positive sum")
        self._leaf_share = counts / counts.sum()

    def set_relevance(self, n_items: int, pairs: Iterable[tuple[int, int]]) -> None:
        """Judgements ``(query index, corpus position)``: a row's in-batch negatives exclude its relevant items."""
        keys = sorted({int(q) * n_items + int(p) for q, p in pairs})
        self._n_items = int(n_items)
        self._relevant = torch.tensor(keys, dtype=torch.long)

    # -- loss -------------------------------------------------------------------------------------
    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        """Embed every input column with the model, then :meth:`compute_loss_from_embeddings`."""
        if self.model is None:
            raise ValueError("EHILoss was built without a model; call compute_loss_from_embeddings()")
        return self.compute_loss_from_embeddings(embed_columns(self.model, sentence_features), labels)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> dict[str, Tensor]:
        """The three weighted terms for ``[queries, positives]`` or ``[queries, positives, negatives]``."""
        if len(embeddings) not in (2, 3):
            raise ValueError(f"EHILoss needs (anchor, positive[, negative]) columns, got {len(embeddings)}")
        q, pos = embeddings[0], embeddings[1]
        neg = embeddings[2] if len(embeddings) == 3 else None
        n_local = q.size(0)
        device = q.device
        lab = torch.full((n_local, 3), -1, dtype=torch.long, device=device)
        if labels is not None:
            given = labels.to(device=device, dtype=torch.long).reshape(n_local, -1)[:, :3]
            lab[:, : given.size(1)] = given
        if neg is None:
            lab[:, 2] = -1
        if self.gather_across_devices and is_distributed():
            q = gather_with_local_grad(q)
            pos = gather_with_local_grad(pos)
            neg = gather_with_local_grad(neg) if neg is not None else None
            lab = gather_with_local_grad(lab)
        eq, ep = F.normalize(q.float(), dim=-1), F.normalize(pos.float(), dim=-1)
        en = F.normalize(neg.float(), dim=-1) if neg is not None else None
        n = eq.size(0)
        rows = torch.cat([eq, ep] + ([en] if en is not None else []), dim=0)
        paths = self.indexer(rows.to(self.indexer.device))
        tq, tp = paths[:n], paths[n : 2 * n]
        tn = paths[2 * n :] if en is not None else None

        # which (row, negative) pairs count
        qidx, ppos, npos = lab[:, 0], lab[:, 1], lab[:, 2]
        eye = torch.eye(n, dtype=torch.bool, device=device)
        inbatch = ~eye if self.in_batch_negatives else torch.zeros_like(eye)
        known = ppos >= 0
        inbatch = inbatch & ~((ppos[:, None] == ppos[None, :]) & known[:, None] & known[None, :])
        if self._relevant.numel() and self._n_items:
            keys = qidx[:, None] * self._n_items + ppos[None, :]
            rel = torch.isin(keys, self._relevant.to(device)) & (qidx[:, None] >= 0) & known[None, :]
            inbatch = inbatch & ~rel
        mined = (npos >= 0) if en is not None else torch.zeros(n, dtype=torch.bool, device=device)

        def term(
            a: Tensor, p: Tensor, nv: Tensor | None, use_mined: bool, gate: tuple[Tensor, Tensor] | None = None
        ) -> Tensor:
            """Mean of the triplet losses of (a_i, p_i) against in-batch p_j and the mined n_i."""
            ap = (a * p).sum(-1)
            total = a.new_zeros(())
            count = a.new_zeros(())
            mask = inbatch if gate is None else inbatch & gate[0]
            if mask.any():
                an = a @ p.T
                total = total + (triplet(ap[:, None], an, self.margin) * mask).sum()
                count = count + mask.sum()
            if use_mined and nv is not None:
                m = mined if gate is None else mined & gate[1]
                if m.any():
                    an_m = (a * nv).sum(-1)
                    total = total + (triplet(ap, an_m, self.margin) * m).sum()
                    count = count + m.sum()
            return total / count.clamp(min=1)

        all_terms = self.mined_negative_terms == "all"
        lam_s, lam_i, lam_t = self.lambdas
        out = {
            "siamese": lam_s * term(eq, ep, en, True),
            "indexing": lam_i * term(tq, tp, tn, all_terms),
        }
        with torch.no_grad():
            cos_pp = ep @ ep.T
            cos_pn = (ep * en).sum(-1) if en is not None else torch.zeros(n, device=device)
            gate = (cos_pp < self.intra_threshold, cos_pn < self.intra_threshold)
        # L(T(d+), T(d+), T(d-)): anchor and positive are both T(d+)
        out["intra"] = lam_t * term(tp, tp, tn, all_terms, gate)
        if self.lambda_balance > 0:
            docs = tp if tn is None else torch.cat([tp, tn[mined]], dim=0)
            out["balance"] = self.lambda_balance * leaf_balance(
                docs, self.indexer.branching, self.indexer.height, self._leaf_share
            )
        return out

    # -- sentence-transformers conventions --------------------------------------------------------
    def get_config_dict(self) -> dict[str, Any]:
        """Hyper-parameters for the model card."""
        return {
            "lambdas": list(self.lambdas),
            "margin": self.margin,
            "intra_threshold": self.intra_threshold,
            "mined_negative_terms": self.mined_negative_terms,
            "in_batch_negatives": self.in_batch_negatives,
            "lambda_balance": self.lambda_balance,
            "indexer": self.indexer.describe(),
        }

    @property
    def citation(self) -> str:
        """BibTeX of the EHI paper."""
        return EHI_CITATION
