"""TreeRetriever (strategy ``tree``): beam search over a store's HCE cluster tree, scoring only the passages it reaches.

At each tree level the ``beam`` best nodes (by inner product with their centroid) among the children of the
nodes kept above are kept; the passages in the leaves reached are scored exactly. A beam as wide as the
widest level scores everything (exhaustive search). ``Hit.scores`` is empty (the score is the inner product);
per query, ``QueryResult.stats`` reports ``passages_scored`` (the passages whose vectors were compared with the
query, measured), ``fraction_scored`` (their share of the tree's passages) and ``leaves_visited``. Filters
restrict which passages of the reached leaves may be returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rag_hier.errors import StoreError
from rag_hier.retrieval.base import Ranking, Retriever
from rag_hier.retrieval.params import TREE_DEFAULT_BEAM as DEFAULT_BEAM
from rag_hier.retrieval.params import TreeParams
from rag_hier.store.contract import engine_extension, remote_vectors

if TYPE_CHECKING:
    from rag_hier.index.tree import TreeSearchResult
    from rag_hier.store.extensions.tree import TreeExtension

__all__ = ["DEFAULT_BEAM", "TreeParams", "TreeRetriever", "beam_rankings"]


class TreeRetriever(Retriever[np.ndarray]):
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

    def rank(
        self, queries: np.ndarray, k: int, allowed: np.ndarray | None, *, min_documents: int | None = None
    ) -> list[Ranking]:
        """Beam search, then exact scores for the passages of the leaves reached."""
        ext = self._extension()
        tree = ext.require_tree()
        if remote_vectors(self.store):
            return self._rank_in_engine(queries, k, allowed)
        item_vectors = ext.item_vectors(self.store)
        result = tree.search(
            queries, beam=self.params.beam, top_k=k, vectors_of=lambda pos: item_vectors[pos], allowed_ids=allowed
        )
        return beam_rankings(result, k, len(tree))

    def _rank_in_engine(self, queries: np.ndarray, k: int, allowed: np.ndarray | None) -> list[Ranking]:
        """Beam search over the centroids here, then one dense search restricted to the reached leaves.

        On a backend whose vectors are remote (Milvus), the leaves' passages are scored by the engine (exact
        over a FLAT index) instead of gathering their vectors: filtered by the passages' leaf field when the
        engine keeps one (``search_in_leaves``), else by the leaves' rowids (``search_dense(allowed=...)``).
        """
        tree = self._extension().require_tree()
        engine = engine_extension(self.store, "tree")
        total = max(len(tree), 1)
        allowed_set = None if allowed is None else np.asarray(allowed, dtype=np.int64)
        out = []
        for i in range(queries.shape[0]):
            leaves = tree.beam_leaves(queries[i], self.params.beam)
            items = tree.leaf_items(leaves)
            if allowed_set is not None:
                items = items[np.isin(items, allowed_set)]
            if items.size == 0:
                out.append(Ranking.empty(passages_scored=0.0, fraction_scored=0.0, leaves_visited=0.0))
                continue
            if engine is not None:
                scores, ids = engine.search_in_leaves(
                    "tree", queries[i : i + 1], min(k, int(items.size)), leaves, allowed
                )
            else:
                scores, ids = self.store.search_dense(queries[i : i + 1], min(k, int(items.size)), items)
            keep = ids[0] >= 0
            out.append(
                Ranking(
                    ids[0][keep],
                    scores[0][keep].astype(np.float64),
                    stats={
                        "passages_scored": float(items.size),
                        "fraction_scored": items.size / total,
                        "leaves_visited": float(leaves.size),
                    },
                    exhausted=int(keep.sum()) < k,
                )
            )
        return out


def beam_rankings(result: TreeSearchResult, k: int, total: int) -> list[Ranking]:
    """One :class:`Ranking` per query of a beam search (tree or EHI), with what it scored of ``total`` passages."""
    out = []
    for i in range(result.ids.shape[0]):
        keep = result.ids[i] >= 0
        scored = int(result.scored[i])
        out.append(
            Ranking(
                result.ids[i][keep],
                result.scores[i][keep].astype(np.float64),
                stats={
                    "passages_scored": float(scored),
                    "fraction_scored": scored / max(total, 1),
                    "leaves_visited": float(result.leaves_visited[i]),
                },
                exhausted=int(keep.sum()) < k,
            )
        )
    return out
