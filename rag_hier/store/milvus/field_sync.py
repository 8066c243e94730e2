"""Writing the extensions kept in Milvus fields at a commit: sparse rows in ``C__sparse``, leaves on passage rows.

See :mod:`rag_hier.store.milvus.fields` for what these fields are. A commit calls :meth:`FieldSync._sync_sparse`
for each sparse extension (its new rows, the versions they replace retired) and :meth:`FieldSync._sync_leaves`
once for the leaf extensions (the passages whose leaves changed get a new row version).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp

from rag_hier.store.milvus.base import MilvusBase
from rag_hier.store.milvus.capabilities import TRUE
from rag_hier.store.milvus.fields import LeafRows, SparseRows, engine_data, leaf_values, sparse_dicts
from rag_hier.store.milvus.filters import str_list
from rag_hier.store.milvus.schema import INSERT_ROWS, PASSAGE_FIELDS

if TYPE_CHECKING:
    from rag_hier.store.contract import StoreExtension

__all__ = ["FieldSync"]


class FieldSync(MilvusBase):
    """The commit's writes of sparse rows and leaf fields (under the open batch's generation)."""

    def _sync_sparse(self, ext: StoreExtension, tag: str, *, full: bool) -> int:
        """Write a sparse extension's new rows under this batch's generation, retiring the versions they replace.

        Returns the rows written.
        """
        b = self._require_batch()
        names = self._collections
        ids, rows = cast(SparseRows, ext).sparse_rows()
        ids = np.asarray(ids, np.int64)
        if not full:
            gone = sorted(b.removed | set(ids.tolist()))
            if gone and self._sparse_collection_present():
                cond = f"tag == {str_list([tag])[1:-1]} and {self._view().expr('s')}"
                old = self._query_in(names.sparse, "rowid", gone, cond, ["vid"])
                b.retired["s"].update(int(r["vid"]) for r in old)
        if ids.size == 0:
            if full:
                self._create_sparse_collection()
            return 0
        self._create_sparse_collection()
        mat = sp.csr_matrix(rows)
        row_of = np.repeat(np.arange(mat.shape[0]), np.diff(mat.indptr))
        bad = np.unique(row_of[~np.isfinite(mat.data) | (mat.data < 0)])
        for i in bad[:1]:  # name the passage (Milvus takes non-negative weights only)
            rowid = int(ids[i])
            found = self._query_in(names.passages, "rowid", [rowid], self._view().expr("p"), ["rowid", "passage_id"])
            where = f"passage {found[0]['passage_id']!r}" if found else f"rowid {rowid}"
            sparse_dicts(mat[int(i)], f"{self.location}: extension {ext.name!r}, {where}")
        dicts = sparse_dicts(mat, f"{self.location}: extension {ext.name!r}", ids)
        keep = [j for j, d in enumerate(dicts) if d]  # a row with no positive weight can never score
        vid0 = self._alloc("next_vid", len(keep))
        out = [
            {"vid": vid0 + n, "tag": tag, "rowid": int(ids[j]), "gen": b.gen, "vec": dicts[j]}
            for n, j in enumerate(keep)
        ]
        for i in range(0, len(out), INSERT_ROWS):
            self._call("writing sparse rows", "insert", names.sparse, out[i : i + INSERT_ROWS])
        return len(out)

    def _sync_leaves(self, plans: Mapping[str, tuple[StoreExtension, bool]]) -> None:
        """Set the leaf fields of the passages whose leaves changed (all of them for a new or rebuilt extension).

        A row written by this batch is replaced in place (it is invisible until the commit); an older row gets a
        new version under this batch's generation and the old one is retired, as for any passage change.
        """
        b = self._require_batch()
        passages = self._collections.passages
        wanted = {
            column: leaf_values(engine_data(ext.name), *cast(LeafRows, ext).leaf_rows())
            for column, (ext, _) in plans.items()
        }
        view = self._view()
        fields = [*PASSAGE_FIELDS, "vector", *self._leaf_columns]
        if any(full for _, full in plans.values()):
            rows = self._passage_rows(TRUE, view, fields)
        elif b.added:
            rows = self._query_in(passages, "rowid", sorted(b.added), view.expr("p"), fields)
        else:
            return
        in_place: list[dict[str, Any]] = []
        versions: list[dict[str, Any]] = []
        for r in rows:
            changed = False
            for column, values in wanted.items():
                want = values.get(int(r["rowid"]))
                have = r.get(column)
                if (list(have) if isinstance(have, list | tuple) else have) != want:
                    r[column] = want
                    changed = True
            if not changed:
                continue
            row = {f: v for f, v in r.items() if v is not None}
            if int(r["gen"]) == b.gen:
                in_place.append(row)
            else:
                b.retired["p"].add(int(r["vid"]))
                row["vid"], row["gen"] = self._alloc("next_vid", 1), b.gen
                versions.append(row)
        for i in range(0, len(in_place), INSERT_ROWS):
            self._call("writing leaves", "upsert", passages, in_place[i : i + INSERT_ROWS])
        self._insert(passages, versions)
