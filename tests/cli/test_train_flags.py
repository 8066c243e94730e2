"""``rag-hier train METHOD`` flags are generated from the method's configuration, so the two cannot drift."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from rag_hier.cli._train import ConfigFlags, add_config_arguments
from rag_hier.cli.main import CliError, build_parser
from rag_hier.cli.plugins import TRAIN_METHODS
from rag_hier.training.config import TrainingConfig, shared_field, train_field

GENERATED = list(TRAIN_METHODS)
"""The methods whose ``train`` flags are generated: every one."""


def _train_parser(method: str) -> argparse.ArgumentParser:
    parser = build_parser("train", method)
    (command,) = [a for a in parser._actions if a.dest == "command"]
    (sub,) = [a for a in command.choices["train"]._actions if a.dest == "method"]
    return sub.choices[method]


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def _minimal_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    argv = ["corpus"]
    for action in parser._actions:
        if action.required and action.option_strings:
            argv += [action.option_strings[0], "x"]
    return parser.parse_args(argv)


@pytest.mark.parametrize("method", GENERATED)
def test_every_config_field_with_cli_metadata_has_a_flag_with_the_configs_default(method: str) -> None:
    parser = _train_parser(method)
    table = parser.get_default("config_flags")
    assert isinstance(table, ConfigFlags) and issubclass(table.config, TrainingConfig)
    options = _options(parser)
    for f in dataclasses.fields(table.config):
        use = f.metadata.get("cli", False)
        if use is False:
            continue
        flag = table.flag(f.name).split()[0]  # a hand-written flag may stand for several fields: "--lambdas (1st)"
        assert flag in options, f"train {method}: {table.config.__name__}.{f.name} has no flag {flag}"
        if use is True and f.name not in table.skip:
            action = options[flag]
            assert action.dest == f.name
            assert action.default == f.default, f"train {method} {flag}: {action.default!r} != {f.default!r}"
            if f.default is not None and not isinstance(f.default, bool):
                assert "(default " in (action.help or ""), flag


@pytest.mark.parametrize("method", GENERATED)
def test_the_flags_defaults_build_the_configs_defaults(method: str) -> None:
    parser = _train_parser(method)
    args = _minimal_args(parser)
    table: ConfigFlags = args.config_flags
    defaults = table.config()
    values = table.values(args)
    assert set(table.flags) <= set(values)
    assert {name: values[name] for name in table.flags} == {name: getattr(defaults, name) for name in table.flags}


@dataclass(frozen=True)
class _Toy(TrainingConfig):
    learning_rate: float = shared_field("learning_rate", 2e-5)
    levels: tuple[str, ...] = train_field(("document", "passage"), help="levels to train")
    shared: bool = train_field(True, help="one model for both", flag="--separate-encoders")
    checkpointing: bool = train_field(False, help="recompute activations (~30% more compute)")
    mini_batch_size: int | None = shared_field("mini_batch_size", 32)
    attention_dropout: float | None = shared_field("attention_dropout", 0.0)
    iterations: int = train_field(1, help="1 or 2", choices=(1, 2))
    hidden: int = train_field(3, help="no flag", cli=False)
    show_progress_bar: bool = shared_field("show_progress_bar", False)
    lambda_a: float = train_field(0.2, help="first weight", minimum=0)


def _toy(argv: list[str]) -> tuple[ConfigFlags, argparse.Namespace]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-progress", action="store_true")
    table = add_config_arguments(parser, _Toy, skip={"lambda_a"}, rename={"lambda_a": "--lambdas (1st)"})
    parser.add_argument("--lambdas", type=float, nargs=1, default=[0.2])
    return table, parser.parse_args(argv)


def test_the_generator_reads_types_switches_lists_and_none_values() -> None:
    table, args = _toy([])
    assert table.flags["learning_rate"] == "--lr" and "hidden" not in table.flags and "lambda_a" not in table.flags
    assert table.build(args) == _Toy(show_progress_bar=True)  # --no-progress not given: progress bars on
    argv = ["--levels", "passage", "--separate-encoders", "--checkpointing", "--mini-batch-size", "0"]
    table, args = _toy([*argv, "--attention-dropout", "-1", "--iterations", "2", "--lr", "1e-4", "--no-progress"])
    config = table.build(args, lambda_a=args.lambdas[0])
    assert config.levels == ("passage",) and config.shared is False and config.checkpointing is True
    assert config.mini_batch_size is None and config.attention_dropout is None and config.iterations == 2
    assert config.learning_rate == 1e-4 and config.show_progress_bar is False
    with pytest.raises(SystemExit):
        _toy(["--iterations", "3"])  # choices are argparse's


@pytest.mark.parametrize(
    ("argv", "given", "message"),
    [
        (["--lr", "0"], {}, "--lr must be > 0; got 0.0"),
        (["--attention-dropout", "1"], {}, "--attention-dropout must be in [0, 1) or None; got 1.0"),
        ([], {"lambda_a": -1.0}, "--lambdas (1st) must be >= 0; got -1.0"),
    ],
)
def test_a_configuration_error_names_the_flag(argv: list[str], given: dict, message: str) -> None:
    table, args = _toy(argv)
    with pytest.raises(CliError) as exc:
        table.build(args, **given)
    assert str(exc.value) == message


def test_the_generator_refuses_unknown_field_names() -> None:
    with pytest.raises(ValueError, match="no field"):
        add_config_arguments(argparse.ArgumentParser(), _Toy, skip={"nope"})
