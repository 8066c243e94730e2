"""EHIIndexer: the learned tree index of EHI (Kumar et al., 2023), its leaf lists and its beam search.

EHI (End-to-end Hierarchical Indexing) learns an IVF-style tree of height ``H`` and branching ``B``
(``B^H`` leaves) jointly with a dual encoder. Every level ``h`` of the tree is one classifier shared by all
nodes of that level: its input is the encoder vector ``u = E(x)`` preceded by the one-hots of the children
chosen at the levels above,

    ``x_1 = u``,  ``x_h = [o(i^{h-1}); …; o(i^1); u]`` (``B(h-1) + m`` values),

passed through a residual block and a softmax over the ``B`` children:

    ``F(x) = x + ReLU(U_hᵀ x)``,  ``p̂^h = softmax(W_hᵀ F(x_h))``.

Training follows the argmax child at every level (``i^h = argmax p̂^h``) and represents the route by the
**path embedding** (Eq. 1, Alg. 2)

    ``T(x) = [p^1; …; p^H]``,  ``p^1 = p̂^1``,  ``p^h = p̂^h · Π_{k<h} p̂^k[i^k]``  (``B·H`` values),

whose inner products enter EHI's indexing losses (:mod:`rag_hier.training.ehi`). The probability of a leaf
``l`` with path ``(i_l^1, …, i_l^H)`` is ``Π_h p̂^h[i_l^h]`` (the one-hots of the input being that leaf's own
prefix); leaf ``l = Σ_h i_l^h · B^{H-h}`` (the first level is the most significant digit).

Search (:func:`ehi_search`): a beam search keeps the ``beam`` most probable prefixes at every level (product
of probabilities), the items assigned to the ``beam`` leaves reached are scored exactly by inner product,
and the result reports the **measured** number of items scored (leaves are not balanced, so ``beam / B^H``
is not the fraction visited). With ``beam = B^H`` every leaf, hence every item, is scored.

Items are assigned to their most probable leaf (greedy path) or, as in the paper's appendix E.8, to their
``k`` most probable leaves (:meth:`EHIIndexer.assign`, :class:`LeafAssignment`). Nothing here depends on a
store: the store extension and the ``ehi`` retrieval strategy are thin layers over :func:`ehi_search`.

Files: :meth:`EHIIndexer.save` writes the parameters as safetensors and the shape as JSON
(:meth:`EHIIndexer.save_pretrained` uses the fixed names of :data:`INDEXER_FILES` in a directory, next to a
sentence-transformers model); :meth:`EHIIndexer.load` checks names, shapes and values. Nothing is unpickled.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rag_hier.errors import DimensionMismatchError, ParameterError, StoreCorruptedError
from rag_hier.index.tree import TreeSearchResult

logger = logging.getLogger(__name__)

__all__ = [
    "EHI_CITATION",
    "INDEXER_FILES",
    "EHIIndexer",
    "LeafAssignment",
    "ehi_search",
]

EHI_FORMAT = "rag-hier-ehi-indexer"
EHI_FORMAT_VERSION = 1
INDEXER_FILES = ("ehi_indexer.safetensors", "ehi_indexer.json")
"""File names of :meth:`EHIIndexer.save_pretrained` (parameters, description)."""
MAX_LEAVES = 1 << 24
"""Largest ``B^H`` accepted (the beam search itself never enumerates every leaf)."""

EHI_CITATION = """@article{kumar2024ehi,
  title={EHI: End-to-end Learning of Hierarchical Index for Efficient Dense Retrieval},
  author={Kumar, Ramnath and Mittal, Anshul and Gupta, Nilesh and Kusupati, Aditya and Dhillon, Inderjit
          and Jain, Prateek},
  journal={Transactions on Machine Learning Research},
  year={2024}
}"""


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class EHIIndexer(nn.Module):
    """EHI's tree indexer: one residual classifier per level over ``[one-hots of the path so far; u]``.

    Args:
        dimension: ``m``, the encoder's embedding dimension.
        branching: ``B``, children per node (paper, SciFact: 40 leaves at height 1).
        height: ``H``, levels (``B^H`` leaves).
        seed: Seed of the random initialisation (``None``: torch's global generator).

    Example:
        >>> import numpy as np
        >>> indexer = EHIIndexer(dimension=16, branching=4, height=2, seed=0)
        >>> x = np.random.default_rng(0).normal(size=(100, 16)).astype(np.float32)
        >>> leaves = indexer.assign(x)               # each item's most probable leaf: shape (100, 1)
        >>> res = ehi_search(indexer, x[:2], x, leaves, beam=4, top_k=3)
        >>> res.ids.shape, bool((res.scored <= 100).all())
        ((2, 3), True)

    """

    def __init__(self, dimension: int, branching: int = 40, height: int = 1, *, seed: int | None = None) -> None:
        super().__init__()
        self.dimension = _check_int("dimension", dimension, 1)
        self.branching = _check_int("branching", branching, 2)
        self.height = _check_int("height", height, 1)
        if self.branching**self.height > MAX_LEAVES:
            raise ParameterError(
                f"branching ** height = {self.branching}**{self.height} leaves is more than {MAX_LEAVES} are supported"
            )
        self.info: dict[str, Any] = {}
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        # U_h and W_h, stored as nn.Linear stores its weight: (out, in); F.linear(x, U) computes Uᵀx of the paper
        self.residual = nn.ParameterList()
        self.classifier = nn.ParameterList()
        for h in range(1, self.height + 1):
            n_in = self.input_size(h)
            u = torch.empty(n_in, n_in)
            w = torch.empty(self.branching, n_in)
            for t in (u, w):  # nn.Linear's own initialisation, drawn from ``gen`` when seeded
                nn.init.kaiming_uniform_(t, a=math.sqrt(5), generator=gen)
            self.residual.append(nn.Parameter(u))
            self.classifier.append(nn.Parameter(w))

    # -- shape ------------------------------------------------------------------------------------
    @property
    def n_leaves(self) -> int:
        """``B^H``."""
        return int(self.branching**self.height)

    def input_size(self, level: int) -> int:
        """Input width of level ``level`` (1-based): ``B·(level-1) + m``."""
        return self.branching * (level - 1) + self.dimension

    @property
    def device(self) -> torch.device:
        """Where the parameters live."""
        return self._w(1).device

    def leaf_of_path(self, path: Tensor) -> Tensor:
        """Leaf index of ``(n, H)`` child indices (first level most significant)."""
        weights = self.branching ** torch.arange(self.height - 1, -1, -1, device=path.device)
        return (path * weights).sum(dim=1)

    def path_of_leaf(self, leaves: Tensor) -> Tensor:
        """``(n, H)`` child indices of leaf indices (inverse of :meth:`leaf_of_path`)."""
        out = []
        rest = leaves.clone()
        for _ in range(self.height):
            out.append(rest % self.branching)
            rest = torch.div(rest, self.branching, rounding_mode="floor")
        return torch.stack(out[::-1], dim=1)

    # -- the per-level classifiers ----------------------------------------------------------------
    def _u(self, level: int) -> Tensor:
        out: Tensor = self.residual[level - 1]
        return out

    def _w(self, level: int) -> Tensor:
        out: Tensor = self.classifier[level - 1]
        return out

    def level_input(self, level: int, u: Tensor, prefix: Tensor) -> Tensor:
        """``x_h = [o(i^{h-1}); …; o(i^1); u]`` for ``(n, h-1)`` prefixes ``(i^1, …, i^{h-1})``."""
        if level == 1:
            return u
        onehots = F.one_hot(prefix.flip(1), self.branching).to(u.dtype).reshape(u.size(0), -1)
        return torch.cat([onehots, u], dim=1)

    def level_log_probs(self, level: int, u: Tensor, prefix: Tensor) -> Tensor:
        """``log p̂^h = log softmax(W_hᵀ F(x_h))`` with ``F(x) = x + ReLU(U_hᵀ x)``: ``(n, B)``."""
        x = self.level_input(level, u, prefix)
        f = x + F.relu(F.linear(x, self._u(level)))
        return F.log_softmax(F.linear(f, self._w(level)), dim=-1)

    def forward(self, u: Tensor) -> Tensor:
        """The path embedding ``T(u)`` (Eq. 1, Alg. 2): ``(n, B·H)``, differentiable in ``u`` and the parameters."""
        return self.path_embedding(u)

    def path_embedding(self, u: Tensor) -> Tensor:
        """``T(u) = [p^1; …; p^H]`` along the argmax path (see the module docstring)."""
        n = u.size(0)
        prefix = torch.zeros((n, 0), dtype=torch.long, device=u.device)
        scale: Tensor | None = None
        parts = []
        for h in range(1, self.height + 1):
            p_hat = self.level_log_probs(h, u, prefix).exp()
            parts.append(p_hat if scale is None else p_hat * scale[:, None])
            choice = p_hat.detach().argmax(dim=1)
            chosen = p_hat.gather(1, choice[:, None]).squeeze(1)
            scale = chosen if scale is None else scale * chosen
            prefix = torch.cat([prefix, choice[:, None]], dim=1)
        return torch.cat(parts, dim=1)

    def greedy_path(self, u: Tensor) -> Tensor:
        """``(n, H)`` argmax child at every level (the path training follows)."""
        prefix = torch.zeros((u.size(0), 0), dtype=torch.long, device=u.device)
        for h in range(1, self.height + 1):
            choice = self.level_log_probs(h, u, prefix).argmax(dim=1)
            prefix = torch.cat([prefix, choice[:, None]], dim=1)
        return prefix

    def leaf_log_probs(self, u: Tensor) -> Tensor:
        """``(n, B^H)`` log-probability of every leaf (enumerates all ``B^{H-1}`` prefixes: for small trees, tests)."""
        n = u.size(0)
        logp = torch.zeros((n, 1), dtype=u.dtype, device=u.device)
        prefixes = torch.zeros((1, 0), dtype=torch.long, device=u.device)
        b = self.branching
        for h in range(1, self.height + 1):
            k = prefixes.size(0)
            rows_u = u.repeat_interleave(k, dim=0)
            rows_prefix = prefixes.repeat(n, 1)
            level = self.level_log_probs(h, rows_u, rows_prefix).reshape(n, k, b)
            logp = (logp[:, :, None] + level).reshape(n, k * b)
            children = torch.arange(b, device=u.device)
            prefixes = torch.cat(
                [prefixes.repeat_interleave(b, dim=0), children.repeat(k)[:, None]], dim=1
            )  # lexicographic: leaf index order
        return logp

    def beam_search(self, u: Tensor, beam: int) -> tuple[Tensor, Tensor]:
        """The ``beam`` most probable leaves of each row by beam search over path probabilities.

        At every level the ``beam`` best prefixes (by the sum of log-probabilities so far) are kept among
        the children of those kept above; ties go to the smaller leaf index.

        Returns:
            ``(leaves, log_probs)``, both ``(n, beam)``, most probable first.

        """
        beam = self._check_beam(beam)
        n = u.size(0)
        b = self.branching
        prefix = torch.zeros((n, 1, 0), dtype=torch.long, device=u.device)
        logp = torch.zeros((n, 1), dtype=u.dtype, device=u.device)
        for h in range(1, self.height + 1):
            k = prefix.size(1)
            level = self.level_log_probs(h, u.repeat_interleave(k, dim=0), prefix.reshape(n * k, h - 1))
            cand = (logp[:, :, None] + level.reshape(n, k, b)).reshape(n, k * b)
            children = torch.arange(b, device=u.device).repeat(k)
            cand_prefix = torch.cat(
                [prefix.repeat_interleave(b, dim=1), children[None, :, None].expand(n, k * b, 1)], dim=2
            )
            keep = min(beam, k * b)
            # sort by probability, ties by leaf index: order candidates by index first, then a stable sort
            partial = (cand_prefix * (b ** torch.arange(h - 1, -1, -1, device=u.device))).sum(dim=2)
            by_index = partial.argsort(dim=1, stable=True)
            cand, cand_prefix = cand.gather(1, by_index), cand_prefix.gather(1, by_index[:, :, None].expand(-1, -1, h))
            order = cand.argsort(dim=1, descending=True, stable=True)[:, :keep]
            logp = cand.gather(1, order)
            prefix = cand_prefix.gather(1, order[:, :, None].expand(-1, -1, h))
        leaves = self.leaf_of_path(prefix.reshape(n * beam, self.height)).reshape(n, beam)
        return leaves, logp

    def _check_beam(self, beam: int) -> int:
        if isinstance(beam, bool) or not isinstance(beam, int | np.integer) or not 1 <= beam <= self.n_leaves:
            raise ParameterError(f"beam must be an integer in 1..{self.n_leaves} (the number of leaves), got {beam!r}")
        return int(beam)

    # -- numpy front end --------------------------------------------------------------------------
    def _as_input(self, vectors: np.ndarray | Tensor, what: str) -> Tensor:
        x = vectors if isinstance(vectors, Tensor) else torch.from_numpy(np.asarray(vectors, dtype=np.float32))
        if x.ndim == 1:
            x = x[None, :]
        if x.ndim != 2:
            raise DimensionMismatchError(
                f"{what} must be a 2-d array (n, {self.dimension}), got shape {tuple(x.shape)}"
            )
        if x.shape[1] != self.dimension:
            raise DimensionMismatchError(
                f"{what} are {x.shape[1]}-d; the EHI indexer was built for {self.dimension}-d vectors"
            )
        if not torch.isfinite(x).all():
            raise ParameterError(f"{what} contain NaN or infinite values")
        # routed as trained: the indexer learns on unit-normalised encoder vectors (EHILoss), so a dot-product
        # model's stored and query vectors are normalised here too (zero vectors stay zero)
        x = torch.nn.functional.normalize(x.float(), dim=-1)
        return x.to(device=self.device, dtype=self._w(1).dtype)

    @torch.no_grad()
    def route(
        self, vectors: np.ndarray | Tensor, beam: int, *, batch_size: int = 4096
    ) -> tuple[np.ndarray, np.ndarray]:
        """Beam search for many vectors: ``(leaves, log_probs)`` as ``(n, beam)`` numpy arrays."""
        beam = self._check_beam(beam)
        x = self._as_input(vectors, "vectors")
        was_training = self.training
        self.eval()
        try:
            leaves, logps = [], []
            for start in range(0, x.size(0), batch_size):
                lv, lp = self.beam_search(x[start : start + batch_size], beam)
                leaves.append(lv.cpu())
                logps.append(lp.float().cpu())
        finally:
            self.train(was_training)
        if not leaves:
            return np.zeros((0, beam), np.int64), np.zeros((0, beam), np.float32)
        return torch.cat(leaves).numpy().astype(np.int64), torch.cat(logps).numpy()

    def assign(self, vectors: np.ndarray | Tensor, top_k: int = 1, *, batch_size: int = 4096) -> np.ndarray:
        """Leaves of items: ``(n, top_k)``, the most probable first (``top_k = 1``: the greedy argmax path).

        ``top_k > 1`` is the paper's multi-leaf assignment (appendix E.8, "d2l"): the ``top_k`` leaves of a
        beam search of width ``top_k``.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or not 1 <= top_k <= self.n_leaves:
            raise ParameterError(f"top_k (leaves per item) must be in 1..{self.n_leaves}, got {top_k!r}")
        return self.route(vectors, int(top_k), batch_size=batch_size)[0]

    # -- k-means warm start -----------------------------------------------------------------------
    def init_kmeans(
        self,
        vectors: np.ndarray,
        *,
        seed: int = 0,
        niter: int = 20,
        steps: int = 300,
        lr: float = 0.01,
        batch_size: int = 1024,
    ) -> np.ndarray:
        """Warm start: fit the classifiers to a hierarchical spherical k-means tree of ``vectors``.

        Level 1 clusters all vectors into ``B`` clusters, level ``h`` splits each level-``(h-1)`` cluster
        into ``B`` (FAISS spherical k-means). The first level starts from the closed form (``U_1 = 0``,
        ``W_1`` = centroids / 0.05, i.e. nearest centroid), then all levels are fitted for ``steps`` Adam
        steps of cross-entropy against the k-means child of each vector given its true k-means prefix.

        Returns:
            ``(n, H)`` the k-means paths the indexer was fitted to.

        """
        import faiss

        x = np.ascontiguousarray(self._as_input(vectors, "vectors").cpu().numpy(), dtype=np.float32)
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        n, b = x.shape[0], self.branching
        if n < b:
            raise ParameterError(f"k-means initialisation needs at least branching={b} vectors, got {n}")
        paths = np.zeros((n, self.height), np.int64)
        groups: list[np.ndarray] = [np.arange(n)]
        first_centroids = None
        for h in range(self.height):
            next_groups: list[np.ndarray] = []
            for g, members in enumerate(groups):
                if members.size == 0:
                    next_groups.extend(np.zeros(0, np.int64) for _ in range(b))
                    continue
                k = min(b, members.size)
                km = faiss.Kmeans(
                    x.shape[1], k, niter=niter, seed=seed + h * 7919 + g, spherical=True,
                    min_points_per_centroid=1, verbose=False,
                )  # fmt: skip
                km.train(x[members])
                _, lab = km.index.search(x[members], 1)
                labels = lab[:, 0].astype(np.int64)
                paths[members, h] = labels
                if h == 0:
                    first_centroids = km.centroids.copy()
                next_groups.extend(members[labels == c] for c in range(b))
            groups = next_groups
        with torch.no_grad():
            self._u(1).zero_()
            w = torch.zeros_like(self._w(1))
            if first_centroids is not None:
                w[: first_centroids.shape[0]] = torch.from_numpy(first_centroids / 0.05).to(w)
            self._w(1).copy_(w)
        gen = torch.Generator().manual_seed(seed)
        xt = torch.from_numpy(x).to(self.device)
        pt = torch.from_numpy(paths).to(self.device)
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        was_training = self.training
        self.train()
        for _ in range(steps):
            rows = torch.randint(0, n, (min(batch_size, n),), generator=gen).to(self.device)
            loss = sum(
                F.nll_loss(self.level_log_probs(h, xt[rows], pt[rows, : h - 1]), pt[rows, h - 1])
                for h in range(1, self.height + 1)
            )
            opt.zero_grad()
            loss.backward()  # type: ignore[union-attr]
            opt.step()
        self.train(was_training)
        return paths

    # -- persistence ------------------------------------------------------------------------------
    def tensors(self) -> dict[str, Tensor]:
        """The parameters by file name: ``level.{h}.residual`` (``U_h``) and ``level.{h}.classifier`` (``W_h``)."""
        out: dict[str, Tensor] = {}
        for h in range(1, self.height + 1):
            out[f"level.{h}.residual"] = self._u(h).detach().float().cpu().contiguous()
            out[f"level.{h}.classifier"] = self._w(h).detach().float().cpu().contiguous()
        return out

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of every tensor of :meth:`tensors` (what :meth:`load` checks)."""
        out: dict[str, tuple[int, ...]] = {}
        for h in range(1, self.height + 1):
            n_in = self.input_size(h)
            out[f"level.{h}.residual"] = (n_in, n_in)
            out[f"level.{h}.classifier"] = (self.branching, n_in)
        return out

    def to_json(self, info: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The JSON half of the files (``info``: free-form facts, e.g. how it was trained)."""
        return {
            "format": EHI_FORMAT,
            "format_version": EHI_FORMAT_VERSION,
            "dimension": self.dimension,
            "branching": self.branching,
            "height": self.height,
            "n_leaves": self.n_leaves,
            "info": dict(info or {}),
        }

    def save(self, tensors_path: str | Path, json_path: str | Path, *, info: Mapping[str, Any] | None = None) -> None:
        """Write the parameters (safetensors) and the description (JSON); the caller makes it atomic."""
        from safetensors.torch import save_file

        save_file(
            self.tensors(), str(tensors_path), metadata={"format": EHI_FORMAT, "version": str(EHI_FORMAT_VERSION)}
        )
        Path(json_path).write_text(json.dumps(self.to_json(info), indent=1) + "\n", encoding="utf-8")

    def save_pretrained(self, directory: str | Path, *, info: Mapping[str, Any] | None = None) -> None:
        """:meth:`save` to ``directory`` under the names of :data:`INDEXER_FILES`."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.save(d / INDEXER_FILES[0], d / INDEXER_FILES[1], info=info)

    @classmethod
    def load(cls, tensors_path: str | Path, json_path: str | Path, *, device: str | None = None) -> EHIIndexer:
        """Read an indexer written by :meth:`save`, checking format, shapes and values.

        Raises:
            StoreCorruptedError: A file is missing, unreadable, of another format or inconsistent.

        """
        from safetensors import safe_open
        from safetensors.torch import load_file

        meta = read_indexer_json(json_path)
        # the shapes the description implies, checked against the tensors file's header (whose shapes the file's
        # size bounds) before the indexer's parameters are allocated: a description cannot allocate by itself
        dim, branching, height = meta["dimension"], meta["branching"], meta["height"]
        if dim < 1 or branching < 2 or not 1 <= height <= 64:
            raise StoreCorruptedError(
                f"{json_path}: invalid indexer shape (dimension {dim}, B={branching}, H={height})"
            )
        implied = {}
        for h in range(1, height + 1):
            n_in = branching * (h - 1) + dim
            implied[f"level.{h}.residual"] = (n_in, n_in)
            implied[f"level.{h}.classifier"] = (branching, n_in)
        try:
            with safe_open(str(tensors_path), framework="pt") as f:
                held = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118
        except Exception as exc:  # safetensors raises its own error types (and OSError for a missing file)
            raise StoreCorruptedError(f"{tensors_path}: not a readable safetensors file ({exc})") from exc
        if held != implied:
            raise StoreCorruptedError(
                f"{tensors_path}: its tensors {held} do not match {json_path} (dimension {dim}, B={branching}, "
                f"H={height}: {implied})"[:600]
            )
        try:
            indexer = cls(meta["dimension"], meta["branching"], meta["height"])
        except ParameterError as exc:
            raise StoreCorruptedError(f"{json_path}: invalid indexer shape ({exc})") from exc
        try:
            tensors = load_file(str(tensors_path))
        except Exception as exc:  # safetensors raises its own error types (and OSError for a missing file)
            raise StoreCorruptedError(f"{tensors_path}: not a readable safetensors file ({exc})") from exc
        expected = indexer.expected_shapes()
        if set(tensors) != set(expected):
            raise StoreCorruptedError(
                f"{tensors_path}: holds tensors {sorted(tensors)}, expected {sorted(expected)} for "
                f"{json_path} (B={indexer.branching}, H={indexer.height}, {indexer.dimension}-d)"
            )
        for name, shape in expected.items():
            t = tensors[name]
            if tuple(t.shape) != shape or not t.is_floating_point():
                raise StoreCorruptedError(
                    f"{tensors_path}: tensor {name} has shape {tuple(t.shape)} ({t.dtype}), expected {shape} float"
                )
            if not torch.isfinite(t).all():
                raise StoreCorruptedError(f"{tensors_path}: tensor {name} contains NaN or infinite values")
        with torch.no_grad():
            for h in range(1, indexer.height + 1):
                indexer._u(h).copy_(tensors[f"level.{h}.residual"].float())
                indexer._w(h).copy_(tensors[f"level.{h}.classifier"].float())
        indexer.info = dict(meta.get("info") or {})
        if device is not None:
            indexer.to(device)
        indexer.eval()
        return indexer

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, device: str | None = None) -> EHIIndexer:
        """:meth:`load` from ``directory`` (the files of :meth:`save_pretrained`)."""
        d = Path(directory)
        return cls.load(d / INDEXER_FILES[0], d / INDEXER_FILES[1], device=device)

    def describe(self) -> dict[str, Any]:
        """Shape facts (for manifests, logs and ``rag-hier info``)."""
        return {
            "dimension": self.dimension,
            "branching": self.branching,
            "height": self.height,
            "n_leaves": self.n_leaves,
            "parameters": int(sum(p.numel() for p in self.parameters())),
        }

    def extra_repr(self) -> str:
        """Shown by ``repr``."""
        return f"dimension={self.dimension}, branching={self.branching}, height={self.height}"


def read_indexer_json(json_path: str | Path) -> dict[str, Any]:
    """The JSON description of an indexer, checked (format, version, integer shape fields)."""
    try:
        meta = json.loads(Path(json_path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreCorruptedError(f"{json_path}: not a readable EHI indexer description ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != EHI_FORMAT:
        raise StoreCorruptedError(f"{json_path}: not a {EHI_FORMAT} file")
    version = meta.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise StoreCorruptedError(f"{json_path}: format_version must be a positive integer, got {version!r}")
    if version > EHI_FORMAT_VERSION:
        raise StoreCorruptedError(
            f"{json_path}: EHI indexer format version {version} is newer than this rag-hier reads "
            f"({EHI_FORMAT_VERSION})"
        )
    for key in ("dimension", "branching", "height"):
        if isinstance(meta.get(key), bool) or not isinstance(meta.get(key), int):
            raise StoreCorruptedError(f"{json_path}: field {key!r} must be an integer, got {meta.get(key)!r}")
    if meta.get("info") is not None and not isinstance(meta["info"], dict):
        raise StoreCorruptedError(f"{json_path}: field 'info' must be an object")
    return meta


class LeafAssignment:
    """Which leaves hold each item, as inverted lists (CSR): one leaf per item, or several (d2l).

    Args:
        leaves: ``(n,)`` or ``(n, k)`` leaf indices of the ``n`` items (row ``i`` = item position ``i``);
            with ``k > 1``, ``-1`` pads rows of items in fewer leaves (the first column must be a leaf).
        n_leaves: Number of leaves of the indexer.

    """

    def __init__(self, leaves: np.ndarray, n_leaves: int) -> None:
        self.n_leaves = _check_int("n_leaves", n_leaves, 1)
        arr = np.asarray(leaves)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise ParameterError(
                f"leaf assignment must be an (n,) or (n, k) integer array, got {arr.dtype} {arr.shape}"
            )
        arr = arr.astype(np.int64, copy=False)
        if arr.size:
            if arr.min() < -1 or arr.max() >= self.n_leaves:
                raise ParameterError(
                    f"leaf assignment holds leaf {int(arr.min() if arr.min() < -1 else arr.max())}; "
                    f"leaves are 0..{self.n_leaves - 1}"
                )
            if arr.shape[1] and (arr[:, 0] < 0).any():
                raise ParameterError(f"item {int(np.argmax(arr[:, 0] < 0))} is assigned to no leaf")
        self.leaves = np.ascontiguousarray(arr)
        n, k = arr.shape
        flat = arr.reshape(-1)
        valid = flat >= 0
        pos = np.repeat(np.arange(n, dtype=np.int64), k)[valid]
        lf = flat[valid]
        order = np.argsort(lf, kind="stable")
        self._positions = pos[order]
        self._ptr = np.searchsorted(lf[order], np.arange(self.n_leaves + 1), side="left")

    @property
    def n_items(self) -> int:
        """Number of items."""
        return int(self.leaves.shape[0])

    @property
    def leaves_per_item(self) -> int:
        """Columns of the assignment (``k``)."""
        return int(self.leaves.shape[1])

    def __len__(self) -> int:
        return self.n_items

    def sizes(self) -> np.ndarray:
        """Items per leaf (an item in ``k`` leaves counts in each)."""
        return np.diff(self._ptr).astype(np.int64)

    def leaf(self, leaf: int) -> np.ndarray:
        """Item positions in ``leaf``."""
        return self._positions[self._ptr[leaf] : self._ptr[leaf + 1]]

    def members(self, leaves: np.ndarray) -> np.ndarray:
        """Item positions in any of ``leaves`` (each once, sorted)."""
        parts = [self._positions[self._ptr[leaf] : self._ptr[leaf + 1]] for leaf in np.asarray(leaves).reshape(-1)]
        if not parts:
            return np.zeros(0, np.int64)
        out = np.concatenate(parts)
        return np.unique(out) if self.leaves_per_item > 1 or len(parts) > 1 else out

    def describe(self) -> dict[str, Any]:
        """Balance facts: leaf-size distribution and the expected fraction scored by a query routed like an item."""
        sizes = self.sizes()
        nonempty = sizes[sizes > 0]
        n = max(self.n_items, 1)
        return {
            "items": self.n_items,
            "leaves": self.n_leaves,
            "leaves_per_item": self.leaves_per_item,
            "leaves_nonempty": int(nonempty.size),
            "leaf_size_max": int(sizes.max()) if sizes.size else 0,
            "leaf_size_mean": round(float(nonempty.mean()), 2) if nonempty.size else 0.0,
            "leaf_size_std": round(float(sizes.std()), 2) if sizes.size else 0.0,
            # an item picked uniformly lands in a leaf of size s with probability s/n: E[s]/n = Σ s² / n²
            "expected_fraction_one_leaf": round(float((sizes.astype(np.float64) ** 2).sum() / n**2), 5),
        }


ItemVectors = np.ndarray | Callable[[np.ndarray], np.ndarray]


def ehi_search(
    indexer: EHIIndexer,
    queries: np.ndarray,
    item_vectors: ItemVectors,
    item_leaves: np.ndarray | LeafAssignment,
    *,
    beam: int,
    top_k: int,
    item_ids: np.ndarray | None = None,
    allowed_ids: np.ndarray | None = None,
    batch_size: int = 4096,
) -> TreeSearchResult:
    """EHI search: route each query by beam search, score exactly the items of the ``beam`` leaves reached.

    Args:
        indexer: The trained indexer.
        queries: ``(n_queries, m)`` query vectors (encoded by the encoder the indexer was trained with).
        item_vectors: ``(n_items, m)`` item vectors (the score is their inner product with the query), or a
            callable returning the vectors of item *positions* (rows of ``item_leaves``).
        item_leaves: Leaf of every item: ``(n_items,)``, ``(n_items, k)`` or a :class:`LeafAssignment`
            (what :meth:`EHIIndexer.assign` returns for the item vectors).
        beam: Leaves visited per query, ``1 .. B^H``.
        top_k: Results per query.
        item_ids: int64 id of every item position (default: the positions ``0 .. n_items-1``).
        allowed_ids: Only these item ids may be scored and returned (a filter).
        batch_size: Queries routed per indexer call.

    Returns:
        A :class:`~rag_hier.index.tree.TreeSearchResult`: ``ids``/``scores`` ``(n_queries, top_k)``
        (``-1``/``-inf`` padded), ``scored`` = items whose vectors were compared with each query (an item
        in several visited leaves counts once), ``leaves_visited`` = ``beam``, ``n_items``; its
        ``fraction_scored`` is the measured fraction of the collection scored per query.

    Raises:
        ParameterError: ``beam`` outside ``1 .. B^H``, ``top_k < 1``, or a leaf assignment that does not
            fit the items or the indexer.
        DimensionMismatchError: Queries or item vectors of another dimension than the indexer's.

    """
    beam = indexer._check_beam(beam)
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise ParameterError(f"top_k must be an integer >= 1, got {top_k!r}")
    if isinstance(item_leaves, LeafAssignment):
        assignment = item_leaves
        if assignment.n_leaves != indexer.n_leaves:
            raise ParameterError(
                f"the leaf assignment has {assignment.n_leaves} leaves; the indexer has {indexer.n_leaves}"
            )
    else:
        assignment = LeafAssignment(item_leaves, indexer.n_leaves)
    n_items = assignment.n_items
    if callable(item_vectors):
        vectors_of = item_vectors
    else:
        vecs = np.asarray(item_vectors, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != indexer.dimension:
            raise DimensionMismatchError(
                f"item vectors have shape {tuple(vecs.shape)}; the EHI indexer is {indexer.dimension}-d"
            )
        if vecs.shape[0] != n_items:
            raise ParameterError(f"{vecs.shape[0]} item vectors but a leaf assignment of {n_items} items")

        def vectors_of(pos: np.ndarray) -> np.ndarray:
            return vecs[pos]

    ids_of = np.arange(n_items, dtype=np.int64) if item_ids is None else np.asarray(item_ids, dtype=np.int64)
    if ids_of.shape != (n_items,):
        raise ParameterError(f"{ids_of.shape[0] if ids_of.ndim else 0} item ids for {n_items} items")
    q = np.asarray(queries, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    leaves, _ = indexer.route(q, beam, batch_size=batch_size)  # checks the query dimension
    n_q = q.shape[0]
    scores = np.full((n_q, top_k), -np.inf, np.float32)
    ids = np.full((n_q, top_k), -1, np.int64)
    scored = np.zeros(n_q, np.int64)
    allowed_mask = None if allowed_ids is None else np.isin(ids_of, np.asarray(allowed_ids, np.int64))
    for i in range(n_q):
        pos = assignment.members(leaves[i])
        if allowed_mask is not None:
            pos = pos[allowed_mask[pos]]
        scored[i] = pos.size
        if not pos.size:
            continue
        s = np.asarray(vectors_of(pos), dtype=np.float32) @ q[i]
        k = min(top_k, pos.size)
        top = np.argpartition(-s, k - 1)[:k] if pos.size > k else np.arange(pos.size)
        top = top[np.lexsort((ids_of[pos[top]], -s[top]))]
        scores[i, :k] = s[top]
        ids[i, :k] = ids_of[pos[top]]
    return TreeSearchResult(
        scores=scores, ids=ids, scored=scored, leaves_visited=np.full(n_q, beam, np.int64), n_items=n_items
    )
