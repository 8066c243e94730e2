"""DHRTrainer: document- and passage-level contrastive training for Dense Hierarchical Retrieval.

Liu et al., "Dense Hierarchical Retrieval for Open-Domain Question Answering" (Findings of EMNLP 2021)
train a document encoder (DHR-D) on question → document-summary pairs and a passage encoder (DHR-P) on
question → passage pairs, each with an InfoNCE loss over in-batch and hard negatives:

- document level: BM25 negatives over the documents' summaries (``doc_negative_text``: or their full text, or
  both in turn), never a
  document that contains an answer string of the question;
- passage level: BM25 negatives (from other documents), **In-Doc** negatives (passages of the gold document
  without the answer; the default, as the paper's code) and optionally **In-Sec** negatives (passages of the
  gold passage's own section without the answer), each ranked by BM25 against the question;
- optionally a second iteration, trained again from the base model, whose negatives are the first iteration's
  plus negatives mined with the first iteration's model (In-Doc/In-Sec ranked by that model).

Built on sentence-transformers' public training API (``SentenceTransformerTrainer`` with
``MultipleNegativesRankingLoss`` over ``(anchor, positive, negative_1, ..., negative_n)`` columns and the
``no_duplicates`` batch sampler); held-out examples are scored with its ``InformationRetrievalEvaluator``.
The result is one sentence-transformers model directory (``shared_encoder=True``: one model trained on both
levels, batches drawn from one level at a time), or two (``document/`` and ``passage/``).

Example:
    >>> from rag_hier.corpus import read_qa_documents, read_qa_questions
    >>> docs, questions = read_qa_documents("xquad_en"), read_qa_questions("xquad_en")  # doctest: +SKIP
    >>> examples = examples_from_questions(questions, docs, max_passage_words=0)  # doctest: +SKIP
    >>> DHRTrainer(DHRTrainingConfig(epochs=1)).train(docs, examples, "dhr-model")  # doctest: +SKIP

"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier._compat import st_training
from rag_hier.corpus.model import Document, Passage, split_document
from rag_hier.corpus.readers import QAQuestion
from rag_hier.corpus.summary import summarize_document
from rag_hier.encoders._st_loading import quiet_trainer_setup
from rag_hier.encoders.dense import resolve_model_path
from rag_hier.errors import RagHierError
from rag_hier.training._attention import attention_dropout
from rag_hier.training._limits import TimeLimit
from rag_hier.training.dhr_config import _LEVELS, DHRTrainingConfig, Level

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = [
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


CITATION = """@inproceedings{liu-etal-2021-dense-hierarchical,
    title = "Dense Hierarchical Retrieval for Open-domain Question Answering",
    author = "Liu, Ye and Hashimoto, Kazuma and Zhou, Yingbo and Yavuz, Semih and Xiong, Caiming and Yu, Philip",
    booktitle = "Findings of the Association for Computational Linguistics: EMNLP 2021",
    year = "2021",
    pages = "188--200",
}"""


# ----------------------------------------------------------------------------------------------------
# training examples
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DHRExample:
    """One training question.

    Args:
        query: The question.
        doc_id: Its gold document.
        passage_ids: Its gold passages (``<doc_id>#<n>`` under the trainer's splitting); empty trains the
            document level only.
        answers: Answer strings; passages containing one are never used as negatives. Without answers only
            the gold passages themselves are excluded.

    """

    query: str
    doc_id: str
    passage_ids: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()


def _contains_answer(text: str, answers: Sequence[str]) -> bool:
    low = text.lower()
    return any(a.strip() and a.strip().lower() in low for a in answers)


def examples_from_questions(
    questions: Iterable[QAQuestion], documents: Sequence[Document], *, max_passage_words: int = 0
) -> list[DHRExample]:
    """Training examples from documents→paragraphs QA questions (XQuAD/SQuAD style).

    With ``max_passage_words=0`` the gold passage is ``<doc_id>#<paragraph_index>``. With longer-passage
    splitting, the gold passages are those of the gold paragraph's section that contain an answer (none:
    document level only for that question).

    Raises:
        RagHierError: A question names a document that is not in ``documents``.

    """
    by_id = {d.doc_id: d for d in documents}
    cache: dict[str, list[Passage]] = {}
    out: list[DHRExample] = []
    for q in questions:
        doc = by_id.get(q.doc_id)
        if doc is None:
            raise RagHierError(f"question {q.qid!r} names document {q.doc_id!r}, which is not in the corpus")
        if q.doc_id not in cache:
            cache[q.doc_id] = split_document(doc, max_passage_words)
        passages = cache[q.doc_id]
        gold: tuple[str, ...] = ()
        if q.paragraph_index is not None:
            if max_passage_words == 0:
                gold = tuple(p.id for p in passages if p.position == q.paragraph_index)
            else:
                section = next((s for i, (s, _, _) in enumerate(doc.iter_paragraphs()) if i == q.paragraph_index), None)
                gold = tuple(p.id for p in passages if p.section == section and _contains_answer(p.text, q.answers))
        elif q.answers:
            gold = tuple(p.id for p in passages if _contains_answer(p.text, q.answers))[:1]
        out.append(DHRExample(q.question, q.doc_id, gold, tuple(q.answers)))
    return out


def examples_from_pairs(pairs: Iterable[tuple[str, str]]) -> tuple[list[Document], list[DHRExample]]:
    """Documents and examples from ``(query, passage text)`` pairs: each distinct passage is a one-passage document.

    Without structure there are no In-Doc/In-Sec negatives (BM25 ones take their place) and the document
    level is the passage level, so train these with ``levels=("passage",)``.
    """
    ids: dict[str, str] = {}
    documents: list[Document] = []
    examples: list[DHRExample] = []
    for query, text in pairs:
        if text not in ids:
            ids[text] = f"p{len(ids)}"
            documents.append(Document(ids[text], "", (text,)))
        examples.append(DHRExample(query, ids[text], (f"{ids[text]}#0",)))
    return documents, examples


def examples_from_qrels(
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    documents: Sequence[Document],
    *,
    max_passage_words: int = 0,
) -> list[DHRExample]:
    """Training examples from BEIR-style queries and judgements (grades > 0 are positives).

    A judged passage id (``<doc_id>#<n>``) is that passage of its document; a judged document id is the
    document and, when the trainer's splitting keeps it as one passage (BEIR documents with
    ``max_passage_words=0``), that passage; a longer judged document trains the document level only.

    Raises:
        RagHierError: A judgement names an id that is neither a document nor a passage of ``documents``.

    """
    by_id = {d.doc_id: d for d in documents}
    passages: dict[str, list[str]] = {}

    def split(doc_id: str) -> list[str]:
        if doc_id not in passages:
            passages[doc_id] = [p.id for p in split_document(by_id[doc_id], max_passage_words)]
        return passages[doc_id]

    out: list[DHRExample] = []
    for qid, rel in qrels.items():
        query = queries.get(qid)
        if query is None:
            continue
        for target, grade in rel.items():
            if grade <= 0:
                continue
            if target in by_id:
                ids = split(target)
                out.append(DHRExample(query, target, tuple(ids) if len(ids) == 1 else ()))
                continue
            doc_id = target.rsplit("#", 1)[0] if "#" in target else None
            if doc_id is None or doc_id not in by_id or target not in split(doc_id):
                raise RagHierError(
                    f"query {qid!r} judges {target!r}, which is neither a document nor a passage of the corpus"
                )
            out.append(DHRExample(query, doc_id, (target,)))
    return out


def read_examples(path: str | Path, documents: Sequence[Document], *, max_passage_words: int = 100) -> list[DHRExample]:
    """Read training questions: QA questions, or (query, passage) pairs, from a JSONL file.

    QA questions are ``{"qid", "question", "doc_id", "paragraph_index", "answers"}`` lines (as XQuAD's);
    pairs are ``{"query", "passage_id"}`` or ``{"query", "doc_id"}`` lines, ``"answers"`` optional. Pair
    passage ids name passages as the trainer cuts them (``<doc_id>#<n>`` under ``max_passage_words``).

    Raises:
        CorpusFormatError: A malformed line, a missing field, or an id that is not in ``documents``.

    """
    import gzip

    from rag_hier.corpus.readers import read_qa_questions
    from rag_hier.errors import CorpusFormatError

    file = Path(path)
    if file.is_dir():
        return examples_from_questions(read_qa_questions(file), documents, max_passage_words=max_passage_words)
    if not file.is_file():
        raise CorpusFormatError("path does not exist", path=str(file))
    opener = gzip.open if file.name.endswith(".gz") else open
    records: list[tuple[int, dict[str, Any]]] = []
    with opener(file, "rt", encoding="utf-8") as handle:
        for n, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusFormatError(f"malformed JSON: {exc.msg}", path=str(file), line=n) from exc
            if not isinstance(data, dict):
                raise CorpusFormatError("expected a JSON object", path=str(file), line=n)
            records.append((n, data))
    if not records:
        raise CorpusFormatError("no training examples found (the file holds none)", path=str(file))
    if "question" in records[0][1]:
        return examples_from_questions(read_qa_questions(file), documents, max_passage_words=max_passage_words)
    doc_ids = {d.doc_id for d in documents}
    passage_doc = {p.id: d.doc_id for d in documents for p in split_document(d, max_passage_words)}
    out: list[DHRExample] = []
    for n, data in records:
        query = data.get("query")
        if not isinstance(query, str) or not query.strip():
            raise CorpusFormatError("field 'query' must be a non-empty string", path=str(file), line=n)
        answers = data.get("answers") or []
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise CorpusFormatError("field 'answers' must be a list of strings", path=str(file), line=n)
        if "passage_id" in data:
            pid = str(data["passage_id"])
            if pid not in passage_doc:
                raise CorpusFormatError(
                    f"passage {pid!r} is not in the corpus (cut with max_passage_words={max_passage_words})",
                    path=str(file),
                    line=n,
                )
            out.append(DHRExample(query, passage_doc[pid], (pid,), tuple(answers)))
        elif "doc_id" in data:
            did = str(data["doc_id"])
            if did not in doc_ids:
                raise CorpusFormatError(f"document {did!r} is not in the corpus", path=str(file), line=n)
            out.append(DHRExample(query, did, (), tuple(answers)))
        else:
            raise CorpusFormatError("a pair needs 'passage_id' or 'doc_id' next to 'query'", path=str(file), line=n)
    return out


# ----------------------------------------------------------------------------------------------------
# configuration and result
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DHRTrainingResult:
    """What :meth:`DHRTrainer.train` produced.

    Args:
        output_dir: The output directory.
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
    seconds: float = 0.0


# ----------------------------------------------------------------------------------------------------
# negatives
# ----------------------------------------------------------------------------------------------------
class _Bm25:
    """A bm25s index over texts; ``scores(query)`` gives every text's BM25 score."""

    def __init__(self, texts: Sequence[str]) -> None:
        import bm25s

        self._bm25s = bm25s
        self.n = len(texts)
        self._index = bm25s.BM25()
        self._index.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        tokens = self._bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        known = [t for t in tokens if t in self._index.vocab_dict]
        if not known:
            return np.zeros(self.n, np.float32)
        return np.asarray(self._index.get_scores(known), dtype=np.float32)


@dataclass
class _Corpus:
    """Passages and summaries of the training documents, with lookups."""

    documents: list[Document]
    passages: list[Passage]
    summaries: list[str]
    full_texts: list[str]
    doc_texts: list[str]  # every passage's text of a document (answer-string checks)
    pos_of: dict[str, int]  # passage id -> index
    doc_index: dict[str, int]  # doc id -> index
    doc_of: np.ndarray  # passage index -> document index
    passages_of: list[np.ndarray]  # document index -> passage indices

    @classmethod
    def build(cls, documents: Sequence[Document], config: DHRTrainingConfig) -> _Corpus:
        docs = list(documents)
        doc_index: dict[str, int] = {}
        for i, d in enumerate(docs):
            if d.doc_id in doc_index:
                raise RagHierError(f"document id {d.doc_id!r} appears twice in the training corpus")
            doc_index[d.doc_id] = i
        passages: list[Passage] = []
        owners: list[int] = []
        for i, d in enumerate(docs):
            for p in split_document(d, config.max_passage_words):
                passages.append(p)
                owners.append(i)
        doc_of = np.asarray(owners, dtype=np.int64)
        texts_of: list[list[str]] = [[] for _ in docs]
        for p, o in zip(passages, owners, strict=True):
            texts_of[o].append(p.text)
        return cls(
            documents=docs,
            passages=passages,
            summaries=[
                summarize_document(d, abstract_words=config.abstract_words, include_toc=config.include_toc)
                for d in docs
            ],
            full_texts=[", ".join([d.title, d.text]) if d.title else d.text for d in docs],
            doc_texts=["\n".join(group) for group in texts_of],
            pos_of={p.id: i for i, p in enumerate(passages)},
            doc_index=doc_index,
            doc_of=doc_of,
            passages_of=[np.nonzero(doc_of == i)[0] for i in range(len(docs))],
        )


def _take(ranked: Iterable[int], exclude: set[int], n: int, usable: Callable[[int], bool] | None = None) -> list[int]:
    """The first ``n`` of ``ranked`` not in ``exclude`` (and ``usable``); adds them to ``exclude``."""
    out: list[int] = []
    if n <= 0:
        return out
    for i in ranked:
        i = int(i)
        if i in exclude or (usable is not None and not usable(i)):
            continue
        out.append(i)
        exclude.add(i)
        if len(out) >= n:
            break
    return out


class _Scorer:
    """Ranks passages and documents for a question: by BM25 (iteration 1) or by a model (mined negatives)."""

    def __init__(
        self,
        corpus: _Corpus,
        queries: Sequence[str],
        model: SentenceTransformer | None,
        document_model: SentenceTransformer | None,
        batch: int = 64,
        doc_text: str = "summary",
    ) -> None:
        self.corpus = corpus
        self.model = model
        if model is None:
            self._p = _Bm25([p.embedding_text for p in corpus.passages])
            self._doc_bm25 = [
                _Bm25(corpus.summaries if kind == "summary" else corpus.full_texts)
                for kind in (("summary", "full_text") if doc_text == "alternate" else (doc_text,))
            ]
        else:
            doc_model = document_model or model
            kw: dict[str, Any] = {"batch_size": batch, "convert_to_numpy": True, "normalize_embeddings": True}
            self._q = model.encode(list(queries), **kw)
            self._pv = model.encode([p.embedding_text for p in corpus.passages], **kw)
            self._dq = self._q if doc_model is model else doc_model.encode(list(queries), **kw)
            self._sv = doc_model.encode(corpus.summaries, **kw)

    def passage_scores(self, i: int, query: str) -> np.ndarray:
        if self.model is None:
            return self._p.scores(query)
        return np.asarray(self._pv @ self._q[i])

    def document_rankings(self, i: int, query: str) -> list[np.ndarray]:
        if self.model is None:
            return [np.argsort(-bm25.scores(query), kind="stable") for bm25 in self._doc_bm25]
        return [np.argsort(-(self._sv @ self._dq[i]), kind="stable")]


def _columns(n_negatives: int) -> dict[str, list[str]]:
    cols: dict[str, list[str]] = {"anchor": [], "positive": []}
    for j in range(n_negatives):
        cols[f"negative_{j + 1}"] = []
    return cols


def _document_negatives(
    corpus: _Corpus, ex: DHRExample, rankings: list[np.ndarray], n_neg: int, exclude: set[int]
) -> list[int]:
    """Document negatives from ``rankings`` (in turn), never the gold document nor one containing an answer."""
    gold = corpus.doc_index[ex.doc_id]
    exclude.add(gold)
    negs: list[int] = []
    n_docs = len(corpus.documents)
    pos = 0

    def usable(k: int) -> bool:
        return not (ex.answers and _contains_answer(corpus.doc_texts[k], ex.answers))

    while len(negs) < n_neg and pos < n_docs:
        for r in rankings:  # one ranking, or summary and full-text BM25 in turn ("alternate")
            negs.extend(_take(r[pos : pos + 1], exclude, n_neg - len(negs), usable))
        pos += 1
    return negs


def _passage_negatives(
    corpus: _Corpus,
    ex: DHRExample,
    scores: np.ndarray,
    config: DHRTrainingConfig,
    n_neg: int,
    exclude: set[int],
) -> list[int]:
    """In-Sec, then In-Doc, then other-document negatives ranked by ``scores``; none contains an answer."""
    golds = [corpus.pos_of[p] for p in ex.passage_ids if p in corpus.pos_of]
    positive = golds[0]
    doc = corpus.doc_index[ex.doc_id]
    ranked = np.argsort(-scores, kind="stable")
    exclude.update(golds)
    exclude.update(j for j in corpus.passages_of[doc].tolist() if _contains_answer(corpus.passages[j].text, ex.answers))
    section = corpus.passages[positive].section
    in_doc = [j for j in ranked.tolist() if corpus.doc_of[j] == doc]
    in_sec = [j for j in in_doc if corpus.passages[j].section == section]
    negs = _take(in_sec, exclude, config.in_sec_negatives)
    negs += _take(in_doc, exclude, config.in_doc_negatives + config.in_sec_negatives - len(negs))
    negs += _take(
        ranked.tolist(),
        exclude,
        n_neg - len(negs),
        lambda j: corpus.doc_of[j] != doc and not _contains_answer(corpus.passages[j].text, ex.answers),
    )
    return negs


def build_training_rows(
    documents: Sequence[Document],
    examples: Sequence[DHRExample],
    config: DHRTrainingConfig,
    *,
    model: SentenceTransformer | None = None,
    document_model: SentenceTransformer | None = None,
    keep_bm25: bool = False,
) -> dict[str, dict[str, list[str]]]:
    """The contrastive training columns per level: ``{"anchor", "positive", "negative_1", ...}``.

    Args:
        documents: The training corpus.
        examples: Training questions.
        config: Counts of each kind of negative, passage splitting and summary format.
        model: Rank passage negatives with this model instead of BM25 (the second iteration's mined negatives).
        document_model: Rank document negatives with this model (default: ``model``).
        keep_bm25: With ``model``: keep the BM25 negatives and add the mined ones after them (DHR's second
            iteration: twice as many negatives per question), instead of replacing them.

    Returns:
        ``{"document": columns, "passage": columns}`` for the configured levels (a level without rows is
        left out). Every row of a level has the same number of negatives; a question whose own document has
        too few passages for In-Doc/In-Sec negatives gets BM25 (or mined) ones instead. Negatives never
        contain an answer string of the question (documents: any of their passages), nor are they gold.

    """
    corpus = _Corpus.build(documents, config)
    rng = random.Random(config.seed)  # noqa: S311 - sampling, not security
    for ex in examples:
        if ex.doc_id not in corpus.doc_index:
            raise RagHierError(f"example {ex.query!r} names document {ex.doc_id!r}, which is not in the corpus")
    queries = [ex.query for ex in examples]
    doc_text = config.doc_negative_text
    scorers = [_Scorer(corpus, queries, model, document_model, doc_text=doc_text)]
    if model is not None and keep_bm25:
        scorers.insert(0, _Scorer(corpus, queries, None, None, doc_text=doc_text))
    out: dict[str, dict[str, list[str]]] = {}
    n_docs, n_pass = len(corpus.documents), len(corpus.passages)
    if "document" in config.levels and n_docs > 1:
        per = min(config.doc_negatives, n_docs - 1)
        rows: list[tuple[str, int, list[int]]] = []
        for i, ex in enumerate(examples):
            exclude: set[int] = set()
            negs: list[int] = []
            for sc in scorers:
                negs += _document_negatives(corpus, ex, sc.document_rankings(i, ex.query), per, exclude)
            rows.append((ex.query, corpus.doc_index[ex.doc_id], negs))
        width = min(per * len(scorers), n_docs - 1)
        cols = _columns(width)
        short = 0
        for query, gold, negs in rows:
            if len(negs) < width:  # every other document contains an answer: no usable negative
                short += 1
                continue
            cols["anchor"].append(query)
            cols["positive"].append(corpus.summaries[gold])
            for j, k in enumerate(negs[:width]):
                cols[f"negative_{j + 1}"].append(corpus.summaries[k])
        if short:
            logger.info("document level: %d questions without %d answer-free negative documents skipped", short, width)
        if cols["anchor"]:
            out["document"] = cols
    want = config.bm25_negatives + config.in_doc_negatives + config.in_sec_negatives
    if "passage" in config.levels and n_pass > 1:
        per = min(want, n_pass - 1)
        n_neg = per * len(scorers)
        cols = _columns(min(n_neg, n_pass - 1))
        for i, ex in enumerate(examples):
            golds = [corpus.pos_of[p] for p in ex.passage_ids if p in corpus.pos_of]
            if not golds:
                continue
            exclude = set()
            negs = []
            for sc in scorers:
                negs += _passage_negatives(corpus, ex, sc.passage_scores(i, ex.query), config, per, exclude)
            target = len(cols) - 2
            if len(negs) < target:  # tiny corpora: anything but the positives
                rest = [j for j in range(n_pass) if j not in exclude]
                rng.shuffle(rest)
                negs += _take(rest, exclude, target - len(negs))
            if len(negs) < target:
                continue
            cols["anchor"].append(ex.query)
            cols["positive"].append(corpus.passages[golds[0]].embedding_text)
            for j, k in enumerate(negs[:target]):
                cols[f"negative_{j + 1}"].append(corpus.passages[k].embedding_text)
        if cols["anchor"]:
            out["passage"] = cols
    return out


# ----------------------------------------------------------------------------------------------------
# the trainer
# ----------------------------------------------------------------------------------------------------
class DHRTrainer:
    """Train DHR's document and passage encoders (one shared model by default).

    Args:
        config: The training configuration.

    Example:
        >>> trainer = DHRTrainer(DHRTrainingConfig(base_model="sentence-transformers/all-MiniLM-L6-v2"))
        >>> trainer.train(documents, examples, "out/dhr")  # doctest: +SKIP

    """

    citation = CITATION

    def __init__(self, config: DHRTrainingConfig | None = None) -> None:
        self.config = config or DHRTrainingConfig()
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
        documents: Sequence[Document],
        examples: Sequence[DHRExample],
        output_dir: str | Path,
        *,
        eval_examples: Sequence[DHRExample] = (),
    ) -> DHRTrainingResult:
        """Train and save sentence-transformers model directories under ``output_dir``.

        Args:
            documents: The training corpus (negatives and summaries come from it).
            examples: Training questions (:func:`examples_from_questions`, :func:`examples_from_pairs`).
            output_dir: Where to save: the shared model itself, or ``document/`` and ``passage/``; with two
                iterations the first iteration's model(s) go to ``iteration-1/``.
            eval_examples: Held-out questions over the same corpus, scored after training with
                sentence-transformers' ``InformationRetrievalEvaluator`` (accuracy@k, nDCG@10, MRR@10).

        Returns:
            Where the models are, row counts, final losses and held-out metrics.

        Raises:
            RagHierError: No examples, or examples naming documents outside ``documents``.
            MissingDependencyError: The training stack (``datasets``, ``accelerate``) is missing.

        """
        if not examples:
            raise RagHierError("DHR training needs at least one example")
        cfg = self.config
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        self._time_limit = TimeLimit(cfg.max_minutes)
        models: dict[str, SentenceTransformer] = {}
        if cfg.negatives_model is not None:
            models = self._mining_models(cfg.negatives_model)
        losses: list[float | None] = []
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
            models, loss = self._fit(rows)
            losses.append(loss)
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
        args_cls = st_training("DHR").arguments
        known = {f.name for f in dataclasses.fields(args_cls)}
        kwargs: dict[str, Any] = {
            "output_dir": str(workdir),
            "num_train_epochs": cfg.epochs,
            "per_device_train_batch_size": cfg.batch_size,
            "learning_rate": cfg.learning_rate,
            "batch_sampler": "no_duplicates",
            "multi_dataset_batch_sampler": "proportional",
            "save_strategy": "no",
            "report_to": "none",
            "logging_steps": 10,
            "seed": cfg.seed,
            "disable_tqdm": not cfg.show_progress_bar,
        }
        if cfg.max_steps is not None:
            kwargs["max_steps"] = cfg.max_steps
        # transformers 5 takes a float warmup_steps as a ratio (warmup_ratio is deprecated there); 4.x has warmup_ratio
        import transformers

        modern = int(transformers.__version__.split(".")[0]) >= 5
        kwargs["warmup_steps" if modern or "warmup_ratio" not in known else "warmup_ratio"] = cfg.warmup_ratio
        if (cfg.device or "").startswith("cpu") and "use_cpu" in known:
            kwargs["use_cpu"] = True
        import torch

        kwargs["dataloader_pin_memory"] = torch.cuda.is_available()  # pinning without a GPU only warns
        kwargs.update(overrides)
        return args_cls(**{k: v for k, v in kwargs.items() if k in known})

    def _fit(self, rows: Mapping[str, Mapping[str, list[str]]]) -> tuple[dict[str, SentenceTransformer], float | None]:
        from datasets import Dataset

        st = st_training("DHR")
        trainer_cls, losses = st.trainer, st.losses
        data = {level: Dataset.from_dict(dict(cols)) for level, cols in rows.items()}
        groups: list[tuple[tuple[str, ...], dict[str, Any]]] = (
            [(tuple(data), data)] if self.config.shared_encoder else [((lv,), {lv: data[lv]}) for lv in data]
        )
        models: dict[str, SentenceTransformer] = {}
        last_loss: float | None = None
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
                with attention_dropout(model, self.config.attention_dropout):
                    output = trainer.train()
            last_loss = float(output.training_loss) if output is not None else None
            logger.info("DHR %s model trained (loss %s)", "+".join(levels), last_loss)
            for lv in levels:
                models[lv] = model
        if "passage" not in models:
            models["passage"] = models["document"]
        if "document" not in models:
            models["document"] = models["passage"]
        return models, last_loss

    def _save(self, models: Mapping[str, SentenceTransformer], out: Path) -> tuple[Path, Path]:
        if models["document"] is models["passage"]:
            with quiet_trainer_setup():
                models["passage"].save(str(out))
            return out, out
        for lv in _LEVELS:
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
        corpus = _Corpus.build(documents, self.config)
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
