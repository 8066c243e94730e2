"""SVDR's training data as sentence-transformers' trainer takes it: examples, batches without duplicates, a collator.

The trainer's dataset holds one row per (query, judged document or passage) example, by its index; the batch
sampler (:class:`SvdrBatchSampler`) shuffles them into batches in which no query and no document appears twice,
and the collator (:class:`ExampleCollator`) passes the batch's example indices on as its labels. Texts are drawn
(a positive passage of the judged unit, hard negatives from the current pools) and tokenized in the loss
(:class:`~rag_hier.training.svdr.loss.SemiParametricLoss`), after the mining callback
(:class:`~rag_hier.training.svdr.mining.SvdrMiningCallback`) has refreshed the negatives for that batch.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ExampleCollator", "SvdrBatchSampler", "SvdrExample", "make_batches"]


@dataclass(frozen=True)
class SvdrExample:
    """One training pair: a query id and the id of a judged document or passage."""

    qid: str
    doc: str


def make_batches(examples: Sequence[SvdrExample], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffle example indices into batches of at most ``batch_size`` in which no query and no document repeats.

    Each batch is filled greedily from the shuffled order; an example that would repeat a query or document of
    the batch waits for a later one (so the last batches can be smaller).
    """
    pending = list(range(len(examples)))
    rng.shuffle(pending)
    batches: list[list[int]] = []
    while pending:
        batch: list[int] = []
        seen_q: set[str] = set()
        seen_d: set[str] = set()
        rest: list[int] = []
        for i in pending:
            ex = examples[i]
            if len(batch) < batch_size and ex.qid not in seen_q and ex.doc not in seen_d:
                batch.append(i)
                seen_q.add(ex.qid)
                seen_d.add(ex.doc)
            else:
                rest.append(i)
        batches.append(batch)
        pending = rest
    return batches


class SvdrBatchSampler:
    """The batch sampler of SVDR training: each epoch, :func:`make_batches` of every example.

    Passed to ``SentenceTransformerTrainingArguments(batch_sampler=...)`` (through :meth:`factory`). Every
    process of a torch.distributed run iterates the same batches (sentence-transformers' trainer then gives each
    process every ``W``-th one), so ``rng`` must be seeded alike on every process. An epoch's batches are drawn
    when its iteration starts, from ``rng`` as it then is, so a single-process run may share ``rng`` with the
    draws of its steps.

    Args:
        examples: The training examples.
        batch_size: Examples per batch, at most.
        rng: The shuffling stream.
        seed: Seed of the first epoch's shuffle as :meth:`__len__` counts it (the planned number of steps).

    """

    batch_size = None  # batches have their own lengths (accelerate shards them batch by batch)
    drop_last = False

    def __init__(self, examples: Sequence[SvdrExample], batch_size: int, rng: random.Random, *, seed: int) -> None:
        self.examples = examples
        self.size = batch_size
        self.rng = rng
        self.epoch = 0
        self._length = len(make_batches(examples, batch_size, random.Random(seed)))  # noqa: S311 - not security

    def factory(self, *args: Any, **kwargs: Any) -> SvdrBatchSampler:
        """The callable sentence-transformers' trainer calls with the dataset and its sampler arguments: ``self``."""
        return self

    def set_epoch(self, epoch: int) -> None:
        """The trainer's epoch (recorded; each iteration draws the next epoch's batches)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[list[int]]:
        yield from make_batches(self.examples, self.size, self.rng)


class ExampleCollator:
    """Collate dataset rows ``{"example": i}`` into ``{"label": tensor([i, ...])}`` and note each batch's queries.

    The trainer's data loader runs one batch ahead of the step, so the queries of every collated batch are queued
    in :attr:`pending`, in order; the mining callback takes the oldest at the start of each step.

    Args:
        examples: The training examples (to name each batch's queries).

    """

    valid_label_columns = ("label",)

    def __init__(self, examples: Sequence[SvdrExample]) -> None:
        self.examples = examples
        self.pending: deque[list[str]] = deque()

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The batch's example indices as ``label``; its queries queued in :attr:`pending`."""
        import torch

        indices = [int(r["example"]) for r in rows]
        self.pending.append([self.examples[i].qid for i in indices])
        return {"label": torch.tensor(indices, dtype=torch.long)}
