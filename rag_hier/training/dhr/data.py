"""DHR's training data: questions (:class:`DHRExample`) and the contrastive rows with their hard negatives.

- examples: :func:`examples_from_questions` (QA questions), :func:`examples_from_pairs`, :func:`examples_from_qrels`
  (BEIR judgements), :func:`read_examples` (a JSONL file of either);
- rows: :func:`build_training_rows` — per level, ``(anchor, positive, negative_1, ...)`` columns with BM25, In-Doc
  and In-Sec negatives (or negatives mined with a trained model), never containing an answer string.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag_hier.corpus.model import Document, Passage, split_document
from rag_hier.corpus.readers import QAQuestion
from rag_hier.corpus.summary import summarize_document
from rag_hier.errors import RagHierError
from rag_hier.training.dhr.config import DHRTrainingConfig

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = [
    "DHRCorpus",
    "DHRExample",
    "build_training_rows",
    "examples_from_pairs",
    "examples_from_qrels",
    "examples_from_questions",
    "read_examples",
]


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
class DHRCorpus:
    """Passages and summaries of the training documents, with lookups (the rows' and the evaluation's corpus)."""

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
    def build(cls, documents: Sequence[Document], config: DHRTrainingConfig) -> DHRCorpus:
        """Split ``documents`` as ``config`` says and summarize them."""
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
        corpus: DHRCorpus,
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
    corpus: DHRCorpus, ex: DHRExample, rankings: list[np.ndarray], n_neg: int, exclude: set[int]
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
    corpus: DHRCorpus,
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
    corpus = DHRCorpus.build(documents, config)
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
