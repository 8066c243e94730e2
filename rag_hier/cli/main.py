"""The ``rag-hier`` command line: ``index``, ``search``, ``eval``, ``compare``, ``info``, ``migrate``, ``train``.

Start-up is kept to ``argparse``: ``rag-hier --help`` and every sub-command's ``--help`` build their parser from
generated tables (:mod:`rag_hier.cli._tables`); what a command needs is imported when it runs
(:mod:`rag_hier.cli.commands`).
"""

from __future__ import annotations

import argparse
import os
import sys

from rag_hier.cli._base import COMMAND_HELP as _COMMAND_HELP
from rag_hier.cli._base import LATE, CliError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

__all__ = ["COMMANDS", "INDEX_COMMIT_DOCUMENTS", "CliError", "build_parser", "main", "table_parser"]


# ----------------------------------------------------------------------------------------------------
# parser
# ----------------------------------------------------------------------------------------------------
def build_parser(command: str | None = None, method: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests), built by the modules that declare the flags.

    ``command``: build only that sub-command's arguments (the others, all of them for ``""``, are listed with
    their help line), so ``rag-hier --help`` and a sub-command's ``--help`` import only what its flags need.
    ``method``: likewise for ``train``: only that training method's arguments (``""``: list the methods only).

    ``rag-hier`` itself parses with the same parser built from the generated tables (:func:`table_parser`).
    """
    return _assemble(command, method, _build_command, _build_method, _source_train_methods)


def table_parser(command: str | None = None, method: str | None = None) -> argparse.ArgumentParser:
    """:func:`build_parser`'s parser, built from the generated tables (:mod:`rag_hier.cli._tables`).

    Imports no module that declares flags (no plugin, strategy registry or configuration dataclass), and only the
    tables of the sub-command asked for. Defaults that the tables cannot hold are :data:`~rag_hier.cli._base.LATE`
    (a command that runs gets them from :func:`build_parser`'s parser).
    """
    import importlib

    from rag_hier.cli._tables import TRAIN_METHODS, module_name

    def build_command(name: str, sub: Any) -> None:
        _replay(importlib.import_module(module_name(name)).OPS, sub)

    def build_method(name: str, train_sub: Any) -> None:
        _replay(importlib.import_module(module_name("train", name)).OPS, train_sub)

    return _assemble(command, method, build_command, build_method, lambda: TRAIN_METHODS)


def _assemble(
    command: str | None,
    method: str | None,
    build_command: Callable[[str, Any], None],
    build_method: Callable[[str, Any], None],
    train_methods: Callable[[], Mapping[str, str]],
) -> argparse.ArgumentParser:
    """The parser: ``build_command(name, subparsers)`` adds a sub-command, ``build_method(name, sub)`` a method."""
    from rag_hier._version import __version__

    parser = argparse.ArgumentParser(
        prog="rag-hier",
        description="Index, search and evaluate corpora with rag-hier's persistent FAISS + SQLite store.",
    )
    parser.add_argument("--version", action="version", version=f"rag-hier {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_line in _COMMAND_HELP.items():
        if command is not None and command != name:
            sub.add_parser(name, help=help_line)
        elif name != "train":
            build_command(name, sub)
        else:  # every method's arguments, or (``method`` given) that one's only
            t = sub.add_parser("train", help=help_line)
            train_sub = t.add_subparsers(dest="method", required=True, metavar="METHOD")
            for method_name, method_help in train_methods().items():
                if method is None or method == method_name:
                    build_method(method_name, train_sub)
                else:
                    train_sub.add_parser(method_name, help=method_help)
    return parser


def _replay(ops: Sequence[tuple[int, str, tuple[Any, ...], dict[str, Any]]], root: Any) -> None:
    """Repeat recorded parser calls (:mod:`rag_hier.cli._tables`), each ``(target, method, args, kwargs)``.

    ``target`` indexes ``[root, what the 1st call returned, what the 2nd call returned, ...]``. A hidden flag's
    ``help`` is written as the text of ``argparse.SUPPRESS``, which argparse recognizes only as that very object.
    """
    made = [root]
    for target, call, args, kwargs in ops:
        if kwargs.get("help") == argparse.SUPPRESS:
            kwargs = {**kwargs, "help": argparse.SUPPRESS}
        made.append(getattr(made[target], call)(*args, **kwargs))


def _build_command(name: str, sub: Any) -> None:
    from rag_hier.cli._builders import BUILDERS

    BUILDERS[name](sub)


def _build_method(name: str, train_sub: Any) -> None:
    import importlib

    from rag_hier.cli.plugins import train_methods

    importlib.import_module(train_methods()[name][0]).add_train_parser(train_sub)


def _source_train_methods() -> dict[str, str]:
    from rag_hier.cli.plugins import train_methods

    return {name: help_line for name, (_, help_line) in train_methods().items()}


def _parser(command: str | None, method: str | None) -> argparse.ArgumentParser:
    """The tables' parser, or the flags' modules' one.

    The latter where a method, strategy or tuning recipe was registered since the tables were generated.
    """
    if any(
        m in sys.modules for m in ("rag_hier.index.methods", "rag_hier.retrieval.registry", "rag_hier.tuning.recipes")
    ):
        from rag_hier.cli._base import registry_fingerprint
        from rag_hier.cli._tables import REGISTRY

        if registry_fingerprint() != REGISTRY:
            return build_parser(command, method)
    return table_parser(command, method)


def _resolve_late(args: argparse.Namespace) -> None:
    """Fill in the defaults the tables left :data:`~rag_hier.cli._base.LATE`, from :func:`build_parser`'s parser."""
    late = [name for name, value in vars(args).items() if value is LATE]
    if not late:
        return
    method = getattr(args, "method", None) if args.command == "train" else None
    parser: Any = build_parser(args.command, method)
    for dest, name in (("command", args.command), ("method", method)):
        if name is None:
            break
        (action,) = [a for a in parser._actions if a.dest == dest]
        parser = action.choices[name]
    for name in late:
        setattr(args, name, parser.get_default(name))


# ----------------------------------------------------------------------------------------------------
# running a command
# ----------------------------------------------------------------------------------------------------
def _err(msg: str) -> None:
    print(msg, file=sys.stderr)


def _may_load_model(args: argparse.Namespace) -> bool:
    """Whether the command may load a model (a token or BM25 index without vectors needs a tokenizer only)."""
    if args.command == "index" and getattr(args, "no_dense", False):
        return bool(getattr(args, "svdr_vectors", False))
    return args.command in _MODEL_COMMANDS


def _quiet_transformers() -> None:
    """Hide transformers' weight-loading progress bars (ours and sentence-transformers' stay)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


_MODEL_COMMANDS = frozenset({"index", "search", "eval", "train", "tune"})
"""Commands that may load a model (the others — ``info``, ``compare``, ``migrate`` — import no model library)."""

_EXTRAS = {
    "datasets": "train",
    "accelerate": "train",
    "mteb": "mteb",
    "pymilvus": "milvus",
    "milvus_lite": "milvus",
}
"""Optional dependencies by module, and the extra that installs each."""


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """``rag_hier.cli.commands.cmd_<name>``, imported when it runs."""

    def run(args: argparse.Namespace) -> int:
        from rag_hier.cli import commands

        return int(getattr(commands, f"cmd_{name}")(args))

    run.__name__ = run.__qualname__ = f"cmd_{name}"
    return run


INDEX_COMMIT_DOCUMENTS = 1000
"""``rag-hier index`` commits every this many documents: an interrupted run keeps what it encoded, and a re-run
finds those documents unchanged (nothing re-encoded)."""


def cmd_index(args: argparse.Namespace) -> int:
    """``rag-hier index`` (:func:`rag_hier.cli.commands.cmd_index`), in commits of :data:`INDEX_COMMIT_DOCUMENTS`."""
    from rag_hier.cli import commands

    return commands.cmd_index(args, commit_documents=INDEX_COMMIT_DOCUMENTS)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    name: cmd_index if name == "index" else _command(name) for name in _COMMAND_HELP
}
"""Each sub-command's function (in :mod:`rag_hier.cli.commands`, imported when one runs)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rag-hier`` console script; returns the exit status."""
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:  # without building the parser (plugins)
        from rag_hier._version import __version__

        print(f"rag-hier {__version__}")
        return 0
    given = list(sys.argv[1:] if argv is None else argv)
    words = [i for i, a in enumerate(given) if not a.startswith("-")]
    command = given[words[0]] if words else None
    method = (given[words[1]] if len(words) > 1 else "") if command == "train" else None
    parser = _parser(command if command in _COMMAND_HELP else "", method)  # "": list the commands only
    args = parser.parse_args(given)  # --help and usage errors exit here, before anything else is imported
    _resolve_late(args)
    import logging

    level = logging.WARNING - 10 * min(args.verbose, 2)
    before = list(logging.root.handlers)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.root.handlers:
        if handler not in before:  # ours: also drop records of libraries that set their own logger to DEBUG (bm25s)
            handler.setLevel(level)
    if args.verbose < 2:
        if _may_load_model(args):  # importing transformers is slow: only where a model loads
            _quiet_transformers()
        for noisy in ("sentence_transformers", "transformers", "huggingface_hub", "httpx", "faiss", "pymilvus"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
    import sqlite3

    from rag_hier.errors import RagHierError

    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        extra = _EXTRAS.get(top)
        if extra is None:
            raise
        _err(f'rag-hier {args.command}: error: {top} is not installed; pip install "rag-hier[{extra}]"')
        return 2
    except (CliError, RagHierError, OSError, ValueError, sqlite3.Error, RecursionError) as exc:
        if isinstance(exc, sqlite3.Error):
            where = getattr(args, "store", None)
            message = f"SQLite error{f' in store {where}' if where else ''}: {exc}"
        elif isinstance(exc, RecursionError):
            message = "input nested too deeply (metadata, filters or sections); at most 100 levels are allowed"
        else:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _err(f"rag-hier {args.command}: error: {message}")
        if args.verbose:
            logging.getLogger("rag_hier.cli").exception("details")
        return 2
    except KeyboardInterrupt:
        _err("rag-hier: interrupted")
        return 130


def _closed_pipe() -> int:
    """The reader of stdout went away (``rag-hier info --json | head``): stop quietly, as ``cat`` would.

    Points stdout at ``/dev/null`` so that the interpreter's final flush of what is still buffered does
    not fail again, and exits with 141 (128 + SIGPIPE), what a shell reports for a tool the closed pipe
    stopped.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests capture it)
        pass
    return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
