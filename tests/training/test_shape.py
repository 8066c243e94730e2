"""One trainer shape: every registered trainer's constructor and ``train``, the arguments builder, the time limit."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from rag_hier.training import Trainer, TrainingResult, trainer_class, trainers
from rag_hier.training.arguments import training_arguments
from rag_hier.training.time_limit import TimeLimit

METHODS = sorted(trainers())


def test_every_method_with_a_trainer_is_registered() -> None:
    assert METHODS == ["dhr", "ehi", "hce", "svdr", "tied-atomic"]


@pytest.mark.parametrize("method", METHODS)
def test_every_trainer_has_one_constructor_and_train_shape(method: str) -> None:
    cls = trainer_class(method)
    init = inspect.signature(cls.__init__).parameters
    assert list(init) == ["self", "config", "model", "device", "show_progress_bar"]
    assert init["config"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and init["config"].default is None
    assert all(init[n].kind is inspect.Parameter.KEYWORD_ONLY and init[n].default is None for n in list(init)[2:])
    train = inspect.signature(cls.train).parameters
    assert list(train)[:3] == ["self", "corpus", "output_dir"]
    assert train["queries"].kind is inspect.Parameter.KEYWORD_ONLY
    assert train["qrels"].kind is inspect.Parameter.KEYWORD_ONLY
    result = inspect.signature(cls.train).return_annotation
    assert result.endswith("TrainingResult")
    assert isinstance(cls(), Trainer)


@pytest.mark.parametrize("method", ["dhr", "tied-atomic"])
def test_constructor_arguments_override_the_configuration(method: str) -> None:
    trainer = trainer_class(method)(model="some/model", device="cpu", show_progress_bar=True)
    assert trainer.config.base_model == "some/model"
    assert trainer.config.device == "cpu" and trainer.config.show_progress_bar is True


def test_every_result_is_a_training_result() -> None:
    from rag_hier.training import (
        DHRTrainingResult,
        EHITrainingResult,
        HCETrainingResult,
        SvdrTrainingResult,
        TiedAtomicTrainingResult,
    )

    for cls in (DHRTrainingResult, EHITrainingResult, HCETrainingResult, SvdrTrainingResult, TiedAtomicTrainingResult):
        assert issubclass(cls, TrainingResult)


def _args_cls() -> type:
    from rag_hier._compat import st_training

    return st_training("test").arguments  # type: ignore[no-any-return]


def test_training_arguments_decide_device_pinning_and_logging_once(tmp_path) -> None:
    args = training_arguments(
        _args_cls(), tmp_path, device="cpu", batch_size=4, learning_rate=1e-4, seed=3, max_steps=7, warmup_steps=2
    )
    assert args.use_cpu and not args.dataloader_pin_memory
    assert args.max_steps == 7 and args.warmup_steps == 2 and args.seed == args.data_seed == 3
    assert args.logging_strategy == "no" and args.save_strategy == "no" and args.per_device_train_batch_size == 4
    logged = training_arguments(
        _args_cls(), tmp_path, device="cpu", batch_size=4, learning_rate=1e-4, seed=3, epochs=2, logging_steps=5
    )
    assert logged.logging_steps == 5 and logged.num_train_epochs == 2 and logged.logging_strategy == "steps"


def test_a_warm_up_ratio_reaches_the_trainer_as_its_transformers_version_reads_it(tmp_path) -> None:
    import transformers

    args = training_arguments(
        _args_cls(), tmp_path, device="cpu", batch_size=4, learning_rate=1e-4, seed=0, max_steps=100, warmup_ratio=0.1
    )
    assert args.get_warmup_steps(100) == 10
    if int(transformers.__version__.split(".")[0]) >= 5:
        assert args.warmup_steps == 0.1
    with pytest.raises(ValueError, match="warmup_steps or warmup_ratio"):
        training_arguments(
            _args_cls(), tmp_path, device="cpu", batch_size=4, learning_rate=1e-4, seed=0, warmup_steps=1,
            warmup_ratio=0.1,
        )  # fmt: skip


def test_the_time_limit_stops_a_trainer_once_and_tells_its_owner() -> None:
    steps: list[int] = []
    limit = TimeLimit(seconds=0.0, on_reached=steps.append)
    callback = limit.callback()
    for step in (3, 4):
        control = SimpleNamespace(should_training_stop=False)
        callback.on_step_end(None, SimpleNamespace(global_step=step), control)
        assert control.should_training_stop
    assert steps == [3] and limit.reached
    assert TimeLimit(max_minutes=1.5).seconds == 90.0
    assert not TimeLimit(None).passed()
    with pytest.raises(ValueError, match="max_minutes or seconds"):
        TimeLimit(1.0, seconds=60.0)


def test_svdr_trains_on_the_data_it_is_given_or_was_prepared_with() -> None:
    from rag_hier.errors import RagHierError
    from rag_hier.training.svdr import SvdrTrainer

    with pytest.raises(RagHierError, match="needs a corpus, queries and qrels"):
        SvdrTrainer().train()
    with pytest.raises(RagHierError, match="needs queries and qrels"):
        SvdrTrainer().train({"p": "text"}, None, queries={"q": "text"})


def test_a_trainers_arguments_take_overrides_of_named_settings(tmp_path) -> None:
    from rag_hier.training.dhr import DHRTrainer, DHRTrainingConfig

    args = DHRTrainer(DHRTrainingConfig(device="cpu", max_steps=50))._args(tmp_path, max_steps=3)
    assert args.max_steps == 3 and args.use_cpu
