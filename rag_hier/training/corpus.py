"""The retrieval units a trainer learns from, built as the store will split and encode them (shared by the trainers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rag_hier.corpus.model import Document, Passage, split_documents
from rag_hier.errors import RagHierError

__all__ = ["CorpusInput", "TrainingCorpus", "as_training_corpus"]


@dataclass(frozen=True)
class TrainingCorpus:
    """The retrieval units a trainer learns from (HCE: the tree's items): ids, texts and their documents.

    Build it with :meth:`from_documents` (documents split into passages exactly as the store splits
    them, so the trained model sees what it will index), :meth:`from_passages` or :meth:`from_texts`.
    """

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    doc_ids: tuple[str, ...]
    _by_id: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    _by_doc: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (len(self.ids) == len(self.texts) == len(self.doc_ids)):
            raise ValueError("ids, texts and doc_ids must have the same length")
        if not self.ids:
            raise RagHierError("the training corpus is empty")
        for i, item in enumerate(self.ids):
            if item in self._by_id:
                raise RagHierError(f"item id {item!r} appears twice in the training corpus")
            self._by_id[item] = i
        for i, d in enumerate(self.doc_ids):
            self._by_doc.setdefault(d, []).append(i)

    @classmethod
    def from_documents(cls, documents: Sequence[Document], max_passage_words: int = 0) -> TrainingCorpus:
        """Passages of ``documents`` (``max_passage_words=0`` keeps paragraphs whole), by their embedding text."""
        return cls.from_passages(split_documents(list(documents), max_passage_words))

    @classmethod
    def from_passages(cls, passages: Sequence[Passage]) -> TrainingCorpus:
        """One item per passage, its text being ``Passage.embedding_text`` (what the store encodes)."""
        return cls(
            tuple(p.id for p in passages), tuple(p.embedding_text for p in passages), tuple(p.doc_id for p in passages)
        )

    @classmethod
    def from_texts(cls, texts: Mapping[str, str]) -> TrainingCorpus:
        """One item per ``id → text`` entry (each its own document)."""
        return cls(tuple(texts), tuple(texts.values()), tuple(texts))

    def __len__(self) -> int:
        return len(self.ids)

    def positions_for(self, identifier: str) -> list[int]:
        """Item positions an id from qrels names: the item itself, or every passage of that document."""
        if identifier in self._by_id:
            return [self._by_id[identifier]]
        return list(self._by_doc.get(identifier, []))


CorpusInput = TrainingCorpus | Sequence[Document] | Sequence[Passage] | Mapping[str, str]
"""What the trainers accept as a corpus."""


def as_training_corpus(corpus: CorpusInput, max_passage_words: int) -> TrainingCorpus:
    """A :class:`TrainingCorpus` of ``corpus``: as is, from ``id → text``, Documents (split) or Passages."""
    if isinstance(corpus, TrainingCorpus):
        return corpus
    if isinstance(corpus, Mapping):
        return TrainingCorpus.from_texts(corpus)
    items = list(corpus)
    if items and all(isinstance(x, Document) for x in items):
        return TrainingCorpus.from_documents(items, max_passage_words)  # type: ignore[arg-type]
    if items and all(isinstance(x, Passage) for x in items):
        return TrainingCorpus.from_passages(items)  # type: ignore[arg-type]
    raise TypeError("corpus must be a TrainingCorpus, Documents, Passages or a mapping of id -> text")
