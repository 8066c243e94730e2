"""Tuning settings and recipes: ``TuneConfig`` is a ``TrainingConfig`` whose metadata makes ``rag-hier tune``'s
flags, and ``method`` names a recipe registered by name."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

import rag_hier.tuning.recipes as recipes_module
from rag_hier import HierStore, TuneConfig
from rag_hier.cli.main import _parser, build_parser
from rag_hier.cli.tune import config_flags
from rag_hier.errors import ParameterError
from rag_hier.training.config import TrainingConfig
from rag_hier.tuning.recipes import TrainOutcome, TuneRecipe, recipe, recipe_names, recipes, register_recipe
from tests.tuning.helpers import COMMON
from tests.tuning.helpers import fingerprint as _fingerprint
from tests.tuning.helpers import run_cli as _run


def _tune_parser() -> argparse.ArgumentParser:
    parser = build_parser("tune")
    (command,) = [a for a in parser._actions if a.dest == "command"]
    return command.choices["tune"]


def test_tune_config_is_a_training_config_and_its_flags_come_from_its_fields() -> None:
    assert issubclass(TuneConfig, TrainingConfig)
    parser = _tune_parser()
    options = {flag: action for action in parser._actions for flag in action.option_strings}
    table = config_flags()
    d = TuneConfig()
    flagged = [f for f in dataclasses.fields(TuneConfig) if f.metadata.get("cli") is True]
    assert {f.name for f in flagged} >= {"method", "epochs", "batch_size", "num_negatives", "refit", "force"}
    for f in flagged:
        action = options[table.flag(f.name)]
        assert action.default == getattr(d, f.name), f.name
        assert action.help and action.help.startswith(f.metadata["help"].replace("%", "%%")[:20]), f.name
    assert table.flag("batch_size") == "--train-batch-size" and table.flag("num_negatives") == "--negatives"
    assert options["--method"].choices == recipe_names()
    assert options["--refit"].const == "full" and options["--no-refit"].const == "off"
    # the flags' defaults build the configuration's defaults, runtime flags included
    args = parser.parse_args(["--store", "s"])
    assert config_flags().build(args) == d
    args = parser.parse_args(["--store", "s", "--refit", "--negatives", "3", "--no-progress", "--device", "cpu"])
    built = config_flags().build(args)
    assert (built.refit, built.num_negatives, built.show_progress_bar, built.device) == ("full", 3, False, "cpu")


def test_a_bad_setting_names_its_flag_on_the_command_line_and_its_field_in_python(judged_store) -> None:
    path, beir = judged_store
    before = _fingerprint(path)
    for argv, message in (
        (["--folds", "1"], "--folds must be an integer >= 2, got 1 (in Python: TuneConfig.folds)"),
        (
            ["--train-batch-size", "0"],
            "--train-batch-size must be a positive integer, got 0 (in Python: TuneConfig.batch_size)",
        ),
        (
            ["--dev-fraction", "nan"],
            "--dev-fraction must be between 0 and 1 (exclusive), got nan (in Python: TuneConfig.dev_fraction)",
        ),
    ):
        code, _, err = _run(["tune", "--store", str(path), "--beir", str(beir), *argv, *COMMON])
        assert code == 2 and err.strip() == f"rag-hier tune: error: {message}", err
    assert _fingerprint(path) == before
    with pytest.raises(ParameterError, match=r"^TuneConfig\.folds must be an integer >= 2, got 1$"):
        TuneConfig(folds=1)


def test_the_built_in_recipes_are_registered_and_an_unknown_one_is_named() -> None:
    assert recipe_names() == ("auto", "contrastive", "hce-s", "hce-j")
    assert recipe("auto") is recipes()["contrastive"] and TuneConfig().resolved_method == "contrastive"
    assert recipe("hce-j").function().__name__ == "train_hce"
    with pytest.raises(KeyError, match="no tuning recipe 'nope'; known: auto, contrastive, hce-s, hce-j"):
        recipe("nope")
    with pytest.raises(ParameterError, match="method must be one of auto, contrastive, hce-s, hce-j, got 'nope'"):
        TuneConfig(method="nope")
    with pytest.raises(ValueError, match="registered already"):
        register_recipe(TuneRecipe("contrastive", "again", "rag_hier.tuning.train:train_contrastive"))
    with pytest.raises(ValueError, match="cannot be called 'auto'"):
        register_recipe(TuneRecipe("auto", "no", "m:f"))
    with pytest.raises(ValueError, match="module:function"):
        register_recipe(TuneRecipe("broken", "no", "no_colon"))


def test_a_registered_recipe_is_a_method_and_trains_the_candidate(judged_store, judged_maps, stays) -> None:
    calls: list[dict] = []

    def unchanged(store, train, query_vectors, cfg, model, output_dir, **kwargs) -> TrainOutcome:
        # a recipe that trains nothing: the candidate is the base model, so it is not adopted
        calls.append({"queries": len(train), "method": cfg.method, **kwargs})
        model.save(str(output_dir))
        return TrainOutcome(steps=0, planned_steps=0)

    register_recipe(TuneRecipe("unchanged", "saves the store's model as it is", unchanged))
    try:
        assert "unchanged" in recipe_names() and TuneConfig(method="unchanged").resolved_method == "unchanged"
        # the command line offers it too (the generated tables name only the recipes registered at generation)
        assert _parser("tune", None).parse_args(["tune", "--store", "s", "--method", "unchanged"]).method == "unchanged"
        path, _ = judged_store
        with HierStore.open(path) as store:
            report = store.tune(*judged_maps, method="unchanged", cross_fit="off", **stays)
        assert len(calls) == 1 and calls[0]["method"] == "unchanged" and calls[0]["queries"] > 0
        assert set(calls[0]) >= {"say", "on_estimate", "max_steps", "evaluate", "time_limit", "label"}
        assert report.method == "unchanged" and not report.adopted
    finally:
        recipes_module._RECIPES.pop("unchanged")
    assert "unchanged" not in recipe_names()
