"""TiedAtomicTrainer and DSIAtomicTrainer: the training runs, their results and reports.

Tied-Atomic and ``"docid_softmax"`` DSI train on sentence-transformers' trainer, ``"seq2seq"`` DSI on
``transformers``' ``Seq2SeqTrainer``; the method is described in :mod:`rag_hier.training.tied_atomic`.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from rag_hier._compat import st_training
from rag_hier.encoders._st_loading import quiet_trainer_setup
from rag_hier.encoders.encdec import CITATION, build_warm_started_encoder_decoder, encoder_decoder_sentence_transformer
from rag_hier.errors import RagHierError
from rag_hier.training._log_dicts import drop_log_dicts
from rag_hier.training.arguments import training_arguments
from rag_hier.training.base import TrainingResult, with_overrides
from rag_hier.training.corpus import CorpusInput, TrainingCorpus, as_training_corpus
from rag_hier.training.distributed import is_distributed, rank, world_size
from rag_hier.training.hce.data import SupervisedPair, resolve_pairs
from rag_hier.training.tied_atomic.config import DSIAtomicConfig, TiedAtomicConfig
from rag_hier.training.tied_atomic.data import bm25_negatives
from rag_hier.training.tied_atomic.loss import AtomicDocidLoss
from rag_hier.training.time_limit import TimeLimit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from rag_hier.retrieval.generative import AtomicDocidModel

logger = logging.getLogger(__name__)

__all__ = [
    "DSI_TRAINING_REPORT",
    "TRAINING_REPORT",
    "DSIAtomicTrainer",
    "TiedAtomicTrainer",
    "TiedAtomicTrainingResult",
]

TRAINING_REPORT = "tied_atomic_training.json"
DSI_TRAINING_REPORT = "dsi_atomic_training.json"


# ----------------------------------------------------------------------------------------------------
# result
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TiedAtomicTrainingResult(TrainingResult):
    """What a Tied-Atomic or DSI-atomic run produced: where, how much, how long, and the held-out metrics when asked.

    ``loss_log`` holds ``(step, mean training loss since the previous entry)`` every ``logging_steps`` steps.
    """

    output_dir: Path
    rows: int
    train_loss: float | None
    world_size: int
    metrics: Mapping[str, float] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    gathered_negatives: bool = False
    loss_log: tuple[tuple[int, float], ...] = ()


# ----------------------------------------------------------------------------------------------------
# negatives
# ----------------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------------
# shared trainer machinery
# ----------------------------------------------------------------------------------------------------
class _Base:
    """Model loading, trainer arguments and evaluation shared by both trainers."""

    config: TiedAtomicConfig | DSIAtomicConfig

    def _base_model(self, scratch: str) -> str:
        """The starting encoder-decoder: ``base_model``, or the warm start built in ``scratch``."""
        cfg = self.config
        if cfg.base_model is None:
            warm = Path(scratch) / "warm-start"
            logger.info(
                "building the warm-started encoder-decoder from %s (cross-attention: %s)",
                cfg.warm_start_encoder,
                cfg.warm_start_cross_attention,
            )
            build_warm_started_encoder_decoder(
                warm,
                cfg.warm_start_encoder,
                max_seq_length=cfg.max_seq_length or 512,
                seed=cfg.seed,
                cross_attention_init=cfg.warm_start_cross_attention,
            )
            return str(warm)
        return cfg.base_model

    def _load_model(self, scratch: str) -> SentenceTransformer:
        from rag_hier.encoders.device import resolve_device

        cfg = self.config
        name = self._base_model(scratch)
        return encoder_decoder_sentence_transformer(
            name, max_seq_length=cfg.max_seq_length, device=resolve_device(cfg.device)
        )

    def _args(self, args_cls: Any, samplers: Any, scratch: str, steps: int, sampler: str, **extra: Any) -> Any:
        return self._training_args(args_cls, scratch, steps, batch_sampler=getattr(samplers, sampler), **extra)

    def _training_args(self, args_cls: Any, scratch: str, steps: int, **extra: Any) -> Any:
        """Training arguments (sentence-transformers' or ``transformers``' class) of a run of ``steps`` steps."""
        cfg = self.config
        return training_arguments(
            args_cls,
            scratch,
            device=cfg.device,
            batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate,
            seed=cfg.seed,
            max_steps=steps,
            warmup_steps=max(0, round(cfg.warmup_ratio * steps)),
            fp16=cfg.fp16,
            bf16=cfg.bf16,
            logging_steps=cfg.logging_steps,
            show_progress_bar=cfg.show_progress_bar,
            drop_last=world_size() > 1,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            weight_decay=cfg.weight_decay,
            lr_scheduler_type="linear",
            max_grad_norm=1.0,
            **extra,
        )

    def _steps(self, rows: int, world: int) -> int:
        cfg = self.config
        per_step = cfg.batch_size * cfg.gradient_accumulation_steps * world
        natural = max(1, math.ceil(rows / per_step)) * cfg.epochs
        return cfg.max_steps if cfg.max_steps is not None else natural

    @staticmethod
    def _evaluate(
        encode_queries: Any,
        doc_matrix: np.ndarray,
        corpus: TrainingCorpus,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
    ) -> dict[str, float]:
        """nDCG@10, Recall@10/100, MRR@10 of dot-product ranking, documents scored by their best item."""
        return _Base._evaluate_scores(lambda texts: encode_queries(texts) @ doc_matrix.T, corpus, queries, qrels)

    @staticmethod
    def _evaluate_scores(
        score: Any,
        corpus: TrainingCorpus,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
    ) -> dict[str, float]:
        """The same metrics from ``score(texts)``: ``(n_queries, n_items)`` scores over the corpus items."""
        from rag_hier.eval import evaluate

        qids = [q for q in qrels if q in queries]
        if not qids:
            return {}
        scores = np.asarray(score([queries[q] for q in qids]), dtype=np.float32)
        k = min(200, scores.shape[1])
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < scores.shape[1] else np.argsort(-scores, axis=1)
        run: dict[str, dict[str, float]] = {}
        for i, q in enumerate(qids):
            best: dict[str, float] = {}
            for j in top[i].tolist():
                d = corpus.doc_ids[j]
                s = float(scores[i, j])
                if d not in best or s > best[d]:
                    best[d] = s
            run[q] = best
        return {
            k_: round(v, 5) for k_, v in evaluate(run, qrels, ("ndcg@10", "recall@10", "recall@100", "mrr@10")).items()
        }


def _loss_log(trainer: Any) -> tuple[tuple[int, float], ...]:
    """``(step, loss)`` of every loss the trainer logged."""
    return tuple((int(e["step"]), round(float(e["loss"]), 5)) for e in trainer.state.log_history if "loss" in e)


def _encode(model: SentenceTransformer, texts: Sequence[str], *, query: bool, batch_size: int = 64) -> np.ndarray:
    fn = getattr(model, "encode_query" if query else "encode_document", model.encode)
    emb = fn(list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(emb, dtype=np.float32)


# ----------------------------------------------------------------------------------------------------
# Tied-Atomic
# ----------------------------------------------------------------------------------------------------
class TiedAtomicTrainer(_Base):
    """Train a Tied-Atomic encoder-decoder embedding (Nguyen & Yates, 2023); save a sentence-transformers model.

    Args:
        config: The training configuration (:class:`TiedAtomicConfig`).
        model: The encoder-decoder to start from (a name or directory; default: the configuration's ``base_model``).
        device: ``"cpu"``, ``"cuda"``, ...; default: the configuration's ``device``.
        show_progress_bar: Progress bars; default: the configuration's ``show_progress_bar``.

    Example:
        >>> from rag_hier.corpus import read_beir_corpus, read_qrels, read_queries
        >>> trainer = TiedAtomicTrainer(TiedAtomicConfig(base_model="t5-small", max_steps=1000))  # doctest: +SKIP
        >>> trainer.train(read_beir_corpus("scifact"), "scifact-tied",  # doctest: +SKIP
        ...               queries=read_queries("scifact/queries.jsonl"), qrels=read_qrels("scifact/qrels/train.tsv"))

    """

    citation = CITATION

    def __init__(
        self,
        config: TiedAtomicConfig | None = None,
        *,
        model: str | None = None,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self.config: TiedAtomicConfig = with_overrides(
            config or TiedAtomicConfig(), base_model=model, device=device, show_progress_bar=show_progress_bar
        )
        self.model: SentenceTransformer | None = None

    def get_config_dict(self) -> dict[str, Any]:
        """The configuration as a dict (sentence-transformers' convention)."""
        return self.config.to_dict()

    def build_rows(
        self,
        corpus: TrainingCorpus,
        pairs: Sequence[SupervisedPair],
        cross_encoder: Any | None = None,
    ) -> dict[str, list[Any]]:
        """Training columns ``anchor, positive, negative_1..n`` (+ ``label`` margins for MarginMSE)."""
        cfg = self.config
        rng = np.random.default_rng(cfg.seed)
        order = rng.permutation(len(pairs)).tolist()
        chosen = [pairs[i] for i in order]
        negs = bm25_negatives(
            corpus,
            chosen,
            n_negatives=min(cfg.bm25_negatives, max(0, len(corpus.texts) - 1)),
            depth=cfg.bm25_depth,
            k1=cfg.bm25_k1,
            b=cfg.bm25_b,
            seed=cfg.seed,
        )
        cols: dict[str, list[Any]] = {
            "anchor": [p.query for p in chosen],
            "positive": [corpus.texts[p.positive] for p in chosen],
        }
        n_neg = min(len(n) for n in negs) if negs else 0
        for j in range(n_neg):
            cols[f"negative_{j + 1}"] = [corpus.texts[n[j]] for n in negs]
        if cross_encoder is not None:
            if n_neg == 0:
                raise RagHierError("MarginMSE needs at least one negative per query (the corpus is too small)")
            cols["label"] = self._margins(cross_encoder, cols, n_neg)
        return cols

    def _margins(self, cross_encoder: Any, cols: Mapping[str, list[Any]], n_neg: int) -> list[list[float]]:
        texts = [cols["positive"]] + [cols[f"negative_{j + 1}"] for j in range(n_neg)]
        scores = []
        for column in texts:
            pairs = list(zip(cols["anchor"], column, strict=True))
            scores.append(np.asarray(cross_encoder.predict(pairs, batch_size=64, show_progress_bar=False), np.float32))
        pos = scores[0]
        margins = np.stack([pos - s for s in scores[1:]], axis=1)
        return [[float(x) for x in row] for row in margins]

    def _cross_encoder(self) -> Any:
        from sentence_transformers import CrossEncoder

        from rag_hier.encoders.device import resolve_device

        name = self.config.cross_encoder
        try:
            return CrossEncoder(str(name), device=resolve_device(self.config.device))
        except (OSError, ValueError) as exc:
            raise RagHierError(f"cannot load cross-encoder {name!r}: {exc}") from exc

    def train(
        self,
        corpus: CorpusInput,
        output_dir: str | Path,
        *,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        eval_queries: Mapping[str, str] | None = None,
        eval_qrels: Mapping[str, Mapping[str, int]] | None = None,
    ) -> TiedAtomicTrainingResult:
        """Train on (query, relevant document) pairs of ``corpus`` and save the model to ``output_dir``.

        Args:
            corpus: The documents (split into training items as ``max_passage_words`` says), Passages, a
                mapping ``id -> text`` or a :class:`~rag_hier.training.hce.TrainingCorpus`.
            output_dir: Where the sentence-transformers model and ``tied_atomic_training.json`` go.
            queries: Training queries ``id -> text``.
            qrels: ``query id -> {document id -> grade}``; grades > 0 are positives.
            eval_queries: Held-out queries, scored after training (nDCG@10, Recall@10/100, MRR@10 over the
                corpus).
            eval_qrels: Their judgements.

        Raises:
            RagHierError: No usable pair, or a model that is not an encoder-decoder.
            MissingDependencyError: The training stack (``datasets``, ``accelerate``) is missing.

        """
        from datasets import Dataset

        cfg = self.config
        t0 = time.perf_counter()
        st = st_training("Tied-Atomic")
        trainer_cls, args_cls, samplers = st.trainer, st.arguments, st.batch_samplers
        items = as_training_corpus(corpus, cfg.max_passage_words)
        pairs = resolve_pairs(items, queries, qrels)
        out = Path(output_dir)
        torch.manual_seed(cfg.seed)
        with tempfile.TemporaryDirectory(prefix="rag-hier-tied-") as scratch:
            probe = self._args(args_cls, samplers, scratch, 1, "NO_DUPLICATES")
            _ = probe.device  # initialises torch.distributed under torchrun
            world = world_size()
            model = self._load_model(scratch)
            cross = self._cross_encoder() if cfg.cross_encoder else None
            cols = self.build_rows(items, pairs, cross)
            del cross
            losses = st.losses
            gathered = False
            if cfg.cross_encoder:
                from sentence_transformers.util import pairwise_dot_score

                loss: nn.Module = losses.MarginMSELoss(model, similarity_fct=pairwise_dot_score)
            else:
                from sentence_transformers.util import dot_score

                gathered = cfg.gather_across_devices and is_distributed()
                loss = losses.MultipleNegativesRankingLoss(
                    model, scale=cfg.scale, similarity_fct=dot_score, gather_across_devices=gathered
                )
            steps = self._steps(len(cols["anchor"]), world)
            args = self._args(args_cls, samplers, scratch, steps, "NO_DUPLICATES")
            with quiet_trainer_setup():
                trainer = trainer_cls(
                    model=model,
                    args=args,
                    train_dataset=Dataset.from_dict(cols),
                    loss=loss,
                    callbacks=[TimeLimit(cfg.max_minutes).callback()],
                )
            drop_log_dicts(trainer)
            outcome = trainer.train()
            done = int(trainer.state.global_step)
            losses_logged = _loss_log(trainer)
        train_loss = float(outcome.training_loss) if outcome.training_loss is not None else None
        metrics: dict[str, float] = {}
        if eval_queries is not None and eval_qrels is not None and rank() == 0:
            metrics = self._evaluate(
                lambda texts: _encode(model, texts, query=True),
                _encode(model, items.texts, query=False),
                items,
                eval_queries,
                eval_qrels,
            )
        seconds = time.perf_counter() - t0
        result = TiedAtomicTrainingResult(
            output_dir=out,
            steps=done,
            rows=len(cols["anchor"]),
            train_loss=train_loss,
            seconds=seconds,
            world_size=world,
            metrics=metrics,
            config=cfg.to_dict(),
            gathered_negatives=gathered,
            loss_log=losses_logged,
        )
        if rank() == 0:
            out.mkdir(parents=True, exist_ok=True)
            with quiet_trainer_setup():
                model.save(str(out))
            (out / TRAINING_REPORT).write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
        self.model = model
        logger.info(
            "Tied-Atomic: %d steps on %d rows in %.0fs (loss %s)", done, len(cols["anchor"]), seconds, train_loss
        )
        return result


# ----------------------------------------------------------------------------------------------------
# DSI-atomic (untied)
# ----------------------------------------------------------------------------------------------------
class DSIAtomicTrainer(_Base):
    """Train the untied DSI-atomic baseline on the retrieval and indexing tasks (Tay et al., 2022).

    ``DSIAtomicConfig.objective`` picks the model: ``"seq2seq"`` (the paper's baseline,
    :class:`~rag_hier.retrieval.dsi_seq2seq.DSIAtomicSeq2SeqModel`: docids are new vocabulary tokens, target
    ``[docid, end-of-sequence]``, teacher forcing, cross-entropy over the whole vocabulary, ``transformers``'
    ``Seq2SeqTrainer``) or ``"docid_softmax"`` (:class:`~rag_hier.retrieval.generative.DSIAtomicModel`: free rows
    over the Tied-Atomic embedding, cross-entropy over the docids only, sentence-transformers' trainer). One
    process only (it is a baseline).

    Args:
        config: The training configuration (:class:`DSIAtomicConfig`).
        model: The encoder-decoder to start from (a name or directory; default: the configuration's ``base_model``).
        device: ``"cpu"``, ``"cuda"``, ...; default: the configuration's ``device``.
        show_progress_bar: Progress bars; default: the configuration's ``show_progress_bar``.

    Example:
        >>> from rag_hier.corpus import read_beir_corpus, read_qrels, read_queries
        >>> trainer = DSIAtomicTrainer(DSIAtomicConfig(base_model="t5-small", epochs=50))  # doctest: +SKIP
        >>> model, result = trainer.train(read_beir_corpus("scifact"), "scifact-dsi",  # doctest: +SKIP
        ...     queries=read_queries("scifact/queries.jsonl"), qrels=read_qrels("scifact/qrels/train.tsv"))
        >>> model.generate("what causes tides?", k=10)  # doctest: +SKIP

    """

    citation = CITATION

    def __init__(
        self,
        config: DSIAtomicConfig | None = None,
        *,
        model: str | None = None,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self.config: DSIAtomicConfig = with_overrides(
            config or DSIAtomicConfig(), base_model=model, device=device, show_progress_bar=show_progress_bar
        )
        self.model: AtomicDocidModel | None = None

    def get_config_dict(self) -> dict[str, Any]:
        """The configuration as a dict (sentence-transformers' convention)."""
        return self.config.to_dict()

    def examples(self, items: TrainingCorpus, pairs: Sequence[SupervisedPair]) -> tuple[list[str], list[int]]:
        """The training examples, shuffled (seeded): ``(texts, corpus positions of their docids)``.

        Retrieval: every (query, relevant item) pair, ``retrieval_repeats`` times; indexing: every item's own text
        (when ``index_documents``).
        """
        cfg = self.config
        texts: list[str] = [p.query for p in pairs] * cfg.retrieval_repeats
        labels: list[int] = [p.positive for p in pairs] * cfg.retrieval_repeats
        if cfg.index_documents:
            texts += list(items.texts)
            labels += list(range(len(items.texts)))
        if not texts:
            raise RagHierError("DSI-atomic training has no example (retrieval_repeats=0 and index_documents=False)")
        order = np.random.default_rng(cfg.seed).permutation(len(texts)).tolist()
        return [texts[i] for i in order], [labels[i] for i in order]

    def train(
        self,
        corpus: CorpusInput,
        output_dir: str | Path,
        *,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        eval_queries: Mapping[str, str] | None = None,
        eval_qrels: Mapping[str, Mapping[str, int]] | None = None,
    ) -> TiedAtomicTrainingResult:
        """Train on the retrieval and indexing tasks; save the model (docids = the corpus item ids).

        Args:
            corpus: The documents (split into items as ``max_passage_words`` says; each item is a docid).
            output_dir: Where the model and ``dsi_atomic_training.json`` go.
            queries: Training queries ``id -> text``.
            qrels: ``query id -> {document id -> grade}``; grades > 0 are positives.
            eval_queries: Held-out queries, scored after training (nDCG@10, Recall@10/100, MRR@10).
            eval_qrels: Their judgements.

        Returns:
            What the training did; the trained model is :attr:`model` (a
            :class:`~rag_hier.retrieval.dsi_seq2seq.DSIAtomicSeq2SeqModel` or a
            :class:`~rag_hier.retrieval.generative.DSIAtomicModel`, as ``objective`` says).

        Raises:
            RagHierError: Under torch.distributed, or without usable pairs.

        """
        cfg = self.config
        if is_distributed():
            raise RagHierError(
                "DSI-atomic training runs in one process (it is a baseline; torch.distributed is not supported)"
            )
        t0 = time.perf_counter()
        st = st_training("DSI-atomic")
        items = as_training_corpus(corpus, cfg.max_passage_words)
        pairs = resolve_pairs(items, queries, qrels) if cfg.retrieval_repeats > 0 else []  # 0: indexing only
        torch.manual_seed(cfg.seed)
        texts, labels = self.examples(items, pairs)
        out = Path(output_dir)
        steps = self._steps(len(texts), 1)
        with tempfile.TemporaryDirectory(prefix="rag-hier-dsi-") as scratch:
            if cfg.objective == "seq2seq":
                model, trainer, finish = self._seq2seq(scratch, steps, items, texts, labels)
            else:
                model, trainer, finish = self._docid_softmax(st, scratch, steps, items, texts, labels)
            drop_log_dicts(trainer)
            outcome = trainer.train()
            done = int(trainer.state.global_step)
            losses_logged = _loss_log(trainer)
            finish()
            del trainer
        train_loss = float(outcome.training_loss) if outcome.training_loss is not None else None
        metrics: dict[str, float] = {}
        if eval_queries is not None and eval_qrels is not None:
            metrics = self._evaluate_scores(model.logits, items, eval_queries, eval_qrels)
        seconds = time.perf_counter() - t0
        result = TiedAtomicTrainingResult(
            output_dir=out,
            steps=done,
            rows=len(texts),
            train_loss=train_loss,
            seconds=seconds,
            world_size=1,
            metrics=metrics,
            config=cfg.to_dict(),
            loss_log=losses_logged,
        )
        with quiet_trainer_setup():
            model.save(out)
        (out / DSI_TRAINING_REPORT).write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
        logger.info(
            "DSI-atomic (%s): %d steps on %d examples in %.0fs (loss %s)",
            cfg.objective,
            done,
            len(texts),
            seconds,
            train_loss,
        )
        self.model = model
        return result

    def _seq2seq(
        self, scratch: str, steps: int, items: TrainingCorpus, texts: list[str], labels: list[int]
    ) -> tuple[AtomicDocidModel, Any, Callable[[], None]]:
        from datasets import Dataset
        from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

        from rag_hier.retrieval.dsi_seq2seq import DSIAtomicSeq2SeqModel, seq2seq_docid_loss

        cfg = self.config
        dsi = DSIAtomicSeq2SeqModel.from_pretrained(
            self._base_model(scratch),
            items.ids,
            max_seq_length=cfg.max_seq_length or 512,
            device=cfg.device,
            seed=cfg.seed,
            docid_init=cfg.docid_init,
        )
        data = Dataset.from_dict(dsi.features(texts, [items.ids[i] for i in labels]))
        args = self._training_args(Seq2SeqTrainingArguments, scratch, steps)
        with quiet_trainer_setup():
            trainer = Seq2SeqTrainer(
                model=dsi.model,
                args=args,
                train_dataset=data,
                data_collator=dsi.data_collator(),
                compute_loss_func=seq2seq_docid_loss,
                callbacks=[TimeLimit(cfg.max_minutes).callback()],
            )
        return dsi, trainer, lambda: None

    def _docid_softmax(
        self, st: Any, scratch: str, steps: int, items: TrainingCorpus, texts: list[str], labels: list[int]
    ) -> tuple[AtomicDocidModel, Any, Callable[[], None]]:
        from datasets import Dataset

        from rag_hier.retrieval.generative import DSIAtomicModel

        cfg = self.config
        model = self._load_model(scratch)
        dsi = DSIAtomicModel(model, items.ids, init_std=cfg.init_std, seed=cfg.seed)
        dsi.weight.data = dsi.weight.data.to(model.device)
        loss = AtomicDocidLoss(model, dsi.weight)
        extra: dict[str, Any] = {}
        if cfg.docid_learning_rate is not None:
            extra["learning_rate_mapping"] = {r"^docid_embeddings$": cfg.docid_learning_rate}
        args = self._args(st.arguments, st.batch_samplers, scratch, steps, "BATCH_SAMPLER", **extra)
        with quiet_trainer_setup():
            trainer = st.trainer(
                model=model,
                args=args,
                train_dataset=Dataset.from_dict({"text": texts, "label": labels}),
                loss=loss,
                callbacks=[TimeLimit(cfg.max_minutes).callback()],
            )

        def finish() -> None:  # the trainer optimised the loss's rows
            dsi.weight = loss.docid_embeddings

        return dsi, trainer, finish
