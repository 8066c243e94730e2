"""Tied-Atomic (dense) and the untied DSI-atomic baseline: generative retrieval with atomic docids.

:class:`TiedAtomicTrainer` follows Nguyen & Yates (arXiv 2306.11397). The model is an encoder-decoder
embedding (:class:`~rag_hier.encoders.encdec.EncoderDecoderEmbedding`: one decoding step from the start
token), used for queries and documents alike, so each docid's output row is tied to its document's
text. Training is contrastive, like a dense retriever:

* **InfoNCE** over in-batch positives and **BM25 negatives** (the paper's NQ320k recipe, "a ranking loss
  with in-batch BM25 negatives, similar to SPLADE"): for each query, ``bm25_negatives`` documents drawn
  from its BM25 top-``bm25_depth`` (bm25s; the query's relevant documents excluded), every other row's
  positive and negatives being further negatives. Scores are raw dot products at temperature 1
  (``scale`` = 1/τ; the paper states none). sentence-transformers' ``MultipleNegativesRankingLoss``;
* **MarginMSE** distillation (the paper's MS MARCO recipe) when a cross-encoder is given:
  ``MSE(h_q·h_d⁺ − h_q·h_d⁻, CE(q, d⁺) − CE(q, d⁻))`` over the same BM25 negatives, scored by the
  cross-encoder (sentence-transformers' ``MarginMSELoss``).

Both run on sentence-transformers' ``SentenceTransformerTrainer`` (CPU or GPU). Under ``torchrun`` the
trainer is data-parallel and the InfoNCE loss gathers the embeddings of every process, so in-batch
negatives span the global batch. The result is a plain sentence-transformers directory:
``rag-hier index CORPUS --store S --model DIR`` indexes with it, and new documents are added by encoding
them.

:class:`DSIAtomicTrainer` trains the untied baseline, DSI with atomic docids (Tay et al., 2022), on the retrieval
task (query → docid) and the indexing task (document text → docid), mixed. ``DSIAtomicConfig.objective`` picks
the model:

* ``"seq2seq"`` (default; the paper's baseline): docids are new tokens of the encoder-decoder's vocabulary, the
  target is ``[docid, end-of-sequence]``, teacher forcing, cross-entropy over the whole vocabulary
  (:class:`~rag_hier.retrieval.dsi_seq2seq.DSIAtomicSeq2SeqModel`, trained by ``transformers``' ``Seq2SeqTrainer``);
* ``"docid_softmax"``: a free ``(n_docids, dim)`` matrix over the Tied-Atomic embedding ``h(x)``, cross-entropy
  over the docids only (:class:`~rag_hier.retrieval.generative.DSIAtomicModel`, sentence-transformers' trainer).

* :class:`TiedAtomicConfig`, :class:`DSIAtomicConfig` (:mod:`~rag_hier.training.tied_atomic.config`).
* :func:`bm25_negatives` (:mod:`~rag_hier.training.tied_atomic.data`); :class:`AtomicDocidLoss`
  (:mod:`~rag_hier.training.tied_atomic.loss`, DSI's ``"docid_softmax"`` objective).
* :class:`TiedAtomicTrainer`, :class:`DSIAtomicTrainer`, :class:`TiedAtomicTrainingResult`
  (:mod:`~rag_hier.training.tied_atomic.trainer`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier._lazy import lazy_getattr
from rag_hier.training.tied_atomic.config import DSIAtomicConfig, TiedAtomicConfig

if TYPE_CHECKING:
    from rag_hier.training.tied_atomic.data import bm25_negatives
    from rag_hier.training.tied_atomic.loss import AtomicDocidLoss
    from rag_hier.training.tied_atomic.trainer import (
        DSI_TRAINING_REPORT,
        TRAINING_REPORT,
        DSIAtomicTrainer,
        TiedAtomicTrainer,
        TiedAtomicTrainingResult,
    )

# the data, loss and trainer modules import NumPy and torch: loaded on first use
_LAZY = {
    "bm25_negatives": "data",
    "AtomicDocidLoss": "loss",
    "DSI_TRAINING_REPORT": "trainer",
    "TRAINING_REPORT": "trainer",
    "DSIAtomicTrainer": "trainer",
    "TiedAtomicTrainer": "trainer",
    "TiedAtomicTrainingResult": "trainer",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "DSI_TRAINING_REPORT",
    "TRAINING_REPORT",
    "AtomicDocidLoss",
    "DSIAtomicConfig",
    "DSIAtomicTrainer",
    "TiedAtomicConfig",
    "TiedAtomicTrainer",
    "TiedAtomicTrainingResult",
    "bm25_negatives",
]
