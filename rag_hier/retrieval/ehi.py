"""EHIRetriever (strategy ``ehi``): beam search over a store's learned EHI tree, scoring only the passages it reaches.

The query vector is routed through the trained indexer (:class:`rag_hier.index.ehi.EHIIndexer`): at every level
the ``beam`` most probable prefixes (product of the per-level softmax probabilities) are kept; the passages
filed under the ``beam`` leaves reached are scored exactly by the encoder (inner product) and ranked. A beam of
``B^H`` (every leaf) scores everything. ``Hit.scores`` is empty (the score is the inner product); per query,
``QueryResult.stats`` reports ``passages_scored`` (the passages whose vectors were compared with the query,
measured: leaves are not balanced, so ``beam / B^H`` is not the fraction), ``fraction_scored`` (their share of
the passages filed) and ``leaves_visited``. Filters restrict which passages of the reached leaves may be
scored and returned. The store needs the ``ehi`` extension (``rag-hier index ... --ehi DIR``). The search itself
is :class:`~rag_hier.retrieval.leaf_routed.LeafRoutedRetriever`'s, shared with the HCE tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.retrieval.base import ParameterError, Ranking
from rag_hier.retrieval.leaf_routed import LeafRoutedRetriever
from rag_hier.retrieval.params import EHI_DEFAULT_BEAM as DEFAULT_BEAM
from rag_hier.retrieval.params import EHIParams

if TYPE_CHECKING:
    from rag_hier.store.candidates import LeafRouting
    from rag_hier.store.extensions.ehi import EHIExtension

__all__ = ["DEFAULT_BEAM", "EHIParams", "EHIRetriever"]


class EHIRetriever(LeafRoutedRetriever):
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

    def routing(self) -> LeafRouting:
        """The store's EHI leaf lists (with their indexer: an error otherwise)."""
        ext = self._extension()
        ext.require_indexer()
        return ext

    def beam_of(self, routing: LeafRouting) -> int:
        """:meth:`beam_for` the indexer's leaves."""
        return self.beam_for(self._extension().require_indexer().n_leaves)

    def rank(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """Beam search, then exact scores for the passages of the leaves reached (none when nothing is filed)."""
        ext = self._extension()
        beam = self.beam_for(ext.require_indexer().n_leaves)
        if ext.rowids.size == 0:
            stats = {"passages_scored": 0.0, "fraction_scored": 0.0, "leaves_visited": float(beam)}
            return [Ranking.empty(**stats) for _ in queries]
        return super().rank(queries, k, allowed, min_documents=min_documents)
