"""TrainingConfig, train_field and shared_field: the shared fields, defaults a subclass overrides, one error shape."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import pytest

from rag_hier.training.config import (
    SHARED_FIELDS,
    TrainingConfig,
    allowed_text,
    shared_field,
    train_field,
)


@dataclass(frozen=True)
class ToyConfig(TrainingConfig):
    epochs: int = shared_field("epochs", 3, help="passes over the toys")
    depth: int = train_field(20, help="candidates per query", minimum=1)
    rate: float | None = train_field(0.5, help="a rate", minimum=0, below=1)
    mode: Literal["fast", "exact"] = train_field("fast", help="how")
    levels: tuple[str, ...] = train_field(("a", "b"), help="levels", cli=False)
    fp16: bool = shared_field("fp16", False)
    bf16: bool = shared_field("bf16", False)


def test_the_common_fields_come_from_the_base_and_a_subclass_overrides_a_default() -> None:
    names = ToyConfig.field_names()
    assert names[:5] == ("epochs", "batch_size", "max_steps", "warmup_ratio", "seed")
    assert ToyConfig().epochs == 3 and TrainingConfig().epochs == 1
    (epochs,) = [f for f in dataclasses.fields(ToyConfig) if f.name == "epochs"]
    assert epochs.metadata["help"] == "passes over the toys" and epochs.metadata["minimum"] == 1  # bound kept


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"depth": 0}, "ToyConfig.depth must be >= 1; got 0"),
        ({"epochs": 0}, "ToyConfig.epochs must be >= 1; got 0"),
        ({"rate": 1.0}, "ToyConfig.rate must be in [0, 1) or None; got 1.0"),
        ({"rate": math.nan}, "ToyConfig.rate must be in [0, 1) or None; got nan"),
        ({"mode": "slow"}, "ToyConfig.mode must be fast or exact; got 'slow'"),
        ({"max_steps": 0}, "ToyConfig.max_steps must be >= 1 or None; got 0"),
        ({"warmup_ratio": 1}, "ToyConfig.warmup_ratio must be in [0, 1); got 1"),
        ({"depth": "many"}, "ToyConfig.depth must be >= 1; got 'many'"),
        ({"depth": None}, "ToyConfig.depth must be >= 1; got None"),
        ({"fp16": True, "bf16": True}, "ToyConfig.fp16 must be False when bf16 is True; got True"),
    ],
)
def test_every_declared_bound_is_checked_with_one_message_shape(changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        ToyConfig(**changes)
    assert str(exc.value) == message


def test_none_where_the_annotation_allows_it() -> None:
    assert ToyConfig(rate=None, max_steps=None).rate is None


def test_to_dict_is_json_ready() -> None:
    data = ToyConfig().to_dict()
    assert data["levels"] == ["a", "b"] and data["epochs"] == 3 and set(data) == set(ToyConfig.field_names())
    assert ToyConfig(**{**data, "levels": tuple(data["levels"])}) == ToyConfig()  # a saved configuration loads


def test_allowed_text() -> None:
    assert allowed_text({"minimum": 0, "maximum": 1}) == "in [0, 1]"
    assert allowed_text({"above": 0}, optional=True) == "> 0 or None"
    assert allowed_text({"maximum": 2.5}) == "<= 2.5"
    assert allowed_text({"allowed": ">= 2 (or None: automatic)"}, optional=True) == ">= 2 (or None: automatic)"
    assert allowed_text({}, choices=("sum", "mean")) == "sum or mean"


def test_shared_field_names_a_known_field() -> None:
    assert {"learning_rate", "max_seq_length", "attention_dropout", "fp16"} <= set(SHARED_FIELDS)
    with pytest.raises(KeyError, match="no shared training field 'lr'"):
        shared_field("lr", 1e-4)


def test_the_training_package_names_every_method_and_its_configuration() -> None:
    import rag_hier.training as training
    from rag_hier.cli.plugins import TRAIN_METHODS

    assert set(training.trainers()) == set(TRAIN_METHODS)
    for method in TRAIN_METHODS:  # the registration names the trainer and its configuration
        assert issubclass(training.config_class(method), TrainingConfig)
        assert training.trainer_class(method).__name__.endswith("Trainer")
    for name in training.__all__:
        assert getattr(training, name) is not None
    configs = [
        training.HCEConfig,
        training.EHIConfig,
        training.DHRTrainingConfig,
        training.SvdrTrainingConfig,
        training.TiedAtomicConfig,
        training.DSIAtomicConfig,
    ]
    for config in configs:
        assert issubclass(config, TrainingConfig) and config().to_dict()["seed"] == config().seed


def test_an_unregistered_method_has_no_trainer() -> None:
    import rag_hier.training as training

    with pytest.raises(KeyError, match="no trainer registered for method 'bm25'"):
        training.trainer_class("bm25")


def test_a_train_spec_names_classes_as_module_colon_class() -> None:
    from rag_hier.index.methods import TrainSpec

    with pytest.raises(ValueError, match=r"TrainSpec\.trainer must be 'module:Class'"):
        TrainSpec("help", trainer="rag_hier.training.hce.HCETrainer", config="m:C")
