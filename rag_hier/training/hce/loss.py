"""HierarchicalContrastiveLoss: HCE's tiered sibling-negative loss, as a sentence-transformers loss module."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rag_hier._compat import embed_columns
from rag_hier.training.distributed import gather_with_local_grad, is_distributed

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from rag_hier.index.tree import ClusterTree

logger = logging.getLogger(__name__)

__all__ = [
    "DIRECTION_REDUCTIONS",
    "HCE_CITATION",
    "DirectionReduction",
    "HierarchicalContrastiveLoss",
    "JointLoss",
    "ScaledLoss",
]

DirectionReduction = Literal["sum", "mean"]
DIRECTION_REDUCTIONS: tuple[str, ...] = ("sum", "mean")

HCE_CITATION = """@article{chen2025hce,
  title={Hierarchical Corpus Encoder: Fusing Generative Retrieval and Dense Indices},
  author={Chen, Tongfei and Sharma, Ankita and Pauls, Adam and Van Durme, Benjamin},
  journal={arXiv preprint arXiv:2502.18877},
  year={2025}
}"""


Components = Callable[[list[Tensor], "Tensor | None"], dict[str, Tensor]]


def _cached_mixin() -> Any:
    """sentence-transformers' GradCache machinery (``CachedLossMixin``), or ``None`` where it is missing (< 6)."""
    try:
        from sentence_transformers.base.losses.gradcache import CachedLossMixin
    except ImportError:  # pragma: no cover - depends on the installed sentence-transformers
        return None
    return CachedLossMixin


def _reconstruct(total: Tensor, parts: dict[str, Tensor]) -> dict[str, Tensor]:
    """The components for logging, with the gradient-carrying ``total`` folded into the first one (sums to it)."""
    out = dict(parts)
    first = next(iter(out))
    others = sum((v for k, v in out.items() if k != first), start=torch.zeros_like(total))
    out[first] = total - others
    return out


def _cached_forward(
    owner: nn.Module,
    features: list[dict[str, Tensor]],
    labels: Tensor | None,
    compute: Components,
    params: list[nn.Parameter],
    mini_batch_size: int,
) -> dict[str, Tensor] | None:
    """GradCache (Gao et al., 2021): the whole batch's loss with only ``mini_batch_size`` texts' activations alive.

    Runs through sentence-transformers' ``CachedLossMixin``. The columns are embedded in mini-batches without
    gradient; the loss components are computed from those embeddings and differentiated with respect to them
    (and to the loss's own ``params``, HCE's centroids); the backward pass then re-embeds each mini-batch with
    gradient (same dropout masks: the RNG is replayed) and feeds it the cached gradient. Same loss value and
    gradients as the plain forward, for one extra forward pass without gradient. Returns ``None`` where
    sentence-transformers has no ``CachedLossMixin`` (the caller then runs the plain forward).
    """
    mixin = _cached_mixin()
    if mixin is None:
        logger.warning("mini_batch_size needs sentence-transformers >= 6 (CachedLossMixin); using the plain loss")
        return None

    class _Runner(mixin):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.mini_batch_size = mini_batch_size
            self.parts: dict[str, Tensor] = {}
            self.param_grads: list[tuple[nn.Parameter, Tensor]] = []

        @property
        def model(self) -> Any:  # the trainer may have swapped in a wrapped (DDP) model
            return owner.model

        def calculate_loss(
            self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
        ) -> Tensor:
            embeddings = [torch.cat(r) for r in reps]
            parts = compute(embeddings, labels)
            total = torch.stack(list(parts.values())).sum()
            self.parts = {k: v.detach() for k, v in parts.items()}
            if not with_backward:
                return total
            leaves = [rep for r in reps for rep in r]
            trainable = [p for p in params if p.requires_grad]
            grads = torch.autograd.grad(total, [*leaves, *trainable], allow_unused=True)
            for rep, g in zip(leaves, grads[: len(leaves)], strict=True):
                rep.grad = torch.zeros_like(rep) if g is None else g
            self.param_grads = [(p, g) for p, g in zip(trainable, grads[len(leaves) :], strict=True) if g is not None]
            return total.detach()

    runner = _Runner()
    total = runner.forward_cached(features, labels)
    if runner.param_grads and total.requires_grad:
        pending = runner.param_grads

        def add_param_grads(grad_output: Tensor) -> None:
            for p, g in pending:  # scaled like the embeddings' (gradient accumulation, loss scaling)
                contribution = (g * grad_output).to(p.dtype)
                p.grad = contribution if p.grad is None else p.grad + contribution

        total.register_hook(add_param_grads)
    return _reconstruct(total, runner.parts)


class HierarchicalContrastiveLoss(nn.Module):
    """HCE loss (Chen et al., 2025, Eq. 5–6): contrast each query against tiered sibling negatives of a cluster tree.

    For a query ``q`` whose positive document ``d`` has tree path ``(n_1, …, n_H, d)``:

    * **Top ``M`` levels** (``t = 1 .. M``): cross-entropy of ``cos(q, c_{n_t}) / τ`` against the
      centroids of ``n_t``'s siblings (the children of ``n_{t-1}``). The centroids of these levels are
      trainable parameters of this module, initialised from the tree (:meth:`set_tree`).
    * **Lower levels**: a bidirectional contrastive loss. Query → document over the positive, the
      sampled negatives of the input (``n_NS`` per lower level, drawn among the children of the
      positive's prefix by :func:`~rag_hier.training.hce.data.sample_tree_negatives`) and every other
      document of the batch; document → query over the batch's queries. The two directions are summed, as
      in the paper's Eq. 8 (``direction_reduction="mean"`` averages them, this library's behaviour before
      0.2, under which ``level_weight`` w weighs the level terms as 2w does under the sum).

    Cosine similarities divided by ``temperature``. In-batch entries that are the query's own positive
    document (same item label) are masked instead of being counted as negatives. Under torch.distributed
    the batch is gathered across processes (:func:`~rag_hier.training.distributed.gather_with_local_grad`):
    every process computes the loss of the global batch.

    Args:
        model: The SentenceTransformer being trained.
        tree: The cluster tree of the training corpus (items = corpus positions used as labels);
            may be set later with :meth:`set_tree`.
        levels_m: ``M``: tree levels trained against sibling centroids (capped at the tree's depth).
        temperature: ``τ`` on cosine similarity (paper: 0.01).
        symmetric: Add the document → query term.
        level_weight: Factor on each level term (``level_1`` … ``level_M``); 1.0 with ``direction_reduction="sum"``
            is the paper's Eq. 8 exactly, 0.0 keeps only the document terms (the tree still supplies the sampled
            negatives).
        direction_reduction: ``"sum"`` (paper, Eq. 8) or ``"mean"`` of the query → document and document → query
            terms.
        gather_across_devices: Gather across processes when torch.distributed is initialised.
        mini_batch_size: Embed the columns in mini-batches of this many texts with GradCache (sentence-transformers'
            ``CachedLossMixin``): the same loss and gradients for one extra forward pass, with the activation memory
            of ``mini_batch_size`` texts instead of the whole batch (``None``: one plain forward pass).

    Requirements:
        1. A :class:`~rag_hier.index.tree.ClusterTree` over the training corpus.
        2. Inputs ``(anchor, positive, negative_1, …, negative_n)`` with labels holding, per row, the tree
           item positions of ``positive, negative_1, …`` (``-1`` where unknown).

    Inputs:
        +--------------------------------------------------+----------------------------------------------+
        | Texts                                            | Labels                                       |
        +==================================================+==============================================+
        | (anchor, positive) pairs                         | ``(batch,)`` or ``(batch, 1)`` item position |
        +--------------------------------------------------+----------------------------------------------+
        | (anchor, positive, negative_1, …, negative_n)    | ``(batch, 1 + n)`` item positions            |
        +--------------------------------------------------+----------------------------------------------+

    Returns:
        A dict of loss components (``level_1`` … ``level_M``, ``documents``); sentence-transformers'
        trainer sums them and logs each. With ``mini_batch_size`` the gradient flows through the first
        component (the dict still sums to the loss; the values are the same).

    Example:
        ::

            tree = ClusterTree.build(model.encode(corpus_texts, normalize_embeddings=True))
            loss = HierarchicalContrastiveLoss(model, tree, levels_m=2, temperature=0.01)
            trainer = SentenceTransformerTrainer(model=model, train_dataset=dataset, loss=loss)

    """

    def __init__(
        self,
        model: SentenceTransformer,
        tree: ClusterTree | None = None,
        *,
        levels_m: int = 2,
        temperature: float = 0.01,
        symmetric: bool = True,
        level_weight: float = 1.0,
        direction_reduction: DirectionReduction = "sum",
        gather_across_devices: bool = True,
        mini_batch_size: int | None = None,
    ) -> None:
        super().__init__()
        if levels_m < 0:
            raise ValueError(f"levels_m must be >= 0, got {levels_m}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if level_weight < 0:
            raise ValueError(f"level_weight must be >= 0, got {level_weight}")
        if direction_reduction not in DIRECTION_REDUCTIONS:
            raise ValueError(f"direction_reduction must be 'sum' or 'mean', got {direction_reduction!r}")
        if mini_batch_size is not None and mini_batch_size < 1:
            raise ValueError(f"mini_batch_size must be >= 1 or None, got {mini_batch_size}")
        self.model = model
        self.levels_m = levels_m
        self.temperature = temperature
        self.symmetric = symmetric
        self.level_weight = level_weight
        self.direction_reduction = direction_reduction
        self.gather_across_devices = gather_across_devices
        self.mini_batch_size = mini_batch_size
        self.centroids = nn.ParameterList()
        self._node_paths = torch.zeros((0, 0), dtype=torch.long)
        self._parents: list[Tensor] = []
        if tree is not None:
            self.set_tree(tree)

    # -- tree -------------------------------------------------------------------------------------
    @property
    def active_levels(self) -> int:
        """Levels trained against sibling centroids: ``min(levels_m, tree depth)``."""
        return len(self.centroids)

    def set_tree(self, tree: ClusterTree) -> bool:
        """Use ``tree`` (item positions = labels) and reset the trainable centroids to its centroids.

        Returns ``True`` when the centroid parameters were replaced by new ones (their number or shapes
        changed), so an optimizer holding the old ones must be rebuilt; ``False`` when they were
        overwritten in place.
        """
        m = min(self.levels_m, tree.depth)
        new = [torch.from_numpy(np.ascontiguousarray(c)) for c in tree.centroids[:m]]
        device = next(self.model.parameters()).device if any(True for _ in self.model.parameters()) else None
        same = len(new) == len(self.centroids) and all(
            p.shape == c.shape for p, c in zip(self.centroids, new, strict=True)
        )
        if same:
            with torch.no_grad():
                for p, c in zip(self.centroids, new, strict=True):
                    p.copy_(c.to(p.device, p.dtype))
        else:
            self.centroids = nn.ParameterList([nn.Parameter(c.to(device) if device else c) for c in new])
        self._node_paths = torch.from_numpy(np.ascontiguousarray(tree.node_paths()))
        self._parents = [torch.from_numpy(np.ascontiguousarray(p)) for p in tree.parents[:m]]
        return not same

    # -- loss -------------------------------------------------------------------------------------
    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        """Embed every input column with the model, then :meth:`compute_loss_from_embeddings`."""
        feats = list(sentence_features)
        if self.mini_batch_size is not None and torch.is_grad_enabled():
            out = _cached_forward(
                self, feats, labels, self.compute_loss_from_embeddings, list(self.centroids), self.mini_batch_size
            )
            if out is not None:
                return out
        return self.compute_loss_from_embeddings(embed_columns(self.model, feats), labels)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> dict[str, Tensor]:
        """The loss components for ``[queries, positives, negatives_1, …]`` embeddings (each ``(batch, dim)``)."""
        if len(embeddings) < 2:
            raise ValueError(
                f"HierarchicalContrastiveLoss needs (anchor, positive, ...) columns, got {len(embeddings)}"
            )
        q = embeddings[0]
        docs = list(embeddings[1:])
        batch = q.size(0)
        device = q.device
        if labels is None:
            lab = torch.full((batch, len(docs)), -1, dtype=torch.long, device=device)
        else:
            lab = labels.to(device=device, dtype=torch.long).reshape(batch, -1)
            if lab.size(1) < len(docs):
                pad = torch.full((batch, len(docs) - lab.size(1)), -1, dtype=torch.long, device=device)
                lab = torch.cat([lab, pad], dim=1)
            lab = lab[:, : len(docs)]
        if self.gather_across_devices and is_distributed():
            q = gather_with_local_grad(q)
            docs = [gather_with_local_grad(d) for d in docs]
            lab = gather_with_local_grad(lab)
        qn = F.normalize(q.float(), dim=-1)
        dn = [F.normalize(d.float(), dim=-1) for d in docs]
        n = qn.size(0)
        pos_label = lab[:, 0]
        known = pos_label >= 0
        inv_t = 1.0 / self.temperature
        out: dict[str, Tensor] = {}
        if self.active_levels and (labels is not None):
            if self._node_paths.numel() and int(pos_label.max().item()) >= self._node_paths.size(0):
                raise ValueError(
                    f"label {int(pos_label.max().item())} is not an item of the tree ({self._node_paths.size(0)} items)"
                )
            paths = self._node_paths.to(device)[pos_label.clamp(min=0)]
            denom = known.sum().clamp(min=1)
            for t in range(1, self.active_levels + 1):
                cent = F.normalize(self.centroids[t - 1].float(), dim=-1)
                logits = qn @ cent.T * inv_t
                target = paths[:, t - 1]
                parents = self._parents[t - 1].to(device)
                siblings = parents[None, :] == parents[target][:, None]
                logits = logits.masked_fill(~siblings, float("-inf"))
                ce = F.cross_entropy(logits, target, reduction="none")
                level = torch.where(known, ce, torch.zeros_like(ce)).sum() / denom
                out[f"level_{t}"] = level * self.level_weight if self.level_weight != 1.0 else level
        all_docs = torch.cat(dn, dim=0)  # column-major: all positives, then each negatives column
        doc_labels = lab.T.reshape(-1)
        target = torch.arange(n, device=device)
        scores = qn @ all_docs.T * inv_t
        same = (doc_labels[None, :] == pos_label[:, None]) & known[:, None]
        same[target, target] = False
        loss_qd = F.cross_entropy(scores.masked_fill(same, float("-inf")), target)
        if self.symmetric:
            back = dn[0] @ qn.T * inv_t
            same_q = (pos_label[None, :] == pos_label[:, None]) & known[:, None]
            same_q[target, target] = False
            loss_dq = F.cross_entropy(back.masked_fill(same_q, float("-inf")), target)
            out["documents"] = loss_qd + loss_dq if self.direction_reduction == "sum" else (loss_qd + loss_dq) / 2
        else:
            out["documents"] = loss_qd
        return out

    # -- sentence-transformers conventions --------------------------------------------------------
    def get_config_dict(self) -> dict[str, Any]:
        """Hyper-parameters for the model card."""
        return {
            "levels_m": self.levels_m,
            "temperature": self.temperature,
            "symmetric": self.symmetric,
            "level_weight": self.level_weight,
            "direction_reduction": self.direction_reduction,
            "gather_across_devices": self.gather_across_devices,
            "mini_batch_size": self.mini_batch_size,
            "active_levels": self.active_levels,
        }

    @property
    def citation(self) -> str:
        """BibTeX of the HCE paper."""
        return HCE_CITATION


class ScaledLoss(nn.Module):
    """Multiply every component of another loss by ``weight`` (HCE-J's ``α`` on the unsupervised loss).

    Args:
        loss: The wrapped loss (returns a tensor or a dict of tensors).
        weight: The factor.
        prefix: Prepended to the component names, so both losses are logged apart.

    """

    def __init__(self, loss: nn.Module, weight: float, prefix: str = "") -> None:
        super().__init__()
        self.loss = loss
        self.weight = weight
        self.prefix = prefix

    @property
    def model(self) -> Any:
        """The wrapped loss's model (the trainer swaps in its DDP-wrapped model through this)."""
        return self.loss.model

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        """The wrapped loss, scaled."""
        value = self.loss(sentence_features, labels)
        if isinstance(value, dict):
            return {f"{self.prefix}{k}": v * self.weight for k, v in value.items()}
        return {f"{self.prefix}loss": value * self.weight}

    def get_config_dict(self) -> dict[str, Any]:
        """The weight and the wrapped loss's configuration."""
        inner: dict[str, Any] = getattr(self.loss, "get_config_dict", dict)()
        return {"weight": self.weight, **inner}


class JointLoss(nn.Module):
    """HCE-J's loss in one step: ``L_sup + alpha * L_unsup`` (Chen et al., 2025), both terms on the same batch of rows.

    Each row holds a supervised example followed by an unsupervised one: the first ``n_columns`` text columns
    (``query, positive, negative_1, …``) and the next ``n_columns`` (``pseudo-query, positive, negatives…``);
    the labels hold the item positions of both halves in the same order. All columns go through the model in
    one forward pass; each half is scored by the same :class:`HierarchicalContrastiveLoss` (shared trainable
    centroids), with its own in-batch negatives.

    Args:
        loss: The hierarchical loss applied to both halves.
        alpha: Weight of the unsupervised half (paper: 0.5).
        n_columns: Text columns per half.

    Returns:
        The supervised components and the unsupervised ones (``unsup_`` prefix, already multiplied by
        ``alpha``); the trainer sums them.

    """

    def __init__(self, loss: HierarchicalContrastiveLoss, alpha: float, n_columns: int) -> None:
        super().__init__()
        if n_columns < 2:
            raise ValueError(f"each half needs at least (anchor, positive) columns, got n_columns={n_columns}")
        self.loss = loss
        self.alpha = alpha
        self.n_columns = n_columns

    @property
    def model(self) -> Any:
        """The wrapped loss's model (the trainer swaps in its DDP-wrapped model through the child loss)."""
        return self.loss.model

    def forward(
        self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        """Embed all columns at once, then add the two halves' losses."""
        feats = list(sentence_features)
        n = self.n_columns
        if len(feats) != 2 * n:
            raise ValueError(f"JointLoss expects 2 x {n} text columns, got {len(feats)}")
        if labels is not None:
            lab = labels.reshape(labels.size(0), -1)
            if lab.size(1) != 2 * (n - 1):
                raise ValueError(f"JointLoss expects 2 x {n - 1} item labels per row, got {lab.size(1)}")
        inner = self.loss
        if inner.mini_batch_size is not None and torch.is_grad_enabled():
            out = _cached_forward(
                self, feats, labels, self.compute_loss_from_embeddings, list(inner.centroids), inner.mini_batch_size
            )
            if out is not None:
                return out
        return self.compute_loss_from_embeddings(embed_columns(inner.model, feats), labels)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None = None) -> dict[str, Tensor]:
        """Both halves' components from the embeddings of all ``2 x n_columns`` columns."""
        n = self.n_columns
        sup_labels = uns_labels = None
        if labels is not None:
            lab = labels.reshape(labels.size(0), -1)
            sup_labels, uns_labels = lab[:, : n - 1], lab[:, n - 1 :]
        sup = self.loss.compute_loss_from_embeddings(embeddings[:n], sup_labels)
        uns = self.loss.compute_loss_from_embeddings(embeddings[n:], uns_labels)
        return {**sup, **{f"unsup_{k}": v * self.alpha for k, v in uns.items()}}

    def get_config_dict(self) -> dict[str, Any]:
        """The weight and the wrapped loss's configuration."""
        return {"alpha": self.alpha, **self.loss.get_config_dict()}
