"""SvdrTrainer: the training loop of an SVDR vocabulary encoder (batches, β- and BM25-mined negatives, AdamW).

Example:
    >>> encoder = VocabEncoder()  # doctest: +SKIP
    >>> config = SvdrTrainingConfig(epochs=1)
    >>> trainer = SvdrTrainer.from_documents(encoder, docs, queries, qrels, config=config)  # doctest: +SKIP
    >>> trainer.train(); trainer.save("svdr-model")  # doctest: +SKIP

"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from rag_hier._logging import progress
from rag_hier.corpus.model import Document, split_document
from rag_hier.errors import MissingDependencyError, RagHierError
from rag_hier.training._attention import attention_dropout
from rag_hier.training.svdr.config import SvdrTrainingConfig
from rag_hier.training.svdr.loss import semi_parametric_loss

if TYPE_CHECKING:
    from rag_hier.encoders.vocab import VocabEncoder
    from rag_hier.index.token import TokenIndex

logger = logging.getLogger(__name__)

__all__ = ["TRAINING_INFO", "SvdrTrainer", "SvdrTrainingResult", "train_svdr"]

TRAINING_INFO = "training.json"


@dataclass(frozen=True)
class SvdrTrainingResult:
    """What a training run did."""

    steps: int
    epochs_completed: float
    seconds: float
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
        out["losses"] = [round(x, 5) for x in self.losses]
        out["step_seconds"] = [round(x, 3) for x in self.step_seconds]
        out["last_loss"] = self.last_loss
        return out


@dataclass(frozen=True)
class _Example:
    qid: str
    doc: str


class SvdrTrainer:
    """Train a :class:`VocabEncoder` on queries, a corpus and relevance judgements.

    Args:
        encoder: The encoder to train (in place), or a model name/path for a new one.
        corpus: Passage id → passage text (for whole documents, use :meth:`from_documents`).
        queries: Query id → text.
        qrels: Query id → {document or passage id → grade}; grades > 0 are relevant. A judged *document*
            makes each of its passages a positive (one drawn per step) and none of them a negative; a judged
            *passage* (an id of ``corpus`` that is not a document id, e.g. ``<doc_id>#<n>`` from
            :meth:`from_documents`) is the positive itself, and the document's other passages stay
            negatives, as the judgement says. An id naming both is read as the document.
        doc_of: Passage id → document id, when passages are parts of documents (default: identity).
        config: Hyper-parameters.
        answers: Query id → answer strings (QA data): a passage containing one is never a hard negative.

    """

    def __init__(
        self,
        encoder: VocabEncoder | str,
        corpus: Mapping[str, str],
        queries: Mapping[str, str],
        qrels: Mapping[str, Mapping[str, int]],
        *,
        doc_of: Mapping[str, str] | None = None,
        config: SvdrTrainingConfig | None = None,
        answers: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        from rag_hier.encoders.vocab import VocabEncoder

        self.encoder = encoder if isinstance(encoder, VocabEncoder) else VocabEncoder(encoder)
        self.config = config or SvdrTrainingConfig()
        self.passage_ids = list(corpus)
        self.texts = [corpus[p] for p in self.passage_ids]
        docs = [doc_of.get(p, p) if doc_of is not None else p for p in self.passage_ids]
        self.passages_of: dict[str, list[int]] = {}
        for i, d in enumerate(docs):
            self.passages_of.setdefault(d, []).append(i)
        passage_row = {p: i for i, p in enumerate(self.passage_ids)}
        self.queries = dict(queries)
        # judged id (document, or passage) -> its passage rows: the positives it stands for
        self.units: dict[str, list[int]] = {}
        self.relevant: dict[str, set[str]] = {}
        self.relevant_rows: dict[str, set[int]] = {}
        examples: list[_Example] = []
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
                examples.extend(_Example(qid, d) for d in sorted(rel))
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
        self.result: SvdrTrainingResult | None = None

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
        """A trainer over documents split like the store splits them (``0``: paragraphs kept whole).

        Passage texts are :attr:`Passage.embedding_text` (title path, then text), as indexed by the store.
        """
        corpus: dict[str, str] = {}
        doc_of: dict[str, str] = {}
        for d in documents:
            for p in split_document(d, max_passage_words):
                corpus[p.id] = p.embedding_text
                doc_of[p.id] = p.doc_id
        return cls(encoder, corpus, queries, qrels, doc_of=doc_of, config=config, answers=answers)

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
    def _batches(self, rng: random.Random) -> list[list[_Example]]:
        """Shuffled batches in which no query and no document appears twice."""
        pending = list(self.examples)
        rng.shuffle(pending)
        batches: list[list[_Example]] = []
        while pending:
            batch: list[_Example] = []
            seen_q: set[str] = set()
            seen_d: set[str] = set()
            rest: list[_Example] = []
            for ex in pending:
                if len(batch) < self.config.batch_size and ex.qid not in seen_q and ex.doc not in seen_d:
                    batch.append(ex)
                    seen_q.add(ex.qid)
                    seen_d.add(ex.doc)
                else:
                    rest.append(ex)
            batches.append(batch)
            pending = rest
        return batches

    def _step_inputs(self, batch: list[_Example], rng: random.Random) -> tuple[list[str], list[str], np.ndarray]:
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
    def train(self) -> SvdrTrainingResult:
        """Run the training; the encoder is updated in place (and left in eval mode)."""
        import torch

        cfg = self.config
        rng = random.Random(cfg.seed)  # noqa: S311 - sampling, not security
        torch.manual_seed(cfg.seed)
        module = self.encoder.module
        device = self.encoder.device
        params = [p for p in module.parameters() if p.requires_grad]
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.learning_rate,
            eps=1e-8,
        )
        per_epoch = len(self._batches(random.Random(cfg.seed)))  # noqa: S311
        planned = per_epoch * cfg.epochs
        if cfg.max_steps is not None:
            planned = min(planned, cfg.max_steps)
        start = time.perf_counter()

        def lr_factor(step: int) -> float:
            # linear warm-up then linear decay over the run's progress: steps done of those planned, or
            # time spent of max_seconds, whichever is further along (so a time budget ends at lr 0)
            progress = (step + 1) / max(1, planned)
            if cfg.max_seconds:
                progress = max(progress, (time.perf_counter() - start) / cfg.max_seconds)
            progress = min(progress, 1.0)
            if progress < cfg.warmup_ratio:
                return progress / cfg.warmup_ratio
            return max(0.0, (1.0 - progress) / max(1e-9, 1.0 - cfg.warmup_ratio))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
        losses: list[float] = []
        step_seconds: list[float] = []
        mining = 0.0
        step = 0
        bm25_steps = 0
        phase = ""
        stopped: Literal["epochs", "max_steps", "max_seconds"] = "epochs"
        epochs_done = 0.0
        backbone = module.backbone
        if cfg.gradient_checkpointing:
            backbone.gradient_checkpointing_enable()
        dropout = attention_dropout(module, cfg.attention_dropout)
        dropout.__enter__()
        try:
            for epoch in range(cfg.epochs):
                batches = self._batches(rng)
                for b, batch in enumerate(
                    progress(batches, show_progress_bar=cfg.show_progress_bar, desc=f"SVDR epoch {epoch + 1}")
                ):
                    if cfg.max_steps is not None and step >= cfg.max_steps:
                        stopped = "max_steps"
                        break
                    if cfg.max_seconds is not None and time.perf_counter() - start >= cfg.max_seconds:
                        stopped = "max_seconds"
                        break
                    t0 = time.perf_counter()
                    done = step / max(1, planned)
                    if cfg.max_seconds:
                        done = max(done, (t0 - start) / cfg.max_seconds)
                    if cfg.hard_negatives and cfg.negative_schedule == "paper" and done < 0.5:
                        self._negatives = dict(self.bm25_negatives())  # the first half: BM25 negatives
                        bm25_steps += 1
                        phase = "bm25"
                    elif cfg.mining == "batch" or b == 0 or phase == "bm25":
                        module.eval()
                        self.mine_negatives([ex.qid for ex in batch] if cfg.mining == "batch" else None)
                        phase = "beta"
                    mining += time.perf_counter() - t0
                    module.train()
                    q_texts, p_texts, false_neg = self._step_inputs(batch, rng)
                    q = self.encoder.encode_for_training(q_texts, "query")
                    p = self.encoder.encode_for_training(p_texts, "document")
                    loss, parts = semi_parametric_loss(
                        q.values,
                        q.lexical,
                        p.values,
                        p.lexical,
                        torch.as_tensor(false_neg, device=device),
                        cfg.temperature,
                    )
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                    optimizer.step()
                    scheduler.step()
                    losses.append(float(loss.detach()))
                    step_seconds.append(time.perf_counter() - t0)
                    step += 1
                    epochs_done = epoch + (b + 1) / len(batches)
                    if step % cfg.log_every == 0:
                        logger.info(
                            "step %d (epoch %.2f): loss %.4f (%s) %.0fs",
                            step,
                            epochs_done,
                            float(np.mean(losses[-cfg.log_every :])),
                            ", ".join(f"{k} {v:.3f}" for k, v in parts.items()),
                            time.perf_counter() - start,
                        )
                else:
                    continue
                break
        finally:
            dropout.__exit__(None, None, None)
            if cfg.gradient_checkpointing:
                backbone.gradient_checkpointing_disable()
            module.eval()
            self.encoder.weights_changed()
        self.result = SvdrTrainingResult(
            steps=step,
            epochs_completed=round(epochs_done, 4),
            seconds=time.perf_counter() - start,
            stopped_by=stopped,
            examples=len(self.examples),
            passages=len(self.texts),
            losses=tuple(losses),
            mining_seconds=mining,
            step_seconds=tuple(step_seconds),
            bm25_steps=bm25_steps,
        )
        return self.result

    def save(self, path: str | Path) -> Path:
        """Save the encoder (a directory :class:`VocabEncoder` loads) plus ``training.json``."""
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
    model: VocabEncoder | str,
    documents: Sequence[Document],
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    output: str | Path,
    *,
    config: SvdrTrainingConfig | None = None,
    max_passage_words: int = 0,
    answers: Mapping[str, Sequence[str]] | None = None,
) -> SvdrTrainingResult:
    """Train an SVDR encoder from ``model`` and save it to ``output`` (see :class:`SvdrTrainer`)."""
    trainer = SvdrTrainer.from_documents(
        model, documents, queries, qrels, config=config, max_passage_words=max_passage_words, answers=answers
    )
    result = trainer.train()
    trainer.save(output)
    return result
