"""TreeRetriever (strategy ``tree``): beam search over a store's HCE cluster tree, scoring only the passages it reaches.

At each tree level the ``beam`` best nodes (by inner product with their centroid) among the children of the
nodes kept above are kept; the passages in the leaves reached are scored exactly. A beam as wide as the
widest level scores everything (exhaustive search). ``Hit.scores`` is empty (the score is the inner product);
per query, ``QueryResult.stats`` reports ``passages_scored`` (the passages whose vectors were compared with the
query, measured), ``fraction_scored`` (their share of the tree's passages) and ``leaves_visited``. Filters
restrict which passages of the reached leaves may be returned. The search itself is
:class:`~rag_hier.retrieval.leaf_routed.LeafRoutedRetriever`'s, shared with EHI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_hier.errors import StoreError
from rag_hier.retrieval.leaf_routed import LeafRoutedRetriever, beam_rankings
from rag_hier.retrieval.params import TREE_DEFAULT_BEAM as DEFAULT_BEAM
from rag_hier.retrieval.params import TreeParams

if TYPE_CHECKING:
    from rag_hier.store.candidates import LeafRouting
    from rag_hier.store.extensions.tree import TreeExtension

__all__ = ["DEFAULT_BEAM", "TreeParams", "TreeRetriever", "beam_rankings"]


class TreeRetriever(LeafRoutedRetriever):
    """Search a store through its ``tree`` extension (HCE cluster tree; ``rag-hier index --tree``).

    Example:
        >>> result = TreeRetriever(store, beam=4).run(Queries(texts=["tides"]), top_k=5)[0]  # doctest: +SKIP
        >>> result.stats["fraction_scored"]  # doctest: +SKIP
        0.12

    """

    name = "tree"
    Params = TreeParams
    params: TreeParams

    @property
    def beam(self) -> int:
        """Nodes kept per level."""
        return self.params.beam

    def _extension(self) -> TreeExtension:
        from rag_hier.store.extensions.tree import TreeExtension

        ext = self.store.extension("tree")
        if not isinstance(ext, TreeExtension):
            raise StoreError(
                f"{self.store.location} has no cluster tree; build one with `rag-hier index ... --tree` "
                "or store.add_extension(TreeExtension())"
            )
        return ext

    def routing(self) -> LeafRouting:
        """The store's cluster tree (built: an error otherwise)."""
        ext = self._extension()
        ext.require_tree()
        return ext

    def beam_of(self, routing: LeafRouting) -> int:
        """The ``beam`` parameter: nodes kept per level."""
        return self.params.beam
