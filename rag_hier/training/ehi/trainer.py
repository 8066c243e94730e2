"""EHITrainer: train the EHI indexer jointly with a sentence-transformers encoder (or alone, on fixed vectors).

Training (Kumar et al., 2023, Alg. 1) runs in *periods* of ``r`` (``refresh_every``) epochs. At the start of
every period the corpus is encoded with the current encoder (skipped when it is frozen), every document is
assigned to its top leaf (or its ``leaves_per_document`` top leaves), and each training query's hard-negative
pool is mined: the documents of its ``mine_leaves`` top leaves that are not relevant to it. With
``remine_every`` the assignment and the pools are mined again every that many steps with the current indexer
(on the vectors of the last re-encode), so that negatives come from a fresh indexer. Each pair draws one hard
negative from its query's pool and trains on :class:`EHILoss` (mined + in-batch negatives, optionally a leaf
load-balancing term) with AdamW, the encoder and the indexer at their own learning rates, one linear
warm-up/decay schedule over all steps. The encoder trains through sentence-transformers'
``SentenceTransformerTrainer`` (DDP under ``torchrun``, mixed precision, gradient clipping); with a frozen
encoder a plain loop trains the indexer on the cached vectors.

Output: the encoder as an ordinary sentence-transformers directory, the indexer next to it
(:data:`~rag_hier.index.ehi.INDEXER_FILES`: safetensors + JSON) and ``ehi_training.json``.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from rag_hier._compat import st_training
from rag_hier.encoders._st_loading import quiet_trainer_setup
from rag_hier.encoders.identity import DEFAULT_MODEL as DEFAULT_BASE_MODEL
from rag_hier.errors import RagHierError
from rag_hier.index.ehi import EHIIndexer, LeafAssignment
from rag_hier.training._log_dicts import drop_log_dicts
from rag_hier.training._models import load_base_model
from rag_hier.training.arguments import training_arguments
from rag_hier.training.base import TrainingResult
from rag_hier.training.corpus import CorpusInput, TrainingCorpus, as_training_corpus
from rag_hier.training.distributed import broadcast_arrays, is_distributed, rank, world_size
from rag_hier.training.ehi.config import EHIConfig
from rag_hier.training.ehi.data import TrainingQueries, exact_pools, leaf_pools, sample_negatives
from rag_hier.training.ehi.loss import EHILoss
from rag_hier.training.hce.data import resolve_pairs
from rag_hier.training.time_limit import TimeLimit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = ["TRAINING_REPORT", "EHIPeriod", "EHITrainer", "EHITrainingResult", "train_ehi"]

TRAINING_REPORT = "ehi_training.json"
LOSS_TERMS = ("siamese", "indexing", "intra", "balance")


@dataclass(frozen=True)
class EHIPeriod:
    """What one refresh period did: its epochs, steps, mean loss terms, and the tree it started from."""

    first_epoch: int
    epochs: int
    steps: int
    seconds: float
    loss: dict[str, float] = field(default_factory=dict)
    leaves: dict[str, Any] = field(default_factory=dict)
    fallback_negatives: int = 0


@dataclass(frozen=True, kw_only=True)
class EHITrainingResult(TrainingResult):
    """Outcome of :meth:`EHITrainer.train`.

    ``indexer`` is the trained indexer (with ``refit_epochs``, the one refit on the final vectors), ``leaves``
    the final ``(n_items, leaves_per_document)`` leaf assignment of the training corpus (with the final
    encoder), ``leaf_stats`` its balance facts, ``corpus_embeddings`` the final encoder's vectors of the corpus
    items, ``refit_history`` the periods of the refit and ``warmup_history`` those of the indexer's warm-up.
    """

    config: EHIConfig
    history: tuple[EHIPeriod, ...]
    indexer: EHIIndexer
    leaves: np.ndarray
    leaf_stats: dict[str, Any]
    corpus_embeddings: np.ndarray | None = None
    refit_history: tuple[EHIPeriod, ...] = ()
    warmup_history: tuple[EHIPeriod, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``ehi_training.json`` holds)."""
        return {
            "output_dir": str(self.output_dir) if self.output_dir is not None else None,
            "steps": self.steps,
            "seconds": round(self.seconds, 1),
            "config": self.config.to_dict(),
            "indexer": self.indexer.describe(),
            "leaves": self.leaf_stats,
            "history": [asdict(p) for p in self.history],
            "refit_history": [asdict(p) for p in self.refit_history],
            "warmup_history": [asdict(p) for p in self.warmup_history],
        }


LAYER_LISTS = ("layer", "layers", "h", "block", "blocks")
"""Names a transformer's list of layers goes by (BERT/MiniLM ``encoder.layer``, DistilBERT ``transformer.layer``)."""


def last_layer_parameters(model: SentenceTransformer) -> list[str]:
    """Names (as in ``model.named_parameters()``) of the parameters of the model's last transformer layer.

    The layer list is the largest ``torch.nn.ModuleList`` (by parameter count) named one of :data:`LAYER_LISTS`
    inside the model's first module (sentence-transformers' ``Transformer``).
    """
    names = [n for n, _ in model.named_parameters()]
    first = next(iter(model._modules))  # the Transformer module's key, "0"
    best: tuple[int, str, int] | None = None
    for name, module in model._modules[first].named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) and name.rsplit(".", 1)[-1] in LAYER_LISTS:
            size = sum(p.numel() for p in module.parameters())
            if best is None or size > best[0]:
                best = (size, name, len(module))
    if best is None:
        raise RagHierError(
            "EHI encoder_scope='last': found no list of transformer layers (a ModuleList named "
            f"{', '.join(LAYER_LISTS)}) in the encoder's first module; use encoder_scope='all'"
        )
    _, name, n_layers = best
    prefix = f"{first}.{name}.{n_layers - 1}."
    return [n for n in names if n.startswith(prefix)]


@contextlib.contextmanager
def training_scope(model: SentenceTransformer, scope: str) -> Iterator[None]:
    """Within the block, freeze every encoder parameter outside ``scope`` (``"last"``: all but the last layer).

    On leaving it, every parameter's ``requires_grad`` is put back as it was.
    """
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    if scope == "last":
        keep = set(last_layer_parameters(model))
        for n, p in model.named_parameters():
            p.requires_grad_(n in keep)
        logger.info("training the encoder's last layer only: %d of %d parameter tensors", len(keep), len(before))
    try:
        yield
    finally:
        for n, p in model.named_parameters():
            p.requires_grad_(before[n])


def _init_distributed(device: str | None) -> None:
    """Under ``torchrun`` (``WORLD_SIZE > 1``) without an initialised group: gloo on CPU, NCCL on CUDA."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized():
        cuda = torch.cuda.is_available() and device != "cpu"
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
        # The group is ours: tear it down while the interpreter is whole, not from gloo's threads at finalisation.
        atexit.register(_destroy_process_group)


def _destroy_process_group() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


class EHITrainer:
    """Train EHI (End-to-end Hierarchical Indexing, Kumar et al., 2023): a tree indexer and, jointly, the encoder.

    Args:
        config: Hyper-parameters (:class:`EHIConfig`).
        model: Encoder to start from: a name or path (default: the offline MiniLM, resolved as everywhere in
            rag-hier) or a loaded ``SentenceTransformer`` (trained in place).
        device: ``"cpu"``, ``"cuda"``, ...; ``None``: CUDA when available.
        show_progress_bar: Progress bars for training steps and corpus encoding (default: shown).

    Example:
        >>> from rag_hier.training.ehi import EHIConfig, EHITrainer  # doctest: +SKIP
        >>> trainer = EHITrainer(config=EHIConfig(branching=40, epochs=10, refresh_every=2))  # doctest: +SKIP
        >>> result = trainer.train(docs, "my-ehi", queries=queries, qrels=qrels)  # doctest: +SKIP
        >>> result.indexer, result.leaf_stats["leaf_size_max"]  # doctest: +SKIP

    """

    def __init__(
        self,
        config: EHIConfig | None = None,
        *,
        model: str | Path | SentenceTransformer | None = None,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self._requested = config or EHIConfig()
        self.config = self._requested
        self.device = device
        self.show_progress_bar = True if show_progress_bar is None else show_progress_bar
        self._model_arg = DEFAULT_BASE_MODEL if model is None else model
        self._limit = TimeLimit(None)
        self._model: SentenceTransformer | None = None

    # -- model ------------------------------------------------------------------------------------
    @property
    def model(self) -> SentenceTransformer:
        """The encoder (loaded on first access)."""
        if self._model is None:
            self._model = load_base_model(self._model_arg, self.device, self.config.max_seq_length)
        return self._model

    def _encode(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        model = self.model
        fn = getattr(model, "encode_query" if query else "encode_document", model.encode)
        emb = fn(
            list(texts),
            batch_size=self.config.encode_batch_size,
            show_progress_bar=self.show_progress_bar and rank() == 0 and not query,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_corpus(self, corpus: TrainingCorpus) -> np.ndarray:
        """Unit-normalised float32 embeddings of every corpus item with the current encoder."""
        return self._encode(corpus.texts, query=False)

    # -- training ---------------------------------------------------------------------------------
    def train(
        self,
        corpus: CorpusInput,
        output_dir: str | Path | None,
        *,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        max_passage_words: int = 0,
        corpus_embeddings: np.ndarray | None = None,
        query_embeddings: Mapping[str, np.ndarray] | None = None,
        on_period: Callable[[EHIPeriod, EHIIndexer], None] | None = None,
    ) -> EHITrainingResult:
        """Train and (when ``output_dir`` is given) save the encoder, the indexer and the report.

        Args:
            corpus: Documents (split like the store splits them, see ``max_passage_words``), Passages,
                a mapping ``id -> text`` or a :class:`~rag_hier.training.hce.TrainingCorpus`.
            output_dir: Directory for the sentence-transformers model, the indexer files and
                ``ehi_training.json`` (``None``: save nothing, e.g. in benchmarks).
            queries: Training queries ``id -> text``.
            qrels: Judgements ``query id -> {document or passage id -> grade}``; grades > 0 are positives.
            max_passage_words: Passage splitting of Documents (0 keeps paragraphs whole).
            corpus_embeddings: The starting encoder's unit vectors of the corpus items, if already computed.
            query_embeddings: With a frozen encoder: the query vectors by id, if already computed.
            on_period: Called (on every process) after each refresh period with its record and the indexer, the
                encoder being :attr:`model`: e.g. to checkpoint or evaluate a long run period by period.

        """
        t_start = time.perf_counter()
        if not queries or not qrels:
            raise RagHierError("EHI training needs training queries and qrels")
        if self.config.freeze_encoder and self.config.lambda_indexing == 0 and self.config.lambda_intra == 0:
            raise RagHierError("with a frozen encoder and lambda_indexing = lambda_intra = 0 nothing would be trained")
        items = as_training_corpus(corpus, max_passage_words)
        cfg = self.config = self._requested.resolved(len(items))  # an automatic branching fixed for this corpus
        rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        # the model leaves as it came: every parameter as trainable as before (a frozen encoder has no model)
        scope = contextlib.nullcontext() if cfg.freeze_encoder else training_scope(self.model, cfg.encoder_scope)
        with tempfile.TemporaryDirectory(prefix="ehi-trainer-") as scratch, scope:
            st = None
            if cfg.freeze_encoder:
                _init_distributed(self.device)
            else:
                st = st_training("EHI")
                probe = self._args(st, scratch, 1)
                _ = probe.device  # initialises torch.distributed under torchrun, before anything is broadcast
            world = world_size()
            emb = corpus_embeddings if corpus_embeddings is not None else self.encode_corpus(items)
            if emb.shape[0] != len(items):
                raise ValueError(f"corpus_embeddings has {emb.shape[0]} rows for {len(items)} corpus items")
            emb = np.ascontiguousarray(emb, dtype=np.float32)
            pairs = resolve_pairs(items, queries, qrels, choose=self._chooser(emb))
            tq = TrainingQueries.from_pairs(pairs)
            if cfg.freeze_encoder and query_embeddings is not None:
                missing = [q for q in tq.ids if q not in query_embeddings]
                if missing:
                    raise ValueError(f"query_embeddings lack {len(missing)} training queries, e.g. {missing[0]!r}")
                q_emb = np.stack([np.asarray(query_embeddings[q], np.float32) for q in tq.ids])
            else:
                q_emb = self._encode(tq.texts, query=True)
            dim = emb.shape[1]
            device = self._train_device(st, scratch)
            warmup: EHITrainingResult | None = None
            if cfg.warmup_epochs and not cfg.freeze_encoder:  # the indexer trained alone first, then jointly
                logger.info("warming the indexer up on the starting vectors for %d epochs", cfg.warmup_epochs)
                warmup = self._indexer_alone(items, queries, qrels, tq, emb, q_emb, cfg.warmup_epochs)
                indexer = warmup.indexer
                indexer.train()
            else:
                indexer = EHIIndexer(dim, cast(int, cfg.branching), cfg.height, seed=cfg.seed)
                if cfg.init == "kmeans":
                    indexer.init_kmeans(emb, seed=cfg.seed, steps=cfg.init_steps)
            indexer.to(device)
            self._sync_parameters(indexer)
            loss = EHILoss(
                None if cfg.freeze_encoder else self.model,
                indexer,
                lambdas=cfg.lambdas,
                margin=cfg.margin,
                intra_threshold=cfg.intra_threshold,
                mined_negative_terms=cfg.mined_negative_terms,
                in_batch_negatives=cfg.in_batch_negatives,
                gather_across_devices=cfg.gather_across_devices,
                lambda_balance=cfg.lambda_balance,
            )
            loss.set_relevance(len(items), tq.relevance_pairs())
            n_pairs = len(pairs)
            global_batch = cfg.batch_size * world
            per_epoch = max(1, n_pairs // global_batch if world > 1 else math.ceil(n_pairs / global_batch))
            planned = per_epoch * cfg.epochs if cfg.max_steps is None else min(cfg.max_steps, per_epoch * cfg.epochs)
            optimizer, scheduler = self._optimizer(indexer, planned)
            history: list[EHIPeriod] = []
            steps = 0
            self._limit = TimeLimit(cfg.max_minutes if world == 1 else None)  # at least one step is taken
            for first in range(0, cfg.epochs, cfg.refresh_every):
                n_ep = min(cfg.refresh_every, cfg.epochs - first)
                budget = min(n_ep * per_epoch, planned - steps)
                if budget <= 0 or (steps and self._limit.passed()):
                    break
                t0 = time.perf_counter()
                if first > 0 and not cfg.freeze_encoder:  # the encoder moved: re-encode (Alg. 1's refresh)
                    emb = self.encode_corpus(items)
                    q_emb = self._encode(tq.texts, query=True)
                assignment, pools = self._refresh(indexer, emb, q_emb, tq, loss)

                def remine(e: np.ndarray = emb, qe: np.ndarray = q_emb) -> list[np.ndarray]:
                    return self._refresh(indexer, e, qe, tq, loss)[1]

                if cfg.freeze_encoder:
                    done, terms, fallback = self._train_frozen(
                        loss, optimizer, scheduler, emb, q_emb, tq, pools, n_ep, budget, rng, remine
                    )
                else:
                    done, terms, fallback = self._train_encoder(
                        st, scratch, loss, optimizer, scheduler, items, tq, pools, n_ep, budget, rng, remine
                    )
                steps += done
                period = EHIPeriod(
                    first + 1, n_ep, done, round(time.perf_counter() - t0, 1), terms, assignment.describe(), fallback
                )
                history.append(period)
                logger.info(
                    "epochs %d-%d: %d steps, loss %s, leaves at refresh: max %d, nonempty %d (%.0fs)",
                    first + 1,
                    first + n_ep,
                    done,
                    {k: round(v, 4) for k, v in terms.items()},
                    period.leaves["leaf_size_max"],
                    period.leaves["leaves_nonempty"],
                    period.seconds,
                )
                if on_period is not None:
                    on_period(period, indexer)
                    indexer.train()
                if steps >= planned:
                    break
            if not cfg.freeze_encoder and steps:
                emb = self.encode_corpus(items)
            refit = self._refit(items, queries, qrels, tq, emb) if cfg.refit_epochs and not cfg.freeze_encoder else None
            if refit is not None:  # its indexer, and its assignment of these same vectors
                indexer, leaves = refit.indexer, refit.leaves
            else:
                indexer.eval()
                leaves = self._broadcast_leaves(indexer.assign(emb, top_k=cfg.leaves_per_document))
            assignment = LeafAssignment(leaves, indexer.n_leaves)
            result = EHITrainingResult(
                output_dir=Path(output_dir) if output_dir is not None else None,
                steps=steps,
                seconds=time.perf_counter() - t_start,
                config=cfg,
                history=tuple(history),
                indexer=indexer,
                leaves=leaves,
                leaf_stats=assignment.describe(),
                corpus_embeddings=emb,
                refit_history=refit.history if refit is not None else (),
                warmup_history=warmup.history if warmup is not None else (),
            )
            if output_dir is not None and rank() == 0:
                out = Path(output_dir)
                out.mkdir(parents=True, exist_ok=True)
                with quiet_trainer_setup():
                    self.model.save(str(out))
                indexer.save_pretrained(out, info={"trained_with": "rag-hier train ehi", "config": cfg.to_dict()})
                (out / TRAINING_REPORT).write_text(json.dumps(result.to_dict(), indent=1) + "\n", encoding="utf-8")
        return result

    # -- pieces -----------------------------------------------------------------------------------
    def _refit(
        self,
        items: TrainingCorpus,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        tq: TrainingQueries,
        emb: np.ndarray,
    ) -> EHITrainingResult:
        """A new indexer trained alone (frozen encoder, ``refit_epochs``) on the final encoder's vectors."""
        logger.info("refitting the indexer on the final vectors for %d epochs", self.config.refit_epochs)
        q_emb = self._encode(tq.texts, query=True)
        return self._indexer_alone(items, queries, qrels, tq, emb, q_emb, self.config.refit_epochs)

    def _indexer_alone(
        self,
        items: TrainingCorpus,
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        tq: TrainingQueries,
        emb: np.ndarray,
        q_emb: np.ndarray,
        epochs: int,
    ) -> EHITrainingResult:
        """A new indexer (initialised as ``init``) trained alone for ``epochs`` on fixed vectors of the encoder."""
        sub = EHITrainer(
            replace(
                self.config, freeze_encoder=True, epochs=epochs, refit_epochs=0, warmup_epochs=0, max_steps=None,
                max_minutes=None,
            ),
            model=self.model,
            device=self.device,
            show_progress_bar=self.show_progress_bar,
        )  # fmt: skip
        return sub.train(
            items, None, queries=queries, qrels=qrels, corpus_embeddings=emb,
            query_embeddings=dict(zip(tq.ids, q_emb, strict=True)),
        )  # fmt: skip

    def _chooser(self, emb: np.ndarray) -> Any:
        """For a judgement naming a multi-passage document: the passage closest to the query (starting encoder)."""

        def choose(query: str, positions: list[int]) -> int:
            q = self._encode([query], query=True)[0]
            return int(positions[int(np.argmax(emb[positions] @ q))])

        return choose

    def _train_device(self, st: Any, scratch: str) -> torch.device:
        if st is not None:
            return torch.device(self._args(st, scratch, 1).device)
        from rag_hier.encoders.device import resolve_device

        if self.device is None and is_distributed() and torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return torch.device(resolve_device(self.device))

    @staticmethod
    def _sync_parameters(indexer: EHIIndexer) -> None:
        """Every process starts from rank 0's indexer."""
        if is_distributed():
            with torch.no_grad():
                for p in indexer.parameters():
                    torch.distributed.broadcast(p.data, 0)

    @staticmethod
    def _broadcast_leaves(leaves: np.ndarray) -> np.ndarray:
        if not is_distributed():
            return leaves
        (got,) = broadcast_arrays([leaves.astype(np.int64)] if rank() == 0 else None)
        return got

    def _refresh(
        self,
        indexer: EHIIndexer,
        emb: np.ndarray,
        q_emb: np.ndarray,
        tq: TrainingQueries,
        loss: EHILoss | None = None,
    ) -> tuple[LeafAssignment, list[np.ndarray]]:
        """Assign the documents to leaves and mine each training query's hard-negative pool."""
        cfg = self.config
        indexer.eval()
        leaves = self._broadcast_leaves(indexer.assign(emb, top_k=cfg.leaves_per_document))
        assignment = LeafAssignment(leaves, indexer.n_leaves)
        if loss is not None:  # the balance term weighs the leaves by how full this assignment makes them
            loss.set_leaf_share(torch.from_numpy(assignment.sizes().astype(np.float32)))
        if cfg.mine_from == "exact":
            size = max(1, round(cfg.mine_leaves * emb.shape[0] / indexer.n_leaves))
            pools = exact_pools(q_emb, emb, tq.relevant, size)
        else:
            q_leaves = self._broadcast_leaves(indexer.route(q_emb, cfg.mine_leaves)[0])
            pools = leaf_pools(q_leaves, assignment, tq.relevant)
        indexer.train()
        return assignment, pools

    def _optimizer(self, indexer: EHIIndexer, steps: int) -> tuple[torch.optim.Optimizer, Any]:
        from transformers import get_linear_schedule_with_warmup

        cfg = self.config
        groups: list[dict[str, Any]] = []
        if not cfg.freeze_encoder:
            decay: list[torch.nn.Parameter] = []
            no_decay: list[torch.nn.Parameter] = []
            for name, p in self.model.named_parameters():
                if p.requires_grad:
                    (no_decay if name.endswith("bias") or "LayerNorm" in name or "norm" in name else decay).append(p)
            groups += [
                {"params": decay, "weight_decay": cfg.weight_decay, "lr": cfg.encoder_lr},
                {"params": no_decay, "weight_decay": 0.0, "lr": cfg.encoder_lr},
            ]
        groups.append({"params": list(indexer.parameters()), "weight_decay": 0.0, "lr": cfg.indexer_lr})
        optimizer = torch.optim.AdamW(groups, lr=cfg.indexer_lr)
        scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * steps), max(steps, 1))
        return optimizer, scheduler

    def _train_frozen(
        self,
        loss: EHILoss,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        emb: np.ndarray,
        q_emb: np.ndarray,
        tq: TrainingQueries,
        pools: list[np.ndarray],
        epochs: int,
        budget: int,
        rng: np.random.Generator,
        remine: Callable[[], list[np.ndarray]] | None = None,
    ) -> tuple[int, dict[str, float], int]:
        """The indexer alone on fixed vectors: plain AdamW steps over (query, positive, mined negative) batches."""
        cfg = self.config
        device = loss.indexer.device
        world, me = world_size(), rank()
        c_t = torch.from_numpy(emb).to(device)
        q_t = torch.from_numpy(np.ascontiguousarray(q_emb, dtype=np.float32)).to(device)
        global_batch = cfg.batch_size * world
        n_pairs = len(tq.positives)
        every = cfg.remine_every if remine is not None else None
        done, fallback, since = 0, 0, 0
        sums: dict[str, float] = {}
        loss.indexer.train()
        for _ in range(epochs):
            order = rng.permutation(n_pairs)
            negatives = np.zeros(n_pairs, np.int64)
            sampled_to = 0
            for start in range(0, n_pairs, global_batch):
                if done >= budget or (done and self._limit.passed()):
                    break
                if every is not None and since >= every:  # Alg. 1: negatives from the current indexer
                    pools = cast(Callable[[], list[np.ndarray]], remine)()
                    loss.indexer.train()
                    since, sampled_to = 0, start
                if start >= sampled_to:  # draw the negatives of the rows up to the next re-mining
                    end = n_pairs if every is None else min(n_pairs, start + global_batch * (every - since))
                    negatives[start:end], fb = sample_negatives(
                        pools, tq.query_of_pair[order[start:end]], tq.relevant, emb.shape[0], rng
                    )
                    fallback += fb
                    sampled_to = end
                rows = np.arange(start, min(start + global_batch, n_pairs))
                if world > 1:
                    if rows.size < global_batch:
                        break  # every process needs a slice of the same size
                    rows = rows[me * cfg.batch_size : (me + 1) * cfg.batch_size]
                pairs = order[rows]
                qi = torch.from_numpy(tq.query_of_pair[pairs]).to(device)
                pos = torch.from_numpy(tq.positives[pairs]).to(device)
                neg = torch.from_numpy(negatives[rows]).to(device)
                out = loss.compute_loss_from_embeddings(
                    [q_t[qi], c_t[pos], c_t[neg]], torch.stack([qi, pos, neg], dim=1)
                )
                total = sum(out.values())
                optimizer.zero_grad()
                total.backward()  # type: ignore[union-attr]
                optimizer.step()
                scheduler.step()
                done += 1
                since += 1
                for k, v in out.items():
                    sums[k] = sums.get(k, 0.0) + float(v.detach())
        return done, {k: v / max(done, 1) for k, v in sums.items()}, fallback

    def _args(self, st: Any, scratch: str, steps: int) -> Any:
        cfg = self.config
        return training_arguments(
            st.arguments,
            scratch,
            device=self.device,
            batch_size=cfg.batch_size,
            learning_rate=cfg.encoder_lr,
            seed=cfg.seed,
            max_steps=steps,
            fp16=cfg.fp16,
            bf16=cfg.bf16,
            logging_steps=max(1, min(cfg.logging_steps, steps)),
            show_progress_bar=self.show_progress_bar,
            drop_last=world_size() > 1,
            # a query judged against several documents appears in several rows: keep them in different batches
            batch_sampler=st.batch_samplers.NO_DUPLICATES,
        )

    def _train_encoder(
        self,
        st: Any,
        scratch: str,
        loss: EHILoss,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        items: TrainingCorpus,
        tq: TrainingQueries,
        pools: list[np.ndarray],
        epochs: int,
        budget: int,
        rng: np.random.Generator,
        remine: Callable[[], list[np.ndarray]] | None = None,
    ) -> tuple[int, dict[str, float], int]:
        """Encoder and indexer together through sentence-transformers' trainer, for ``budget`` steps.

        Without ``remine_every`` one trainer runs the whole period on rows whose negatives were drawn at its
        start; with it, the period runs in segments of ``remine_every`` steps (one trainer each, sharing the
        optimizer and the schedule), the pools mined again with the current indexer between segments.
        """
        cfg = self.config
        n_pairs = len(tq.positives)
        every = cfg.remine_every if remine is not None else None
        done, fallback = 0, 0
        logged: list[dict[str, float]] = []
        if every is None:  # one trainer for the period, every epoch's negatives drawn now
            orders, negs = [], []
            for _ in range(epochs):
                order = rng.permutation(n_pairs)
                neg, fb = sample_negatives(pools, tq.query_of_pair[order], tq.relevant, len(items), rng)
                orders.append(order)
                negs.append(neg)
                fallback += fb
            part, neg = np.concatenate(orders), np.concatenate(negs)
            done, logged = self._run_trainer(st, scratch, loss, optimizer, scheduler, items, tq, part, neg, budget)
        else:
            # the period's pairs in training order (``epochs`` permutations), in segments of ``every`` steps
            order = np.concatenate([rng.permutation(n_pairs) for _ in range(epochs)])
            per_segment = every * cfg.batch_size * world_size()
            # every trainer run ends in a full garbage collection (accelerate's free_memory); freezing the
            # model's objects out of the collector's view keeps that collection from walking them each period
            gc.freeze()
            try:
                for start in range(0, len(order), per_segment):
                    if done >= budget or (done and self._limit.passed()):
                        break
                    if start:
                        pools = cast(Callable[[], list[np.ndarray]], remine)()  # Alg. 1: fresh negatives
                    part = order[start : start + per_segment]
                    neg, fb = sample_negatives(pools, tq.query_of_pair[part], tq.relevant, len(items), rng)
                    fallback += fb
                    steps = min(every, budget - done)
                    got, log = self._run_trainer(st, scratch, loss, optimizer, scheduler, items, tq, part, neg, steps)
                    done += got
                    logged += log
            finally:
                gc.unfreeze()
        terms = {k: float(np.mean([e[k] for e in logged if k in e])) for k in LOSS_TERMS if any(k in e for e in logged)}
        return done, terms, fallback

    def _run_trainer(
        self,
        st: Any,
        scratch: str,
        loss: EHILoss,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        items: TrainingCorpus,
        tq: TrainingQueries,
        pairs: np.ndarray,
        negatives: np.ndarray,
        steps: int,
    ) -> tuple[int, list[dict[str, float]]]:
        """One sentence-transformers trainer over the given (query, positive, negative) rows for ``steps`` steps."""
        from datasets import Dataset

        anchors: list[str] = []
        positives: list[str] = []
        negative_texts: list[str] = []
        labels: list[list[int]] = []
        for j, n in zip(pairs, negatives, strict=True):
            q = int(tq.query_of_pair[j])
            anchors.append(tq.texts[q])
            positives.append(items.texts[int(tq.positives[j])])
            negative_texts.append(items.texts[int(n)])
            labels.append([q, int(tq.positives[j]), int(n)])
        dataset = Dataset.from_dict(
            {"anchor": anchors, "positive": positives, "negative": negative_texts, "label": labels}
        )
        with quiet_trainer_setup():
            trainer = st.trainer(
                model=self.model,
                args=self._args(st, scratch, steps),
                train_dataset=dataset,
                loss=loss,
                optimizers=(optimizer, scheduler),
                callbacks=[self._limit.callback()],
            )
        drop_log_dicts(trainer)
        trainer.train()
        logged = [e for e in trainer.state.log_history if any(k in e for k in LOSS_TERMS)]
        return int(trainer.state.global_step), logged


def train_ehi(
    corpus: CorpusInput,
    output_dir: str | Path | None,
    *,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    model: str | Path | SentenceTransformer = "sentence-transformers/all-MiniLM-L6-v2",
    config: EHIConfig | None = None,
    device: str | None = None,
    show_progress_bar: bool = True,
    **train_kwargs: Any,
) -> EHITrainingResult:
    """One-call EHI training: ``EHITrainer(config, model=model, ...).train(corpus, output_dir, ...)``."""
    trainer = EHITrainer(config, model=model, device=device, show_progress_bar=show_progress_bar)
    return trainer.train(corpus, output_dir, queries=queries, qrels=qrels, **train_kwargs)
