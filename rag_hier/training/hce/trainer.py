"""HCETrainer: fine-tune a sentence-transformers encoder with HCE, with EM re-clustering (Alg. 3).

Each EM epoch samples tiered negatives from the current cluster tree, trains with
sentence-transformers' ``SentenceTransformerTrainer`` and :class:`HierarchicalContrastiveLoss`, then
re-embeds the corpus once: those embeddings give the dev metric (sentence-transformers'
``InformationRetrievalEvaluator``) and, when the metric improved, the rebuilt tree for the next epoch.
Training stops after ``patience`` epochs without improvement; the best model is what is saved, as a
plain sentence-transformers directory (``SentenceTransformer(path)``, ``rag-hier index --model path``).
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rag_hier._compat import st_training
from rag_hier.encoders._st_loading import quiet_trainer_setup
from rag_hier.encoders.identity import DEFAULT_MODEL as DEFAULT_BASE_MODEL
from rag_hier.errors import RagHierError
from rag_hier.index.tree import ClusterTree, TreeBuildConfig
from rag_hier.training._attention import attention_dropout
from rag_hier.training._log_dicts import drop_log_dicts
from rag_hier.training._models import load_base_model
from rag_hier.training.arguments import training_arguments
from rag_hier.training.base import TrainingResult
from rag_hier.training.corpus import CorpusInput, as_training_corpus
from rag_hier.training.distributed import broadcast_arrays, is_distributed, rank, world_size
from rag_hier.training.hce.config import HCEConfig
from rag_hier.training.hce.data import (
    SupervisedPair,
    TrainingCorpus,
    build_rows,
    ict_examples,
    ict_queries,
    resolve_pairs,
    sample_tree_negatives,
)
from rag_hier.training.hce.loss import HierarchicalContrastiveLoss, JointLoss, ScaledLoss
from rag_hier.training.time_limit import TimeLimit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = ["HCEEpoch", "HCETrainer", "HCETrainingResult", "train_hce"]

DEV_METRIC = "ndcg@10"
TRAINING_REPORT = "hce_training.json"


@dataclass(frozen=True)
class HCEEpoch:
    """What one EM epoch did (``epoch`` 0 is the starting model)."""

    epoch: int
    steps: int
    seconds: float
    dev: dict[str, float] | None = None
    improved: bool = False
    reclustered: bool = False
    train_loss: float | None = None
    tree: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class HCETrainingResult(TrainingResult):
    """Outcome of :meth:`HCETrainer.train` (the EM epochs, the best one and its dev metric)."""

    output_dir: Path
    best_epoch: int
    best_dev: float | None
    history: tuple[HCEEpoch, ...]
    config: HCEConfig

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``hce_training.json`` holds)."""
        return {
            "output_dir": str(self.output_dir),
            "steps": self.steps,
            "best_epoch": self.best_epoch,
            f"best_dev_{DEV_METRIC}": self.best_dev,
            "seconds": round(self.seconds, 1),
            "config": self.config.to_dict(),
            "history": [asdict(e) for e in self.history],
        }


class HCETrainer:
    """Fine-tune a sentence-transformers model with HCE (Hierarchical Corpus Encoder, Chen et al., 2025).

    Args:
        config: Hyper-parameters (:class:`HCEConfig`).
        model: Base model: a name or path (default: the offline MiniLM, resolved as everywhere in rag-hier),
            or a loaded ``SentenceTransformer`` (trained in place).
        device: ``"cpu"``, ``"cuda"``, ...; ``None``: CUDA when available.
        show_progress_bar: Progress bars for training steps and corpus encoding (default: shown).

    Example:
        >>> from rag_hier.training.hce import HCEConfig, HCETrainer  # doctest: +SKIP
        >>> trainer = HCETrainer(config=HCEConfig(mode="unsupervised", max_steps=100))  # doctest: +SKIP
        >>> trainer.train(read_corpus("my-notes/"), "my-model")  # doctest: +SKIP

    """

    def __init__(
        self,
        config: HCEConfig | None = None,
        *,
        model: str | Path | SentenceTransformer | None = None,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self.config = config or HCEConfig()
        self.device = device
        self.show_progress_bar = True if show_progress_bar is None else show_progress_bar
        self._model_arg = DEFAULT_BASE_MODEL if model is None else model
        self._model: SentenceTransformer | None = None

    # -- model ------------------------------------------------------------------------------------
    @property
    def model(self) -> SentenceTransformer:
        """The model being trained (loaded on first access)."""
        if self._model is None:
            self._model = load_base_model(self._model_arg, self.device, self.config.max_seq_length)
        return self._model

    def encode_corpus(self, corpus: TrainingCorpus) -> np.ndarray:
        """Unit-normalised float32 embeddings of every corpus item with the current model."""
        model = self.model
        encode = getattr(model, "encode_document", model.encode)
        emb = encode(
            list(corpus.texts),
            batch_size=self.config.encode_batch_size,
            show_progress_bar=self.show_progress_bar and rank() == 0,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def _tokenize_offsets(self) -> Callable[[str], list[tuple[int, int]]] | None:
        tokenizer = getattr(self.model, "tokenizer", None)
        if tokenizer is None or not getattr(tokenizer, "is_fast", False):
            return None

        def offsets(text: str) -> list[tuple[int, int]]:
            enc = tokenizer(
                text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False
            )
            return [(int(a), int(b)) for a, b in enc["offset_mapping"] if b > a]

        return offsets

    def _ict_window(self) -> int | None:
        """Tokens of a document the model encodes (its ``max_seq_length`` minus special tokens): ICT spans lie there."""
        tokenizer = getattr(self.model, "tokenizer", None)
        limit = self.config.max_seq_length or getattr(self.model, "max_seq_length", None)
        if tokenizer is None or not getattr(tokenizer, "is_fast", False) or not limit:
            return None
        try:
            special = int(tokenizer.num_special_tokens_to_add(pair=False))
        except (AttributeError, TypeError):  # pragma: no cover - every fast tokenizer has it
            special = 2
        return max(1, int(limit) - special)

    # -- training ---------------------------------------------------------------------------------
    def train(
        self,
        corpus: CorpusInput,
        output_dir: str | Path,
        *,
        queries: Mapping[str, str] | None = None,
        qrels: Mapping[str, Mapping[str, int]] | None = None,
        dev_queries: Mapping[str, str] | None = None,
        dev_qrels: Mapping[str, Mapping[str, int]] | None = None,
        max_passage_words: int = 0,
        corpus_embeddings: np.ndarray | None = None,
    ) -> HCETrainingResult:
        """Train and save the best model to ``output_dir`` (a standard sentence-transformers directory).

        Args:
            corpus: The documents to adapt to (Documents are split like the store splits them, see
                ``max_passage_words``), Passages, a mapping ``id -> text`` or a :class:`TrainingCorpus`.
            output_dir: Where the model (and ``hce_training.json``) is written.
            queries: Training queries ``id -> text`` (supervised and joint modes).
            qrels: Judgements ``query id -> {document or passage id -> grade}``; grades > 0 are positives.
            dev_queries: Explicit dev queries (default: ``dev_fraction`` of the training queries).
            dev_qrels: Judgements for ``dev_queries``.
            max_passage_words: Passage splitting of Documents (0 keeps paragraphs whole).
            corpus_embeddings: The base model's embeddings of the corpus items, if already computed.

        """
        cfg = self.config
        t_start = time.perf_counter()
        st = st_training("HCE")
        Trainer, Args, BatchSamplers = st.trainer, st.arguments, st.batch_samplers
        MultiSamplers = st.multi_dataset_batch_samplers
        IREvaluator = st.ir_evaluator
        items = as_training_corpus(corpus, max_passage_words)
        if cfg.mode in ("supervised", "joint") and (not queries or not qrels):
            raise RagHierError(f"mode {cfg.mode!r} needs training queries and qrels")
        out = Path(output_dir)
        rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        model = self.model
        with tempfile.TemporaryDirectory(prefix="hce-trainer-") as scratch:
            probe = self._args(Args, BatchSamplers, MultiSamplers, scratch, 1, joint=False)
            _ = probe.device  # initialises torch.distributed under torchrun, before anything is broadcast
            world = world_size()
            if cfg.max_minutes is not None and world > 1:
                logger.warning("max_minutes applies to single-process training; ignored under torch.distributed")
            limit = TimeLimit(cfg.max_minutes if world == 1 else None)
            emb = corpus_embeddings if corpus_embeddings is not None else self.encode_corpus(items)
            if emb.shape[0] != len(items):
                raise ValueError(f"corpus_embeddings has {emb.shape[0]} rows for {len(items)} corpus items")
            train_pairs, dev = self._split(items, emb, queries, qrels, dev_queries, dev_qrels, rng)
            evaluator = None
            if dev is not None:
                dq, drel = dev
                evaluator = IREvaluator(
                    queries=dq,
                    corpus=dict(zip(items.ids, items.texts, strict=True)),
                    relevant_docs=drel,
                    ndcg_at_k=[10],
                    mrr_at_k=[10],
                    accuracy_at_k=[1],
                    precision_recall_at_k=[10, 100],
                    map_at_k=[100],
                    batch_size=cfg.encode_batch_size,
                    show_progress_bar=False,
                    name="dev",
                    write_csv=False,
                )
            history: list[HCEEpoch] = []
            best_metrics = self._dev(evaluator, emb)
            best = best_metrics[DEV_METRIC] if best_metrics else None
            tree = self._build_tree(emb)
            history.append(HCEEpoch(0, 0, round(time.perf_counter() - t_start, 1), best_metrics, tree=tree.describe()))
            logger.info("epoch 0 (base model): dev %s, tree %s", best_metrics, tree.describe())
            if rank() == 0:
                out.mkdir(parents=True, exist_ok=True)
                if evaluator is not None:  # the base model is the best until an epoch beats it
                    with quiet_trainer_setup():
                        model.save(str(out))
            loss = HierarchicalContrastiveLoss(
                model,
                tree,
                levels_m=cfg.levels_m,
                temperature=cfg.temperature,
                symmetric=cfg.symmetric,
                level_weight=cfg.level_weight,
                direction_reduction=cfg.direction_reduction,
                gather_across_devices=cfg.gather_across_devices,
                mini_batch_size=cfg.mini_batch_size,
            )
            n_sup = len(train_pairs)
            rows_per_step = cfg.batch_size * cfg.gradient_accumulation_steps * world
            if cfg.mode == "supervised" or (cfg.mode == "joint" and cfg.joint_schedule == "sum"):
                natural = math.ceil(n_sup / rows_per_step)  # one pass over the query pairs
            elif cfg.mode == "unsupervised":
                natural = math.ceil(len(items) / rows_per_step)
            else:
                natural = 2 * max(1, min(n_sup, len(items)) // rows_per_step)
            per_epoch = cfg.steps_per_epoch or max(1, natural)
            planned = per_epoch * cfg.epochs if cfg.max_steps is None else min(cfg.max_steps, per_epoch * cfg.epochs)
            optimizer, scheduler = self._optimizer(loss, planned)
            steps = 0
            best_epoch = 0
            stale = 0
            for epoch in range(1, cfg.epochs + 1):
                this = min(per_epoch, planned - steps)
                if this <= 0:
                    break
                t0 = time.perf_counter()
                train_ds, losses = self._datasets(items, tree, train_pairs, loss, rng, this * rows_per_step)
                args = self._args(Args, BatchSamplers, MultiSamplers, scratch, this, joint=isinstance(train_ds, dict))
                with quiet_trainer_setup():
                    trainer = Trainer(
                        model=model,
                        args=args,
                        train_dataset=train_ds,
                        loss=losses,
                        optimizers=(optimizer, scheduler),
                        callbacks=[limit.callback()],
                    )
                drop_log_dicts(trainer)
                with attention_dropout(model, cfg.attention_dropout):
                    outcome = trainer.train()
                done = int(trainer.state.global_step)
                steps += done
                last = epoch == cfg.epochs or steps >= planned or limit.reached
                # Re-embed the corpus (once) when the dev metric or the next epoch's tree needs it.
                fresh = None
                if evaluator is not None or (not last and cfg.recluster != "never"):
                    fresh = emb = self.encode_corpus(items)
                metrics = self._dev(evaluator, emb) if fresh is not None else None
                value = metrics[DEV_METRIC] if metrics else None
                improved = value is not None and (best is None or value > best)
                if improved:
                    best, best_epoch, stale = value, epoch, 0
                else:
                    stale += 1
                if (evaluator is None or improved) and rank() == 0:
                    with quiet_trainer_setup():
                        model.save(str(out))
                stop = evaluator is not None and cfg.patience > 0 and stale >= cfg.patience
                recluster = (
                    not last
                    and not stop
                    and (cfg.recluster == "always" or (cfg.recluster == "improved" and (improved or evaluator is None)))
                )
                if recluster:
                    tree = self._build_tree(emb)
                    if loss.set_tree(tree):  # pragma: no cover - shapes are fixed for a fixed corpus and b
                        optimizer, scheduler = self._optimizer(loss, planned - steps)
                    else:
                        for p in loss.centroids.parameters():
                            optimizer.state.pop(p, None)
                entry = HCEEpoch(
                    epoch,
                    done,
                    round(time.perf_counter() - t0, 1),
                    metrics,
                    improved,
                    recluster,
                    float(outcome.training_loss) if outcome.training_loss is not None else None,
                    tree.describe() if recluster else {},
                )
                history.append(entry)
                logger.info(
                    "epoch %d: %d steps, loss %.4f, dev %s%s%s",
                    epoch,
                    done,
                    entry.train_loss or float("nan"),
                    metrics,
                    " (improved)" if improved else "",
                    ", tree rebuilt" if recluster else "",
                )
                if stop:
                    logger.info("dev %s did not improve for %d epoch(s): stopping", DEV_METRIC, stale)
                    break
                if steps >= planned or limit.reached:
                    break
            if evaluator is not None and best_epoch != history[-1].epoch:
                logger.info("keeping the model of epoch %d (best dev %s %.4f)", best_epoch, DEV_METRIC, best or 0.0)
        result = HCETrainingResult(
            output_dir=out,
            steps=steps,
            best_epoch=best_epoch if evaluator is not None else history[-1].epoch,
            best_dev=best,
            history=tuple(history),
            seconds=time.perf_counter() - t_start,
            config=cfg,
        )
        if rank() == 0:
            (out / TRAINING_REPORT).write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
        if evaluator is not None and best_epoch != history[-1].epoch:
            self._reload(out)
        return result

    def _reload(self, path: Path) -> None:
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(path), device=str(self.model.device))

    # -- pieces -----------------------------------------------------------------------------------
    def _args(self, Args: Any, BatchSamplers: Any, MultiSamplers: Any, scratch: str, steps: int, *, joint: bool) -> Any:
        cfg = self.config
        return training_arguments(
            Args,
            scratch,
            device=self.device,
            batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate,
            seed=cfg.seed,
            max_steps=steps,
            fp16=cfg.fp16,
            bf16=cfg.bf16,
            logging_steps=cfg.logging_steps,
            show_progress_bar=self.show_progress_bar,
            drop_last=world_size() > 1,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            # Duplicate query texts (a query judged against several documents) would be false in-batch
            # negatives; duplicate documents are masked by the loss through their labels.
            batch_sampler=BatchSamplers.BATCH_SAMPLER if cfg.mode == "unsupervised" else BatchSamplers.NO_DUPLICATES,
            multi_dataset_batch_sampler=MultiSamplers.ROUND_ROBIN if joint else MultiSamplers.PROPORTIONAL,
        )

    def _optimizer(self, loss: HierarchicalContrastiveLoss, steps: int) -> tuple[torch.optim.Optimizer, Any]:
        from transformers import get_linear_schedule_with_warmup

        cfg = self.config
        decay: list[torch.nn.Parameter] = []
        no_decay: list[torch.nn.Parameter] = []
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                (no_decay if name.endswith("bias") or "LayerNorm" in name or "norm" in name else decay).append(p)
        groups = [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay + list(loss.centroids.parameters()), "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=cfg.learning_rate)
        scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * steps), max(steps, 1))
        return optimizer, scheduler

    def _build_tree(self, emb: np.ndarray) -> ClusterTree:
        cfg = self.config
        arrays: list[np.ndarray] | None = None
        if rank() == 0:
            tree = ClusterTree.build(
                emb, config=TreeBuildConfig(branching=cfg.branching, niter=cfg.tree_niter, seed=cfg.seed)
            )
            arrays = [a for pair in zip(tree.centroids, tree.parents, strict=True) for a in pair]
            arrays += [tree.item_ids, tree.item_leaf]
            meta = np.asarray([tree.branching], np.int64)
            if not is_distributed():
                return tree
            arrays.append(meta)
        got = broadcast_arrays(arrays)
        depth = (len(got) - 3) // 2
        return ClusterTree(
            emb.shape[1],
            int(got[-1][0]),
            [got[2 * i] for i in range(depth)],
            [got[2 * i + 1] for i in range(depth)],
            got[-3],
            got[-2],
        )

    def _dev(self, evaluator: Any, emb: np.ndarray) -> dict[str, float] | None:
        if evaluator is None:
            return None
        from sentence_transformers.util import cos_sim

        evaluator.score_functions = {"cosine": cos_sim}
        evaluator.score_function_names = ["cosine"]
        scores = evaluator.compute_all_metrics(self.model, corpus_embeddings=torch.from_numpy(emb))["cosine"]
        out = {
            "ndcg@10": float(scores["ndcg@k"][10]),
            "mrr@10": float(scores["mrr@k"][10]),
            "recall@10": float(scores["recall@k"][10]),
            "recall@100": float(scores["recall@k"][100]),
        }
        if is_distributed():  # every process takes rank 0's decision
            (vals,) = broadcast_arrays([np.asarray(list(out.values()), np.float32)] if rank() == 0 else None)
            out = dict(zip(out, map(float, vals), strict=True))
        return {k: round(v, 5) for k, v in out.items()}

    def _split(
        self,
        items: TrainingCorpus,
        emb: np.ndarray,
        queries: Mapping[str, str] | None,
        qrels: Mapping[str, Mapping[str, int]] | None,
        dev_queries: Mapping[str, str] | None,
        dev_qrels: Mapping[str, Mapping[str, int]] | None,
        rng: np.random.Generator,
    ) -> tuple[list[SupervisedPair], tuple[dict[str, str], dict[str, set[str]]] | None]:
        cfg = self.config
        choose = self._chooser(items, emb)
        pairs: list[SupervisedPair] = []
        if cfg.mode in ("supervised", "joint") and queries and qrels:
            pairs = resolve_pairs(items, queries, qrels, choose=choose)
        if dev_queries is not None and dev_qrels is not None:
            dev_pairs = resolve_pairs(items, dev_queries, dev_qrels, choose=choose)
            return pairs, self._dev_set(items, dev_pairs)
        if pairs and cfg.dev_fraction > 0:
            qids = sorted({p.query_id for p in pairs})
            n_dev = round(cfg.dev_fraction * len(qids))
            if n_dev >= 1 and n_dev < len(qids):
                held = set(rng.choice(qids, size=n_dev, replace=False).tolist())
                dev_pairs = [p for p in pairs if p.query_id in held]
                pairs = [p for p in pairs if p.query_id not in held]
                return pairs, self._dev_set(items, dev_pairs)
            return pairs, None
        if cfg.mode == "unsupervised" and cfg.dev_size > 0:
            dev_rng = np.random.default_rng(cfg.seed + 7919)
            picks = dev_rng.choice(len(items), size=min(cfg.dev_size, len(items)), replace=False)
            spans = ict_queries(
                [items.texts[i] for i in picks],
                dev_rng,
                span_tokens=cfg.span_tokens,
                tokenize=self._tokenize_offsets(),
                max_tokens=self._ict_window(),
            )
            dq = {f"dev-{i}": s for i, s in zip(picks.tolist(), spans, strict=True)}
            return pairs, (dq, {f"dev-{i}": {items.ids[i]} for i in picks.tolist()})
        return pairs, None

    @staticmethod
    def _dev_set(items: TrainingCorpus, pairs: Sequence[SupervisedPair]) -> tuple[dict[str, str], dict[str, set[str]]]:
        dq = {p.query_id: p.query for p in pairs}
        rel: dict[str, set[str]] = {}
        for p in pairs:
            rel.setdefault(p.query_id, set()).update(items.ids[i] for i in p.relevant)
        return dq, rel

    def _chooser(self, items: TrainingCorpus, emb: np.ndarray) -> Callable[[str, list[int]], int]:
        """For a judgement naming a multi-passage document: the passage the base model finds closest to the query."""

        def choose(query: str, positions: list[int]) -> int:
            encode = getattr(self.model, "encode_query", self.model.encode)
            q = np.asarray(encode([query], normalize_embeddings=True, convert_to_numpy=True), np.float32)[0]
            return int(positions[int(np.argmax(emb[positions] @ q))])

        return choose

    def _unsup_rows(
        self, items: TrainingCorpus, positions: np.ndarray, rng: np.random.Generator
    ) -> tuple[list[str], list[str]]:
        """Pseudo-queries and the texts of their positives (ICT may cut the span out of its document)."""
        texts = [items.texts[i] for i in positions]
        if self.config.unsupervised_task == "simcse":
            return texts, texts
        return ict_examples(
            texts,
            rng,
            span_tokens=self.config.span_tokens,
            tokenize=self._tokenize_offsets(),
            remove_rate=self.config.ict_remove_rate,
            max_tokens=self._ict_window(),
            unit=self.config.ict_unit,
        )

    def _datasets(
        self,
        items: TrainingCorpus,
        tree: ClusterTree,
        pairs: list[SupervisedPair],
        loss: HierarchicalContrastiveLoss,
        rng: np.random.Generator,
        rows: int,
    ) -> tuple[Any, Any]:
        from datasets import Dataset

        cfg = self.config

        def negatives(pos: np.ndarray, exclude: Sequence[frozenset[int]] | None) -> np.ndarray:
            return sample_tree_negatives(
                tree, pos, levels_m=cfg.levels_m, n_negatives=cfg.n_negatives, rng=rng, exclude=exclude
            )

        def supervised_rows() -> dict[str, list[Any]]:
            order = rng.permutation(len(pairs))[: max(rows, 1)]
            chosen = [pairs[i] for i in order]
            pos = np.asarray([p.positive for p in chosen], np.int64)
            neg = negatives(pos, [p.relevant for p in chosen])
            return build_rows([p.query for p in chosen], pos, neg, items)

        def unsupervised_rows(n: int) -> dict[str, list[Any]]:
            pos = rng.permutation(len(items))[: max(n, 1)].astype(np.int64)
            if pos.size < n:  # more rows than items (joint mode on a small corpus): draw again
                extra = rng.choice(len(items), size=n - pos.size, replace=True).astype(np.int64)
                pos = np.concatenate([pos, extra])
            neg = negatives(pos, None)
            anchors, contexts = self._unsup_rows(items, pos, rng)
            return build_rows(anchors, pos, neg, items, positive_texts=contexts)

        if cfg.mode == "supervised":
            return Dataset.from_dict(supervised_rows()), loss
        if cfg.mode == "unsupervised":
            return Dataset.from_dict(unsupervised_rows(rows)), loss
        if cfg.joint_schedule == "alternate":
            datasets = {
                "supervised": Dataset.from_dict(supervised_rows()),
                "unsupervised": Dataset.from_dict(unsupervised_rows(rows)),
            }
            return datasets, {"supervised": loss, "unsupervised": ScaledLoss(loss, cfg.alpha, prefix="unsup_")}
        # "sum": each row = a supervised example followed by an unsupervised one (JointLoss splits them)
        sup = supervised_rows()
        uns = unsupervised_rows(len(sup["anchor"]))
        labels = [a + b for a, b in zip(sup.pop("label"), uns.pop("label"), strict=True)]
        cols = {**sup, **{f"unsup_{k}": v for k, v in uns.items()}, "label": labels}
        return Dataset.from_dict(cols), JointLoss(loss, cfg.alpha, n_columns=len(sup))


def train_hce(
    corpus: CorpusInput,
    output_dir: str | Path,
    *,
    model: str | Path | SentenceTransformer = "sentence-transformers/all-MiniLM-L6-v2",
    config: HCEConfig | None = None,
    queries: Mapping[str, str] | None = None,
    qrels: Mapping[str, Mapping[str, int]] | None = None,
    device: str | None = None,
    show_progress_bar: bool = True,
    **train_kwargs: Any,
) -> HCETrainingResult:
    """One-call HCE fine-tuning: ``HCETrainer(config, model=model, ...).train(corpus, output_dir, ...)``."""
    trainer = HCETrainer(config, model=model, device=device, show_progress_bar=show_progress_bar)
    return trainer.train(corpus, output_dir, queries=queries, qrels=qrels, **train_kwargs)
