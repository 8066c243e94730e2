"""DHRTrainer: DHR's document and passage encoders trained on sentence-transformers' trainer.

``MultipleNegativesRankingLoss`` (or its cached variant) over the ``(anchor, positive, negative_1, ...)`` columns
of :func:`~rag_hier.training.dhr.data.build_training_rows` with the ``no_duplicates`` batch sampler; held-out
examples scored with ``InformationRetrievalEvaluator``. One sentence-transformers model directory
(``shared_encoder=True``: one model trained on both levels, batches drawn from one level at a time), or two
(``document/`` and ``passage/``).

Example:
    >>> from rag_hier.corpus import read_qa_documents, read_qa_questions
    >>> docs, questions = read_qa_documents("xquad_en"), read_qa_questions("xquad_en")  # doctest: +SKIP
    >>> examples = examples_from_questions(questions, docs, max_passage_words=0)  # doctest: +SKIP
    >>> DHRTrainer(DHRTrainingConfig(epochs=1)).train(docs, "dhr-model", examples=examples)  # doctest: +SKIP

"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_hier._compat import st_training
from rag_hier.corpus.model import Document
from rag_hier.encoders._st_loading import quiet_trainer_setup
from rag_hier.encoders.dense import resolve_model_path
from rag_hier.errors import RagHierError
from rag_hier.training._attention import attention_dropout
from rag_hier.training._log_dicts import drop_log_dicts
from rag_hier.training.arguments import training_arguments
from rag_hier.training.base import TrainingResult, with_overrides
from rag_hier.training.dhr.config import LEVELS, DHRTrainingConfig
from rag_hier.training.dhr.data import DHRCorpus, DHRExample, build_training_rows, examples_from_qrels
from rag_hier.training.time_limit import TimeLimit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = ["CITATION", "DHRTrainer", "DHRTrainingResult"]


CITATION = """@inproceedings{liu-etal-2021-dense-hierarchical,
    title = "Dense Hierarchical Retrieval for Open-domain Question Answering",
    author = "Liu, Ye and Hashimoto, Kazuma and Zhou, Yingbo and Yavuz, Semih and Xiong, Caiming and Yu, Philip",
    booktitle = "Findings of the Association for Computational Linguistics: EMNLP 2021",
    year = "2021",
    pages = "188--200",
}"""


# ----------------------------------------------------------------------------------------------------
# configuration and result
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class DHRTrainingResult(TrainingResult):
    """What :meth:`DHRTrainer.train` produced.

    Args:
        output_dir: The output directory.
        steps: Optimizer steps done (every model and iteration together).
        document_model: Sentence-transformers directory of the document encoder.
        passage_model: Sentence-transformers directory of the passage encoder (the same when shared).
        rows: Training rows per level (last iteration).
        losses: Final training loss per iteration (the passage model's with separate encoders; ``None`` where
            the trainer logged none).
        metrics: Held-out metrics from the IR evaluator (``document``/``passage`` prefixed), if evaluated.
        seconds: Wall-clock training time.

    """

    output_dir: Path
    document_model: Path
    passage_model: Path
    rows: Mapping[str, int]
    losses: tuple[float | None, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = super().to_dict()
        out["document_model"], out["passage_model"] = str(self.document_model), str(self.passage_model)
        return out


# ----------------------------------------------------------------------------------------------------
# the trainer
# ----------------------------------------------------------------------------------------------------
class DHRTrainer:
    """Train DHR's document and passage encoders (one shared model by default).

    Args:
        config: The training configuration.
        model: The sentence-transformers model to start from (default: the configuration's ``base_model``).
        device: ``"cpu"``, ``"cuda"``, ...; default: the configuration's ``device``.
        show_progress_bar: Progress bars; default: the configuration's ``show_progress_bar``.

    Example:
        >>> trainer = DHRTrainer(DHRTrainingConfig(), model="sentence-transformers/all-MiniLM-L6-v2")
        >>> trainer.train(documents, "out/dhr", queries=queries, qrels=qrels)  # doctest: +SKIP

    """

    citation = CITATION

    def __init__(
        self,
        config: DHRTrainingConfig | None = None,
        *,
        model: str | None = None,
        device: str | None = None,
        show_progress_bar: bool | None = None,
    ) -> None:
        self.config: DHRTrainingConfig = with_overrides(
            config or DHRTrainingConfig(), base_model=model, device=device, show_progress_bar=show_progress_bar
        )
        self._time_limit = TimeLimit(None)

    def get_config_dict(self) -> dict[str, Any]:
        """The configuration as a dict (sentence-transformers' convention)."""
        return self.config.to_dict()

    def _load(self, name: str | None = None) -> SentenceTransformer:
        from rag_hier.encoders._st_loading import load_sentence_transformer
        from rag_hier.encoders.device import resolve_device

        name = name or self.config.base_model
        model = load_sentence_transformer(
            resolve_model_path(name), device=resolve_device(self.config.device), name=name
        )
        if self.config.max_seq_length is not None:
            model.max_seq_length = self.config.max_seq_length
        return model

    def train(
        self,
        corpus: Sequence[Document],
        output_dir: str | Path,
        *,
        queries: Mapping[str, str] | None = None,
        qrels: Mapping[str, Mapping[str, int]] | None = None,
        examples: Sequence[DHRExample] | None = None,
        eval_examples: Sequence[DHRExample] = (),
    ) -> DHRTrainingResult:
        """Train and save sentence-transformers model directories under ``output_dir``.

        Args:
            corpus: The training documents (negatives and summaries come from them).
            output_dir: Where to save: the shared model itself, or ``document/`` and ``passage/``; with two
                iterations the first iteration's model(s) go to ``iteration-1/``.
            queries: Training queries ``id -> text`` (with ``qrels``; or give ``examples``).
            qrels: Their judgements ``query id -> {document or passage id -> grade}``
                (:func:`~rag_hier.training.dhr.data.examples_from_qrels` reads them).
            examples: Training questions instead of ``queries``/``qrels`` (:func:`examples_from_questions`,
                :func:`examples_from_pairs`, :func:`read_examples`).
            eval_examples: Held-out questions over the same corpus, scored after training with
                sentence-transformers' ``InformationRetrievalEvaluator`` (accuracy@k, nDCG@10, MRR@10).

        Returns:
            Where the models are, row counts, final losses and held-out metrics.

        Raises:
            RagHierError: No examples (or both examples and queries), or examples naming documents outside
                ``corpus``.
            MissingDependencyError: The training stack (``datasets``, ``accelerate``) is missing.

        """
        cfg = self.config
        documents = corpus
        if examples is not None and (queries is not None or qrels is not None):
            raise RagHierError("give DHR training its questions as examples or as queries and qrels, not both")
        if examples is None:
            if queries is None or qrels is None:
                raise RagHierError("DHR training needs queries and qrels (or examples)")
            examples = examples_from_qrels(queries, qrels, documents, max_passage_words=cfg.max_passage_words)
        if not examples:
            raise RagHierError("DHR training needs at least one example")
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        self._time_limit = TimeLimit(cfg.max_minutes)
        models: dict[str, SentenceTransformer] = {}
        if cfg.negatives_model is not None:
            models = self._mining_models(cfg.negatives_model)
        losses: list[float | None] = []
        steps = 0
        rows: dict[str, dict[str, list[str]]] = {}
        for iteration in range(1, cfg.iterations + 1):
            if iteration > 1 and self._time_limit.reached:
                break  # the time limit stopped the first iteration: its model is the result
            if models:
                logger.info("DHR iteration %d: mining negatives with an earlier model", iteration)
            rows = build_training_rows(
                documents,
                examples,
                cfg,
                model=models.get("passage"),
                document_model=models.get("document"),
                keep_bm25=cfg.mined_negatives == "add",
            )
            if not rows:
                raise RagHierError("no training rows could be built (does the corpus hold more than one passage?)")
            if iteration > 1 and cfg.iterations > 1:
                self._save(models, out / "iteration-1")
            models, loss, done = self._fit(rows)
            losses.append(loss)
            steps += done
        doc_path, psg_path = self._save(models, out)
        metrics = self._evaluate(models, documents, eval_examples) if eval_examples else {}
        seconds = time.perf_counter() - t0
        (out / "dhr_training.json").write_text(
            json.dumps(
                {
                    "config": cfg.to_dict(),
                    "rows": {k: len(v["anchor"]) for k, v in rows.items()},
                    "negatives": {k: len(v) - 2 for k, v in rows.items()},
                    "losses": losses,
                    "steps": steps,
                    "metrics": metrics,
                    "seconds": round(seconds, 1),
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        return DHRTrainingResult(
            output_dir=out,
            steps=steps,
            document_model=doc_path,
            passage_model=psg_path,
            rows={k: len(v["anchor"]) for k, v in rows.items()},
            losses=tuple(losses),
            metrics=metrics,
            seconds=seconds,
        )

    def _mining_models(self, path: str) -> dict[str, SentenceTransformer]:
        root = Path(path)
        if (root / "passage").is_dir() and (root / "document").is_dir():
            return {"passage": self._load(str(root / "passage")), "document": self._load(str(root / "document"))}
        model = self._load(path)
        return {"passage": model, "document": model}

    def _args(self, workdir: Path, **overrides: Any) -> Any:
        cfg = self.config
        settings: dict[str, Any] = {
            "device": cfg.device,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.learning_rate,
            "seed": cfg.seed,
            "max_steps": cfg.max_steps,
            "epochs": cfg.epochs,
            "warmup_ratio": cfg.warmup_ratio,
            "logging_steps": 10,
            "show_progress_bar": cfg.show_progress_bar,
            "batch_sampler": "no_duplicates",
            "multi_dataset_batch_sampler": "proportional",
        }
        settings.update(overrides)
        return training_arguments(st_training("DHR").arguments, workdir, **settings)

    def _fit(
        self, rows: Mapping[str, Mapping[str, list[str]]]
    ) -> tuple[dict[str, SentenceTransformer], float | None, int]:
        from datasets import Dataset

        st = st_training("DHR")
        trainer_cls, losses = st.trainer, st.losses
        data = {level: Dataset.from_dict(dict(cols)) for level, cols in rows.items()}
        groups: list[tuple[tuple[str, ...], dict[str, Any]]] = (
            [(tuple(data), data)] if self.config.shared_encoder else [((lv,), {lv: data[lv]}) for lv in data]
        )
        models: dict[str, SentenceTransformer] = {}
        last_loss: float | None = None
        steps = 0
        for levels, subset in groups:
            model = self._load()
            if self.config.mini_batch_size:
                loss = losses.CachedMultipleNegativesRankingLoss(
                    model, scale=self.config.scale, mini_batch_size=self.config.mini_batch_size
                )
            else:
                loss = losses.MultipleNegativesRankingLoss(model, scale=self.config.scale)
            with tempfile.TemporaryDirectory(prefix="rag-hier-dhr-") as tmp:
                train_dataset: Any = subset if len(subset) > 1 else next(iter(subset.values()))
                with quiet_trainer_setup():
                    trainer = trainer_cls(
                        model=model,
                        args=self._args(Path(tmp)),
                        train_dataset=train_dataset,
                        loss=loss,
                        callbacks=[self._time_limit.callback()],
                    )
                drop_log_dicts(trainer)  # the command prints a summary (rows, loss, where the model went)
                with attention_dropout(model, self.config.attention_dropout):
                    output = trainer.train()
            last_loss = float(output.training_loss) if output is not None else None
            steps += int(trainer.state.global_step)
            logger.info("DHR %s model trained (loss %s)", "+".join(levels), last_loss)
            for lv in levels:
                models[lv] = model
        if "passage" not in models:
            models["passage"] = models["document"]
        if "document" not in models:
            models["document"] = models["passage"]
        return models, last_loss, steps

    def _save(self, models: Mapping[str, SentenceTransformer], out: Path) -> tuple[Path, Path]:
        if models["document"] is models["passage"]:
            with quiet_trainer_setup():
                models["passage"].save(str(out))
            return out, out
        for lv in LEVELS:
            target = out / lv
            if target.exists():
                shutil.rmtree(target)
            with quiet_trainer_setup():
                models[lv].save(str(target))
        return out / "document", out / "passage"

    def _evaluate(
        self, models: Mapping[str, SentenceTransformer], documents: Sequence[Document], examples: Sequence[DHRExample]
    ) -> dict[str, float]:
        evaluator_cls = st_training("DHR").ir_evaluator
        corpus = DHRCorpus.build(documents, self.config)
        queries = {f"q{i}": ex.query for i, ex in enumerate(examples)}
        metrics: dict[str, float] = {}
        doc_eval = evaluator_cls(
            queries=queries,
            corpus={d.doc_id: s for d, s in zip(corpus.documents, corpus.summaries, strict=True)},
            relevant_docs={f"q{i}": {ex.doc_id} for i, ex in enumerate(examples)},
            name="document",
            write_csv=False,
            accuracy_at_k=[1, 5, 20],
            precision_recall_at_k=[20],
        )
        metrics.update({k: float(v) for k, v in doc_eval(models["document"]).items()})
        relevant = {f"q{i}": set(ex.passage_ids) for i, ex in enumerate(examples) if ex.passage_ids}
        if relevant:
            psg_eval = evaluator_cls(
                queries={q: queries[q] for q in relevant},
                corpus={p.id: p.embedding_text for p in corpus.passages},
                relevant_docs=relevant,
                name="passage",
                write_csv=False,
                accuracy_at_k=[1, 5, 20],
                precision_recall_at_k=[20],
            )
            metrics.update({k: float(v) for k, v in psg_eval(models["passage"]).items()})
        return metrics
