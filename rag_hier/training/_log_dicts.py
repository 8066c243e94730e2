"""A trainer's step bar without the log dicts that transformers' ``Trainer`` prints on stdout.

With its bar on, ``Trainer`` writes every log (``{'loss': ...}`` each ``logging_steps``, ``{'train_runtime':
..., 'train_loss': ...}`` at the end) under the bar; with it off, ``PrinterCallback`` prints them. rag-hier's
commands print their own summary instead, so :func:`drop_log_dicts` keeps the bar and drops the dicts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["drop_log_dicts"]


def drop_log_dicts(trainer: Any) -> None:
    """Remove ``trainer``'s printed log dicts; its progress bar (if shown) stays."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):  # type: ignore[misc,unused-ignore]
        """transformers' step bar, writing no log dicts under it."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            return None

    trainer.remove_callback(PrinterCallback)
    if trainer.pop_callback(ProgressCallback) is not None:
        trainer.add_callback(BarOnly())
