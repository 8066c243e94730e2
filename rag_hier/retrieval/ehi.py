"""EHIRetriever (strategy ``ehi``): beam search over a store's learned EHI tree, scoring only the passages it reaches.

The query vector is routed through the trained indexer (:class:`rag_hier.index.ehi.EHIIndexer`): at every level
the ``beam`` most probable prefixes (product of the per-level softmax probabilities) are kept; the passages
filed under the ``beam`` leaves reached are scored exactly by the encoder (inner product) and ranked. A beam of
``B^H`` (every leaf) scores everything. ``Hit.scores`` is empty (the score is the inner product); per query,
``QueryResult.stats`` reports ``passages_scored`` (the passages whose vectors were compared with the query,
measured: leaves are not balanced, so ``beam / B^H`` is not the fraction), ``fraction_scored`` (their share of
the passages filed) and ``leaves_visited``. Filters restrict which passages of the reached leaves may be
scored and returned. The store needs the ``ehi`` extension (``rag-hier index ... --ehi DIR``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.retrieval.base import ParameterError, Ranking, Retriever
from rag_hier.retrieval.params import EHI_DEFAULT_BEAM as DEFAULT_BEAM
from rag_hier.retrieval.params import EHIParams
from rag_hier.retrieval.tree import beam_rankings
from rag_hier.store.contract import engine_extension, remote_vectors

if TYPE_CHECKING:
    from rag_hier.store.extensions.ehi import EHIExtension

__all__ = ["DEFAULT_BEAM", "EHIParams", "EHIRetriever"]


class EHIRetriever(Retriever[np.ndarray]):
    """Search a store through its ``ehi`` extension (a trained EHI indexer; ``rag-hier index --ehi DIR``).

    Example:
        >>> result = EHIRetriever(store, beam=8).run(Queries(texts=["tides"]), top_k=5)[0]  # doctest: +SKIP
        >>> result.stats["fraction_scored"]  # doctest: +SKIP
        0.06

    """

    name = "ehi"
    Params = EHIParams
    params: EHIParams

    def _extension(self) -> EHIExtension:
        from rag_hier.store.extensions.ehi import EHIExtension

        ext = self.store.extension("ehi")
        if not isinstance(ext, EHIExtension):
            raise StoreError(
                f"{self.store.location} has no EHI index; attach a trained indexer with "
                "`rag-hier index ... --ehi DIR` or store.add_extension(EHIExtension(DIR))"
            )
        return ext

    def beam_for(self, n_leaves: int) -> int:
        """The beam used on an indexer of ``n_leaves`` leaves (an error if the given beam is larger)."""
        beam = self.params.beam
        if beam is None:
            return min(DEFAULT_BEAM, n_leaves)
        if beam > n_leaves:
            raise ParameterError(f"beam must be in 1..{n_leaves} (the EHI tree's leaves), got {beam}")
        return beam

    def rank(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """Beam search, then exact scores for the passages of the leaves reached."""
        from rag_hier.index.ehi import ehi_search

        ext = self._extension()
        indexer = ext.require_indexer()
        beam = self.beam_for(indexer.n_leaves)
        if ext.rowids.size == 0:
            stats = {"passages_scored": 0.0, "fraction_scored": 0.0, "leaves_visited": float(beam)}
            return [Ranking.empty(**stats) for _ in queries]
        if remote_vectors(self.store):
            return self._rank_in_engine(ext, queries, k, allowed, beam)
        item_vectors = ext.item_vectors(self.store)
        result = ehi_search(
            indexer,
            queries,
            lambda pos: item_vectors[pos],
            ext.assignment(),
            beam=beam,
            top_k=k,
            item_ids=ext.rowids,
            allowed_ids=allowed,
        )
        return beam_rankings(result, k, ext.rowids.size)

    def _rank_in_engine(
        self, ext: EHIExtension, queries: np.ndarray, k: int, allowed: np.ndarray | None, beam: int
    ) -> list[Ranking]:
        """Route here, then ONE dense search per query inside the engine over the passages of the leaves reached.

        The engine filters by the passages' leaf field when it keeps one (``search_in_leaves``: Milvus'
        ``array_contains_any(ehi_leaves, [...])``), else by the leaves' rowids (``search_dense(allowed=...)``).
        """
        indexer = ext.require_indexer()
        engine = engine_extension(self.store, "ehi")
        leaves, _ = indexer.route(np.asarray(queries, np.float32), beam)
        assignment = ext.assignment()
        allowed_ids = None if allowed is None else np.asarray(allowed, dtype=np.int64)
        out = []
        for i in range(leaves.shape[0]):
            items = ext.rowids[assignment.members(leaves[i])]
            if allowed_ids is not None:
                items = items[np.isin(items, allowed_ids)]
            stats = {
                "passages_scored": float(items.size),
                "fraction_scored": items.size / ext.rowids.size,
                "leaves_visited": float(beam),
            }
            if items.size == 0:
                out.append(Ranking.empty(**stats))
                continue
            n = min(k, int(items.size))
            if engine is not None:
                scores, ids = engine.search_in_leaves("ehi", queries[i : i + 1], n, leaves[i], allowed)
            else:
                scores, ids = self.store.search_dense(queries[i : i + 1], n, items)
            keep = ids[0] >= 0
            out.append(
                Ranking(ids[0][keep], scores[0][keep].astype(np.float64), stats=stats, exhausted=int(keep.sum()) < k)
            )
        return out
