"""The generated parser tables (``rag_hier/cli/_tables``) build exactly the parser the flags' modules build.

``rag-hier`` parses with :func:`table_parser` (no plugin, registry or configuration dataclass imported);
:func:`build_parser` is built by the modules that declare the flags. When a flag, its help or its default changes
there, the first test fails until ``python -m rag_hier.cli._generate`` is run again.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import pytest

from rag_hier.cli import _generate
from rag_hier.cli._base import COMMAND_HELP, LATE
from rag_hier.cli._tables import TRAIN_METHODS
from rag_hier.cli.main import _parser, _resolve_late, build_parser, table_parser
from rag_hier.cli.plugins import train_methods

PARSERS = [(c, None) for c in COMMAND_HELP if c != "train"] + [("train", m) for m in TRAIN_METHODS]
PARSERS += [("", None), ("train", ""), (None, None)]


def test_the_tables_are_what_the_flags_modules_declare_now() -> None:
    # on failure: python -m rag_hier.cli._generate (and commit rag_hier/cli/_tables)
    assert _generate._stale(_generate.render(_generate.record())) == []
    assert _generate.main(["--check"]) == 0


def test_the_tables_list_the_registered_train_methods() -> None:
    assert {name: help_line for name, (_, help_line) in train_methods().items()} == TRAIN_METHODS


def _dump(parser: argparse.ArgumentParser) -> Any:
    """Everything argparse keeps of a parser, its groups and its sub-parsers (``LATE`` defaults as such)."""

    def default(v: Any) -> Any:
        return "LATE" if v is LATE or not _generate._is_literal(v) else v

    def action(a: argparse.Action) -> Any:
        fields = {
            k: v
            for k, v in vars(a).items()
            if k not in ("container", "_choices_actions", "choices", "_name_parser_map")
        }
        if isinstance(a, argparse._SubParsersAction):
            fields["choices"] = {name: _dump(p) for name, p in a.choices.items()}
            fields["_choices_actions"] = [action(c) for c in a._choices_actions]
        else:
            fields["choices"] = a.choices
        return type(a).__name__, fields

    def members(group: Any) -> list[int]:
        return [parser._actions.index(a) for a in group._group_actions]

    return {
        "attrs": {k: getattr(parser, k) for k in ("prog", "usage", "description", "epilog", "add_help")},
        "defaults": {k: default(v) for k, v in parser._defaults.items()},
        "actions": [action(a) for a in parser._actions],
        "groups": [(g.title, g.description, members(g)) for g in parser._action_groups],
        "exclusive": [(g.required, members(g)) for g in parser._mutually_exclusive_groups],
        "help": parser.format_help(),
    }


@pytest.mark.parametrize(("command", "method"), PARSERS)
def test_the_tables_build_the_same_parser(command: str | None, method: str | None) -> None:
    assert _dump(table_parser(command, method)) == _dump(build_parser(command, method))


def _argv(parser: argparse.ArgumentParser, prefix: list[str]) -> list[str]:
    """``prefix`` plus a value for each positional and each required flag of ``parser``."""
    argv = list(prefix)
    for a in parser._actions:
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction):
            argv.append("x")
        elif a.required and a.option_strings:
            argv += [a.option_strings[0], "x"]
    for g in parser._mutually_exclusive_groups:
        if g.required:
            argv += [g._group_actions[0].option_strings[0], "x"]
    return argv


@pytest.mark.parametrize(("command", "method"), [p for p in PARSERS if p[0] and p[1] != ""])
def test_a_command_that_runs_gets_the_same_namespace(command: str, method: str | None) -> None:
    # the defaults the tables cannot hold (a train method's func and ConfigFlags) come from build_parser's parser
    source = build_parser(command, method)
    (sub,) = [a for a in source._actions if a.dest == "command"]
    leaf = sub.choices[command]
    if method is not None:
        (train_sub,) = [a for a in leaf._actions if a.dest == "method"]
        leaf = train_sub.choices[method]
    argv = _argv(leaf, [command] + ([method] if method else []))
    if command == "compare":
        argv.append("y")
    args = table_parser(command, method).parse_args(argv)
    assert (method is not None) == any(v is LATE for v in vars(args).values())
    _resolve_late(args)
    assert vars(args) == vars(source.parse_args(argv))
    if method is not None:
        assert callable(args.func) and args.config_flags.config.__name__.endswith("Config")


def test_the_flags_modules_build_the_parser_once_the_registry_changed() -> None:
    # a method registered in this process (a plugin of the caller's): the tables do not have its flags
    code = (
        "import sys\n"
        "from rag_hier.cli.main import _parser\n"
        "_parser('index', None)\n"
        "assert 'rag_hier.cli.plugins' not in sys.modules\n"
        "from rag_hier.index.methods import MethodSpec, register_method\n"
        "_parser('index', None)\n"
        "assert 'rag_hier.cli.plugins' not in sys.modules  # the registry as generated: still the tables\n"
        "register_method(MethodSpec('toy-method'))\n"
        "_parser('index', None)\n"
        "assert 'rag_hier.cli.plugins' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_in_this_process_the_tables_are_used() -> None:
    # this process has imported the registry (and tests may have registered methods): _parser decides by it
    parser = _parser("info", None)
    assert _dump(parser) == _dump(build_parser("info"))


def test_the_generator_refuses_what_the_tables_cannot_hold() -> None:
    with pytest.raises(TypeError, match="cannot hold"):
        _generate._source(object(), set())
    assert _generate._source((int, positive := _generate.positive_int, LATE, [1.5, None]), names := set()) == (
        "(int, positive_int, LATE, [1.5, None])"
    )
    assert names == {"int", "positive_int", "LATE"} and positive is _generate.positive_int
