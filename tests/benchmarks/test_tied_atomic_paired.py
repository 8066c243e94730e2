"""bench_tied_atomic's ``paired`` stage: the paired per-query difference of two saved runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.retrieval import bench_tied_atomic


def _run(out: Path, name: str, values: dict[str, float], steps: int = 87) -> None:
    run = {"metrics": {}, "per_query_ndcg@10": values, "budget": {"steps": steps}}
    (out / f"{name}.json").write_text(json.dumps(run), encoding="utf-8")


def test_paired_compares_two_runs_query_by_query(tmp_path: Path) -> None:
    a = {f"q{i}": 0.5 for i in range(20)}
    b = {q: v + (0.1 if i % 4 else -0.1) for i, (q, v) in enumerate(a.items())}  # 15 better, 5 worse
    _run(tmp_path, "tied", a)
    _run(tmp_path, "minilm-ft-dot1", b, steps=250)
    bench_tied_atomic.main(["paired", "--out", str(tmp_path), "--compare", "tied", "minilm-ft-dot1"])
    result = json.loads((tmp_path / "paired.json").read_text())
    stats = result["ndcg@10"]
    assert stats["delta"] == pytest.approx(0.05) and (stats["wins"], stats["losses"]) == (15, 5)
    assert stats["ci_low"] < stats["delta"] < stats["ci_high"]
    # the compared runs' budgets, not this command line's defaults (paired trains nothing)
    assert result["budgets"] == {"tied": {"steps": 87}, "minilm-ft-dot1": {"steps": 250}} and "budget" not in result


def test_paired_refuses_runs_scored_on_different_queries(tmp_path: Path) -> None:
    _run(tmp_path, "a", {"q1": 0.1, "q2": 0.2})
    _run(tmp_path, "b", {"q1": 0.1, "q3": 0.2})
    with pytest.raises(SystemExit, match="different queries"):
        bench_tied_atomic.main(["paired", "--out", str(tmp_path), "--compare", "a", "b"])
