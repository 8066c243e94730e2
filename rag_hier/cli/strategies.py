"""``--strategy`` and its flags, generated from the strategy registry; running a strategy for ``search``/``eval``.

Every parameter a strategy declares (:func:`rag_hier.retrieval.base.param`) becomes one flag of ``rag-hier
search`` and ``rag-hier eval`` (``--k1``, ``--beam``, ...; strategies that share a parameter name share its flag),
validated by the strategy's own parameters dataclass, so no default or check is written here.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import typing
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Literal

from rag_hier.cli.plugins import plugins

__all__ = ["add_strategy_arguments", "flag_of", "given_parameters", "mean_stats", "params_from_args", "run_strategy"]

logger = logging.getLogger("rag_hier.cli")


def flag_of(field: dataclasses.Field[Any]) -> str:
    """The command-line flag of a parameter field."""
    flag = field.metadata.get("flag")
    if flag:
        return str(flag)
    return "--" + field.name.rstrip("_").replace("_", "-")


def _dest(field: dataclasses.Field[Any]) -> str:
    return "strategy_" + flag_of(field).lstrip("-").replace("-", "_")


def _parser_type(hint: Any) -> tuple[Any, tuple[Any, ...] | None, str | None]:
    """``(type, choices, nargs)`` for argparse from a parameter annotation."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return type(args[0]), args, None
    if origin is tuple:
        return args[0], None, "+"
    return hint, None, None


def add_strategy_arguments(parser: argparse.ArgumentParser) -> None:
    """``--strategy`` plus one flag per settable parameter of every registered strategy."""
    from rag_hier.retrieval.registry import strategy, strategy_names

    names = strategy_names()
    parser.add_argument(
        "--strategy",
        choices=names,
        default="dense",
        help="retrieval strategy (default dense): " + "; ".join(f"{n}: {strategy(n).help}" for n in names),
    )
    group = parser.add_argument_group("strategy parameters (each applies to the strategies named in its help)")
    seen: dict[str, tuple[list[str], Any]] = {}
    meanings: dict[str, dict[str, str]] = {}  # flag -> its help and default per strategy
    for name in names:
        entry = strategy(name)
        hints = typing.get_type_hints(entry.params)
        for f in dataclasses.fields(entry.params):
            if f.name in entry.fixed or not f.metadata.get("cli", True):
                continue
            flag = flag_of(f)
            default_text = "" if f.default is None else f" (default {f.default!r})"
            meanings.setdefault(flag, {})[name] = f"{f.metadata.get('help', '')}{default_text}"
            if flag in seen:
                seen[flag][0].append(name)
                continue
            seen[flag] = ([name], (f, hints[f.name]))
    for flag, (owners, (f, hint)) in seen.items():
        base, choices, nargs = _parser_type(hint)
        helps = meanings[flag]
        if len(set(helps.values())) > 1:  # one flag, a meaning per strategy (e.g. --beam of tree and ehi)
            help_text = "; ".join(f"{n}: {text}" for n, text in helps.items())
        else:
            default_text = "" if f.default is None or flag.startswith("--no-") else f" (default {f.default!r})"
            help_text = f"{', '.join(owners)}: {f.metadata.get('help', '')}{default_text}"
        if base is bool:
            if flag.startswith("--no-"):
                group.add_argument(
                    flag, dest=_dest(f), action="store_const", const=not f.default, default=None, help=help_text
                )
            else:
                group.add_argument(
                    flag, dest=_dest(f), action=argparse.BooleanOptionalAction, default=None, help=help_text
                )
            continue
        group.add_argument(
            flag,
            dest=_dest(f),
            type=base,
            choices=choices,
            nargs=nargs,
            default=None,
            metavar=None if choices else f.name.rstrip("_").upper(),
            help=help_text,
        )


def params_from_args(name: str, args: argparse.Namespace) -> Any:
    """The validated parameters of strategy ``name`` from the flags given (others: the strategy's defaults).

    A flag that the chosen strategy does not take is an error naming it, and a parameter error names the flag.
    """
    from rag_hier.retrieval.base import ParameterError
    from rag_hier.retrieval.registry import strategy

    entry = strategy(name)
    mine = {f.name: f for f in dataclasses.fields(entry.params) if f.name not in entry.fixed}
    values = given_parameters(name, args)
    flags = {fname: flag_of(mine[fname]) for fname in values}
    given = {dest for dest, v in vars(args).items() if dest.startswith("strategy_") and v is not None}
    foreign = given - {_dest(f) for f in mine.values()}
    if foreign:
        flag = "--" + sorted(foreign)[0].removeprefix("strategy_").replace("_", "-")
        raise ValueError(f"{flag} does not apply to --strategy {name}")
    try:
        return entry.parse(values, where=f"--strategy {name}")
    except ParameterError as exc:
        message = str(exc)
        for fname, flag in flags.items():
            message = message.replace(f"{entry.params.__name__}.{fname}", flag)
        raise ValueError(message.removeprefix(f"--strategy {name}: ")) from exc


def given_parameters(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The parameters of strategy ``name`` set by flags on the command line (unchecked), by parameter name."""
    from rag_hier.retrieval.registry import strategy

    entry = strategy(name)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(entry.params):
        if f.name in entry.fixed or not f.metadata.get("cli", True):
            continue
        value = getattr(args, _dest(f), None)
        if value is not None:
            values[f.name] = value
    return values


def _hooks(mods: Sequence[ModuleType] | None = None) -> list[ModuleType]:
    return list(mods) if mods is not None else plugins()


def run_strategy(
    store: Any, args: argparse.Namespace, queries: list[str], top_k: int, filters: Any, aggregate: str
) -> list[Any]:
    """Run ``args.strategy`` over ``store`` for ``queries``: one :class:`~rag_hier.retrieval.hit.QueryResult` each.

    CLI plugins may configure a strategy (``configure_search(name, store, args) -> dict`` of constructor
    keyword arguments, e.g. an encoder on the requested device) and follow it up (``after_search(name, store,
    retriever, args)``). Per-query statistics (e.g. the fraction of passages a tree search scored) are logged.
    """
    from rag_hier.retrieval.base import Queries
    from rag_hier.retrieval.registry import strategy

    name = args.strategy
    entry = strategy(name)
    params = params_from_args(name, args)
    retriever_cls = entry.retriever
    if retriever_cls.over_vectors and store.encoder is None and store.corpus_info.get("dense", True) is False:
        from rag_hier.retrieval.registry import strategy_names

        token_only = [n for n in strategy_names() if not strategy(n).retriever.over_vectors and n != "sparse-embedding"]
        raise ValueError(
            f"the store at {store.path} was built with --no-dense: it has no dense index to search; use "
            f"--strategy {', '.join(token_only)}"
        )
    kwargs: dict[str, Any] = {}
    mods = _hooks()
    for mod in mods:
        if hasattr(mod, "configure_search"):
            kwargs.update(mod.configure_search(name, store, args) or {})
    retriever = retriever_cls(store, params=params, **kwargs)
    results = retriever.run(Queries(texts=queries), top_k=top_k, filters=filters, aggregate=aggregate)  # type: ignore[arg-type]
    for mod in mods:
        if hasattr(mod, "after_search"):
            mod.after_search(name, store, retriever, args)
    stats = mean_stats(results)
    if stats:
        logger.info("%s search: %s (mean per query)", name, ", ".join(f"{k} {v:.4g}" for k, v in stats.items()))
    return results


def mean_stats(results: Sequence[Any]) -> dict[str, float]:
    """The mean of each per-query statistic over the queries that report it."""
    sums: dict[str, list[float]] = {}
    for r in results:
        for k, v in r.stats.items():
            sums.setdefault(k, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in sums.items()}
