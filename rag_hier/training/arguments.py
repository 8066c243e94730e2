"""The one builder of training arguments for sentence-transformers' and ``transformers``' trainers.

Every trainer (and ``rag-hier tune``) gets its ``TrainingArguments`` from :func:`training_arguments`, which
decides once what they all share: the device (``use_cpu``), data-loader memory pinning, mixed precision,
warm-up (transformers 5 takes a fractional ``warmup_steps`` as a ratio and deprecates ``warmup_ratio``;
4.x has ``warmup_ratio``), seeds, and that the trainer saves, evaluates and reports nothing on its own (the
trainers save their models and reports themselves).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

__all__ = ["pin_memory", "training_arguments", "uses_cpu"]


def uses_cpu(device: str | None) -> bool:
    """Whether training runs on the CPU: ``device`` (the trainer's, or its model's) names it."""
    return str(device or "").startswith("cpu")


def pin_memory(device: str | None) -> bool:
    """Pin data-loader memory: only for a CUDA run (pinning without a GPU only warns)."""
    import torch

    return torch.cuda.is_available() and not uses_cpu(device)


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def training_arguments(
    args_cls: Any,
    output_dir: str | Path,
    *,
    device: str | None,
    batch_size: int,
    learning_rate: float,
    seed: int,
    max_steps: int | None = None,
    epochs: int | None = None,
    warmup_steps: int | None = None,
    warmup_ratio: float | None = None,
    fp16: bool = False,
    bf16: bool = False,
    logging_steps: int | None = None,
    show_progress_bar: bool = True,
    drop_last: bool = False,
    **extra: Any,
) -> Any:
    """``args_cls(...)`` (sentence-transformers' or ``transformers``' training arguments) for one training run.

    Args:
        args_cls: The arguments class (``SentenceTransformerTrainingArguments``, ``Seq2SeqTrainingArguments``).
        output_dir: The trainer's scratch directory (nothing is saved there: ``save_strategy="no"``).
        device: The run's device (``"cpu"``, ``"cuda"``, ...; ``None``: CUDA when available).
        batch_size: Examples per step and device.
        learning_rate: Peak learning rate.
        seed: Seed of the trainer and of its data order.
        max_steps: Optimizer steps (``None``: ``epochs`` passes).
        epochs: Passes over the data when ``max_steps`` is not given.
        warmup_steps: Linear warm-up over this many steps (when the caller knows the steps).
        warmup_ratio: Linear warm-up over this fraction of the planned steps, computed by the trainer.
        fp16: float16 mixed precision.
        bf16: bfloat16 mixed precision.
        logging_steps: Log the loss every this many steps (``None``: the trainer logs nothing).
        show_progress_bar: The trainer's own progress bar.
        drop_last: Drop a last incomplete batch (every process of a distributed run needs full batches).
        **extra: Other arguments, passed as they are (``batch_sampler``, ``weight_decay``, ...).

    """
    if warmup_steps is not None and warmup_ratio is not None:
        raise ValueError("give training_arguments warmup_steps or warmup_ratio, not both")
    known = {f.name for f in dataclasses.fields(args_cls)}
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": batch_size,
        "learning_rate": learning_rate,
        "fp16": fp16,
        "bf16": bf16,
        "seed": seed,
        "data_seed": seed,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "disable_tqdm": not show_progress_bar,
        "dataloader_drop_last": drop_last,
        "dataloader_pin_memory": pin_memory(device),
    }
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    if epochs is not None:
        kwargs["num_train_epochs"] = epochs
    if logging_steps is None:
        kwargs["logging_strategy"] = "no"
    else:
        kwargs["logging_steps"] = logging_steps
    if warmup_steps is not None:
        kwargs["warmup_steps"] = warmup_steps
    elif warmup_ratio is not None:
        # transformers 5 reads a fractional warmup_steps as a ratio (warmup_ratio is deprecated there)
        modern = _transformers_major() >= 5 or "warmup_ratio" not in known
        kwargs["warmup_steps" if modern else "warmup_ratio"] = warmup_ratio
    if uses_cpu(device) and "use_cpu" in known:
        kwargs["use_cpu"] = True
    kwargs.update(extra)
    return args_cls(**kwargs)
