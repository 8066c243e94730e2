"""DSI-atomic as the paper's baseline: each docid is a new token of a seq2seq model's vocabulary.

DSI (Tay et al., 2022) with atomic docids, the untied baseline of Nguyen & Yates ("Generative Retrieval as Dense
Retrieval", arXiv 2306.11397), on any Hugging Face encoder-decoder (T5, BART, an ``EncoderDecoderModel``):

* **vocabulary**: the model's output vocabulary (its input embeddings and LM head, tied or not) is extended by one
  row per docid, after every existing row, with ``transformers``' ``resize_token_embeddings`` (its
  ``mean_resizing`` chosen by ``docid_init``): with ``"random"`` (the default) each new row is
  drawn by the model's own weight initializer (seeded; BERT and T5: normal with the config's initializer range
  or factor) and its bias starts at 0, so the docids start apart; with ``"mean"`` each new row (and LM-head
  bias) starts at the mean of the existing ones, plus seeded noise of 10⁻⁹ × their covariance, so every docid
  starts with the same logit (on a MiniLM warm start that lets training collapse the decoder's first state to
  one state for every input: docs/tied_atomic.md, "Where DSI-atomic learns"). Docid ``i`` is token
  ``first_docid_token + i``;
* **target**: a training example (text, docid) has the target sequence ``[docid token, end-of-sequence]``;
* **teacher forcing**: the decoder reads ``[start, docid token]`` (the labels shifted right, as ``transformers``'
  seq2seq models do with ``labels=``), and the loss is the cross-entropy over the **whole** output vocabulary
  (text tokens and docids) at both positions (:func:`seq2seq_docid_loss`);
* **retrieval**: one decoding step from the start token; docids are ranked by their tokens' logits (the scores
  restricted to docid tokens, as constrained decoding does). With T5 v1.0 the LM head reads the decoder state
  times ``d_model ** -0.5``; ``transformers`` applies that factor, so the logits are the model's own.

Training: :class:`~rag_hier.training.tied_atomic.DSIAtomicTrainer` with ``DSIAtomicConfig(objective="seq2seq")``
(the indexing task, document text → docid, and the retrieval task, query → docid, mixed).

Saved without pickle: the Hugging Face model (``config.json``, ``model.safetensors``), its tokenizer, and
``dsi_atomic.json`` (format, version, objective ``"seq2seq"``, docids, the first docid token, the end-of-sequence
and start tokens); :meth:`DSIAtomicSeq2SeqModel.load` checks that they agree.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from rag_hier.encoders.encdec import NotEncoderDecoderError
from rag_hier.errors import RagHierError
from rag_hier.retrieval.generative import (
    DSI_FORMAT,
    DSI_META,
    DSI_VERSION,
    AtomicDocidModel,
    UnknownDocidError,
    _queries,
    read_dsi_meta,
)

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

__all__ = ["DSIAtomicSeq2SeqModel", "load_seq2seq_lm", "seq2seq_docid_loss"]

_IGNORE = -100  # the label id transformers' losses skip


def seq2seq_docid_loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """Teacher-forced cross-entropy over the whole output vocabulary, per target token (a ``compute_loss_func``).

    Args:
        outputs: The model's output for decoder inputs = the labels shifted right (``logits``: ``(batch, 2, vocab)``).
        labels: ``(batch, 2)``: ``[docid token, end-of-sequence]`` per example (``-100``: ignored).
        num_items_in_batch: Target tokens in the whole (accumulated) batch; ``None``: those of ``labels``.

    Returns:
        The summed token cross-entropy divided by the number of target tokens: ``transformers``' seq2seq loss
        with ``labels=`` for one batch, and the same per-token mean over an accumulated batch.

    """
    import torch.nn.functional as F

    logits = outputs["logits"] if isinstance(outputs, Mapping) else outputs.logits
    target = labels.to(logits.device).reshape(-1)
    total = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), target, ignore_index=_IGNORE, reduction="sum")
    count = num_items_in_batch if num_items_in_batch is not None else (target != _IGNORE).sum()
    if hasattr(count, "to"):
        count = count.to(total.device)
    return total / count


def load_seq2seq_lm(model_name_or_path: str, *, safetensors_only: bool = False) -> Any:
    """A Hugging Face encoder-decoder with its LM head (``AutoModelForSeq2SeqLM``, or ``EncoderDecoderModel``).

    Raises:
        NotEncoderDecoderError: The model is not an encoder-decoder.
        RagHierError: It cannot be loaded, or it has no LM head.

    """
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, EncoderDecoderModel

    from rag_hier.encoders._st_loading import quiet_weight_loading

    name = str(model_name_or_path)
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise RagHierError(f"cannot load the configuration of model {name!r}: {exc}") from exc
    if not getattr(config, "is_encoder_decoder", False):
        raise NotEncoderDecoderError(
            f"model {name!r} is not an encoder-decoder (model_type {getattr(config, 'model_type', '?')!r}); "
            "DSI-atomic needs one, e.g. t5-small, facebook/bart-base, an EncoderDecoderModel"
        )
    kwargs: dict[str, Any] = {"trust_remote_code": False}
    if safetensors_only:
        kwargs["use_safetensors"] = True
    try:
        with quiet_weight_loading():
            if config.model_type == "encoder-decoder":
                model = EncoderDecoderModel.from_pretrained(name, config=config, **kwargs)
            else:
                model = AutoModelForSeq2SeqLM.from_pretrained(name, config=config, **kwargs)
    except (OSError, ValueError, SafetensorError) as exc:
        raise RagHierError(f"cannot load model {name!r} as a seq2seq language model: {exc}") from exc
    if model.get_output_embeddings() is None:
        raise RagHierError(f"model {name!r} has no LM head (output embeddings) to add docid tokens to")
    return model


def _output_rows(model: Any) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


DocidInit = Literal["random", "mean"]
DOCID_INITS: tuple[str, ...] = get_args(DocidInit)


def _resize(model: Any, rows: int, seed: int, init: DocidInit = "random") -> None:
    """Grow the output vocabulary (and the tied input embeddings) to ``rows`` (seeded new rows).

    ``init="random"``: the model's own initializer (``mean_resizing=False``); ``"mean"``: ``transformers``'
    default for added tokens (the existing rows' mean, 10⁻⁹-covariance noise).
    """
    import torch

    if init not in DOCID_INITS:
        raise ValueError(f"docid_init must be one of {', '.join(DOCID_INITS)}, got {init!r}")
    # EncoderDecoderModel refuses resize_token_embeddings: its decoder owns the LM head (and its word embeddings)
    target = model.decoder if getattr(model.config, "model_type", None) == "encoder-decoder" else model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        target.resize_token_embeddings(rows, mean_resizing=init == "mean")


def _first_int(*values: Any) -> int | None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _special_tokens(model: Any, tokenizer: Any, name: str) -> tuple[int, int]:
    """``(decoder start token, end-of-sequence token)`` of a seq2seq model."""
    config = model.config
    decoder = getattr(config, "decoder", None)
    start = _first_int(getattr(config, "decoder_start_token_id", None))
    eos = _first_int(
        getattr(config, "eos_token_id", None),
        getattr(decoder, "eos_token_id", None),
        getattr(tokenizer, "eos_token_id", None),
        getattr(tokenizer, "sep_token_id", None),
    )
    if start is None or _first_int(getattr(config, "pad_token_id", None)) is None:
        raise RagHierError(
            f"model {name!r}: its config needs decoder_start_token_id and pad_token_id (teacher forcing shifts the "
            "labels right with them)"
        )
    if eos is None:
        raise RagHierError(f"model {name!r} names no end-of-sequence token (config eos_token_id, tokenizer eos/sep)")
    return start, eos


class DSIAtomicSeq2SeqModel(AtomicDocidModel):
    """DSI with atomic docids, trained as the paper's baseline: docids are new output tokens of an encoder-decoder.

    Build one with :meth:`from_pretrained` (adds the docid tokens), train it with
    :class:`~rag_hier.training.tied_atomic.DSIAtomicTrainer`, reload it with :meth:`load`.

    Args:
        model: A Hugging Face seq2seq LM whose output vocabulary ends with the docid tokens.
        tokenizer: Its tokenizer.
        docids: The docids, in token order.
        first_docid_token: The token id of ``docids[0]`` (the text vocabulary's size).
        max_seq_length: Input tokens kept.

    Raises:
        RagHierError: The LM head does not hold ``first_docid_token + len(docids)`` rows, or a docid repeats.

    Example:
        >>> dsi = DSIAtomicSeq2SeqModel.from_pretrained("t5-small", ["d1", "d2", "d3"])  # doctest: +SKIP
        >>> dsi.generate("what causes tides?", k=2)  # doctest: +SKIP
        ['d3', 'd1']

    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        docids: Sequence[str],
        *,
        first_docid_token: int,
        max_seq_length: int = 128,
    ) -> None:
        ids = [str(d) for d in docids]
        if len(set(ids)) != len(ids):
            dup = next(d for d in ids if ids.count(d) > 1)
            raise RagHierError(f"docid {dup!r} appears twice")
        rows = _output_rows(model)
        if rows != first_docid_token + len(ids):
            raise RagHierError(
                f"the model's LM head has {rows} rows; {first_docid_token} text tokens + {len(ids)} docids expected"
            )
        if max_seq_length < 1:
            raise ValueError(f"max_seq_length must be >= 1, got {max_seq_length}")
        self.model = model
        self.tokenizer = tokenizer
        self.docids: list[str] = ids
        self.first_docid_token = int(first_docid_token)
        self.max_seq_length = int(max_seq_length)
        self.decoder_start_token_id, self.eos_token_id = _special_tokens(model, tokenizer, type(model).__name__)
        self._position = {d: i for i, d in enumerate(ids)}

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str,
        docids: Sequence[str],
        *,
        max_seq_length: int = 128,
        device: str | None = None,
        seed: int = 0,
        docid_init: DocidInit = "random",
    ) -> DSIAtomicSeq2SeqModel:
        """Load an encoder-decoder and add one token per docid to its output vocabulary.

        Args:
            model_name_or_path: A Hugging Face encoder-decoder (``t5-small``, ``t5-base``, ``facebook/bart-base``, a
                saved ``EncoderDecoderModel``, a Tied-Atomic directory, ...).
            docids: The docids (token ``first_docid_token + i`` is ``docids[i]``).
            max_seq_length: Input tokens kept.
            device: ``"cpu"``, ``"cuda"``, ...; ``None``: CUDA when available.
            seed: Seed of the new rows.
            docid_init: How the new rows start: ``"random"`` (the model's own initializer, bias 0: the docids
                start apart) or ``"mean"`` (``transformers``' default for added tokens: all at the existing rows'
                mean, every docid with the same logit).

        Raises:
            ValueError: ``docid_init`` is neither.

        """
        from transformers import AutoTokenizer

        from rag_hier.encoders.dense import resolve_model_path
        from rag_hier.encoders.device import resolve_device

        name = resolve_model_path(str(model_name_or_path))
        model = load_seq2seq_lm(name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=False)
        except (OSError, ValueError) as exc:
            raise RagHierError(f"cannot load the tokenizer of model {name!r}: {exc}") from exc
        first = _output_rows(model)
        _special_tokens(model, tokenizer, name)  # fail before resizing
        _resize(model, first + len(docids), seed, docid_init)
        model.to(resolve_device(device))
        return cls(model, tokenizer, docids, first_docid_token=first, max_seq_length=max_seq_length)

    # -- tokens and examples ------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where the model's weights are."""
        return next(self.model.parameters()).device

    def docid_token(self, docid: str) -> int:
        """The token id of ``docid``.

        Raises:
            UnknownDocidError: The model has no token for it.

        """
        try:
            return self.first_docid_token + self._position[docid]
        except KeyError:
            raise UnknownDocidError(f"docid {docid!r} has no token in this DSI-atomic model") from None

    def features(self, texts: Sequence[str], docids: Sequence[str]) -> dict[str, list[list[int]]]:
        """Training examples: tokenized ``texts`` and labels ``[docid token, end-of-sequence]`` (unpadded lists)."""
        if isinstance(texts, str) or isinstance(docids, str):
            raise TypeError("texts and docids must be sequences, not single strings")
        if len(texts) != len(docids):
            raise ValueError(f"{len(texts)} texts but {len(docids)} docids")
        enc = self.tokenizer(list(texts), truncation=True, max_length=self.max_seq_length, return_token_type_ids=False)
        labels = [[self.docid_token(d), self.eos_token_id] for d in docids]
        return {"input_ids": list(enc["input_ids"]), "attention_mask": list(enc["attention_mask"]), "labels": labels}

    def data_collator(self) -> Any:
        """``DataCollatorForSeq2Seq``: pads a batch and adds ``decoder_input_ids`` = the labels shifted right."""
        from transformers import DataCollatorForSeq2Seq

        return DataCollatorForSeq2Seq(self.tokenizer, model=self.model, label_pad_token_id=_IGNORE)

    def batch(self, texts: Sequence[str], docids: Sequence[str]) -> dict[str, torch.Tensor]:
        """One collated batch of :meth:`features` (tensors, with ``decoder_input_ids``), as the trainer builds it."""
        feats = self.features(texts, docids)
        rows = [{k: feats[k][i] for k in feats} for i in range(len(texts))]
        return dict(self.data_collator()(rows))

    # -- scoring ------------------------------------------------------------------------------------
    def _encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        enc = self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=self.max_seq_length,
            return_tensors="pt",
            return_token_type_ids=False,
        )
        return {k: v.to(self.device) for k, v in enc.items()}

    def _first_step(self, texts: Sequence[str], batch_size: int, read: Any) -> np.ndarray:
        """Run one decoding step from the start token over ``texts`` in batches; ``read(output)`` → rows."""
        import torch

        chunks: list[np.ndarray] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                for i in range(0, len(texts), batch_size):
                    enc = self._encode(texts[i : i + batch_size])
                    n = enc["input_ids"].size(0)
                    start = torch.full((n, 1), self.decoder_start_token_id, dtype=torch.long, device=self.device)
                    out = self.model(**enc, decoder_input_ids=start, use_cache=False, return_dict=True)
                    chunks.append(read(out).float().cpu().numpy())
        finally:
            self.model.train(was_training)
        return np.ascontiguousarray(np.concatenate(chunks), dtype=np.float32)

    def logits(self, queries: str | Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Logits ``(n_queries, len(docids))`` of the docid tokens after one decoding step from the start token."""
        texts, _ = _queries(queries)
        lo, hi = self.first_docid_token, self.first_docid_token + len(self.docids)
        if not texts:
            return np.zeros((0, len(self.docids)), np.float32)
        return self._first_step(texts, batch_size, lambda out: out.logits[:, 0, lo:hi])

    def head_inputs(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """What the LM head multiplies at the first decoding step (``(n, dim)``): ``logits = rows · v + bias``."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        captured: list[Any] = []
        hook = self.model.get_output_embeddings().register_forward_hook(
            lambda _module, args, _out: captured.append(args[0][:, 0])
        )
        try:
            return self._first_step(list(texts), batch_size, lambda _out: captured.pop())
        finally:
            hook.remove()

    def sequence_losses(self, texts: Sequence[str], docids: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Teacher-forced cross-entropy ``(n, 2)`` of each example's docid token and end-of-sequence token."""
        import torch
        import torch.nn.functional as F

        chunks: list[np.ndarray] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                for i in range(0, len(texts), batch_size):
                    batch = {
                        k: v.to(self.device)
                        for k, v in self.batch(texts[i : i + batch_size], docids[i : i + batch_size]).items()
                    }
                    labels = batch.pop("labels")
                    logits = self.model(**batch, use_cache=False, return_dict=True).logits.float()
                    loss = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none", ignore_index=_IGNORE)
                    chunks.append(loss.cpu().numpy())
        finally:
            self.model.train(was_training)
        return np.concatenate(chunks) if chunks else np.zeros((0, 2), np.float32)

    # -- new docids ---------------------------------------------------------------------------------
    def add_docids(
        self, docids: Sequence[str], *, init: Literal["random", "tied"] = "random", texts: Sequence[str] | None = None
    ) -> None:
        """Add a token per new docid, without training.

        Args:
            docids: New docids (none may exist already).
            init: ``"random"``: untrained new tokens, as DSI adds them (drawn by the model's own initializer,
                seeded, bias 0, as :meth:`from_pretrained`'s default: they rank by chance until the model is
                trained again); ``"tied"``: the row is the LM head's input for the document's text (:meth:`head_inputs`)
                and its bias 0: what tying gives an untied model.
            texts: The documents' texts (for ``init="tied"``).

        """
        import torch

        new = self._check_new_docids(docids)
        if init not in ("random", "tied"):
            raise ValueError(f"init must be 'random' or 'tied', got {init!r}")
        rows = None
        if init == "tied":
            if texts is None or len(texts) != len(new):
                raise ValueError("init='tied' needs one text per new docid")
            rows = torch.from_numpy(self.head_inputs(list(texts)))
        before = _output_rows(self.model)
        _resize(self.model, before + len(new), seed=before)
        if rows is not None:
            head = self.model.get_output_embeddings()
            with torch.no_grad():
                head.weight[before:] = rows.to(head.weight)
                if getattr(head, "bias", None) is not None:
                    head.bias[before:] = 0.0
                extra = getattr(self.model, "final_logits_bias", None)  # BART adds one after its head
                if extra is not None:
                    extra[..., before:] = 0.0
        self.docids.extend(new)
        self._position.update({d: len(self._position) + i for i, d in enumerate(new)})

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the Hugging Face model (safetensors), its tokenizer and ``dsi_atomic.json``."""
        from rag_hier.encoders._st_loading import quiet_trainer_setup

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        with quiet_trainer_setup():
            self.model.save_pretrained(str(out), safe_serialization=True)
        self.tokenizer.save_pretrained(str(out))
        meta = {
            "format": DSI_FORMAT,
            "format_version": DSI_VERSION,
            "objective": "seq2seq",
            "model_type": self.model.config.model_type,
            "first_docid_token": self.first_docid_token,
            "vocab_size": _output_rows(self.model),
            "decoder_start_token_id": self.decoder_start_token_id,
            "eos_token_id": self.eos_token_id,
            "max_seq_length": self.max_seq_length,
            "num_docids": len(self.docids),
            "docids": self.docids,
        }
        (out / DSI_META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return out

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None) -> DSIAtomicSeq2SeqModel:
        """Load what :meth:`save` wrote (safetensors and JSON only; no ``trust_remote_code``).

        Raises:
            RagHierError: A missing file, a field with a wrong value, or a model that disagrees with
                ``dsi_atomic.json`` (the message names the file and the field).

        """
        from transformers import AutoTokenizer

        from rag_hier.encoders.device import resolve_device

        root = Path(path)
        meta_file = root / DSI_META
        meta = read_dsi_meta(root, "seq2seq")
        fields: dict[str, int] = {}
        for key, low in (
            ("first_docid_token", 0),
            ("decoder_start_token_id", 0),
            ("eos_token_id", 0),
            ("max_seq_length", 1),
        ):
            value = meta.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise RagHierError(f"{meta_file}: field {key!r} must be an integer >= {low}, got {value!r}")
            fields[key] = value
        if not any((root / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json")):
            raise RagHierError(f"{root / 'model.safetensors'} is missing: {root} holds no safetensors weights")
        model = load_seq2seq_lm(str(root), safetensors_only=True)
        rows, n = _output_rows(model), len(meta["docids"])
        if rows != fields["first_docid_token"] + n:
            raise RagHierError(
                f"{root / 'config.json'}: the model's LM head has {rows} rows, but {meta_file} describes "
                f"first_docid_token {fields['first_docid_token']} + {n} docids"
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(root), trust_remote_code=False)
        except (OSError, ValueError) as exc:
            raise RagHierError(f"{root}: cannot load the tokenizer ({exc})") from exc
        dsi = cls(
            model.to(resolve_device(device)),
            tokenizer,
            meta["docids"],
            first_docid_token=fields["first_docid_token"],
            max_seq_length=fields["max_seq_length"],
        )
        for key in ("decoder_start_token_id", "eos_token_id"):
            if getattr(dsi, key) != fields[key]:
                raise RagHierError(
                    f"{meta_file}: field {key!r} is {fields[key]}, but the model's config gives {getattr(dsi, key)}"
                )
        return dsi

    def __repr__(self) -> str:
        return (
            f"DSIAtomicSeq2SeqModel({type(self.model).__name__}, docids={len(self.docids)}, "
            f"first_docid_token={self.first_docid_token})"
        )
