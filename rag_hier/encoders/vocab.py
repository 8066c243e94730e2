"""VocabEncoder: SVDR's parametric representation E(x), a sparse vector over the tokenizer's vocabulary.

Forward pass (Zhou, Dong, Wei, Chen, arXiv 2405.01924; reference code ``jzhoubu/vsearch``):

1. ``h = backbone(x).last_hidden_state`` — any BERT-family encoder with a vocabulary.
2. Vocabulary projection, one of
   - ``"tied-embeddings"`` (the reference's choice): a new ``LayerNorm`` on ``h``, then the product with
     the tied input word-embedding matrix, no bias;
   - ``"mlm-head"``: the checkpoint's masked-language-model head (its transform — dense, activation,
     LayerNorm — then the decoder with its bias).
   ``projection="auto"`` takes the MLM head when the checkpoint has one, else the tied embeddings (so the
   default all-MiniLM-L6-v2, which ships without an MLM head, uses the tied embeddings).
3. ``elu1p(x) = elu(x) + 1`` (every value > 0).
4. **Masked** max-pooling over the text's real tokens (``[CLS]`` and ``[SEP]`` included, padding
   excluded). The reference pools over padding too, so a text's vector depends on its batch; here it
   does not (up to float rounding), which is also what lets β+rerank cache vectors.
5. Sparsification: the ``top_k`` largest dimensions (768), **plus the text's own tokens**
   (``activate_lexical=True``, the reference's ``embed()``/β-search default). The same rule is used for
   indexing, search and training, so a passage always keeps weight on the tokens the binary index
   records for it, and a query always weights its own tokens in β search.

Special and placeholder tokens (``[CLS]``, ``[unused17]``, ...) are never dimensions; for BERT's uncased
vocabulary that leaves the reference's 29,523 of 30,522 (see :class:`TokenBinarizer`).

Memory: the projection would materialise a ``(batch, length, vocab)`` tensor (≈1 GB for 32 passages of
256 tokens). It is computed in position blocks of at most ``chunk_elements`` values with a running max.
In training, the max is taken without gradient and only the kept ``(text, token)`` entries are
recomputed with gradient at their arg-max position — the same values and the same (sub)gradient as a
full max-pool, at a fraction of the memory.

Saving writes a directory that :class:`VocabEncoder` loads: ``vocab_encoder.json`` (configuration),
``vocab_head.safetensors`` (the new LayerNorm) and ``backbone/`` (``save_pretrained`` of the transformer
and its tokenizer). Nothing is pickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier._logging import progress
from rag_hier.encoders.binarizer import (
    VOCAB_ENCODER_CONFIG,
    SparseVector,
    TokenBinarizer,
    resolve_backbone_dir,
    to_sparse_vectors,
)
from rag_hier.encoders.dense import DEFAULT_MODEL
from rag_hier.encoders.device import resolve_device
from rag_hier.errors import RagHierError

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TOP_K",
    "Projection",
    "TextKind",
    "TrainingEncoding",
    "VocabEncoder",
    "VocabEncoderConfig",
]

Projection = Literal["auto", "mlm-head", "tied-embeddings"]
TextKind = Literal["query", "document"]
DEFAULT_TOP_K = 768
HEAD_FILE = "vocab_head.safetensors"
_FORMAT = "rag-hier-vocab-encoder"
_VERSION = 1
_PROJECTIONS = ("auto", "mlm-head", "tied-embeddings")
_MLM_HEAD_KEYS = ("cls.predictions.transform.", "lm_head.dense.", "vocab_transform.")


@dataclass(frozen=True)
class VocabEncoderConfig:
    """What defines a vocabulary encoder's outputs (saved as ``vocab_encoder.json``).

    Args:
        projection: ``"tied-embeddings"`` or ``"mlm-head"`` (resolved; never ``"auto"`` here).
        top_k: Dimensions kept per text besides its own tokens; ``0``: only its own tokens; ``None``: all.
        activate_lexical: Always keep the text's own tokens active (see the module docstring).
        query_max_length: Tokens per query (special tokens included).
        document_max_length: Tokens per passage (special tokens included).
        selection_precision: Precision of the full vocabulary projection that chooses the kept
            dimensions (``"bfloat16"`` is faster on CPUs with AVX512-BF16, docs/svdr.md; the kept values are
            then recomputed in float32, so only which dimensions sit at the top-k boundary can differ).
        base_model: The model the backbone came from (informational).

    """

    projection: Literal["mlm-head", "tied-embeddings"] = "tied-embeddings"
    top_k: int | None = DEFAULT_TOP_K
    activate_lexical: bool = True
    query_max_length: int = 128
    document_max_length: int = 256
    selection_precision: Literal["float32", "bfloat16"] = "float32"
    base_model: str = ""

    def __post_init__(self) -> None:
        if self.selection_precision not in ("float32", "bfloat16"):
            raise ValueError(f"selection_precision must be 'float32' or 'bfloat16', got {self.selection_precision!r}")
        if self.projection not in ("mlm-head", "tied-embeddings"):
            raise ValueError(f"projection must be 'mlm-head' or 'tied-embeddings', got {self.projection!r}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 or None, got {self.top_k}")
        if self.top_k == 0 and not self.activate_lexical:
            raise ValueError("top_k=0 keeps only the text's own tokens, which needs activate_lexical=True")
        for name in ("query_max_length", "document_max_length"):
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be >= 2, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VocabEncoderConfig:
        """Inverse of :meth:`to_dict` (unknown keys are an error)."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise RagHierError(f"unknown vocabulary encoder option(s): {', '.join(sorted(unknown))}")
        return cls(**dict(data))


@dataclass(frozen=True)
class TrainingEncoding:
    """Differentiable encodings for a training step, over the kept vocabulary (``(n, n_kept)`` tensors).

    Args:
        values: E(x), sparsified (zeros outside the kept dimensions), with gradient.
        lexical: T(x), the binary bag of the text's own tokens (no gradient).

    """

    values: torch.Tensor
    lexical: torch.Tensor


def _local_mlm_head(hf_dir: str) -> bool | None:
    """Whether the checkpoint in ``hf_dir`` has MLM-head weights (``None``: cannot tell without loading)."""
    root = Path(hf_dir)
    if not root.is_dir():
        return None
    keys: list[str] = []
    index = root / "model.safetensors.index.json"
    if index.is_file():
        keys = list(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}))
    elif (root / "model.safetensors").is_file():
        from safetensors import safe_open

        with safe_open(str(root / "model.safetensors"), framework="pt") as f:
            keys = list(f.keys())
    else:
        return None
    return any(k.startswith(p) or f".{p}" in k for k in keys for p in _MLM_HEAD_KEYS)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' load reports while we probe a checkpoint."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _build_module(backbone: PreTrainedModel, projection: str, kept_ids: np.ndarray, vocab_size: int) -> Any:
    """The torch module: backbone + projection onto the kept vocabulary (defined lazily: torch is heavy)."""
    import torch
    from torch import nn

    class VocabModule(nn.Module):
        """Backbone, vocabulary projection and elu1p; pooling and sparsification live in the encoder."""

        def __init__(self) -> None:
            super().__init__()
            self.backbone = backbone
            self.projection = projection
            hidden = int(backbone.config.hidden_size)
            self.norm = nn.LayerNorm(hidden) if projection == "tied-embeddings" else None
            self.register_buffer("kept_ids", torch.as_tensor(kept_ids, dtype=torch.long), persistent=False)
            to_kept = torch.full((vocab_size,), -1, dtype=torch.long)
            to_kept[torch.as_tensor(kept_ids, dtype=torch.long)] = torch.arange(len(kept_ids))
            self.register_buffer("vocab_to_kept", to_kept, persistent=False)
            self._family = _mlm_family(backbone) if projection == "mlm-head" else ""

        @property
        def base(self) -> nn.Module:
            return self.backbone.base_model if self.projection == "mlm-head" else self.backbone

        def hidden(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            """Projected-ready hidden states ``(batch, length, hidden)``."""
            h = self.base(**batch).last_hidden_state
            if self.norm is not None:
                return self.norm(h)
            m: Any = self.backbone
            if self._family == "bert":
                return m.cls.predictions.transform(h)
            if self._family == "roberta":
                return m.lm_head.layer_norm(torch.nn.functional.gelu(m.lm_head.dense(h)))
            return m.vocab_layer_norm(m.activation(m.vocab_transform(h)))  # distilbert

        def vocab_weight(self) -> tuple[torch.Tensor, torch.Tensor | None]:
            """Projection weight ``(vocab, hidden)`` and bias ``(vocab,)`` (``None`` for tied embeddings)."""
            m: Any = self.backbone
            if self.norm is not None:
                return m.get_input_embeddings().weight, None
            decoder = m.get_output_embeddings()
            bias = getattr(decoder, "bias", None)
            if bias is None and self._family == "bert":
                bias = m.cls.predictions.bias
            if bias is None and self._family == "roberta":
                bias = m.lm_head.bias
            return decoder.weight, bias

    return VocabModule()


def _mlm_family(model: Any) -> str:
    if hasattr(model, "cls") and hasattr(model.cls, "predictions"):
        return "bert"
    if hasattr(model, "lm_head") and hasattr(model.lm_head, "dense"):
        return "roberta"
    if hasattr(model, "vocab_transform"):
        return "distilbert"
    raise RagHierError(f"don't know the MLM head of {type(model).__name__}; use projection='tied-embeddings'")


class VocabEncoder:
    """Encode texts into SVDR's sparse vocabulary-space vectors E(x).

    The model loads on first use. Outputs are scipy CSR matrices ``(n, vocab_size)`` whose columns are
    token ids, or per-text :class:`SparseVector` ``(indices, values)``.

    Args:
        model: A directory saved by :meth:`save` (its settings become the defaults), a
            sentence-transformers directory or name (its transformer is used), a Hugging Face model, or
            the default offline all-MiniLM-L6-v2.
        projection: ``"auto"`` (MLM head if the checkpoint has one, else tied embeddings),
            ``"mlm-head"`` or ``"tied-embeddings"``. Default: the saved one, else ``"auto"``.
        top_k: Dimensions kept per text besides its own tokens (default 768); ``0`` keeps only its own
            tokens, ``None`` every dimension.
        activate_lexical: Keep the text's own tokens active (default ``True``).
        query_max_length: Tokens per query (default 128).
        document_max_length: Tokens per passage (default 256).
        selection_precision: ``"float32"`` (default, exact) or ``"bfloat16"`` (see
            :class:`VocabEncoderConfig`).
        batch_size: Texts per forward pass.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` picks CUDA when available. Computation is float32.
        show_progress_bar: Show a progress bar when encoding many texts.
        chunk_elements: Most values of one projection block (bounds memory; default 2²⁴ = 64 MB).

    Example:
        >>> encoder = VocabEncoder()  # doctest: +SKIP
        >>> v = encoder.query_vector("what pulls the tides?")  # doctest: +SKIP
        >>> v.indices[:3], v.values[:3]  # doctest: +SKIP

    """

    def __init__(
        self,
        model: str | Path = DEFAULT_MODEL,
        *,
        projection: Projection | None = None,
        top_k: int | Literal["default"] | None = "default",
        activate_lexical: bool | None = None,
        query_max_length: int | None = None,
        document_max_length: int | None = None,
        selection_precision: Literal["float32", "bfloat16"] | None = None,
        batch_size: int = 32,
        device: str | None = None,
        show_progress_bar: bool = False,
        chunk_elements: int = 2**24,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if projection is not None and projection not in _PROJECTIONS:
            raise ValueError(f"projection must be one of {', '.join(_PROJECTIONS)}; got {projection!r}")
        if chunk_elements < 1:
            raise ValueError(f"chunk_elements must be >= 1, got {chunk_elements}")
        self.model_name = str(model)
        self.batch_size = batch_size
        self.requested_device = device
        self.show_progress_bar = show_progress_bar
        self.chunk_elements = chunk_elements
        self._hf_dir = resolve_backbone_dir(model)
        saved = self._saved_config()
        self._is_saved = saved is not None
        base = saved or VocabEncoderConfig(base_model=self.model_name)
        overrides: dict[str, Any] = {}
        if top_k != "default":
            overrides["top_k"] = top_k
        for key, value in (
            ("activate_lexical", activate_lexical),
            ("query_max_length", query_max_length),
            ("document_max_length", document_max_length),
            ("selection_precision", selection_precision),
        ):
            if value is not None:
                overrides[key] = value
        self._requested_projection: Projection = projection or (base.projection if saved else "auto")
        if projection is not None and projection != "auto":
            overrides["projection"] = projection
        self._config = replace(base, **overrides)
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._binarizer: TokenBinarizer | None = None
        self._module: Any = None
        self._device: str | None = None
        self._fingerprint: str | None = None

    # -- configuration and loading ------------------------------------------------------------------
    def _saved_config(self) -> VocabEncoderConfig | None:
        path = Path(self.model_name) / VOCAB_ENCODER_CONFIG
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RagHierError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise RagHierError(f"{path}: not a rag-hier vocabulary encoder configuration")
        if data.get("version") != _VERSION:
            raise RagHierError(f"{path}: version {data.get('version')}; this rag-hier reads version {_VERSION}")
        return VocabEncoderConfig.from_dict(data.get("config", {}))

    def _resolve_projection(self) -> Literal["mlm-head", "tied-embeddings"]:
        if self._requested_projection != "auto":
            return self._requested_projection
        has_head = _local_mlm_head(self._hf_dir)
        if has_head is None:
            logger.info("cannot inspect %s for an MLM head; using the tied embeddings", self._hf_dir)
        resolved: Literal["mlm-head", "tied-embeddings"] = "mlm-head" if has_head else "tied-embeddings"
        self._requested_projection = resolved
        self._config = replace(self._config, projection=resolved)
        return resolved

    @property
    def config(self) -> VocabEncoderConfig:
        """The settings in force (``projection`` resolved)."""
        self._resolve_projection()
        return self._config

    @property
    def top_k(self) -> int | None:
        """Dimensions kept per text besides its own tokens."""
        return self._config.top_k

    @property
    def activate_lexical(self) -> bool:
        """Whether a text's own tokens are always active."""
        return self._config.activate_lexical

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The backbone's tokenizer (loaded on first use; no model needed)."""
        if self._tokenizer is None:
            from rag_hier.encoders.binarizer import load_tokenizer

            self._tokenizer = load_tokenizer(self._hf_dir)
        return self._tokenizer

    @property
    def binarizer(self) -> TokenBinarizer:
        """T(x) with this encoder's tokenizer and passage length."""
        if self._binarizer is None:
            self._binarizer = TokenBinarizer(self.tokenizer, max_length=self._config.document_max_length)
            self._binarizer.source = self.model_name
        return self._binarizer

    @property
    def vocab_size(self) -> int:
        """Columns of the outputs (the tokenizer's vocabulary size)."""
        return self.binarizer.vocab_size

    @property
    def module(self) -> Any:
        """The torch module (backbone + projection), loaded on first use."""
        if self._module is None:
            self._load()
        return self._module

    @property
    def device(self) -> str:
        """The device the model runs on (loads the model)."""
        self.module  # noqa: B018 - loads
        assert self._device is not None
        return self._device

    def _load(self) -> None:
        import torch
        from transformers import AutoModel, AutoModelForMaskedLM

        device = resolve_device(self.requested_device)
        requested = self._resolve_projection()
        kwargs: dict[str, Any] = {"use_safetensors": True} if self._is_saved else {}
        try:
            if requested == "mlm-head":
                with _quiet_transformers():
                    backbone, info = AutoModelForMaskedLM.from_pretrained(
                        self._hf_dir, output_loading_info=True, **kwargs
                    )
                missing = [k for k in info.get("missing_keys", ()) if any(p in k for p in _MLM_HEAD_KEYS)]
                if missing:
                    raise RagHierError(
                        f"{self.model_name!r} has no MLM head (missing {sorted(missing)[0]}, ...); "
                        "use projection='tied-embeddings'"
                    )
            else:
                backbone = AutoModel.from_pretrained(self._hf_dir, **kwargs)
        except OSError as exc:
            raise RagHierError(f"cannot load model {self.model_name!r} ({self._hf_dir}): {exc}") from exc
        binarizer = self.binarizer
        if int(backbone.get_input_embeddings().weight.shape[0]) < binarizer.vocab_size:
            raise RagHierError(
                f"{self.model_name!r}: the model has {backbone.get_input_embeddings().weight.shape[0]} token "
                f"embeddings but its tokenizer {binarizer.vocab_size} tokens"
            )
        module = _build_module(backbone, requested, binarizer.kept_ids, binarizer.vocab_size)
        head = Path(self.model_name) / HEAD_FILE
        if self._is_saved and head.is_file() and module.norm is not None:
            from safetensors.torch import load_file

            state = load_file(str(head))
            module.norm.load_state_dict({"weight": state["norm.weight"], "bias": state["norm.bias"]})
        module.to(torch.device(device))
        module.eval()
        self._module = module
        self._device = device
        logger.info("loaded vocabulary encoder %s (%s) on %s", self.model_name, requested, device)

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the configuration, the tokenizer and every weight: equal fingerprints, equal vectors."""
        if self._fingerprint is None:
            import torch

            h = hashlib.sha256()
            h.update(json.dumps(self.config.to_dict() | {"base_model": ""}, sort_keys=True).encode("utf-8"))
            h.update(self.binarizer.fingerprint.encode("ascii"))
            for name, tensor in sorted(self.module.state_dict().items()):
                h.update(name.encode("utf-8"))
                t = tensor.detach().to("cpu").contiguous()
                h.update(t.reshape(-1).view(dtype=torch.uint8).numpy().tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def weights_changed(self) -> None:
        """Forget the cached :attr:`fingerprint` (call after changing the weights, e.g. training)."""
        self._fingerprint = None

    # -- encoding -----------------------------------------------------------------------------------
    def _max_length(self, kind: TextKind) -> int:
        if kind == "query":
            return self._config.query_max_length
        if kind == "document":
            return self._config.document_max_length
        raise ValueError(f"kind must be 'query' or 'document', got {kind!r}")

    def _tokenize(self, texts: Sequence[str], kind: TextKind) -> dict[str, torch.Tensor]:
        batch = self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self._max_length(kind),
            return_tensors="pt",
        )
        return {k: v.to(self.device) for k, v in batch.items()}

    def _project_max(
        self, packed: torch.Tensor, lengths: list[int], *, with_argmax: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per text, the max over its (packed) real tokens of ``packed @ W_keptᵀ``: ``(B, n_kept)`` logits.

        Computed in blocks of at most ``chunk_elements`` values, in the selection precision. With
        ``with_argmax``, the second result holds the packed row where each max was reached.
        """
        import torch

        module = self.module
        weight, _ = module.vocab_weight()
        dtype = torch.bfloat16 if self._config.selection_precision == "bfloat16" else packed.dtype
        w = weight.detach().index_select(0, module.kept_ids).to(dtype)
        x = packed.detach().to(dtype)
        n, nk = len(lengths), int(w.shape[0])
        ends = np.cumsum(lengths).tolist()
        best = torch.full((n, nk), -torch.inf, dtype=dtype, device=packed.device)
        arg = torch.zeros((n, nk), dtype=torch.long, device=packed.device) if with_argmax else None
        step = max(1, self.chunk_elements // max(1, nk))
        first = 0
        for s in range(0, x.shape[0], step):
            e = min(s + step, x.shape[0])
            block = torch.matmul(x[s:e], w.T)
            while first < n and ends[first] <= s:
                first += 1
            t = first
            while t < n and ends[t] - lengths[t] < e:
                lo, hi = max(ends[t] - lengths[t], s) - s, min(ends[t], e) - s
                if hi > lo:
                    if arg is None:
                        torch.maximum(best[t], block[lo:hi].amax(dim=0), out=best[t])
                    else:
                        values, where = block[lo:hi].max(dim=0)
                        better = values > best[t]
                        best[t] = torch.where(better, values, best[t])
                        arg[t] = torch.where(better, where + (lo + s), arg[t])
                if ends[t] > e:
                    break
                t += 1
        return best.float(), arg

    def _select(
        self, h: torch.Tensor, batch: Mapping[str, torch.Tensor], *, need_rows: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The kept entries of a batch and their exact float32 values.

        Masked max-pool of elu1p(projection) over each text's real tokens (padding is never projected;
        elu1p is increasing and the bias constant over positions, so both apply after the max), then
        top-k ∪ own tokens. With ``selection_precision="bfloat16"`` the pool runs in bfloat16 to choose
        the entries, whose values are then recomputed exactly in float32.

        Returns ``(b, j, values, rows, lexical)``: text index and kept-vocabulary index of each entry, its
        value, the packed row of its max (when ``need_rows``), and T(x) as a ``(B, n_kept)`` bool mask.
        """
        import torch

        module = self.module
        mask = batch["attention_mask"].bool()
        packed = h[mask]
        lengths = mask.sum(dim=1).tolist()
        exact = self._config.selection_precision == "float32"
        logits, arg = self._project_max(packed, lengths, with_argmax=need_rows and exact)
        _, bias = module.vocab_weight()
        kept = module.kept_ids
        if bias is not None:
            logits = logits + bias.detach().index_select(0, kept)
        pooled = torch.nan_to_num(torch.nn.functional.elu(logits) + 1.0, nan=0.0)
        lexical = self._lexical(batch["input_ids"], mask)
        keep = self._keep_mask(pooled, lexical)
        b, j = keep.nonzero(as_tuple=True)
        if exact:
            return b, j, pooled[b, j], (arg[b, j] if arg is not None else None), lexical
        weight, _ = module.vocab_weight()
        values = torch.empty(b.shape[0], dtype=torch.float32, device=h.device)
        rows = torch.empty(b.shape[0], dtype=torch.long, device=h.device)
        counts = torch.bincount(b, minlength=len(lengths)).tolist()
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        at = 0
        x = packed.detach().float()
        for t, c in enumerate(counts):
            if c == 0:
                continue
            dims = kept[j[at : at + c]]
            block = x[starts[t] : starts[t] + lengths[t]] @ weight.detach()[dims].float().T
            v, r = block.max(dim=0)
            if bias is not None:
                v = v + bias.detach()[dims].float()
            values[at : at + c] = torch.nn.functional.elu(v) + 1.0
            rows[at : at + c] = r + starts[t]
            at += c
        return b, j, values, rows, lexical

    def _keep_mask(self, values: torch.Tensor, lexical: torch.Tensor) -> torch.Tensor:
        """Which kept-vocabulary dimensions survive: top-k, plus the text's own tokens."""
        import torch

        n, nk = values.shape
        top_k = self._config.top_k
        if top_k is None or top_k >= nk:
            keep = torch.ones((n, nk), dtype=torch.bool, device=values.device)
        else:
            keep = torch.zeros((n, nk), dtype=torch.bool, device=values.device)
            if top_k > 0:
                keep.scatter_(1, values.topk(top_k, dim=1).indices, True)
        if self._config.activate_lexical:
            keep |= lexical
        return keep

    def _lexical(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """T(x) over the kept vocabulary, from the batch's token ids: ``(B, n_kept)`` bool."""
        import torch

        module = self.module
        pos = module.vocab_to_kept[input_ids.clamp(0, module.vocab_to_kept.shape[0] - 1)]
        valid = (pos >= 0) & mask.bool()
        out = torch.zeros((input_ids.shape[0], module.kept_ids.shape[0]), dtype=torch.bool, device=input_ids.device)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None].expand_as(pos)
        out[rows[valid], pos[valid]] = True
        return out

    def encode(
        self, texts: Sequence[str], kind: TextKind = "document", *, show_progress_bar: bool | None = None
    ) -> sp.csr_matrix:
        """E(x) of ``texts`` as a ``(n, vocab_size)`` float32 CSR matrix (columns are token ids, sorted)."""
        import torch

        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        self._max_length(kind)
        n = len(texts)
        vocab = self.vocab_size
        if n == 0:
            return sp.csr_matrix((0, vocab), dtype=np.float32)
        module = self.module
        kept = module.kept_ids.cpu().numpy()
        order = np.argsort([-len(t) for t in texts], kind="stable")
        rows: list[np.ndarray] = []
        cols: list[np.ndarray] = []
        data: list[np.ndarray] = []
        show = self.show_progress_bar if show_progress_bar is None else show_progress_bar
        starts = range(0, n, self.batch_size)
        was_training = module.training
        module.eval()
        try:
            with torch.inference_mode():
                for start in progress(
                    starts,
                    show_progress_bar=show and n > 2 * self.batch_size,
                    desc=f"SVDR encode {kind}s",
                    total=len(starts),
                    unit="batch",
                ):
                    idx = order[start : start + self.batch_size]
                    batch = self._tokenize([texts[i] for i in idx], kind)
                    h = module.hidden(batch)
                    b, j, values, _, _ = self._select(h, batch, need_rows=False)
                    rows.append(idx[b.cpu().numpy()])
                    cols.append(kept[j.cpu().numpy()])
                    data.append(values.float().cpu().numpy())
        finally:
            module.train(was_training)
        out = sp.csr_matrix(
            (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(n, vocab), dtype=np.float32
        )
        out.sort_indices()
        return out

    def encode_queries(self, queries: Sequence[str], *, show_progress_bar: bool | None = None) -> sp.csr_matrix:
        """E(q) of queries (``query_max_length`` tokens)."""
        return self.encode(queries, "query", show_progress_bar=show_progress_bar)

    def encode_documents(self, texts: Sequence[str], *, show_progress_bar: bool | None = None) -> sp.csr_matrix:
        """E(d) of passages (``document_max_length`` tokens)."""
        return self.encode(texts, "document", show_progress_bar=show_progress_bar)

    def query_vector(self, text: str) -> SparseVector:
        """E(q) of one query as ``(indices, values)``."""
        return to_sparse_vectors(self.encode([text], "query"))[0]

    def document_vector(self, text: str) -> SparseVector:
        """E(d) of one passage as ``(indices, values)``."""
        return to_sparse_vectors(self.encode([text], "document"))[0]

    def sparse_vectors(self, texts: Sequence[str], kind: TextKind = "document") -> list[SparseVector]:
        """E(x) of each text as ``(indices, values)``."""
        return to_sparse_vectors(self.encode(texts, kind))

    def token_vectors(self, texts: Sequence[str], kind: TextKind = "document") -> sp.csr_matrix:
        """T(x): the binary bag of tokens, truncated like this encoder's input of that ``kind``."""
        return self.binarizer.transform(texts, max_length=self._max_length(kind))

    # -- training -----------------------------------------------------------------------------------
    def encode_for_training(self, texts: Sequence[str], kind: TextKind) -> TrainingEncoding:
        """E(x) with gradient, and T(x), over the kept vocabulary (for :mod:`rag_hier.training.svdr`).

        The max-pool runs without gradient; the kept ``(text, dimension)`` entries are then recomputed
        with gradient at their arg-max positions (same values, same gradient, bounded memory).
        """
        import torch

        module = self.module
        batch = self._tokenize(texts, kind)
        h = module.hidden(batch)
        with torch.no_grad():
            b, j, _, rows, lexical = self._select(h, batch, need_rows=True)
        assert rows is not None
        weight, bias = module.vocab_weight()
        token = module.kept_ids[j]
        packed = h[batch["attention_mask"].bool()]
        logits = (packed[rows] * weight[token]).sum(-1)
        if bias is not None:
            logits = logits + bias[token]
        vals = torch.nn.functional.elu(logits) + 1.0
        dense = torch.zeros((h.shape[0], int(module.kept_ids.shape[0])), dtype=vals.dtype, device=vals.device)
        dense = dense.index_put((b, j), vals)
        return TrainingEncoding(values=dense, lexical=lexical.to(vals.dtype))

    def kept_to_csr(self, values: np.ndarray) -> sp.csr_matrix:
        """Map ``(n, n_kept)`` kept-vocabulary values (as in :class:`TrainingEncoding`) to vocabulary CSR."""
        kept = self.module.kept_ids.cpu().numpy()
        arr = np.asarray(values, dtype=np.float32)
        r, c = np.nonzero(arr)
        return sp.csr_matrix((arr[r, c], (r, kept[c])), shape=(arr.shape[0], self.vocab_size), dtype=np.float32)

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write a directory this class loads: config JSON, head safetensors, ``backbone/`` (no pickle)."""
        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        module = self.module
        backbone_dir = out / "backbone"
        module.backbone.save_pretrained(str(backbone_dir))
        self.tokenizer.save_pretrained(str(backbone_dir))
        state = {}
        if module.norm is not None:
            state = {f"norm.{k}": v.detach().cpu().contiguous() for k, v in module.norm.state_dict().items()}
        save_file(state, str(out / HEAD_FILE))
        payload = {"format": _FORMAT, "version": _VERSION, "config": self.config.to_dict()}
        (out / VOCAB_ENCODER_CONFIG).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        return out

    def __repr__(self) -> str:
        return f"VocabEncoder(model={self.model_name!r}, top_k={self.top_k}, activate_lexical={self.activate_lexical})"
