"""TreeRetriever: beam search over a store's HCE cluster tree, scoring only the passages in the leaves reached."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.retrieval.dense import Aggregate, aggregate_max_passage
from rag_hier.retrieval.hit import Hit
from rag_hier.store.filters import Predicate

if TYPE_CHECKING:
    from rag_hier.store.store import HierStore
    from rag_hier.store.tree import TreeExtension

__all__ = ["DEFAULT_BEAM", "TreeHits", "TreeRetriever"]

Filters = Mapping[str, Any] | Predicate | None
DEFAULT_BEAM = 8
"""Nodes kept per tree level when no beam is given."""


@dataclass(frozen=True)
class TreeHits:
    """One query's tree-search result: the ranked hits and how much of the collection was scored.

    Args:
        hits: Ranked hits.
        passages_scored: Passages whose vectors were compared with the query.
        passages_total: Passages in the tree.
        leaves_visited: Leaves the beam reached.

    """

    hits: list[Hit]
    passages_scored: int
    passages_total: int
    leaves_visited: int

    @property
    def fraction_scored(self) -> float:
        """``passages_scored / passages_total``."""
        return self.passages_scored / max(self.passages_total, 1)


class TreeRetriever:
    """Search a :class:`~rag_hier.store.HierStore` through its ``tree`` extension (HCE cluster tree).

    At each tree level the ``beam`` best nodes (by inner product with their centroid) among the children
    of the nodes kept above are kept; the passages in the leaves reached are scored exactly. A beam as
    wide as the widest level scores everything (= exhaustive search). Every hit's ``scores`` records
    ``passages_scored`` and ``fraction_scored`` for its query; :meth:`search_detailed` returns them per
    query as :class:`TreeHits`. Filters restrict which passages of the reached leaves may be returned.

    Args:
        store: A store with a ``tree`` extension (``rag-hier index --tree``).
        beam: Default beam width.

    """

    def __init__(self, store: HierStore, beam: int = DEFAULT_BEAM) -> None:
        if beam < 1:
            raise ValueError(f"beam must be >= 1, got {beam}")
        self.store = store
        self.beam = beam

    def _extension(self) -> TreeExtension:
        from rag_hier.store.tree import TreeExtension

        ext = self.store.extension("tree")
        if not isinstance(ext, TreeExtension):
            raise StoreError(
                f"{self.store.path} has no cluster tree; build one with `rag-hier index ... --tree` "
                "or store.add_extension(TreeExtension())"
            )
        return ext

    @overload
    def search(  # type: ignore[overload-overlap]  # str is also a Sequence[str]; str wins
        self,
        query: str,
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
        beam: int | None = None,
    ) -> list[Hit]: ...
    @overload
    def search(
        self,
        query: Sequence[str],
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
        beam: int | None = None,
    ) -> list[list[Hit]]: ...
    def search(
        self,
        query: str | Sequence[str],
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
        beam: int | None = None,
    ) -> list[Hit] | list[list[Hit]]:
        """Search with query text: ``str`` → ``list[Hit]``; a list of queries → one list per query."""
        single = isinstance(query, str)
        queries: list[str] = [query] if isinstance(query, str) else list(query)
        if not queries:
            return []
        vectors = self.store.encode_queries(queries)
        results = [r.hits for r in self.search_detailed(vectors, top_k, filters, aggregate, beam)]
        return results[0] if single else results

    def search_vectors(
        self,
        vectors: np.ndarray,
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
        beam: int | None = None,
    ) -> list[list[Hit]]:
        """Search with query vectors ``(n, dim)``; one ranked list per query."""
        return [r.hits for r in self.search_detailed(vectors, top_k, filters, aggregate, beam)]

    def search_detailed(
        self,
        vectors: np.ndarray,
        top_k: int = 10,
        filters: Filters = None,
        aggregate: Aggregate = "passage",
        beam: int | None = None,
    ) -> list[TreeHits]:
        """Search with query vectors; per query the hits plus how many passages were scored."""
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if aggregate not in ("passage", "doc"):
            raise ValueError(f"aggregate must be 'passage' or 'doc', got {aggregate!r}")
        width = self.beam if beam is None else beam
        if width < 1:
            raise ValueError(f"beam must be >= 1, got {width}")
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        ext = self._extension()
        tree = ext.require_tree()
        if q.shape[0] == 0:
            return []
        item_vectors = ext.item_vectors(self.store)
        allowed = self.store.allowed_rowids(filters)
        k = top_k if aggregate == "passage" else max(top_k * 4, 32)
        result = tree.search(q, beam=width, top_k=k, vectors_of=lambda pos: item_vectors[pos], allowed_ids=allowed)
        records = self.store.records_by_rowid(result.ids.ravel().tolist())
        out: list[TreeHits] = []
        for i in range(q.shape[0]):
            n_scored = int(result.scored[i])
            extra = {"passages_scored": float(n_scored), "fraction_scored": n_scored / max(len(tree), 1)}
            hits: list[Hit] = []
            for s, rid in zip(result.scores[i].tolist(), result.ids[i].tolist(), strict=True):
                rec = records.get(rid)
                if rec is None:
                    continue
                hits.append(
                    Hit(
                        passage_id=rec["id"],
                        doc_id=rec["doc_id"],
                        text=rec["content"],
                        title_path=rec["title_path"],
                        meta=rec["meta"],
                        score=float(s),
                        rank=len(hits) + 1,
                        position=rec["position"],
                        scores=extra,
                    )
                )
            if aggregate == "doc":
                hits = aggregate_max_passage(hits, top_k)
            out.append(TreeHits(hits, n_scored, len(tree), int(result.leaves_visited[i])))
        return out
