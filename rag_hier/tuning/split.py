"""Splitting judged queries into a training part and a dev part that decides adoption."""

from __future__ import annotations

import numpy as np

from rag_hier.errors import RagHierError
from rag_hier.eval.judged import JudgedQueries

__all__ = ["fold_split", "seen_documents", "split_dev"]


def _groups(judged: JudgedQueries) -> list[list[str]]:
    """Queries that share a relevant document, transitively, form one group (in first-seen order)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for qid in judged.queries:
        find(f"q:{qid}")
        for doc in judged.documents_of(qid):
            a, b = find(f"q:{qid}"), find(f"d:{doc}")
            if a != b:
                parent[b] = a
    groups: dict[str, list[str]] = {}
    for qid in judged.queries:
        groups.setdefault(find(f"q:{qid}"), []).append(qid)
    return list(groups.values())


def split_dev(
    judged: JudgedQueries, fraction: float, seed: int, *, mode: str = "grouped"
) -> tuple[JudgedQueries, JudgedQueries]:
    """Split by query, seeded, into a training part and a dev part of at least ``fraction`` of the queries.

    Modes:

    * ``"grouped"``: groups of queries linked by a shared relevant document (see
      :meth:`JudgedQueries.documents_of`) are shuffled and moved to the dev part whole, so no training query is
      about a dev query's documents;
    * ``"random"``: queries are drawn one by one;
    * ``"mixed"``: half of the dev part is drawn as ``"grouped"`` draws it (queries about documents training
      never sees), the other half one by one from the rest (queries like the training ones).

    Returns:
        ``(train, dev)``.

    Raises:
        RagHierError: ``fraction`` outside (0, 1), an unknown mode, or a split that leaves either part empty.

    """
    if not 0 < fraction < 1:
        raise RagHierError(f"--dev-fraction must be between 0 and 1 (exclusive), got {fraction}")
    if mode not in ("grouped", "random", "mixed"):
        raise RagHierError(f"dev split must be grouped, random or mixed, got {mode!r}")
    rng = np.random.default_rng(seed)
    groups = _groups(judged) if mode != "random" else [[q] for q in judged.queries]
    want = fraction * len(judged)
    dev: list[str] = []
    grouped_want = want / 2 if mode == "mixed" else want
    for i in rng.permutation(len(groups)).tolist():
        if len(dev) >= grouped_want:
            break
        dev.extend(groups[i])
    if mode == "mixed":
        taken = set(dev)
        rest = [q for q in judged.queries if q not in taken]
        for i in rng.permutation(len(rest)).tolist():
            if len(dev) >= want or len(dev) >= len(judged) - 1:
                break
            dev.append(rest[i])
    dev_set = set(dev)
    train = [q for q in judged.queries if q not in dev_set]
    if not dev or len(dev) < 2:
        raise RagHierError(
            f"the dev split of {judged.source} is empty or holds one query ({len(judged)} judged queries, "
            f"--dev-fraction {fraction}): give more judged queries or a larger --dev-fraction"
        )
    if not train:
        raise RagHierError(
            f"no training queries are left in {judged.source} after the dev split ({len(judged)} judged queries "
            f"linked by shared documents into {len(groups)} group(s)); give more judged queries or a smaller "
            "--dev-fraction"
        )
    return judged.subset(train), judged.subset([q for q in judged.queries if q in dev_set])


def seen_documents(train: JudgedQueries, dev: JudgedQueries) -> tuple[list[str], list[str]]:
    """Dev query ids whose relevant documents include one a training query is about, and the others."""
    known = set().union(*(train.documents_of(q) for q in train.queries)) if len(train) else set()
    seen = [q for q in dev.queries if dev.documents_of(q) & known]
    return seen, [q for q in dev.queries if q not in set(seen)]


def fold_split(judged: JudgedQueries, folds: int, seed: int, *, mode: str = "mixed") -> list[list[str]]:
    """``folds`` disjoint parts of the query ids for cross-fitting, seeded, as even in size as the units allow.

    ``"grouped"``: groups of queries linked by a shared relevant document stay in one fold (scikit-learn's
    ``GroupKFold`` idea: each fold's queries are about documents the other folds' queries never name);
    ``"random"`` and ``"mixed"``: queries are dealt one by one, so every fold follows the judged queries' own mix.

    Raises:
        RagHierError: Fewer units (queries or groups) than folds, or fewer than two queries per fold.

    """
    groups = _groups(judged) if mode == "grouped" else [[q] for q in judged.queries]
    if len(groups) < folds or len(judged) < 2 * folds:
        unit = "groups of queries linked by shared documents" if mode == "grouped" else "judged queries"
        raise RagHierError(
            f"cross-fitting {judged.source} in {folds} folds needs at least {folds} {unit} and two queries per fold; "
            f"it has {len(judged)} judged queries in {len(groups)} unit(s): give more judged queries"
            + (", fewer folds or --dev-split random" if mode == "grouped" else " or fewer folds")
        )
    rng = np.random.default_rng(seed)
    parts: list[list[str]] = [[] for _ in range(folds)]
    for i in rng.permutation(len(groups)).tolist():
        smallest = min(range(folds), key=lambda k: (len(parts[k]), k))
        parts[smallest].extend(groups[i])
    if min(len(p) for p in parts) < 2:
        raise RagHierError(
            f"cross-fitting {judged.source} in {folds} folds leaves a fold with fewer than two queries (its queries "
            "are linked by shared documents into uneven groups): use fewer folds or --dev-split random"
        )
    order = {q: i for i, q in enumerate(judged.queries)}
    return [sorted(p, key=order.__getitem__) for p in parts]
