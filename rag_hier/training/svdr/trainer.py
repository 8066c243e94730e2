"""SvdrTrainer: SVDR training on sentence-transformers' trainer (batches, β- and BM25-mined negatives, AdamW).

The data (:mod:`~rag_hier.training.svdr.data`), the loss and the encoder as a sentence-transformers module
(:mod:`~rag_hier.training.svdr.loss`) and the negative schedule as a trainer callback
(:mod:`~rag_hier.training.svdr.mining`) run on sentence-transformers' trainer, which brings mixed precision,
clipping, logging and torch.distributed data parallelism.

Example:
    >>> encoder = VocabEncoder()  # doctest: +SKIP
    >>> config = SvdrTrainingConfig(epochs=1)
    >>> trainer = SvdrTrainer(config, model=encoder)  # doctest: +SKIP
    >>> trainer.train(docs, "svdr-model", queries=queries, qrels=qrels)  # doctest: +SKIP

"""

from __future__ import annotations

import json
import logging
import math
import random
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rag_hier._compat import st_training
from rag_hier.corpus.model import Document
from rag_hier.encoders._st_loading import quiet_trainer_setup
from rag_hier.errors import MissingDependencyError, RagHierError
from rag_hier.training._attention import attention_dropout
from rag_hier.training._log_dicts import drop_log_dicts
from rag_hier.training.arguments import training_arguments
from rag_hier.training.base import TrainingResult, with_overrides
from rag_hier.training.corpus import CorpusInput, as_training_corpus
from rag_hier.training.distributed import rank, world_size
from rag_hier.training.svdr.config import SvdrTrainingConfig
from rag_hier.training.svdr.data import ExampleCollator, SvdrBatchSampler, SvdrExample, make_batches
from rag_hier.training.svdr.loss import SemiParametricLoss, VocabTrainingModule
from rag_hier.training.svdr.mining import SvdrMiningCallback
from rag_hier.training.time_limit import TimeLimit

if TYPE_CHECKING:
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.index.token import TokenIndex

logger = logging.getLogger(__name__)

__all__ = ["TRAINING_INFO", "SvdrTrainer", "SvdrTrainingResult", "train_svdr"]

TRAINING_INFO = "training.json"


@dataclass(frozen=True, kw_only=True)
class SvdrTrainingResult(TrainingResult):
    """What a training run did (``output_dir``: where :meth:`SvdrTrainer.save` put the encoder, if it did)."""

    epochs_completed: float
    stopped_by: Literal["epochs", "max_steps", "max_seconds"]
    examples: int
    passages: int
    losses: tuple[float, ...] = field(default=(), repr=False)
    mining_seconds: float = 0.0
    step_seconds: tuple[float, ...] = field(default=(), repr=False)
    bm25_steps: int = 0

    @property
    def last_loss(self) -> float:
        """Mean loss of the last 10 steps (``nan`` before any step)."""
        tail = self.losses[-10:]
        return float(np.mean(tail)) if tail else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (losses included)."""
        out = asdict(self)
        out["output_dir"] = str(self.output_dir) if self.output_dir is not None else None
        out["losses"] = [round(x, 5) for x in self.losses]
        out["step_seconds"] = [round(x, 3) for x in self.step_seconds]
        out["last_loss"] = self.last_loss
        return out


class SvdrTrainer:
    """Train a :class:`VocabEncoder` on queries, a corpus and relevance judgements.

    Args:
        config: Hyper-parameters (:class:`SvdrTrainingConfig`).
        model: The encoder to train (in place), or a model name/path for a new one (default: the offline MiniLM).
        device: Where a model given by name is loaded (``None``: CUDA when available); a given encoder stays where
            it is.
        show_progress_bar: Progress bars; default: the configuration's ``show_progress_bar``.

    :meth:`train` takes the data; :meth:`prepare` (or :meth:`from_documents`) loads it first, for a caller that
    looks at the hard negatives before training. The judgements: a judged *document* makes each of its passages a
    positive (one drawn per step) and none of them a negative; a judged *passage* (an item id that is not a
    document id, e.g. ``<doc_id>#<n>`` of a split document) is the positive itself, and the document's other
    passages stay negatives, as the judgement says. An id naming both is read as the document.

    """

    def __init__(
        self,
        config: SvdrTrainingConfig | None = None,
        *,
        model: VocabEncoder | str | None = None,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self.config: SvdrTrainingConfig = with_overrides(
            config or SvdrTrainingConfig(), show_progress_bar=show_progress_bar
        )
        self.device = device
        self._model_arg = model
        self._encoder: VocabEncoder | None = None
        self.examples: list[SvdrExample] = []
        self.result: SvdrTrainingResult | None = None

    @property
    def encoder(self) -> VocabEncoder:
        """The encoder being trained (loaded on first access)."""
        if self._encoder is None:
            from rag_hier.encoders.vocab import VocabEncoder

            model = self._model_arg
            if isinstance(model, VocabEncoder):
                self._encoder = model
            else:
                self._encoder = (
                    VocabEncoder(model, device=self.device) if model is not None else VocabEncoder(device=self.device)
                )
        return self._encoder

    def prepare(
        self,
        corpus: CorpusInput,
        *,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        answers: Mapping[str, Sequence[str]] | None = None,
        max_passage_words: int = 0,
    ) -> SvdrTrainer:
        """Load the training data (what :meth:`train` trains on); returns the trainer.

        Args:
            corpus: Documents (split like the store splits them; passage texts are :attr:`Passage.embedding_text`,
                title path then text), Passages, a mapping ``passage id -> text`` or a
                :class:`~rag_hier.training.corpus.TrainingCorpus`.
            queries: Query id → text.
            qrels: Query id → {document or passage id → grade}; grades > 0 are relevant.
            answers: Query id → answer strings (QA data): a passage containing one is never a hard negative.
            max_passage_words: Passage splitting of Documents (0 keeps paragraphs whole).

        Raises:
            RagHierError: No judged query has a relevant document or passage in the corpus.

        """
        items = as_training_corpus(corpus, max_passage_words)
        self.passage_ids = list(items.ids)
        self.texts = list(items.texts)
        self.passages_of: dict[str, list[int]] = {}
        for i, d in enumerate(items.doc_ids):
            self.passages_of.setdefault(d, []).append(i)
        passage_row = {p: i for i, p in enumerate(self.passage_ids)}
        self.queries = dict(queries)
        # judged id (document, or passage) -> its passage rows: the positives it stands for
        self.units: dict[str, list[int]] = {}
        self.relevant: dict[str, set[str]] = {}
        self.relevant_rows: dict[str, set[int]] = {}
        examples: list[SvdrExample] = []
        skipped = 0
        for qid, judged in qrels.items():
            if qid not in self.queries:
                skipped += 1
                continue
            rel: set[str] = set()
            for d, g in judged.items():
                if g <= 0:
                    continue
                if d in self.passages_of:
                    self.units.setdefault(d, self.passages_of[d])
                elif d in passage_row:
                    self.units.setdefault(d, [passage_row[d]])
                else:
                    continue
                rel.add(d)
            if rel:
                self.relevant[qid] = rel
                self.relevant_rows[qid] = {i for d in rel for i in self.units[d]}
                examples.extend(SvdrExample(qid, d) for d in sorted(rel))
        if not examples:
            raise RagHierError(
                "no training pair: no judged query has a relevant document or passage in the corpus "
                f"({len(qrels)} judged queries, {len(self.queries)} queries, {len(self.passages_of)} documents, "
                f"{len(self.passage_ids)} passages; judged ids are matched against document ids and passage ids)"
            )
        if skipped:
            logger.warning("%d judged queries have no text in the queries and are skipped", skipped)
        self.examples = examples
        self.answers = {q: tuple(a.strip().lower() for a in v if a.strip()) for q, v in (answers or {}).items()}
        self._lower: list[str] | None = None
        self._negatives: dict[str, list[int]] = {}
        self._bm25: dict[str, list[int]] | None = None
        self._token_index: TokenIndex | None = None
        self.result = None
        return self

    @classmethod
    def from_documents(
        cls,
        encoder: VocabEncoder | str,
        documents: Sequence[Document],
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        *,
        config: SvdrTrainingConfig | None = None,
        max_passage_words: int = 0,
        answers: Mapping[str, Sequence[str]] | None = None,
    ) -> SvdrTrainer:
        """A trainer of ``encoder`` with the data loaded: ``SvdrTrainer(config, model=encoder).prepare(...)``."""
        return cls(config, model=encoder).prepare(
            documents, queries=queries, qrels=qrels, answers=answers, max_passage_words=max_passage_words
        )

    # -- hard negatives -----------------------------------------------------------------------------
    @property
    def token_index(self) -> TokenIndex:
        """The binary token index of the training corpus (built once, by tokenization only)."""
        if self._token_index is None:
            from rag_hier.index.token import TokenIndex

            index = TokenIndex(self.encoder.binarizer)
            index.rows.add(np.arange(len(self.texts)), self.encoder.binarizer.transform(self.texts))
            self._token_index = index
        return self._token_index

    def _usable(self, qid: str, candidates: Sequence[int]) -> list[int]:
        """The candidates that may be negatives of ``qid``: not relevant, and (QA data) without an answer string."""
        rel = self.relevant_rows[qid]
        answers = self.answers.get(qid, ())
        if answers and self._lower is None:
            self._lower = [t.lower() for t in self.texts]
        out = []
        for i in candidates:
            i = int(i)
            if i < 0 or i in rel:
                continue
            if answers and self._lower is not None and any(a in self._lower[i] for a in answers):
                continue
            out.append(i)
            if len(out) >= self.config.negative_depth:
                break
        return out

    def _search_depth(self) -> int:
        depth = self.config.negative_depth + max(len(rows) for rows in self.relevant_rows.values())
        return min(depth * 2 + (20 if self.answers else 0), len(self.texts))

    def mine_negatives(self, qids: Sequence[str] | None = None) -> dict[str, list[int]]:
        """β search with the current model: each query's top ``negative_depth`` usable (non-relevant) passages.

        Args:
            qids: The queries to mine for (default: every training query).

        """
        cfg = self.config
        if cfg.hard_negatives == 0:
            return {}
        qids = sorted(self.relevant) if qids is None else sorted(set(qids))
        vectors = self.encoder.encode_queries([self.queries[q] for q in qids])
        _, ids = self.token_index.search(vectors, top_k=self._search_depth())
        out = {qid: self._usable(qid, row) for qid, row in zip(qids, ids, strict=True)}
        self._negatives.update(out)
        return out

    def use_bm25_negatives(self) -> None:
        """Make the BM25 candidates (:meth:`bm25_negatives`) every query's hard-negative pool."""
        self._negatives = dict(self.bm25_negatives())

    def bm25_negatives(self) -> dict[str, list[int]]:
        """BM25 (bm25s, English stopwords) top ``negative_depth`` usable passages of every training query."""
        if self._bm25 is None:
            try:
                import bm25s
            except ImportError as exc:
                raise MissingDependencyError(
                    "SVDR's paper negative schedule mines BM25 negatives with bm25s (a rag-hier dependency): pip "
                    "install bm25s, or use negative_schedule='beta' / --negative-schedule beta"
                ) from exc

            index = bm25s.BM25()
            index.index(bm25s.tokenize(self.texts, stopwords="en", show_progress=False), show_progress=False)
            qids = sorted(self.relevant)
            texts = [self.queries[q] for q in qids]
            tokens = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
            depth = self._search_depth()
            out: dict[str, list[int]] = {}
            for qid, toks in zip(qids, tokens, strict=True):
                known = [t for t in toks if t in index.vocab_dict]
                if not known:
                    out[qid] = []
                    continue
                scores = np.asarray(index.get_scores(known), dtype=np.float32)
                top = np.argpartition(-scores, min(depth, len(scores) - 1))[:depth]
                top = top[np.argsort(-scores[top], kind="stable")]
                out[qid] = self._usable(qid, [int(i) for i in top if scores[i] > 0])
            self._bm25 = out
        return self._bm25

    # -- batches ------------------------------------------------------------------------------------
    def _batches(self, rng: random.Random) -> list[list[SvdrExample]]:
        """Shuffled batches in which no query and no document appears twice (:func:`~.data.make_batches`)."""
        return [[self.examples[i] for i in b] for b in make_batches(self.examples, self.config.batch_size, rng)]

    def _step_inputs(self, batch: list[SvdrExample], rng: random.Random) -> tuple[list[str], list[str], np.ndarray]:
        """Query texts, passage texts (positives first), and the false-negative mask ``(n, m)``."""
        positives = [rng.choice(self.units[ex.doc]) for ex in batch]
        passages = list(positives)
        taken = set(positives)
        for ex in batch:
            pool = [i for i in self._negatives.get(ex.qid, []) if i not in taken]
            for i in rng.sample(pool, min(self.config.hard_negatives, len(pool))):
                passages.append(i)
                taken.add(i)
        mask = np.zeros((len(batch), len(passages)), dtype=bool)
        for r, ex in enumerate(batch):
            rel = self.relevant_rows[ex.qid]
            for c, i in enumerate(passages):
                if c != r and i in rel:
                    mask[r, c] = True
        return [self.queries[ex.qid] for ex in batch], [self.texts[i] for i in passages], mask

    # -- training -----------------------------------------------------------------------------------
    def train(
        self,
        corpus: CorpusInput | None = None,
        output_dir: str | Path | None = None,
        *,
        queries: Mapping[str, str] | None = None,
        qrels: Mapping[str, Mapping[str, int]] | None = None,
        answers: Mapping[str, Sequence[str]] | None = None,
        max_passage_words: int = 0,
    ) -> SvdrTrainingResult:
        """Train on sentence-transformers' trainer; the encoder is updated in place (left in eval mode).

        ``corpus``, ``queries``, ``qrels``, ``answers`` and ``max_passage_words`` are :meth:`prepare`'s (``corpus``
        ``None``: the data :meth:`prepare` loaded); with ``output_dir`` the encoder is saved there (:meth:`save`).

        The trainer brings mixed precision (``fp16`` on CUDA, ``bf16``), gradient clipping, logging and
        torch.distributed data parallelism (``torchrun``: each process trains on its share of the batches,
        in-batch negatives stay within a process's batch, ``max_seconds`` is ignored so every process takes the
        same number of steps). The hard negatives are refreshed before each step by
        :class:`~rag_hier.training.svdr.mining.SvdrMiningCallback`.

        Raises:
            RagHierError: ``fp16`` on a device other than CUDA.
            MissingDependencyError: The training stack (``datasets``, ``accelerate``) is missing.

        """
        import torch
        from datasets import Dataset
        from sentence_transformers import SentenceTransformer

        if corpus is not None:
            if queries is None or qrels is None:
                raise RagHierError("SVDR training needs queries and qrels")
            self.prepare(corpus, queries=queries, qrels=qrels, answers=answers, max_passage_words=max_passage_words)
        elif not self.examples:
            raise RagHierError("SVDR training needs a corpus, queries and qrels (or a trainer prepared with them)")
        cfg = self.config
        device = str(self.encoder.device)
        if cfg.fp16 and not device.startswith("cuda"):
            raise RagHierError(
                f"SvdrTrainingConfig.fp16 needs a CUDA device; the encoder is on {device!r} (use bf16 there)"
            )
        st = st_training("SVDR")
        torch.manual_seed(cfg.seed)
        module = self.encoder.module
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="svdr-trainer-") as scratch:
            probe = self._args(st, scratch, 1, None)
            _ = probe.device  # initialises torch.distributed under torchrun
            world, me = world_size(), rank()
            max_seconds = cfg.max_seconds
            if max_seconds is not None and world > 1:
                logger.warning("max_seconds applies to single-process training; ignored under torch.distributed")
                max_seconds = None
            # one stream for the shuffles and the steps' draws in a single process; under torch.distributed the
            # shuffles must agree on every process and the draws differ with each one's batches
            draws = random.Random(cfg.seed)  # noqa: S311 - sampling, not security
            shuffles = draws if world == 1 else random.Random(cfg.seed)  # noqa: S311
            if world > 1:
                draws = random.Random(f"{cfg.seed}/{me}")  # noqa: S311
            sampler = SvdrBatchSampler(self.examples, cfg.batch_size, shuffles, seed=cfg.seed)
            per_epoch = math.ceil(len(sampler) / world)
            natural = per_epoch * cfg.epochs
            planned = natural if cfg.max_steps is None else min(natural, cfg.max_steps)
            collator = ExampleCollator(self.examples)
            model = SentenceTransformer(modules=[VocabTrainingModule(self.encoder)], device=device)
            loss = SemiParametricLoss(
                model,
                lambda rows: self._step_inputs([self.examples[i] for i in rows], draws),
                temperature=cfg.temperature,
            )
            mining = SvdrMiningCallback(
                self, loss, collator.pending, planned=planned, max_seconds=max_seconds, log=me == 0
            )
            params = [p for p in module.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(
                [
                    {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
                    {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
                ],
                lr=cfg.learning_rate,
                eps=1e-8,
            )
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, mining.lr_factor)
            limit = TimeLimit(max_seconds / 60 if max_seconds is not None else None)
            with quiet_trainer_setup():
                trainer = st.trainer(
                    model=model,
                    args=self._args(st, scratch, planned, sampler),
                    train_dataset=Dataset.from_dict({"example": list(range(len(self.examples)))}),
                    loss=loss,
                    data_collator=collator,
                    optimizers=(optimizer, scheduler),
                    callbacks=[mining, limit.callback()],
                )
            drop_log_dicts(trainer)  # the mining callback logs the steps
            if cfg.gradient_checkpointing:
                module.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            try:
                with attention_dropout(module, cfg.attention_dropout):
                    trainer.train()
            finally:
                if cfg.gradient_checkpointing:
                    module.backbone.gradient_checkpointing_disable()
                module.eval()
                self.encoder.weights_changed()
            steps = int(trainer.state.global_step)
            epochs_done = float(trainer.state.epoch or 0.0)
        stopped: Literal["epochs", "max_steps", "max_seconds"] = "epochs"
        if limit.reached and steps < planned:
            stopped = "max_seconds"
        elif cfg.max_steps is not None and cfg.max_steps < natural and steps >= cfg.max_steps:
            stopped = "max_steps"
        self.result = SvdrTrainingResult(
            output_dir=None,
            steps=steps,
            epochs_completed=round(epochs_done, 4),
            seconds=time.perf_counter() - start,
            stopped_by=stopped,
            examples=len(self.examples),
            passages=len(self.texts),
            losses=tuple(mining.losses),
            mining_seconds=mining.mining_seconds,
            step_seconds=tuple(mining.step_seconds),
            bm25_steps=mining.bm25_steps,
        )
        if output_dir is not None:
            self.save(output_dir)
        return self.result

    def _args(self, st: Any, scratch: str, steps: int, sampler: SvdrBatchSampler | None) -> Any:
        """sentence-transformers' training arguments of a run of ``steps`` optimizer steps."""
        cfg = self.config
        extra: dict[str, Any] = {"batch_sampler": sampler.factory} if sampler is not None else {}
        return training_arguments(
            st.arguments,
            scratch,
            device=str(self.encoder.device),
            batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate,
            seed=cfg.seed,
            max_steps=steps,
            fp16=cfg.fp16,
            bf16=cfg.bf16,
            logging_steps=cfg.log_every,
            show_progress_bar=cfg.show_progress_bar,
            weight_decay=cfg.weight_decay,
            max_grad_norm=cfg.grad_clip,
            # a backbone's pooler (tied-embeddings projection) has no gradient: DDP must not wait for it
            ddp_find_unused_parameters=True,
            **extra,
        )

    def save(self, path: str | Path) -> Path:
        """Save the encoder (a directory :class:`VocabEncoder` loads) plus ``training.json``.

        Under torch.distributed only rank 0 writes (every process holds the same weights); the others return the
        path.
        """
        if self.result is not None:
            self.result = replace(self.result, output_dir=Path(path))
        if rank() != 0:
            return Path(path)
        out = self.encoder.save(path)
        info = {
            "method": "svdr",
            "config": asdict(self.config),
            "result": self.result.to_dict() if self.result is not None else None,
            "data": {"passages": len(self.texts), "queries": len(self.relevant), "pairs": len(self.examples)},
        }
        (out / TRAINING_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        return out


def train_svdr(
    corpus: CorpusInput,
    output_dir: str | Path,
    *,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    model: VocabEncoder | str | None = None,
    config: SvdrTrainingConfig | None = None,
    device: str | None = None,
    show_progress_bar: bool | None = None,
    **train_kwargs: Any,
) -> SvdrTrainingResult:
    """One-call SVDR training: ``SvdrTrainer(config, model=model, ...).train(corpus, output_dir, ...)``."""
    trainer = SvdrTrainer(config, model=model, device=device, show_progress_bar=show_progress_bar)
    return trainer.train(corpus, output_dir, queries=queries, qrels=qrels, **train_kwargs)
