"""Encoder-decoder embeddings (Tied-Atomic): one decoding step of a seq2seq model as a dense vector.

Nguyen & Yates, "Generative Retrieval as Dense Retrieval" (Gen-IR@SIGIR 2023, arXiv 2306.11397), observe
that generative retrieval with atomic docids scores a document by ``h(q) · W_d``, where ``h(q)`` is the
decoder's last hidden state after one decoding step and ``W_d`` the document's row of the output
embedding matrix. Tied-Atomic ties that row to the document's text: ``W_d = h(d)``, the same
encoder-decoder run over the document. :class:`EncoderDecoderEmbedding` computes ``h``:

* the text goes through the encoder;
* the decoder is fed only its start token (``decoder_start_token_id``: the pad token for T5, ``</s>`` for
  BART, whatever the config names for an ``EncoderDecoderModel``);
* the vector is the decoder's last hidden state at that step, after its final layer norm;
* T5 v1.0 checkpoints scale that state by ``d_model ** -0.5`` before their (tied) LM head; where the model
  does so, the same factor is applied to every vector, queries and documents alike (a constant
  temperature); T5 v1.1, Flan-T5, mT5, BART and ``EncoderDecoderModel`` use no factor;
* similarity is the raw dot product: vectors are not normalized.

It is a sentence-transformers module, so a Tied-Atomic model is an ordinary sentence-transformers
directory (``modules.json`` naming this class, the Hugging Face model saved with safetensors, the
tokenizer, and ``encoder_decoder_embedding.json``) whose similarity function is ``"dot"``:
``DenseEncoder(dir)``, ``rag-hier index --model DIR`` and the Haystack / LlamaIndex embedders load it as
any other model (see :mod:`rag_hier.encoders._st_loading` for why no ``trust_remote_code`` is needed).

Example:
    >>> model = encoder_decoder_sentence_transformer("t5-small")  # doctest: +SKIP
    >>> model.encode(["what is a tide?"]).shape  # doctest: +SKIP
    (1, 512)

"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from rag_hier.errors import RagHierError

try:  # sentence-transformers >= 6
    from sentence_transformers.base.modules import InputModule as _Base
except ImportError:  # pragma: no cover - older sentence-transformers
    try:
        from sentence_transformers.models import InputModule as _Base  # type: ignore[no-redef,attr-defined,unused-ignore]
    except ImportError:  # sentence-transformers < 5: modules are plain torch modules
        from torch.nn import Module as _Base  # type: ignore[assignment,unused-ignore]

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = [
    "CONFIG_FILE",
    "EncoderDecoderEmbedding",
    "NotEncoderDecoderError",
    "build_warm_started_encoder_decoder",
    "decoder_output_scale",
    "encoder_decoder_sentence_transformer",
    "is_encoder_decoder_model",
]

CONFIG_FILE = "encoder_decoder_embedding.json"
"""The module's own configuration file (next to the Hugging Face ``config.json``)."""

CITATION = """@inproceedings{nguyen2023generative,
  title={Generative Retrieval as Dense Retrieval},
  author={Nguyen, Thong and Yates, Andrew},
  booktitle={Gen-IR@SIGIR 2023: The First Workshop on Generative Information Retrieval},
  year={2023},
  note={arXiv:2306.11397}
}"""

_T5_FAMILY = frozenset({"t5", "mt5", "umt5", "longt5", "switch_transformers"})


class NotEncoderDecoderError(RagHierError, ValueError):
    """The model given to an encoder-decoder embedding is not an encoder-decoder (e.g. a BERT encoder)."""


def _load_config(name: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise RagHierError(f"cannot load the configuration of model {name!r}: {exc}") from exc


def is_encoder_decoder_model(name_or_path: str) -> bool:
    """Whether the Hugging Face model ``name_or_path`` is an encoder-decoder (reads only its config)."""
    return bool(getattr(_load_config(name_or_path), "is_encoder_decoder", False))


def decoder_output_scale(config: Any) -> float:
    """The factor the model's LM applies to the decoder output before its head: ``d_model ** -0.5`` or 1.

    T5 v1.0 checkpoints (``tie_word_embeddings`` true, which recent ``transformers`` records as
    ``scale_decoder_outputs``) scale by ``d_model ** -0.5``; T5 v1.1, Flan-T5 and mT5 checkpoints
    (``tie_word_embeddings: false``), BART and ``EncoderDecoderModel`` do not.
    """
    if getattr(config, "model_type", None) not in _T5_FAMILY:
        return 1.0
    flag = getattr(config, "scale_decoder_outputs", None)
    if flag is None:  # transformers < 5 keys the scaling on tie_word_embeddings (mT5 checkpoints set it false)
        flag = getattr(config, "tie_word_embeddings", False) and config.model_type != "mt5"
    return float(config.d_model) ** -0.5 if flag else 1.0


class EncoderDecoderEmbedding(_Base):  # type: ignore[misc,valid-type,unused-ignore]
    """A sentence-transformers input module: text → encoder → one decoder step → the decoder's last hidden state.

    Args:
        model_name_or_path: A Hugging Face encoder-decoder (name or directory): T5 / mT5 / Flan-T5, BART,
            an ``EncoderDecoderModel``, ...
        max_seq_length: Input tokens kept (default: the tokenizer's limit, at most 512).
        output_scale: Factor on every vector; ``None`` takes the model's own (:func:`decoder_output_scale`:
            ``d_model ** -0.5`` for T5 v1.0, else 1). Recorded when saved, so a reload never re-derives it.
        decoder_start_token_id: The decoder's single input token (default: the config's
            ``decoder_start_token_id``, else its decoder's BOS, CLS or pad token).
        model_kwargs: Passed to ``from_pretrained`` of the model (e.g. ``torch_dtype``).
        tokenizer_kwargs: Passed to ``AutoTokenizer.from_pretrained``.

    Raises:
        NotEncoderDecoderError: The model is not an encoder-decoder.
        RagHierError: The model cannot be loaded.

    Inputs:
        Texts (queries or documents).

    Returns:
        ``sentence_embedding``: ``(batch, d_model)`` float vectors, compared by dot product.

    """

    config_file_name = CONFIG_FILE
    config_keys = ["max_seq_length", "output_scale", "decoder_start_token_id"]  # noqa: RUF012 - sentence-transformers' convention
    save_in_root = True
    citation = CITATION

    def __init__(
        self,
        model_name_or_path: str,
        *,
        max_seq_length: int | None = None,
        output_scale: float | None = None,
        decoder_start_token_id: int | None = None,
        model_kwargs: dict[str, Any] | None = None,
        tokenizer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer, EncoderDecoderModel

        name = str(model_name_or_path)
        config = _load_config(name)
        if not getattr(config, "is_encoder_decoder", False):
            raise NotEncoderDecoderError(
                f"model {name!r} is not an encoder-decoder (model_type {getattr(config, 'model_type', '?')!r}); "
                "Tied-Atomic needs one, e.g. t5-small, google/flan-t5-base, facebook/bart-base, an EncoderDecoderModel"
            )
        kwargs = {"trust_remote_code": False, **(model_kwargs or {})}
        try:
            if config.model_type == "encoder-decoder":
                model = EncoderDecoderModel.from_pretrained(name, config=config, **kwargs)
            else:
                model = AutoModel.from_pretrained(name, config=config, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False, **(tokenizer_kwargs or {}))
        except OSError as exc:
            raise RagHierError(f"cannot load model {name!r}: {exc}") from exc
        self.auto_model = model
        self.tokenizer = tokenizer
        self._returns_hidden_state = config.model_type != "encoder-decoder"  # Seq2SeqModelOutput vs Seq2SeqLMOutput
        start = decoder_start_token_id if decoder_start_token_id is not None else self._default_start(config)
        if start is None:
            raise RagHierError(
                f"model {name!r} names no decoder start token (decoder_start_token_id, or the decoder's bos, cls "
                "or pad token); pass decoder_start_token_id"
            )
        self.decoder_start_token_id = int(start)
        self.output_scale = float(decoder_output_scale(config) if output_scale is None else output_scale)
        if not math.isfinite(self.output_scale) or self.output_scale <= 0:
            raise ValueError(f"output_scale must be a positive finite number, got {output_scale}")
        if max_seq_length is None:
            limit = getattr(tokenizer, "model_max_length", 512) or 512
            max_seq_length = int(min(limit, 512))
        if max_seq_length < 1:
            raise ValueError(f"max_seq_length must be >= 1, got {max_seq_length}")
        self.max_seq_length = int(max_seq_length)

    @staticmethod
    def _default_start(config: Any) -> int | None:
        for value in (
            getattr(config, "decoder_start_token_id", None),
            getattr(getattr(config, "decoder", None), "decoder_start_token_id", None),
            getattr(getattr(config, "decoder", None), "bos_token_id", None),
            getattr(getattr(config, "decoder", None), "pad_token_id", None),
        ):
            if value is not None:
                return int(value)
        return None

    # -- sentence-transformers module API ---------------------------------------------------------
    @property
    def dimension(self) -> int:
        """Output dimension (the decoder's hidden size)."""
        cfg = self.auto_model.config
        size = getattr(cfg, "d_model", None) or getattr(getattr(cfg, "decoder", None), "hidden_size", None)
        if size is None:  # pragma: no cover - exotic configs
            size = getattr(cfg, "hidden_size", None)
        if size is None:  # pragma: no cover
            raise RagHierError(f"cannot tell the hidden size of {type(self.auto_model).__name__}")
        return int(size)

    def get_embedding_dimension(self) -> int:
        """Output dimension (sentence-transformers >= 6)."""
        return self.dimension

    def get_sentence_embedding_dimension(self) -> int:
        """Output dimension (sentence-transformers < 6)."""
        return self.dimension

    def get_config_dict(self) -> dict[str, Any]:
        """What :data:`CONFIG_FILE` records."""
        return {
            "max_seq_length": self.max_seq_length,
            "output_scale": self.output_scale,
            "decoder_start_token_id": self.decoder_start_token_id,
        }

    def preprocess(self, inputs: Sequence[Any], prompt: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """Tokenize texts (a prompt, when given, is prepended to each)."""
        texts: list[str] = []
        for x in inputs:
            if not isinstance(x, str):
                raise TypeError(f"EncoderDecoderEmbedding encodes texts, got {type(x).__name__}")
            texts.append(prompt + x if prompt else x)
        tokenizer: Any = self.tokenizer
        enc = tokenizer(
            texts,
            padding=True,
            truncation="longest_first",
            max_length=self.max_seq_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def tokenize(self, texts: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
        """Tokenize texts (sentence-transformers < 6 calls this; 6 calls :meth:`preprocess`)."""
        return self.preprocess(texts, **kwargs)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Add ``sentence_embedding``: the decoder's last hidden state after one step from the start token."""
        ids = features["input_ids"]
        start = torch.full((ids.size(0), 1), self.decoder_start_token_id, dtype=ids.dtype, device=ids.device)
        out = self.auto_model(
            input_ids=ids,
            attention_mask=features["attention_mask"],
            decoder_input_ids=start,
            output_hidden_states=not self._returns_hidden_state,
            use_cache=False,
            return_dict=True,
        )
        hidden = out.last_hidden_state if self._returns_hidden_state else out.decoder_hidden_states[-1]
        vector = hidden[:, 0]
        if self.output_scale != 1.0:
            vector = vector * self.output_scale
        features["sentence_embedding"] = vector
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        """Write the Hugging Face model (always safetensors), the tokenizer and :data:`CONFIG_FILE`."""
        self.auto_model.save_pretrained(output_path, safe_serialization=True)
        tokenizer: Any = self.tokenizer
        tokenizer.save_pretrained(output_path)
        with (Path(output_path) / CONFIG_FILE).open("w", encoding="utf-8") as handle:
            json.dump(self.get_config_dict(), handle, indent=2)

    @classmethod
    def load(  # type: ignore[override,unused-ignore]
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs: Any,
    ) -> EncoderDecoderEmbedding:
        """Load a saved module (safetensors only; ``trust_remote_code`` is never passed to ``transformers``)."""
        hub = {"token": token, "cache_folder": cache_folder, "revision": revision, "local_files_only": local_files_only}
        load_dir = getattr(cls, "load_dir_path", None)
        if load_dir is not None:
            path = load_dir(model_name_or_path, subfolder=subfolder, **hub)
        else:  # pragma: no cover - sentence-transformers < 5: a local directory
            path = str(Path(model_name_or_path) / subfolder)
        config_file = Path(path) / CONFIG_FILE
        config: dict[str, Any] = {}
        if config_file.is_file():
            config = json.loads(config_file.read_text(encoding="utf-8"))
        known = {k: config[k] for k in ("max_seq_length", "output_scale", "decoder_start_token_id") if k in config}
        model_kwargs = {k: v for k, v in (kwargs.get("model_kwargs") or {}).items() if k != "trust_remote_code"}
        model_kwargs["use_safetensors"] = True
        return cls(path, model_kwargs=model_kwargs, **known)

    def __repr__(self) -> str:
        return (
            f"EncoderDecoderEmbedding({type(self.auto_model).__name__}, dim={self.dimension}, "
            f"max_seq_length={self.max_seq_length}, output_scale={self.output_scale:.6g})"
        )


def encoder_decoder_sentence_transformer(
    model_name_or_path: str,
    *,
    max_seq_length: int | None = None,
    output_scale: float | None = None,
    decoder_start_token_id: int | None = None,
    device: str | None = None,
) -> SentenceTransformer:
    """A ``SentenceTransformer`` (dot-product similarity) over a Hugging Face encoder-decoder.

    Args:
        model_name_or_path: A Hugging Face encoder-decoder (``t5-small``, ``t5-base``, ``google/flan-t5-base``,
            ``facebook/bart-base``, a saved ``EncoderDecoderModel``, ...), or a sentence-transformers directory
            saved from such a model (loaded as it is).
        max_seq_length: Input tokens kept.
        output_scale: Override the model's output factor (see :class:`EncoderDecoderEmbedding`).
        decoder_start_token_id: Override the decoder start token.
        device: ``"cpu"``, ``"cuda"``, ...; ``None``: CUDA when available.

    Raises:
        NotEncoderDecoderError: The model is not an encoder-decoder.

    """
    from sentence_transformers import SentenceTransformer

    from rag_hier.encoders._st_loading import st_load_kwargs
    from rag_hier.encoders.dense import resolve_model_path
    from rag_hier.encoders.device import resolve_device

    name = resolve_model_path(str(model_name_or_path))
    dev = resolve_device(device)
    if (Path(name) / "modules.json").is_file():
        trusted = st_load_kwargs(name)
        if not trusted:
            raise NotEncoderDecoderError(
                f"{name} is not an encoder-decoder: a sentence-transformers model without an encoder-decoder "
                "module; Tied-Atomic needs a Hugging Face encoder-decoder (T5, BART, EncoderDecoderModel) or a "
                "model saved from one"
            )
        model = SentenceTransformer(name, device=dev, **trusted)
        if max_seq_length is not None:
            model.max_seq_length = max_seq_length
        return model
    module = EncoderDecoderEmbedding(
        name,
        max_seq_length=max_seq_length,
        output_scale=output_scale,
        decoder_start_token_id=decoder_start_token_id,
    )
    return SentenceTransformer(modules=[module], device=dev, similarity_fn_name="dot")


def build_warm_started_encoder_decoder(
    path: str | Path,
    encoder: str = "sentence-transformers/all-MiniLM-L6-v2",
    *,
    max_seq_length: int = 128,
    seed: int = 0,
    cross_attention_init: Literal["random", "self_attention"] = "random",
) -> Path:
    """Write a Tied-Atomic starting point built from a BERT-style encoder (default: the offline MiniLM).

    ``EncoderDecoderModel.from_encoder_decoder_pretrained(encoder, encoder)``: the encoder is the pretrained
    model, the decoder a copy of it run causally with **new, randomly initialized cross-attention layers**
    (seeded). The decoder starts from the ``[CLS]`` token. This is what CPU experiments on this project use
    because no pretrained T5 can be downloaded offline; the cross-attention has to be learned from scratch
    by fine-tuning, so expect it to need more steps than a pretrained T5 (``t5-small`` / ``t5-base``, the
    paper's models, which anyone with a model hub can pass instead).

    Args:
        path: Output directory (a sentence-transformers model directory, dot-product similarity).
        encoder: A BERT-style Hugging Face model or sentence-transformers directory holding one at its root.
        max_seq_length: Input tokens kept.
        seed: Torch seed of the cross-attention initialization.
        cross_attention_init: ``"random"`` (``from_encoder_decoder_pretrained``'s own initialization) or
            ``"self_attention"``: each decoder layer's cross-attention starts as a copy of that layer's
            pretrained self-attention (query, key, value, output and its layer norm), so the start token
            attends over the encoder's states by content from the first step. Not part of the paper (which
            starts from a pretrained T5); see ``docs/tied_atomic.md`` for what it changes.

    Returns:
        ``path``.

    """
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, EncoderDecoderModel

    from rag_hier.encoders.dense import resolve_model_path

    src = resolve_model_path(encoder)
    out = Path(path)
    torch.manual_seed(seed)
    with tempfile.TemporaryDirectory(prefix="rag-hier-encdec-") as tmp:
        try:
            tokenizer = AutoTokenizer.from_pretrained(src)
            model = EncoderDecoderModel.from_encoder_decoder_pretrained(src, src)
        except OSError as exc:
            raise RagHierError(f"cannot build an encoder-decoder from {encoder!r}: {exc}") from exc
        if cross_attention_init == "self_attention":
            _copy_self_attention(model.decoder)
        elif cross_attention_init != "random":
            raise ValueError(f"cross_attention_init must be 'random' or 'self_attention', got {cross_attention_init!r}")
        start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        model.config.decoder_start_token_id = start
        model.config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        module = EncoderDecoderEmbedding(tmp, max_seq_length=max_seq_length)
        st = SentenceTransformer(modules=[module], device="cpu", similarity_fn_name="dot")
        if out.exists() and any(out.iterdir()):
            shutil.rmtree(out)
        st.save(str(out))
    return out


def _copy_self_attention(decoder: Any) -> None:
    """Initialize every cross-attention block of a BERT-style decoder from the same layer's self-attention."""
    layers = getattr(getattr(getattr(decoder, "bert", decoder), "encoder", None), "layer", None)
    if layers is None:
        raise RagHierError("cross_attention_init='self_attention' supports BERT-style decoders only")
    with torch.no_grad():
        for layer in layers:
            cross = getattr(layer, "crossattention", None)
            if cross is None:
                raise RagHierError("the decoder has no cross-attention layers to initialize")
            cross.load_state_dict(layer.attention.state_dict())
