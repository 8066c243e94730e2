"""Per-query metric files: trec_eval ``-q`` style TSV (``metric<TAB>query<TAB>value``) or JSON.

The TSV lists every query's value of every metric, query by query, then one ``all`` row per metric with
the mean, as ``trec_eval -q`` does. The JSON is ``{"metrics": [...], "per_query": {query: {metric:
value}}, "mean": {metric: value}}``. :func:`read_per_query` reads both (the ``all`` rows and ``mean`` are
recomputed, not trusted) so that ``rag-hier compare`` can pair systems without their runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from rag_hier.errors import CorpusFormatError

__all__ = ["PerQuery", "is_per_query_file", "read_per_query", "write_per_query"]

PerQuery = dict[str, dict[str, float]]
"""metric name → {query id → value}."""


def write_per_query(per_query: Mapping[str, Mapping[str, float]], path: str | Path) -> None:
    """Write per-query values; JSON when ``path`` ends in ``.json``, else the trec_eval ``-q`` TSV.

    Args:
        per_query: Metric name → {query id → value}, every metric over the same queries.
        path: Output file.

    """
    p = Path(path)
    metrics = list(per_query)
    qids = list(next(iter(per_query.values()), {}))
    means = {m: (sum(v.values()) / len(v) if v else 0.0) for m, v in per_query.items()}
    if p.suffix.lower() == ".json":
        body = {
            "metrics": metrics,
            "per_query": {q: {m: per_query[m][q] for m in metrics} for q in qids},
            "mean": means,
        }
        p.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        return
    lines = [f"{m}\t{q}\t{per_query[m][q]:.6f}\n" for q in qids for m in metrics]
    lines += [f"{m}\tall\t{means[m]:.6f}\n" for m in metrics]
    p.write_text("".join(lines), encoding="utf-8")


def is_per_query_file(path: str | Path) -> bool:
    """Whether ``path`` looks like a per-query file (JSON, or 3 columns) rather than a TREC run (6)."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        return True
    with p.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                return len(line.split()) == 3
    return False


def _number(value: object, path: Path, line: int | None, what: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise CorpusFormatError(f"{what} {value!r} is not a number", path=str(path), line=line) from exc
    if not math.isfinite(number):
        raise CorpusFormatError(f"{what} {value!r} is not a finite number", path=str(path), line=line)
    return number


def read_per_query(path: str | Path) -> PerQuery:
    """Read a file written by :func:`write_per_query` (or by ``trec_eval -q``), leaving out ``all`` rows.

    Raises:
        CorpusFormatError: A missing file, malformed JSON or lines, a value that is not a number, a
            (metric, query) pair given twice, or no values at all; the message names the file and line.

    """
    p = Path(path)
    if not p.is_file():
        raise CorpusFormatError("per-query file does not exist", path=str(p))
    out: PerQuery = {}
    if p.suffix.lower() == ".json":
        try:
            body = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CorpusFormatError(f"malformed JSON: {exc.msg}", path=str(p), line=exc.lineno) from exc
        rows = body.get("per_query") if isinstance(body, dict) else None
        if not isinstance(rows, dict):
            raise CorpusFormatError("expected an object with a 'per_query' object", path=str(p))
        for qid, values in rows.items():
            if not isinstance(values, dict):
                raise CorpusFormatError(f"per_query[{qid!r}] must be an object of metric values", path=str(p))
            for metric, value in values.items():
                out.setdefault(metric, {})[qid] = _number(value, p, None, f"per_query[{qid!r}][{metric!r}]")
    else:
        seen: dict[tuple[str, str], int] = {}
        with p.open(encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                cols = line.split()
                if len(cols) != 3:
                    raise CorpusFormatError(
                        f"expected 3 columns 'metric query value' (trec_eval -q), got {len(cols)}", path=str(p), line=n
                    )
                metric, qid, raw = cols
                if qid == "all":
                    continue
                first = seen.setdefault((metric, qid), n)
                if first != n:
                    raise CorpusFormatError(
                        f"metric {metric!r} of query {qid!r} given twice (first on line {first})", path=str(p), line=n
                    )
                out.setdefault(metric, {})[qid] = _number(raw, p, n, "value")
    if not out:
        raise CorpusFormatError("no per-query values found", path=str(p))
    return out
