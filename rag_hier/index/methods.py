"""Retrieval methods, each registered once: its strategies, its store extensions, its CLI plugin, its train command.

A method (DHR, HCE, EHI, SVDR, BM25, ...) plugs into several layers: search strategies (the retrieval registry,
:mod:`rag_hier.retrieval.registry`), store extensions that keep its data next to the passages
(:mod:`rag_hier.store.extensions`), an optional module of command-line hooks (:mod:`rag_hier.cli.plugins`) and an
optional trainer (its configuration and its ``rag-hier train`` command). One :class:`MethodSpec` names all of them,
by dotted path, and :func:`register_method` registers it once; every layer reads its part from here:

- the retrieval registry lists the method's :class:`StrategySpec` entries (``--strategy``, the adapters' strategies);
- the store imports an extension's module when a store names the extension (never a path read from disk);
- a backend keeps an extension's data as the extension's :attr:`ExtensionSpec.data` says (Milvus: ``"sparse-rows"``
  in a sparse vector field, ``"leaf"`` / ``"leaves"`` in a passage field, ``"files"`` as files), never by name;
- the command line imports the method's plugin module and lists its ``train`` command (:class:`TrainSpec`: its
  help line, its trainer and its configuration, which :func:`rag_hier.training.trainer_class` and
  :func:`rag_hier.training.config_class` load).

Everything here is a name, a dotted path or a help line, so this module imports nothing but the standard library:
``rag-hier --help`` reads it without NumPy, and the store layer (below the retrieval and CLI layers) may read it.

Example (a third-party method; the modules are imported only when used)::

    register_method(
        MethodSpec(
            "mine",
            strategies=(StrategySpec("mine", "my_pkg.retriever:MyRetriever", "one line of help",
                                     params="my_pkg.params:MyParams", extensions=("my-index",)),),
            extensions=(ExtensionSpec("my-index", "my_pkg.extension"),),
        )
    )
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ENGINE_DATA",
    "EngineData",
    "ExtensionSpec",
    "MethodSpec",
    "StrategySpec",
    "TrainSpec",
    "extension_spec",
    "extension_specs",
    "method",
    "methods",
    "on_method",
    "register_method",
]

EngineData = Literal["files", "sparse-rows", "leaf", "leaves"]
"""What an extension's data is, for a backend that can keep it inside its engine.

``"files"``: files only (the default; a backend stores them as they are). ``"sparse-rows"``: one sparse vector per
passage (the extension implements ``sparse_rows()``, ``add_sparse_rows()``, ``clear_rows()``). ``"leaf"``: one leaf
(an int) per passage; ``"leaves"``: several per passage (the extension implements ``leaf_rows()``); a search then
routes queries to leaves and scores the passages filed under them.
"""
ENGINE_DATA: tuple[str, ...] = ("files", "sparse-rows", "leaf", "leaves")


@dataclass(frozen=True)
class StrategySpec:
    """One search strategy of a method (see :class:`rag_hier.retrieval.registry.StrategyEntry`).

    Args:
        name: The strategy name (``--strategy NAME``).
        target: The retriever class, or ``"module:Class"`` (imported on first use).
        help: One line for ``--help`` and the docs.
        params: The parameters dataclass, or ``"module:Class"`` in a module without NumPy (``--help`` lists its
            flags without importing the retriever); ``None``: the retriever's ``Params``.
        fixed: Parameter values this strategy fixes (SVDR's ``mode`` for ``svdr-beta``).
        extensions: Store extensions the strategy needs (adapters build them on request).

    """

    name: str
    target: Any
    help: str
    params: Any = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExtensionSpec:
    """One store extension of a method.

    Args:
        name: The registry key stores record (``StoreExtension.name``).
        module: The module defining the extension class (imported when a store names ``name``).
        data: What its data is (:data:`EngineData`): where a backend with an engine of its own keeps it.

    """

    name: str
    module: str
    data: EngineData = "files"

    def __post_init__(self) -> None:
        if self.data not in ENGINE_DATA:
            raise ValueError(f"ExtensionSpec.data must be one of {', '.join(ENGINE_DATA)}; got {self.data!r}")


@dataclass(frozen=True)
class TrainSpec:
    """A method's trainer: ``rag-hier train NAME`` and the classes behind it.

    Args:
        help: The help line of ``rag-hier train NAME`` (the method's ``cli`` module defines its parser).
        trainer: The trainer class as ``"module:Class"`` (the shape of :class:`rag_hier.training.Trainer`).
        config: Its configuration class as ``"module:Class"``, in a module without NumPy or PyTorch (a
            :class:`rag_hier.training.TrainingConfig` subclass: ``rag-hier train NAME`` generates its flags from it).

    """

    help: str
    trainer: str
    config: str

    def __post_init__(self) -> None:
        for name in ("trainer", "config"):
            value = getattr(self, name)
            if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
                raise ValueError(f"TrainSpec.{name} must be 'module:Class'; got {value!r}")


@dataclass(frozen=True)
class MethodSpec:
    """A retrieval method: everything it plugs in, registered once with :func:`register_method`.

    Args:
        name: The method's name (``rag-hier train NAME`` when it has a train command).
        strategies: Its search strategies, in the order ``--strategy`` lists them.
        extensions: Its store extensions.
        cli: A module of command-line hooks (:mod:`rag_hier.cli.plugins` says which it may define).
        train: Its trainer (``cli`` then defines ``add_train_parser``, the ``rag-hier train NAME`` command).

    """

    name: str
    strategies: tuple[StrategySpec, ...] = ()
    extensions: tuple[ExtensionSpec, ...] = ()
    cli: str | None = None
    train: TrainSpec | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a method needs a name, got {self.name!r}")
        if self.train is not None and self.cli is None:
            raise ValueError(f"method {self.name!r} has a train command but no cli module to define it")


_METHODS: dict[str, MethodSpec] = {}
_LISTENERS: list[Callable[[MethodSpec, MethodSpec | None], None]] = []


def register_method(spec: MethodSpec, *, replace: bool = False) -> MethodSpec:
    """Register ``spec``: its strategies, extensions, CLI plugin and train command become known everywhere.

    Raises:
        ValueError: The method, one of its strategies or one of its extensions is registered already (by another
            method, or by this one without ``replace=True``).

    """
    old = _METHODS.get(spec.name)
    if old is not None and not replace:
        raise ValueError(f"method {spec.name!r} is already registered")
    for other in _METHODS.values():
        if other.name == spec.name:
            continue
        clash = {s.name for s in other.strategies} & {s.name for s in spec.strategies}
        clash |= {e.name for e in other.extensions} & {e.name for e in spec.extensions}
        if clash:
            raise ValueError(f"method {spec.name!r}: {', '.join(sorted(clash))} already belongs to {other.name!r}")
    for listener in list(_LISTENERS):  # a listener refusing the method (a strategy name taken) stops it here
        listener(spec, old)
    _METHODS[spec.name] = spec
    return spec


def on_method(listener: Callable[[MethodSpec, MethodSpec | None], None]) -> None:
    """Call ``listener(spec, replaced)`` for every method registered so far, then for every later registration."""
    _LISTENERS.append(listener)
    for spec in list(_METHODS.values()):
        listener(spec, None)


def methods() -> tuple[MethodSpec, ...]:
    """The registered methods, in registration order."""
    return tuple(_METHODS.values())


def method(name: str) -> MethodSpec:
    """The method registered as ``name`` (a ``KeyError`` listing the known ones otherwise)."""
    try:
        return _METHODS[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r}; known: {', '.join(_METHODS)}") from None


def extension_specs() -> dict[str, ExtensionSpec]:
    """Every registered extension by name, in registration order."""
    return {e.name: e for m in _METHODS.values() for e in m.extensions}


def extension_spec(name: str) -> ExtensionSpec | None:
    """The registered extension ``name`` (``None``: no method registered it)."""
    for m in _METHODS.values():
        for e in m.extensions:
            if e.name == name:
                return e
    return None


# -- the built-in methods: one registration each ----------------------------------------------------------
_PARAMS = "rag_hier.retrieval.params"

register_method(
    MethodSpec(
        "dense",
        strategies=(
            StrategySpec(
                "dense",
                "rag_hier.retrieval.dense:DenseRetriever",
                "dense passage search (exact or ANN per the store's index)",
                params=f"{_PARAMS}:DenseParams",
            ),
        ),
    )
)
register_method(
    MethodSpec(
        "dhr",
        strategies=(
            StrategySpec(
                "hierarchical",
                "rag_hier.retrieval.hierarchical:HierarchicalRetriever",
                "DHR: top-k1 documents, then only their passages; score = passage + lambda * document",
                params=f"{_PARAMS}:HierarchicalParams",
                extensions=("doc-index",),
            ),
        ),
        extensions=(ExtensionSpec("doc-index", "rag_hier.store.extensions.doc_index"),),
        cli="rag_hier.cli.dhr",
        train=TrainSpec(
            "train DHR document/passage encoders (In-Doc, In-Sec and BM25 negatives)",
            trainer="rag_hier.training.dhr.trainer:DHRTrainer",
            config="rag_hier.training.dhr.config:DHRTrainingConfig",
        ),
    )
)
register_method(
    MethodSpec(
        "hce",
        strategies=(
            StrategySpec(
                "tree",
                "rag_hier.retrieval.tree:TreeRetriever",
                "HCE cluster tree: beam search over the tree, exact scores for the passages of the leaves reached",
                params=f"{_PARAMS}:TreeParams",
                extensions=("tree",),
            ),
        ),
        extensions=(ExtensionSpec("tree", "rag_hier.store.extensions.tree", data="leaf"),),
        cli="rag_hier.cli.hce",
        train=TrainSpec(
            "fine-tune an encoder with HCE (hierarchical corpus encoder): unsupervised, supervised or joint",
            trainer="rag_hier.training.hce.trainer:HCETrainer",
            config="rag_hier.training.hce.config:HCEConfig",
        ),
    )
)
register_method(
    MethodSpec(
        "ehi",
        strategies=(
            StrategySpec(
                "ehi",
                "rag_hier.retrieval.ehi:EHIRetriever",
                "EHI learned tree: beam search over the trained indexer, exact scores for the passages of the leaves "
                "reached",
                params=f"{_PARAMS}:EHIParams",
                extensions=("ehi",),
            ),
        ),
        extensions=(ExtensionSpec("ehi", "rag_hier.store.extensions.ehi", data="leaves"),),
        cli="rag_hier.cli.ehi",
        train=TrainSpec(
            "train an EHI tree index (learned jointly with the encoder, or alone on its vectors)",
            trainer="rag_hier.training.ehi.trainer:EHITrainer",
            config="rag_hier.training.ehi.config:EHIConfig",
        ),
    )
)
register_method(
    MethodSpec(
        "svdr",
        strategies=(
            StrategySpec(
                "svdr-full",
                "rag_hier.retrieval.svdr:SvdrRetriever",
                "SVDR full search <E(q),E(d)> (missing E(d) encoded first)",
                params=f"{_PARAMS}:SvdrParams",
                fixed={"mode": "full"},
            ),
            StrategySpec(
                "svdr-alpha",
                "rag_hier.retrieval.svdr:SvdrRetriever",
                "SVDR alpha search <T(q),E(d)>: no query encoding",
                params=f"{_PARAMS}:SvdrParams",
                fixed={"mode": "alpha"},
            ),
            StrategySpec(
                "svdr-beta",
                "rag_hier.retrieval.svdr:SvdrRetriever",
                "SVDR beta search <E(q),T(d)> over the binary token index (no passage encoding)",
                params=f"{_PARAMS}:SvdrParams",
                fixed={"mode": "beta"},
                extensions=("token-index",),
            ),
            StrategySpec(
                "svdr-beta-rerank",
                "rag_hier.retrieval.svdr:SvdrRetriever",
                "SVDR beta search, top rerank_m re-ranked by <E(q),E(d)> (E(d) encoded on the fly and cached)",
                params=f"{_PARAMS}:SvdrParams",
                fixed={"mode": "beta-rerank"},
                extensions=("token-index",),
            ),
            StrategySpec(
                "svdr-lexical",
                "rag_hier.retrieval.svdr:SvdrRetriever",
                "idf-weighted token overlap over the binary token index (no model at all)",
                params=f"{_PARAMS}:SvdrParams",
                fixed={"mode": "lexical"},
                extensions=("token-index",),
            ),
        ),
        extensions=(
            ExtensionSpec("token-index", "rag_hier.store.extensions.token_index", data="sparse-rows"),
            ExtensionSpec("svdr-vectors", "rag_hier.store.extensions.svdr_vectors", data="sparse-rows"),
        ),
        cli="rag_hier.cli.svdr",
        train=TrainSpec(
            "train an SVDR vocabulary encoder (L_p + L_sp, beta-mined hard negatives)",
            trainer="rag_hier.training.svdr.trainer:SvdrTrainer",
            config="rag_hier.training.svdr.config:SvdrTrainingConfig",
        ),
    )
)
register_method(
    MethodSpec(
        "tied-atomic",
        cli="rag_hier.cli.tied_atomic",
        train=TrainSpec(
            "train a Tied-Atomic encoder-decoder embedding (generative retrieval as dense retrieval)",
            trainer="rag_hier.training.tied_atomic.trainer:TiedAtomicTrainer",
            config="rag_hier.training.tied_atomic.config:TiedAtomicConfig",
        ),
    )
)
register_method(
    MethodSpec(
        "bm25",
        strategies=(
            StrategySpec(
                "bm25",
                "rag_hier.retrieval.bm25:BM25Retriever",
                "BM25 (Lucene's variant, bm25s tokenization: stopwords, Snowball stemmer) over the passages' term "
                "frequencies",
                params=f"{_PARAMS}:BM25Params",
                extensions=("bm25",),
            ),
        ),
        extensions=(ExtensionSpec("bm25", "rag_hier.store.extensions.bm25"),),
        cli="rag_hier.cli.bm25",
    )
)
register_method(
    MethodSpec(
        "sparse-embedding",
        strategies=(
            StrategySpec(
                "sparse-embedding",
                "rag_hier.retrieval.sparse_embedding:SparseEmbeddingRetriever",
                "exact inner product of a caller's sparse query vector with the passages' stored sparse embeddings",
                params=f"{_PARAMS}:SparseEmbeddingParams",
                extensions=("sparse-embeddings",),
            ),
        ),
        extensions=(
            ExtensionSpec("sparse-embeddings", "rag_hier.store.extensions.sparse_embeddings", data="sparse-rows"),
        ),
    )
)
register_method(
    MethodSpec(
        "fusion",
        strategies=(
            StrategySpec(
                "fusion",
                "rag_hier.retrieval.fusion:FusionRetriever",
                "hybrid: several strategies' rankings fused (rrf, relative_score, dbsf or convex)",
                params="rag_hier.retrieval.fusion_params:FusionParams",
            ),
        ),
    )
)
register_method(
    MethodSpec(
        "tune",
        extensions=(ExtensionSpec("questions", "rag_hier.store.extensions.questions"),),
    )
)
