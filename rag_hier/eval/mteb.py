"""MTEB search adapter: any rag-hier strategy over a rag-hier store, as an ``mteb.models.SearchProtocol``.

MTEB evaluates flat embedding search: it wraps an encoder in its own ``SearchEncoderWrapper``. A model
that implements the search protocol itself (``index(corpus, ...)`` then ``search(queries, ...)``) is
searched as it is, so :class:`RagHierSearchModel` lets ``mteb.evaluate`` score DHR, HCE's tree, SVDR or
plain dense search over a rag-hier store on MTEB's retrieval tasks, with MTEB's own evaluator::

    import mteb
    from rag_hier.eval.mteb import RagHierSearchModel

    model = RagHierSearchModel(strategy="hierarchical", parameters={"k1": 100}, store_root="stores/mteb")
    mteb.evaluate(model, tasks=mteb.get_tasks(tasks=["SciFact"]), cache=None)

Two ways to give it a store:

- ``store=PATH``: a store already indexed (``rag-hier index``, with ``--hierarchical``, ``--tree`` or
  ``--token-index`` as the strategy needs). ``index()`` only checks that the store holds every document
  of the task's corpus; nothing is encoded again.
- no ``store``: ``index()`` builds one store per task, subset and split under ``store_root`` (a
  temporary folder when ``None``) from MTEB's corpus, whole documents (``title`` + ``text``) encoded with
  ``model``, plus what the strategy needs (document index, cluster tree, token index).

Results are at the document level (a document scores as its best passage, MaxP), which is what MTEB's
qrels judge. MTEB removes identical query/document ids only on tasks that ask for it
(``ignore_identical_ids``); ``rag-hier eval`` does so always (see ``docs/evaluation.md``).

``mteb`` is imported lazily (``pip install "rag-hier[mteb]"``); importing this module does not need it.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_hier.errors import MissingDependencyError, RagHierError

if TYPE_CHECKING:
    from rag_hier.retrieval.hit import Hit
    from rag_hier.store.store import HierStore

__all__ = ["RagHierSearchModel", "StrategySearch", "beir_task", "strategy_search"]

logger = logging.getLogger(__name__)

StrategySearch = Callable[["HierStore", list[str], int], list[list["Hit"]]]
"""``(store, query texts, top_k) -> ranked hits per query, at the document level``."""


def _require_mteb() -> Any:
    try:
        import mteb
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError('the MTEB adapter needs mteb: pip install "rag-hier[mteb]"') from exc
    return mteb


def strategy_search(strategy: str, parameters: Mapping[str, Any] | None = None) -> StrategySearch:
    """A search function for a registered strategy and its parameters (validated by the strategy's dataclass).

    Args:
        strategy: A name of :func:`rag_hier.retrieval.strategy_names`.
        parameters: The strategy's parameters (those its parameters dataclass declares, e.g. ``k1`` for
            ``hierarchical``, ``beam`` for ``tree``, ``rerank_m`` for ``svdr-beta-rerank``).

    Raises:
        RagHierError: An unknown strategy or parameter.

    """
    from rag_hier.retrieval.base import Queries
    from rag_hier.retrieval.registry import strategy as registered

    entry = registered(strategy)
    params = entry.parse(parameters, where=f"strategy {strategy!r}")

    def search(store: HierStore, texts: list[str], top_k: int) -> list[list[Hit]]:
        retriever = entry.retriever(store, params=params)
        return [r.hits for r in retriever.run(Queries(texts=texts), top_k=top_k, aggregate="doc")]

    return search


def _prepare_store(store: HierStore, strategy: str, model: str) -> None:
    """Attach the extensions ``strategy`` needs to a store just built."""
    from rag_hier.retrieval.registry import strategy as registered

    for name in registered(strategy).extensions:
        config: dict[str, Any] = {"model": model} if name == "token-index" else {}
        store.ensure_extension(name, **config)


class RagHierSearchModel:
    """An ``mteb.models.SearchProtocol`` that searches a rag-hier store with any strategy.

    Args:
        store: An existing store directory to search (its documents must cover the task's corpus);
            ``None`` builds a store per task from MTEB's corpus in :meth:`index`.
        model: The sentence-transformers model for stores built here (default: the offline
            all-MiniLM-L6-v2); ignored with ``store`` (the store's own model is used).
        strategy: A registered strategy name (:func:`rag_hier.retrieval.strategy_names`) or a search function
            ``(store, texts, top_k) -> hits per query`` for strategies not known here.
        parameters: The strategy's parameters (see :func:`strategy_search`).
        store_root: Where built stores go (one sub-folder per task, subset and split); ``None``: a
            temporary folder removed with this object.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` picks CUDA when available.
        batch_size: Encoding batch size (default: MTEB's ``encode_kwargs["batch_size"]``, else the encoder's).
        name: The name MTEB records results under (default ``rag-hier/<strategy>``).

    Example:
        >>> model = RagHierSearchModel(strategy="dense")
        >>> model.strategy_name
        'dense'

    """

    def __init__(
        self,
        store: str | Path | None = None,
        *,
        model: str | None = None,
        strategy: str | StrategySearch = "dense",
        parameters: Mapping[str, Any] | None = None,
        store_root: str | Path | None = None,
        device: str | None = None,
        batch_size: int | None = None,
        name: str | None = None,
    ) -> None:
        if isinstance(strategy, str):
            self._search_fn = strategy_search(strategy, parameters)
            self.strategy_name = strategy
        else:
            if parameters:
                raise RagHierError("parameters apply to a strategy name, not to a search function")
            self._search_fn = strategy
            self.strategy_name = getattr(strategy, "__name__", "custom")
        self.parameters = dict(parameters or {})
        self.store_path = Path(store) if store is not None else None
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.name = name or f"rag-hier/{self.strategy_name}"
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._root = Path(store_root) if store_root is not None else None
        self._store: HierStore | None = None

    # -- MTEB's protocol ---------------------------------------------------------------------------
    @property
    def mteb_model_meta(self) -> Any:
        """MTEB's ``ModelMeta`` for this model (name, embedding size where known, framework)."""
        mteb = _require_mteb()
        from rag_hier._version import __version__

        return mteb.models.ModelMeta(
            loader=None,
            name=self.name,
            revision=__version__,
            release_date=None,
            languages=None,
            n_parameters=None,
            memory_usage_mb=None,
            max_tokens=None,
            embed_dim=None,
            license=None,
            open_weights=True,
            public_training_code=None,
            public_training_data=None,
            framework=["Sentence Transformers", "PyTorch"],
            reference=None,
            similarity_fn_name=None,
            use_instructions=False,
            training_datasets=None,
            model_type=["sparse"] if self.strategy_name.startswith("svdr-") else ["dense"],
        )

    def index(
        self,
        corpus: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        encode_kwargs: Mapping[str, Any] | None = None,
        num_proc: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Open the given store (checking it holds the corpus) or build one from ``corpus``.

        Args:
            corpus: MTEB's corpus dataset (columns ``id``, ``text`` and optionally ``title``).
            task_metadata: The task's metadata (its ``name`` names the built store's folder).
            hf_split: The split evaluated.
            hf_subset: The subset evaluated.
            encode_kwargs: MTEB's encoding arguments (``batch_size`` is honoured).
            num_proc: Unused (data loading is MTEB's).
            **kwargs: Reserved by MTEB.

        Raises:
            RagHierError: The given store lacks documents of the corpus.

        """
        from rag_hier.store.store import HierStore

        self.close()
        batch_size = self.batch_size or (encode_kwargs or {}).get("batch_size")
        ids = [str(i) for i in corpus["id"]]
        if self.store_path is not None:
            store = HierStore.open(self.store_path, device=self.device, read_only=True)
            stored = set(store.document_ids())
            missing = [i for i in ids if i not in stored]
            if missing:
                store.close()
                raise RagHierError(
                    f"the store at {self.store_path} lacks {len(missing)} of the {len(ids)} documents of "
                    f"{task_metadata.name} ({hf_subset}/{hf_split}), e.g. {missing[:3]}: index that corpus into it"
                )
            extra = len(stored) - len(set(ids))
            if extra:
                logger.warning(
                    "the store at %s holds %d documents beyond %s's corpus; they compete in every search",
                    self.store_path,
                    extra,
                    task_metadata.name,
                )
        else:
            store = self._build(corpus, ids, f"{task_metadata.name}-{hf_subset}-{hf_split}", batch_size)
        if batch_size and store.encoder is not None:
            store.encoder.batch_size = int(batch_size)
        self._store = store

    def search(
        self,
        queries: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        top_k: int,
        encode_kwargs: Mapping[str, Any] | None = None,
        top_ranked: Mapping[str, Sequence[str]] | None = None,
        num_proc: int | None = None,
        **kwargs: Any,
    ) -> dict[str, dict[str, float]]:
        """Search every query; ``{query id: {document id: score}}`` with ``top_k`` documents each.

        Raises:
            RagHierError: :meth:`index` was not called first, or ``top_ranked`` (re-ranking tasks) is given:
                rag-hier strategies retrieve from the whole store.

        """
        if self._store is None:
            raise RagHierError("call index(corpus, ...) before search(queries, ...)")
        if top_ranked is not None:
            raise RagHierError(
                "rag-hier strategies retrieve from the whole store; re-ranking tasks (top_ranked) are not supported"
            )
        qids = [str(q) for q in queries["id"]]
        texts = [str(t) for t in queries["text"]]
        results = self._search_fn(self._store, texts, int(top_k))
        out: dict[str, dict[str, float]] = {}
        for qid, hits in zip(qids, results, strict=True):
            ranked: dict[str, float] = {}
            for h in hits:
                ranked.setdefault(h.doc_id, float(h.score))
            out[qid] = ranked
        return out

    # -- ours ------------------------------------------------------------------------------------------
    def _build(self, corpus: Any, ids: list[str], folder: str, batch_size: Any) -> HierStore:
        from rag_hier.corpus.model import Document
        from rag_hier.encoders.dense import DEFAULT_MODEL, DenseEncoder
        from rag_hier.index.dense import IndexConfig
        from rag_hier.store.store import HierStore

        if self._root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="rag-hier-mteb-")
            root = Path(self._tmp.name)
        else:
            root = self._root
        path = root / "".join(c if c.isalnum() or c in "-_." else "_" for c in folder)
        model = self.model or DEFAULT_MODEL
        titles = corpus["title"] if "title" in corpus.column_names else [""] * len(ids)
        documents = [
            Document(doc_id=i, title=str(t or ""), paragraphs=(str(x),) if x else ())
            for i, t, x in zip(ids, titles, corpus["text"], strict=True)
        ]
        enc_kwargs: dict[str, Any] = {"device": self.device}
        if batch_size:
            enc_kwargs["batch_size"] = int(batch_size)
        store = HierStore.open_or_create(
            path,
            encoder=DenseEncoder(model, **enc_kwargs),
            index=IndexConfig(kind="flat"),
            corpus={"format": "beir", "max_passage_words": 0, "source": f"mteb:{folder}"},
        )
        with store.batch():
            store.add_documents(documents, max_passage_words=0)
            _prepare_store(store, self.strategy_name, model)
        return store

    def close(self) -> None:
        """Close the store opened by :meth:`index` (built stores stay under ``store_root``)."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()


def beir_task(
    folder: str | Path,
    *,
    split: str = "test",
    name: str | None = None,
    ignore_identical_ids: bool = False,
) -> Any:
    """An MTEB retrieval task over a local BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/SPLIT.tsv``).

    MTEB downloads its data sets from a model hub at run time; this task reads the files given instead, so
    ``mteb.evaluate`` runs offline (and on private BEIR-format sets). Files may be gzipped.

    Args:
        folder: The BEIR data set folder.
        split: The qrels split to evaluate.
        name: The task name MTEB reports (default: ``Local<folder name>``).
        ignore_identical_ids: Remove hits whose id equals the query id before scoring (MTEB's task
            attribute; rag-hier eval always does).

    Returns:
        An instance of a ``mteb.abstasks.AbsTaskRetrieval`` subclass, scored on nDCG@10.

    Raises:
        CorpusFormatError: The folder lacks a file, or a file is malformed (raised when MTEB loads it).

    """
    _require_mteb()
    from datasets import Dataset
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    from rag_hier.corpus.readers import beir_split_files, read_beir_corpus, read_qrels, read_queries

    root = Path(folder)
    queries_file, qrels_file = beir_split_files(root, split)
    task_name = name or f"Local{root.name}"

    class LocalBEIRRetrieval(AbsTaskRetrieval):
        metadata = TaskMetadata(
            name=task_name,
            description=f"BEIR-format retrieval set read from {root} (split {split}) by rag-hier.",
            reference=None,
            dataset={"path": str(root), "revision": "local"},
            type="Retrieval",
            category="t2t",
            modalities=["text"],
            eval_splits=[split],
            eval_langs=["eng-Latn"],
            main_score="ndcg_at_10",
            date=None,
            domains=None,
            task_subtypes=None,
            license=None,
            annotations_creators=None,
            dialect=None,
            sample_creation=None,
            bibtex_citation="",
        )

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            if self.data_loaded:
                return
            documents = read_beir_corpus(root)
            queries = read_queries(queries_file)
            qrels = {q: rel for q, rel in read_qrels(qrels_file).items() if q in queries}
            corpus = Dataset.from_dict(
                {
                    "id": [d.doc_id for d in documents],
                    "title": [d.title for d in documents],
                    "text": [d.paragraphs[0] if d.paragraphs else "" for d in documents],
                }
            )
            judged = [q for q in queries if q in qrels]
            query_ds = Dataset.from_dict({"id": judged, "text": [queries[q] for q in judged]})
            self.dataset = {
                "default": {split: {"corpus": corpus, "queries": query_ds, "relevant_docs": qrels, "top_ranked": None}}
            }
            self.data_loaded = True

    LocalBEIRRetrieval.ignore_identical_ids = ignore_identical_ids
    LocalBEIRRetrieval.__name__ = task_name
    return LocalBEIRRetrieval()
