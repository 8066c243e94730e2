"""What every trainer's configuration shares: :class:`TrainingConfig`, :func:`train_field` and :func:`shared_field`.

Importable without NumPy or PyTorch: ``rag-hier train METHOD --help`` builds its flags from a configuration's
field metadata (:func:`rag_hier.cli._train.add_config_arguments`), as ``rag-hier search`` does from a strategy's
:func:`~rag_hier.retrieval.params.param` fields, so the command line and the dataclass cannot disagree.

A method's configuration subclasses :class:`TrainingConfig` (``epochs``, ``batch_size``, ``max_steps``,
``warmup_ratio`` and ``seed``: the fields every trainer has), declares its own fields with :func:`train_field`
and the recurring ones (``learning_rate``, ``max_seq_length``, ``fp16``, ...) with :func:`shared_field`, which
keeps one help line and one set of bounds for each. A subclass changes a default by declaring the field again::

    @dataclass(frozen=True)
    class MyConfig(TrainingConfig):
        epochs: int = shared_field("epochs", 3)
        learning_rate: float = shared_field("learning_rate", 2e-5)
        depth: int = train_field(20, help="candidates per query", minimum=1)

Every bound, choice and ``None`` allowance declared there is checked at construction with one message shape,
``MyConfig.depth must be >= 1; got 0`` (the CLI turns ``MyConfig.depth`` into ``--depth``); checks that involve
several fields stay in the subclass's ``__post_init__``, after ``super().__post_init__()``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SHARED_FIELDS", "FlagNone", "TrainingConfig", "allowed_text", "shared_field", "train_field"]

FlagNone = Literal["zero", "negative"]
"""Which values of a field's flag stand for ``None``: ``0``, or any negative number."""

CliUse = bool | Literal["runtime"]
"""Whether ``rag-hier train`` gives a field a flag: ``True`` (generated), ``False`` (none), ``"runtime"`` (one of
the shared runtime flags ``--fp16``/``--bf16``/``--device``/``--no-progress``)."""


def train_field(
    default: Any,
    *,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    choices: tuple[Any, ...] | Callable[[], tuple[Any, ...]] | None = None,
    allowed: str | None = None,
    flag: str | None = None,
    cli: CliUse = True,
    flag_none: FlagNone | None = None,
    const: Any = None,
) -> Any:
    """Declare a training hyper-parameter: its default, one line of help, and what values it allows.

    Args:
        default: The default value.
        help: One line for ``rag-hier train METHOD --help`` (the default is appended there).
        minimum: Smallest allowed value (inclusive).
        maximum: Largest allowed value (inclusive).
        above: Values must be greater than this.
        below: Values must be less than this.
        choices: The allowed values (a ``Literal`` annotation gives them otherwise), or a function returning them
            (a registry's names), asked at each check and when the flags are generated.
        allowed: What the error message says is allowed, where the bounds alone do not say it well.
        flag: The ``rag-hier train`` flag (default ``--`` + the name with dashes; for a ``bool`` that defaults to
            true, the flag sets it false).
        cli: ``True``: a generated flag; ``False``: none; ``"runtime"``: one of the shared runtime flags.
        flag_none: The flag values that stand for ``None`` (``"zero"``: 0; ``"negative"``: any negative number).
        const: The value of the flag given alone (its value is then optional: ``--refit`` means ``--refit full``).

    """
    metadata = {
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "above": above,
        "below": below,
        "choices": choices,
        "allowed": allowed,
        "flag": flag,
        "cli": cli,
        "flag_none": flag_none,
        "const": const,
    }
    return dataclasses.field(default=default, metadata=metadata)


SHARED_FIELDS: Mapping[str, Mapping[str, Any]] = {
    # every trainer
    "epochs": {"help": "passes over the training data", "minimum": 1},
    "batch_size": {"help": "training examples per step and device", "minimum": 1},
    "max_steps": {"help": "stop after this many optimizer steps in total", "minimum": 1},
    "warmup_ratio": {
        "help": "linear warm-up over this fraction of the planned steps, then linear decay",
        "minimum": 0,
        "below": 1,
        "cli": False,
    },
    "seed": {"help": "seed of sampling, data order and initialisation"},
    # most trainers
    "learning_rate": {"help": "peak learning rate (AdamW)", "above": 0, "flag": "--lr"},
    "weight_decay": {"help": "AdamW weight decay", "minimum": 0, "cli": False},
    "max_minutes": {"help": "stop training after this many minutes", "above": 0},
    "max_seq_length": {"help": "truncate texts to this many tokens (default: the model's own limit)", "minimum": 8},
    "attention_dropout": {
        "help": "dropout on attention probabilities while training (0: PyTorch's fused attention kernel on CPU, "
        "faster and lighter, docs/hce.md; -1 keeps the model's own rate)",
        "minimum": 0,
        "below": 1,
        "flag_none": "negative",
    },
    "mini_batch_size": {
        "help": "embed each step's texts in GradCache mini-batches of N texts to bound memory (0: the whole batch "
        "in one forward pass)",
        "minimum": 1,
        "flag_none": "zero",
    },
    "gradient_accumulation_steps": {
        "help": "gradient accumulation steps (micro-batches per optimizer step)",
        "minimum": 1,
        "flag": "--grad-accum",
    },
    "fp16": {"help": "float16 mixed precision (GPU)", "cli": "runtime"},
    "bf16": {"help": "bfloat16 mixed precision", "cli": "runtime"},
    "device": {"help": "cpu, cuda, ... (default: CUDA when available)", "cli": "runtime"},
    "show_progress_bar": {"help": "show progress bars", "cli": "runtime"},
    "gather_across_devices": {
        "help": "gather in-batch negatives across processes under torch.distributed",
        "cli": False,
    },
    "logging_steps": {"help": "log the training loss every this many steps", "minimum": 1, "cli": False},
    "encode_batch_size": {"help": "batch size for encoding the corpus", "minimum": 1, "cli": False},
}
"""The fields several trainers declare, with their shared help and bounds (:func:`shared_field`)."""


def shared_field(name: str, default: Any, **changes: Any) -> Any:
    """A field of :data:`SHARED_FIELDS` (``"learning_rate"``, ...) with this ``default``.

    ``changes`` adjust its help, bounds or flag as :func:`train_field` takes them (``minimum=2``,
    ``help="queries per step"``).
    """
    if name not in SHARED_FIELDS:
        raise KeyError(f"no shared training field {name!r}; known: {', '.join(SHARED_FIELDS)}")
    return train_field(default, **{**SHARED_FIELDS[name], **changes})


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def allowed_text(meta: Mapping[str, Any], *, optional: bool = False, choices: tuple[Any, ...] = ()) -> str:
    """What a field allows, in words (``">= 1"``, ``"in [0, 1)"``, ``"sum or mean"``, ``"> 0 or None"``)."""
    if meta.get("allowed"):
        return str(meta["allowed"])
    if choices:
        text = " or ".join(str(c) for c in choices)
    else:
        lo = (_number(meta["minimum"]), "[") if meta.get("minimum") is not None else None
        lo = (_number(meta["above"]), "(") if lo is None and meta.get("above") is not None else lo
        hi = (_number(meta["maximum"]), "]") if meta.get("maximum") is not None else None
        hi = (_number(meta["below"]), ")") if hi is None and meta.get("below") is not None else hi
        if lo and hi:
            text = f"in {lo[1]}{lo[0]}, {hi[0]}{hi[1]}"
        elif lo:
            text = f"{'>=' if lo[1] == '[' else '>'} {lo[0]}"
        elif hi:
            text = f"{'<=' if hi[1] == ']' else '<'} {hi[0]}"
        else:
            return ""
    return f"{text} or None" if optional else text


def field_type(hint: Any) -> tuple[Any, bool, tuple[Any, ...]]:
    """``(base type, whether None is allowed, Literal choices)`` of a field annotation."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else hint
    if typing.get_origin(hint) is Literal:
        return type(typing.get_args(hint)[0]), optional, typing.get_args(hint)
    return hint, optional, ()


_Check = tuple[str, tuple[Any, ...] | Callable[[], tuple[Any, ...]], bool, Mapping[str, Any]]
_CHECKS: dict[type, tuple[_Check, ...]] = {}


def _checks(cls: type) -> tuple[_Check, ...]:
    """Per field with something to check: ``(name, choices, optional, metadata)`` (kept per class).

    ``choices`` may be a function, asked at each check.
    """
    if cls in _CHECKS:
        return _CHECKS[cls]
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        _, optional, literal = field_type(hints[f.name])
        given = f.metadata.get("choices")
        choices = given if callable(given) else tuple(given or literal)
        bounds = any(f.metadata.get(k) is not None for k in ("minimum", "maximum", "above", "below"))
        if choices or bounds:
            out.append((f.name, choices, optional, f.metadata))
    _CHECKS[cls] = tuple(out)
    return _CHECKS[cls]


def _within(value: Any, meta: Mapping[str, Any]) -> bool:
    try:  # written so that NaN fails every bound
        return (
            (meta.get("minimum") is None or value >= meta["minimum"])
            and (meta.get("maximum") is None or value <= meta["maximum"])
            and (meta.get("above") is None or value > meta["above"])
            and (meta.get("below") is None or value < meta["below"])
        )
    except TypeError:  # not a number
        return False


@dataclass(frozen=True)
class TrainingConfig:
    """Base of the trainers' frozen configurations: the fields every trainer has, checked at construction.

    Args:
        epochs: Passes over the training data.
        batch_size: Training examples per step and device.
        max_steps: Stop after this many optimizer steps in total (``None``: ``epochs`` decide).
        warmup_ratio: Linear warm-up over this fraction of the planned steps, then linear decay.
        seed: Seed of sampling, data order and initialisation.

    Every field's bounds and choices (:func:`train_field`) are checked in field order; a configuration with both
    ``fp16`` and ``bf16`` refuses both set. Errors are ``ValueError("<Class>.<field> must be <allowed>; got
    <value>")``.

    """

    epochs: int = shared_field("epochs", 1)
    batch_size: int = shared_field("batch_size", 32)
    max_steps: int | None = shared_field("max_steps", None)
    warmup_ratio: float = shared_field("warmup_ratio", 0.1)
    seed: int = shared_field("seed", 42)

    def __post_init__(self) -> None:
        for name, allowed, optional, meta in _checks(type(self)):
            choices = allowed() if callable(allowed) else allowed
            value = getattr(self, name)
            if value is None and optional:
                continue
            ok = value in choices if choices else value is not None and _within(value, meta)
            if not ok:
                self._invalid(name, allowed_text(meta, optional=optional, choices=choices))
        if getattr(self, "fp16", False) and getattr(self, "bf16", False):
            self._invalid("fp16", "False when bf16 is True")

    def _invalid(self, name: str, allowed: str) -> typing.NoReturn:
        """Raise the error for field ``name``: ``<Class>.<name> must be <allowed>; got <value>``."""
        raise ValueError(f"{type(self).__name__}.{name} must be {allowed}; got {getattr(self, name)!r}")

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The configuration's field names."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (written next to the trained model; tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
