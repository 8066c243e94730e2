"""DHR — Dense Hierarchical Retrieval (Liu et al., 2021): document- and passage-level contrastive training.

Liu et al., "Dense Hierarchical Retrieval for Open-Domain Question Answering" (Findings of EMNLP 2021) train a
document encoder (DHR-D) on question → document-summary pairs and a passage encoder (DHR-P) on question → passage
pairs, each with an InfoNCE loss over in-batch and hard negatives:

- document level: BM25 negatives over the documents' summaries (``doc_negative_text``: or their full text, or both
  in turn), never a document that contains an answer string of the question;
- passage level: BM25 negatives (from other documents), **In-Doc** negatives (passages of the gold document
  without the answer; the default, as the paper's code) and optionally **In-Sec** negatives (passages of the
  gold passage's own section without the answer), each ranked by BM25 against the question;
- optionally a second iteration, trained again from the base model, whose negatives are the first iteration's
  plus negatives mined with the first iteration's model (In-Doc/In-Sec ranked by that model).

* :class:`DHRTrainingConfig` (:mod:`~rag_hier.training.dhr.config`) — hyper-parameters.
* :mod:`~rag_hier.training.dhr.data` — training questions (:class:`DHRExample` and their readers) and the
  contrastive rows with their negatives (:func:`build_training_rows`).
* :class:`DHRTrainer` (:mod:`~rag_hier.training.dhr.trainer`) — sentence-transformers' trainer with its
  ``MultipleNegativesRankingLoss``; the result is one model directory, or ``document/`` and ``passage/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr
from rag_hier.training.dhr.config import LEVELS, DHRTrainingConfig, Level

if TYPE_CHECKING:
    from rag_hier.training.dhr.data import (
        DHRExample,
        build_training_rows,
        examples_from_pairs,
        examples_from_qrels,
        examples_from_questions,
        read_examples,
    )
    from rag_hier.training.dhr.trainer import CITATION, DHRTrainer, DHRTrainingResult

# the data and trainer modules import NumPy (and the trainer, torch): loaded on first use
_LAZY = {
    "DHRExample": "data",
    "build_training_rows": "data",
    "examples_from_pairs": "data",
    "examples_from_qrels": "data",
    "examples_from_questions": "data",
    "read_examples": "data",
    "CITATION": "trainer",
    "DHRTrainer": "trainer",
    "DHRTrainingResult": "trainer",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "CITATION",
    "LEVELS",
    "DHRExample",
    "DHRTrainer",
    "DHRTrainingConfig",
    "DHRTrainingResult",
    "Level",
    "build_training_rows",
    "examples_from_pairs",
    "examples_from_qrels",
    "examples_from_questions",
    "read_examples",
]
