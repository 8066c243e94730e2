"""What the ``rag-hier train ...`` commands share: generated configuration flags, errors, runtime flags, corpus checks.

:func:`add_config_arguments` turns a training configuration's field metadata
(:func:`rag_hier.training.config.train_field`) into flags, as :mod:`rag_hier.cli.strategies` does for a strategy's
parameters; the :class:`ConfigFlags` it returns builds the configuration from the parsed flags by the same table,
and names the flag in the configuration's own validation errors. Flags that are not configuration fields (the
corpus, ``--queries``, ``--output``, ``--eval-queries``, ``--fp16``/``--bf16``/``--device``/``--no-progress``)
are written by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_hier.cli._base import CliError
from rag_hier.cli._base import comma_list as _comma_list

__all__ = [
    "ConfigFlags",
    "add_config_arguments",
    "add_eval_arguments",
    "add_runtime_arguments",
    "cli_error",
    "existing_corpus",
    "passage_words",
    "print_before_after",
    "qa_or_beir_judgements",
    "train_parser",
]


def cli_error(message: str) -> Exception:
    """A one-line CLI error (exit 2)."""
    return CliError(message)


def train_parser(subparsers: Any, name: str, **kwargs: Any) -> Any:
    """The ``rag-hier train NAME`` parser, with the help line the method registered (``MethodSpec.train``)."""
    from rag_hier.index.methods import method

    spec = method(name).train
    if spec is None:
        raise ValueError(f"method {name!r} registered no trainer")
    return subparsers.add_parser(name, help=spec.help, **kwargs)


def add_runtime_arguments(p: Any, *, precision: bool = True) -> None:
    """``--fp16``/``--bf16`` (exclusive, with ``precision``), ``--device`` and ``--no-progress``."""
    if precision:
        group = p.add_mutually_exclusive_group()
        group.add_argument("--fp16", action="store_true", help="float16 mixed precision (GPU)")
        group.add_argument("--bf16", action="store_true", help="bfloat16 mixed precision")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when available)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


_RUNTIME_FLAGS: Mapping[str, tuple[str, str]] = {
    "fp16": ("--fp16", "fp16"),
    "bf16": ("--bf16", "bf16"),
    "device": ("--device", "device"),
    "show_progress_bar": ("--no-progress", "no_progress"),
}
"""Configuration fields set by the runtime flags (:func:`add_runtime_arguments`): field → (flag, dest)."""


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


@dataclass(frozen=True)
class ConfigFlags:
    """How one ``rag-hier train`` command sets a configuration's fields (made by :func:`add_config_arguments`).

    Attributes:
        config: The configuration class.
        flags: Field → its generated flag.
        skip: Fields the generator left to the command (hand-written flags, or none).
        rename: Field → the flag that sets it, where that is not ``--`` + the name with dashes (a hand-written
            flag, or a generated one renamed for this command).
        dests: Field → the parsed arguments' attribute of its generated flag, where that is not the field's name.

    """

    config: type
    flags: Mapping[str, str]
    skip: frozenset[str]
    rename: Mapping[str, str]
    dests: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def flag(self, name: str) -> str:
        """The flag that sets field ``name``, as error messages name it."""
        if name in self.flags:
            return self.flags[name]
        if name in self.rename:
            return self.rename[name]
        if name in _RUNTIME_FLAGS:
            return _RUNTIME_FLAGS[name][0]
        return "--" + name.replace("_", "-")

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        """The field values given by the generated and the runtime flags (a ``flag_none`` value becomes ``None``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self.config):
            if f.name in self.flags:
                value = getattr(args, self.dests.get(f.name, f.name))
                none = f.metadata.get("flag_none")
                if value is not None and ((none == "zero" and value == 0) or (none == "negative" and value < 0)):
                    value = None
                out[f.name] = value
            elif f.metadata.get("cli") == "runtime" and f.name not in self.skip and f.name in _RUNTIME_FLAGS:
                dest = _RUNTIME_FLAGS[f.name][1]
                if hasattr(args, dest):
                    value = getattr(args, dest)
                    out[f.name] = not value if dest == "no_progress" else value
        return out

    def build(self, args: argparse.Namespace, **given: Any) -> Any:
        """The configuration from the flags plus ``given`` (values of hand-written flags).

        Raises:
            CliError: The configuration refused a value; the message names its flag.

        """
        try:
            return self.config(**{**self.values(args), **given})
        except ValueError as exc:
            raise cli_error(self.message(str(exc))) from exc

    def message(self, text: str) -> str:
        """``text`` with every ``<Config>.<field>`` replaced by the field's flag."""
        pattern = rf"\b{re.escape(self.config.__name__)}\.(\w+)"
        return re.sub(pattern, lambda m: self.flag(m.group(1)), text)


def add_config_arguments(
    parser: Any,
    config: type,
    *,
    skip: Collection[str] = (),
    rename: Mapping[str, str] | None = None,
    title: str | None = None,
    dest_from_flag: bool = False,
    set_default: bool = True,
) -> ConfigFlags:
    """One flag per field of ``config`` whose metadata asks for one (``cli=True``, :func:`train_field`), but ``skip``.

    The flag is the field's ``flag=`` (or ``rename``'s, or ``--`` + the name with dashes); its type comes from the
    annotation (``X | None`` as ``X``, ``Literal[...]`` or ``choices=`` as choices, ``tuple[str, ...]`` as a
    comma-separated list); a ``bool`` that defaults to false is a switch that sets it, one that defaults to true a
    switch that clears it; a field with ``const=`` takes its value optionally (the flag alone means ``const``).
    The default is the configuration's own, shown in the help. Bounds are left to the configuration's validation:
    :meth:`ConfigFlags.build` reports its message with the flag's name.

    Args:
        parser: The ``rag-hier train METHOD`` parser.
        config: The configuration dataclass.
        skip: Fields the command sets through hand-written flags (or not at all).
        rename: Field → flag where this command's flag is not the field's own (generated or hand-written).
        title: Title of the flags' group in ``--help``.
        dest_from_flag: Store each flag's value under the flag's own name (``--train-batch-size`` →
            ``args.train_batch_size``) rather than the field's, where the command has a flag of the field's name
            for something else.
        set_default: Make the table the parser's default ``config_flags``; a command that does not (its
            parser is built from the generated tables alone) builds the table again when it runs.

    Returns:
        The table, also the parser's default ``config_flags`` (``args.config_flags.build(args, ...)``) with
        ``set_default``.

    """
    from rag_hier.training.config import field_type

    names = {f.name for f in dataclasses.fields(config)}
    rename = dict(rename or {})
    unknown = sorted((set(skip) | set(rename)) - names)
    if unknown:
        raise ValueError(f"{config.__name__} has no field(s) {', '.join(unknown)}")
    hints = typing.get_type_hints(config)
    group = parser.add_argument_group(title or f"training configuration ({config.__name__})")
    flags: dict[str, str] = {}
    dests: dict[str, str] = {}
    for f in dataclasses.fields(config):
        meta = f.metadata
        if f.name in skip or meta.get("cli", False) is not True:
            continue
        base, _, literal = field_type(hints[f.name])
        dashed = f.name.replace("_", "-")
        flag = rename.get(f.name) or meta.get("flag") or (f"--no-{dashed}" if f.default is True else f"--{dashed}")
        help_text = str(meta.get("help", "")).replace("%", "%%")
        dest = flag.lstrip("-").replace("-", "_") if dest_from_flag else f.name
        if dest != f.name:
            dests[f.name] = dest
        if base is bool:
            action = "store_false" if f.default else "store_true"
            group.add_argument(flag, dest=dest, action=action, default=f.default, help=help_text)
        else:
            given = meta.get("choices")
            choices = tuple((given() if callable(given) else given) or literal) or None
            tuple_type = typing.get_origin(base) is tuple
            if f.default is not None:
                help_text += f" (default {_shown(f.default)})"
            optional = {"nargs": "?", "const": meta["const"]} if meta.get("const") is not None else {}
            group.add_argument(
                flag,
                dest=dest,
                type=_comma_list if tuple_type else base,
                choices=choices,
                **optional,
                default=f.default,
                metavar=None if choices else flag.lstrip("-").replace("-", "_").upper(),
                help=help_text,
            )
        flags[f.name] = flag
    table = ConfigFlags(config, flags, frozenset(skip), rename, dests)
    if set_default:
        parser.set_defaults(config_flags=table)
    return table


def existing_corpus(path: str) -> Path:
    """The corpus path, or a CLI error when there is nothing there."""
    corpus = Path(path)
    if not corpus.exists():
        raise cli_error(f"corpus {corpus} does not exist")
    return corpus


def passage_words(args: argparse.Namespace, fmt: str) -> int:
    """``--max-passage-words``, defaulting as ``rag-hier index`` does (0 for BEIR and QA documents, else 100)."""
    words = args.max_passage_words if args.max_passage_words is not None else (0 if fmt in ("beir", "qa-docs") else 100)
    if words < 0:
        raise cli_error(f"--max-passage-words must be >= 0, got {words}")
    return words


def add_eval_arguments(p: Any) -> None:
    """``--eval-queries FILE [--eval-qrels FILE]``: held-out judged queries scored for base and trained model."""
    p.add_argument(
        "--eval-queries",
        default=None,
        help="held-out judged queries (BEIR queries.jsonl or QA questions.jsonl): after training, the base and the "
        "trained model are scored on them over the training corpus, side by side (rag-hier eval's metrics)",
    )
    p.add_argument("--eval-qrels", default=None, help="judgements of --eval-queries (optional for QA questions)")


def check_eval_arguments(args: argparse.Namespace) -> None:
    """Refuse ``--eval-queries/--eval-qrels`` that could not be scored, before anything is trained."""
    queries, qrels = getattr(args, "eval_queries", None), getattr(args, "eval_qrels", None)
    if qrels and not queries:
        raise cli_error("--eval-qrels needs --eval-queries")
    if not queries:
        return
    for flag, value in (("--eval-queries", queries), ("--eval-qrels", qrels)):
        if value is not None and not Path(value).exists():
            raise cli_error(f"{flag} {value} does not exist")
    if qrels is None:
        from rag_hier.corpus.readers import read_qa_questions

        try:
            read_qa_questions(queries)
        except Exception as exc:
            raise cli_error(
                f"--eval-qrels is required unless --eval-queries is a QA questions.jsonl ({queries}: {exc})"
            ) from exc


def print_before_after(
    args: argparse.Namespace,
    documents: Any,
    base_model: str,
    trained_model: str | Path,
    *,
    corpus_format: str,
    max_passage_words: int,
) -> None:
    """When ``--eval-queries`` was given: score base and trained model on them and print both with the difference."""
    if not getattr(args, "eval_queries", None):
        if getattr(args, "eval_qrels", None):
            raise cli_error("--eval-qrels needs --eval-queries")
        return

    from rag_hier.tuning.before_after import before_after

    report = before_after(
        documents,
        base_model,
        trained_model,
        args.eval_queries,
        args.eval_qrels,
        corpus_format=corpus_format,
        max_passage_words=max_passage_words,
        device=getattr(args, "device", None),
        show_progress_bar=not getattr(args, "no_progress", False),
    )
    show_before_after(report)


def show_before_after(report: Any) -> None:
    """Print a held-out comparison (a :class:`~rag_hier.tuning.TuneReport`): its warnings on stderr, then it."""
    import sys

    for line in report.warnings:
        print(f"rag-hier train: warning: {line}", file=sys.stderr)
    print(report.summary())


def qa_or_beir_judgements(queries: str, qrels: str | None, max_passage_words: int) -> tuple[dict, dict]:
    """Training queries and judgements from BEIR queries + qrels, or from QA ``questions.jsonl`` alone.

    QA questions judge their gold paragraph (``<doc_id>#<index>``) when paragraphs are kept whole
    (``max_passage_words == 0``), else their gold document.
    """
    from rag_hier.corpus.readers import qa_qrels, read_qa_questions, read_qrels, read_queries

    if qrels:
        return read_queries(queries), read_qrels(qrels)
    try:
        questions = read_qa_questions(queries)
    except Exception as exc:
        raise cli_error(f"--qrels is required unless --queries is a QA questions.jsonl ({exc})") from exc
    level = "paragraph" if max_passage_words == 0 and all(q.paragraph_index is not None for q in questions) else "doc"
    return {q.qid: q.question for q in questions}, qa_qrels(questions, level)  # type: ignore[arg-type]
