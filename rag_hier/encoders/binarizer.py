"""T(x): the binary bag-of-tokens representation of SVDR, built by a tokenizer alone (no model).

SVDR (Zhou, Dong, Wei, Chen, "Semi-Parametric Retrieval via Binary Token Index", arXiv 2405.01924)
represents a text non-parametrically as the set of vocabulary tokens it contains: ``T(x)[t] = 1`` when
token ``t`` occurs in ``x``. :class:`TokenBinarizer` computes it with the same tokenizer, the same
truncation and the same dropped tokens as :class:`~rag_hier.encoders.vocab.VocabEncoder`, so that the
binary token index, the encoder's lexical activation and the trainer's ``T(q)``/``T(p)`` agree exactly.

Columns are token ids of the tokenizer's vocabulary. Special tokens (``[PAD]``, ``[CLS]``, ``[SEP]``,
``[MASK]``, ``[UNK]``, ...) and placeholder tokens (``[unused0]`` ... ``[unused993]`` in BERT) are never
active; for BERT's uncased WordPiece vocabulary that leaves 29,523 of 30,522 dimensions, the same
dimensions as the reference implementation's ``shift_vocab_num = 999``. There is no stopword list.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rag_hier._lazy import LazyModule
from rag_hier.encoders.dense import DEFAULT_MODEL, resolve_model_path
from rag_hier.errors import RagHierError

if TYPE_CHECKING:
    import scipy.sparse as sp
else:
    sp = LazyModule("scipy.sparse")  # imported on first use

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

__all__ = [
    "VOCAB_ENCODER_CONFIG",
    "SparseVector",
    "TokenBinarizer",
    "dropped_token_ids",
    "resolve_backbone_dir",
    "to_sparse_vectors",
]

VOCAB_ENCODER_CONFIG = "vocab_encoder.json"
"""The file that marks a directory saved by :meth:`VocabEncoder.save`; its backbone is in ``backbone/``."""

_PLACEHOLDER = re.compile(r"^(\[unused\d+\]|<unused\d+>|\[UNUSED_\d+\])$")


@dataclass(frozen=True)
class SparseVector:
    """One sparse vector over a tokenizer's vocabulary.

    Args:
        indices: Token ids of the active dimensions, ascending (int32).
        values: Their weights (float32); all 1 for a binary T(x).

    """

    indices: np.ndarray
    values: np.ndarray

    def to_dict(self) -> dict[str, list[Any]]:
        """``{"indices": [...], "values": [...]}`` (JSON-ready; Haystack's ``SparseEmbedding`` layout)."""
        return {"indices": self.indices.tolist(), "values": self.values.tolist()}

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def to_sparse_vectors(matrix: sp.csr_matrix) -> list[SparseVector]:
    """Split a CSR matrix into one :class:`SparseVector` per row (indices ascending)."""
    m = sp.csr_matrix(matrix)
    m.sort_indices()
    return [
        SparseVector(
            indices=np.asarray(m.indices[m.indptr[i] : m.indptr[i + 1]], dtype=np.int32),
            values=np.asarray(m.data[m.indptr[i] : m.indptr[i + 1]], dtype=np.float32),
        )
        for i in range(m.shape[0])
    ]


def resolve_backbone_dir(model: str | Path) -> str:
    """The Hugging Face model directory (or hub id) behind ``model``.

    ``model`` may be the default model's name (mapped to the offline copy), a sentence-transformers
    directory (its ``Transformer`` module's folder is returned, read from ``modules.json``), a directory
    saved by :meth:`VocabEncoder.save` (its ``backbone/`` folder), a plain Hugging Face model directory,
    or a hub id (returned as is).
    """
    path = Path(resolve_model_path(str(model)))
    if not path.is_dir():
        return str(model) if str(model) not in ("", ".") else str(path)
    if (path / VOCAB_ENCODER_CONFIG).is_file():
        return str(path / "backbone")
    modules = path / "modules.json"
    if modules.is_file():
        try:
            entries = json.loads(modules.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RagHierError(f"{modules}: not valid JSON ({exc})") from exc
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and str(entry.get("type", "")).endswith(".Transformer"):
                sub = str(entry.get("path", "") or "")
                return str(path / sub) if sub else str(path)
        raise RagHierError(f"{modules}: no Transformer module, so there is no vocabulary model to use")
    return str(path)


def dropped_token_ids(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """Ids never used as dimensions: special tokens and placeholders such as ``[unused17]`` (sorted)."""
    drop = {int(i) for i in tokenizer.all_special_ids}
    drop.update(int(i) for tok, i in tokenizer.get_vocab().items() if _PLACEHOLDER.match(tok))
    return np.asarray(sorted(drop), dtype=np.int64)


def _tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase, kept: np.ndarray) -> str:
    h = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        for transient in ("truncation", "padding"):  # call settings, not the tokenization itself
            spec.pop(transient, None)
        h.update(json.dumps(spec, sort_keys=True).encode("utf-8"))
    else:  # pragma: no cover - slow tokenizers
        h.update(json.dumps(sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])).encode("utf-8"))
    h.update(np.ascontiguousarray(kept, dtype="<i8").tobytes())
    return h.hexdigest()


class TokenBinarizer:
    """Compute T(x), the binary bag of tokens of texts, with a tokenizer only.

    Args:
        tokenizer: A Hugging Face tokenizer, or a model name/path to load one from (any form accepted by
            :func:`resolve_backbone_dir`; default: the offline all-MiniLM-L6-v2, i.e. BERT uncased).
        max_length: Truncate each text to this many model tokens, special tokens included, as the
            encoder does (``None``: no truncation — every token of the text counts).
        batch_size: Texts tokenized per call (the fast tokenizers parallelise inside a call).
        light: A tokenizer given by name loads with ``load_tokenizer(..., light=True)`` (no PyTorch import for a
            BERT-family ``tokenizer.json``); ``False`` always goes through ``AutoTokenizer``.

    Example:
        >>> binarizer = TokenBinarizer()  # doctest: +SKIP
        >>> binarizer.transform(["the moon pulls the tides"]).indices  # doctest: +SKIP
        array([1996, 4231, 8005, 11952], dtype=int32)

    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase | str | Path = DEFAULT_MODEL,
        *,
        max_length: int | None = 256,
        batch_size: int = 2048,
        light: bool = True,
    ) -> None:
        if max_length is not None and max_length < 2:
            raise ValueError(f"max_length must be >= 2 (room for the special tokens) or None, got {max_length}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if isinstance(tokenizer, (str, Path)):
            self.source: str = str(tokenizer)
            self.tokenizer = load_tokenizer(tokenizer, light=light)
        else:
            self.source = str(getattr(tokenizer, "name_or_path", "") or "")
            self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self.vocab_size = len(self.tokenizer)
        self.dropped_ids = dropped_token_ids(self.tokenizer)
        kept = np.ones(self.vocab_size, dtype=bool)
        kept[self.dropped_ids[self.dropped_ids < self.vocab_size]] = False
        self.kept_mask: np.ndarray = kept
        """Boolean mask over token ids: ``True`` for dimensions that can be active."""
        self.kept_ids: np.ndarray = np.flatnonzero(kept).astype(np.int64)
        """The usable token ids, ascending."""
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the tokenizer (normaliser, pre-tokeniser, vocabulary) and the kept ids."""
        if self._fingerprint is None:
            self._fingerprint = _tokenizer_fingerprint(self.tokenizer, self.kept_ids)
        return self._fingerprint

    def input_ids(self, texts: Sequence[str], *, max_length: int | bool | None = True) -> list[list[int]]:
        """Token ids as the encoder sees them (special tokens added, truncated to ``max_length``).

        ``max_length=True`` uses the binarizer's own ``max_length``.
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a single string")
        limit = self.max_length if max_length is True else max_length
        out: list[list[int]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [t if isinstance(t, str) else str(t) for t in texts[start : start + self.batch_size]]
            enc = self.tokenizer(
                batch,
                add_special_tokens=True,
                truncation=limit is not None,
                max_length=limit,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
            )
            out.extend(enc["input_ids"])
        return out

    def from_input_ids(self, ids: Sequence[Sequence[int]]) -> sp.csr_matrix:
        """T(x) from token ids: a ``(n, vocab_size)`` float32 CSR of ones, columns sorted."""
        n = len(ids)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=n)
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        ok = (flat >= 0) & (flat < self.vocab_size)
        rows, flat = rows[ok], flat[ok]
        keep = self.kept_mask[flat]
        rows, cols = rows[keep], flat[keep].astype(np.int32)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        # rows are already grouped: sort and de-duplicate the columns within each row (scipy, in C++)
        matrix = sp.csr_matrix((np.ones(cols.shape[0], dtype=np.float32), cols, indptr), shape=(n, self.vocab_size))
        matrix.sum_duplicates()
        matrix.data[:] = 1.0
        return matrix

    def transform(self, texts: Sequence[str], *, max_length: int | bool | None = True) -> sp.csr_matrix:
        """T(x) of ``texts``: a ``(n, vocab_size)`` float32 CSR matrix of ones."""
        return self.from_input_ids(self.input_ids(texts, max_length=max_length))

    def sparse_vectors(self, texts: Sequence[str]) -> list[SparseVector]:
        """T(x) of each text as ``(indices, values)`` (values all 1)."""
        return to_sparse_vectors(self.transform(texts))

    def __repr__(self) -> str:
        return f"TokenBinarizer({self.source!r}, max_length={self.max_length})"


_LIGHT_TOKENIZER_CLASSES = frozenset(
    {"BertTokenizer", "BertTokenizerFast", "DistilBertTokenizer", "DistilBertTokenizerFast", "PreTrainedTokenizerFast"}
)
"""Tokenizer classes whose ``tokenizer.json`` is the whole tokenizer: run without transformers."""


def _light_tokenizer_config(where: str) -> dict[str, Any] | None:
    """``tokenizer_config.json`` of a local BERT-family tokenizer whose ``tokenizer.json`` is all it needs, else None.

    Such a tokenizer runs from the file with the ``tokenizers`` library alone, without transformers' auto classes
    and their import of PyTorch (about 2 s): building a token index needs no model.
    """
    folder = Path(where)
    if not (folder / "tokenizer.json").is_file():
        return None
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # no configuration, or a broken one: the ordinary loader decides or reports
    if not isinstance(config, dict) or config.get("tokenizer_class") not in _LIGHT_TOKENIZER_CLASSES:
        return None
    return config


_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class _TokenizerFile:
    """A BERT-family ``tokenizer.json`` run by the ``tokenizers`` library alone.

    It offers the part of transformers' tokenizer interface :class:`TokenBinarizer` uses (call, ``len``,
    ``all_special_ids``, ``get_vocab``, ``backend_tokenizer``) and the id/token conversions (``convert_tokens_to_ids``,
    ``convert_ids_to_tokens``, ``decode``), with the same ids, special tokens and fingerprint, without importing
    transformers (about 0.7 s) or PyTorch (about 2 s).
    """

    def __init__(self, folder: Path, special_ids: list[int]) -> None:
        from tokenizers import Tokenizer

        self.backend_tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.backend_tokenizer.no_padding()
        self.name_or_path = str(folder)
        self.all_special_ids = special_ids

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend_tokenizer.get_vocab(with_added_tokens=True))

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> Any:
        """Id of a token (or ids of tokens); unknown tokens map to the unknown token's id, as in transformers."""
        unk = self.backend_tokenizer.token_to_id(str(getattr(self.backend_tokenizer.model, "unk_token", "")))

        def one(token: str) -> int | None:
            found = self.backend_tokenizer.token_to_id(token)
            return unk if found is None else found

        return one(tokens) if isinstance(tokens, str) else [one(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> Any:
        """Token of an id (or tokens of ids)."""
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of token ids."""
        return str(self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def __call__(
        self,
        texts: str | Sequence[str],
        *,
        add_special_tokens: bool = True,
        truncation: bool = False,
        max_length: int | None = None,
        **_settings: Any,
    ) -> dict[str, Any]:
        """``{"input_ids": ...}``: one list of ids for a string, a list of them for a list of strings."""
        backend = self.backend_tokenizer
        if truncation and max_length is not None:
            backend.enable_truncation(max_length)  # what transformers sets for truncation=True ("longest_first")
        else:
            backend.no_truncation()
        if isinstance(texts, str):
            return {"input_ids": backend.encode(texts, add_special_tokens=add_special_tokens).ids}
        # ids only: the offsets that encode_batch also computes are not needed (tokenizers >= 0.20)
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        encodings = encode(list(texts), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encodings]}


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _light_tokenizer(where: str) -> _TokenizerFile | None:
    """The tokenizer of ``where`` run from its ``tokenizer.json`` alone, when that is the whole tokenizer."""
    config = _light_tokenizer_config(where)
    if config is None:
        return None
    folder = Path(where)
    tokenizer = _TokenizerFile(folder, [])
    lowercase = getattr(tokenizer.backend_tokenizer.normalizer, "lowercase", None)
    if "do_lower_case" in config and lowercase is not None and bool(config["do_lower_case"]) != bool(lowercase):
        return None  # the configuration overrides the file's normaliser: the ordinary loader applies it
    names: dict[str, Any] = {}
    for loaded in (config, _json_or_none(folder / "special_tokens_map.json")):  # the map wins, as in transformers
        if isinstance(loaded, dict):
            names.update({k: loaded[k] for k in (*_SPECIAL_KEYS, "additional_special_tokens") if k in loaded})
    tokens: list[Any] = [names.get(k) for k in _SPECIAL_KEYS] + list(names.get("additional_special_tokens") or [])
    vocab = tokenizer.get_vocab()
    ids = []
    for token in tokens:
        content = token.get("content") if isinstance(token, dict) else token
        if content is None:
            continue
        if not isinstance(content, str) or content not in vocab:
            return None  # a special token the file does not hold: the ordinary loader decides
        ids.append(vocab[content])
    tokenizer.all_special_ids = sorted(set(ids))
    return tokenizer


def load_tokenizer(model: str | Path, *, light: bool = False) -> PreTrainedTokenizerBase:
    """Load the (fast) tokenizer of ``model`` (see :func:`resolve_backbone_dir` for accepted forms).

    ``light=True`` runs a local BERT-family ``tokenizer.json`` with the ``tokenizers`` library alone (same
    vocabulary, normaliser, special tokens and ids; neither transformers nor PyTorch imported) when that is the
    whole tokenizer, and loads any other tokenizer the ordinary way (``AutoTokenizer``).
    """
    where = resolve_backbone_dir(model)
    try:
        if light and (tokenizer := _light_tokenizer(where)) is not None:
            return cast("PreTrainedTokenizerBase", tokenizer)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(where)
    except (OSError, ValueError) as exc:
        raise RagHierError(f"cannot load a tokenizer from {str(model)!r} ({where}): {exc}") from exc
