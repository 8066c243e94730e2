"""Generate :mod:`rag_hier.cli._tables`: the ``rag-hier`` parsers as tables of the calls that build them.

The flags are declared where they belong: the sub-commands' builders in :mod:`rag_hier.cli.main`, the strategies'
parameters in the strategy registry, the methods' plugins, the training configurations' field metadata. Building
the parser from those imports ``dataclasses``, ``inspect``, the plugins and the configurations: several times what
``rag-hier --help`` may cost. So :func:`record` builds each sub-command once with the declaring modules, records the
parser calls (``add_parser``, ``add_argument``, ``add_argument_group``, ...) with their exact arguments, and
:func:`render` writes them as literals; :func:`rag_hier.cli.main.table_parser` repeats them.

    python -m rag_hier.cli._generate          # rewrite rag_hier/cli/_tables.py
    python -m rag_hier.cli._generate --check  # exit 1 when the tables differ from what the modules declare now

``tests/cli/test_parser_tables.py`` runs the check, so the tables cannot drift from the declarations.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rag_hier.cli._base import LATE, comma_list, positive_int, registry_fingerprint

__all__ = ["TABLES_DIR", "main", "record", "render"]

TABLES_DIR = Path(__file__).with_name("_tables")
"""The generated package: ``__init__.py``, and a module per sub-command and per ``train`` method."""

Op = tuple[int, str, tuple[Any, ...], dict[str, Any]]
"""One recorded call: ``(target, method, args, kwargs)``; ``target`` indexes ``[root, result 1, result 2, ...]``."""

_RECORDED = frozenset(
    {
        "add_parser",
        "add_subparsers",
        "add_argument",
        "add_argument_group",
        "add_mutually_exclusive_group",
        "set_defaults",
    }
)
"""The parser methods recorded (every other attribute is read from the real object)."""

_NAMES: dict[str, Any] = {
    "int": int,
    "float": float,
    "str": str,
    "argparse.BooleanOptionalAction": argparse.BooleanOptionalAction,
    "comma_list": comma_list,
    "positive_int": positive_int,
    "LATE": LATE,
}
"""The objects that the tables name (types and actions); :mod:`rag_hier.cli._tables` imports each."""


class _Recorder:
    """Stands for a parser, group or sub-parsers action: the calls in :data:`_RECORDED` run and are recorded."""

    def __init__(self, target: Any, index: int, ops: list[Op]) -> None:
        self._target = target
        self._index = index
        self._ops = ops

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name not in _RECORDED:
            return value

        def call(*args: Any, **kwargs: Any) -> _Recorder:
            result = value(*args, **kwargs)
            if name == "set_defaults":  # a function or a ConfigFlags table: taken from the real parser when run
                kwargs = {k: v if _is_literal(v) else LATE for k, v in kwargs.items()}
            self._ops.append((self._index, name, args, kwargs))
            return _Recorder(result, len(self._ops), self._ops)

        return call


def _is_literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (tuple, list)):
        return all(_is_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_literal(v) for k, v in value.items())
    return False


class _Recording:
    """``build(name, container)`` run on a recorder: its calls land in ``tables[name]``."""

    def __init__(self, build: Callable[[str, Any], None]) -> None:
        self.build = build
        self.tables: dict[str, tuple[Op, ...]] = {}

    def __call__(self, name: str, container: Any) -> None:
        ops: list[Op] = []
        self.build(name, _Recorder(container, 0, ops))
        self.tables[name] = tuple(ops)


def record() -> dict[str, Any]:
    """What :mod:`rag_hier.cli._tables` holds, built now by the modules that declare the flags."""
    from rag_hier.cli import main

    build_command = _Recording(main._build_command)
    build_method = _Recording(main._build_method)
    train_methods = main._source_train_methods()
    main._assemble(None, None, build_command, build_method, lambda: train_methods)
    return {
        "COMMANDS": build_command.tables,
        "TRAIN": build_method.tables,
        "TRAIN_METHODS": train_methods,
        "REGISTRY": registry_fingerprint(),
    }


def _source(value: Any, names: set[str]) -> str:
    """``value`` as Python source (a literal, or a name of :data:`_NAMES`, then added to ``names``)."""
    for name, obj in _NAMES.items():
        if value is obj:
            names.add(name)
            return name
    if isinstance(value, tuple):
        return "(" + ", ".join(_source(v, names) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_source(v, names) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_source(v, names)}" for k, v in value.items()) + "}"
    if _is_literal(value):
        return repr(value)
    raise TypeError(
        f"the parser tables cannot hold {value!r}: use a literal, or add the object to {__name__}._NAMES and to "
        "the imports of the generated module"
    )


_GENERATED = "GENERATED by ``python -m rag_hier.cli._generate`` from the modules that declare the flags: do not edit."

_PACKAGE = '''"""The ``rag-hier`` parsers as the calls building them: a module per sub-command and ``train`` method.

{generated}
``rag-hier`` repeats the calls (:func:`rag_hier.cli.main.table_parser`), so that its ``--help`` imports none of
those modules; a test fails when the tables differ from what the modules declare now (run the generator again).
"""
# ruff: noqa: E501, RUF100
# fmt: off

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    Op = tuple[int, str, tuple[Any, ...], dict[str, Any]]
    """One call: ``(target, method, args, kwargs)``; ``target`` indexes ``[root, result 1, result 2, ...]``."""

__all__ = ["REGISTRY", "TRAIN_METHODS", "module_name"]

TRAIN_METHODS: dict[str, str] = {train_methods}
"""The ``train`` methods and their help lines."""

REGISTRY = {registry}
"""``registry_fingerprint()`` of the methods and strategies registered at generation."""


def module_name(command: str, method: str | None = None) -> str:
    """The module of ``command``'s calls on the root's sub-parsers (``train``: ``method``'s, on its sub-parsers)."""
    return f"{{__name__}}.{{command if method is None else 'train_' + method}}".replace("-", "_")
'''

_MODULE = '''"""``rag-hier {title}``: the calls that build its parser.

{generated}
"""
# ruff: noqa: E501, RUF100
# fmt: off

from __future__ import annotations
{imports}
TYPE_CHECKING = False
if TYPE_CHECKING:
    from rag_hier.cli._tables import Op

OPS: tuple[Op, ...] = (
{ops})
'''


def _module(title: str, ops: tuple[Op, ...]) -> str:
    names: set[str] = set()
    lines = "".join(f"    {_source(op, names)},\n" for op in ops)
    imports = "\nimport argparse\n" if "argparse.BooleanOptionalAction" in names else ""
    ours = sorted(n for n in names if n in ("LATE", "comma_list", "positive_int"))
    if ours:
        imports += f"\nfrom rag_hier.cli._base import {', '.join(ours)}\n"
    return _MODULE.format(title=title, generated=_GENERATED, imports=imports, ops=lines)


def render(tables: dict[str, Any]) -> dict[str, str]:
    """The files of :mod:`rag_hier.cli._tables` for ``tables`` (:func:`record`'s): file name → source."""
    names: set[str] = set()
    files = {
        "__init__.py": _PACKAGE.format(
            generated=_GENERATED, train_methods=_source(tables["TRAIN_METHODS"], names), registry=tables["REGISTRY"]
        )
    }
    for name, ops in tables["COMMANDS"].items():
        files[f"{name}.py"] = _module(name, ops)
    for name, ops in tables["TRAIN"].items():
        files[f"train_{name}.py".replace("-", "_")] = _module(f"train {name}", ops)
    return files


def _stale(files: dict[str, str]) -> list[str]:
    """The files of :data:`TABLES_DIR` that differ from ``files``, or that ``files`` lacks."""
    present = {p.name: p.read_text(encoding="utf-8") for p in TABLES_DIR.glob("*.py")} if TABLES_DIR.is_dir() else {}
    return sorted(n for n in present.keys() | files.keys() if present.get(n) != files.get(n))


def main(argv: list[str] | None = None) -> int:
    """Rewrite :mod:`rag_hier.cli._tables`, or (``--check``) say whether it is current."""
    parser = argparse.ArgumentParser(prog="python -m rag_hier.cli._generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the tables are not current; write nothing")
    args = parser.parse_args(argv)
    files = render(record())
    stale = _stale(files)
    if args.check:
        if stale:
            print(
                f"{TABLES_DIR}: {', '.join(stale)} out of date; run python -m rag_hier.cli._generate", file=sys.stderr
            )
            return 1
        return 0
    TABLES_DIR.mkdir(exist_ok=True)
    for name in stale:
        if name in files:
            (TABLES_DIR / name).write_text(files[name], encoding="utf-8")
        else:
            (TABLES_DIR / name).unlink()
        print(f"{'wrote' if name in files else 'removed'} {TABLES_DIR / name}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
