"""Paired comparisons (rag_hier.eval.compare) against direct scipy computations, and per-query files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rag_hier.errors import CorpusFormatError, RagHierError
from rag_hier.eval import compare_systems, holm, paired_difference, read_per_query, write_per_query


def _systems(seed: int = 0, n: int = 300) -> dict[str, np.ndarray]:
    """Per-query nDCG-like values: a baseline, a better system, a system with many ties to the baseline."""
    rng = np.random.default_rng(seed)
    base = np.clip(rng.beta(2, 2, size=n), 0, 1)
    better = np.clip(base + rng.normal(0.07, 0.2, size=n), 0, 1)
    tied = base.copy()
    changed = rng.random(n) < 0.3
    tied[changed] = np.clip(base[changed] + rng.normal(0.0, 0.2, size=int(changed.sum())), 0, 1)
    return {"base": base, "better": better, "tied": tied}


def _old_bench_hce(a: np.ndarray, b: np.ndarray, seed: int) -> dict[str, float]:
    """What benchmarks/retrieval/bench_hce.py computed by hand before the code moved into the library."""
    rng = np.random.default_rng(seed)
    boot = rng.integers(0, len(a), size=(10_000, len(a)))
    d = b - a
    means = d[boot].mean(axis=1)
    return {
        "delta": float(d.mean()),
        "ci_low": float(np.percentile(means, 2.5)),
        "ci_high": float(np.percentile(means, 97.5)),
        "p_value": float(stats.ttest_rel(b, a).pvalue),
        "wins": int((d > 1e-9).sum()),
        "losses": int((d < -1e-9).sum()),
        "ties": int((np.abs(d) <= 1e-9).sum()),
    }


@pytest.mark.parametrize("seed", [0, 1, 42])
def test_paired_difference_reproduces_the_bench_hce_computation(seed: int) -> None:
    s = _systems(seed)
    for other in ("better", "tied"):
        ours = paired_difference(s["base"], s[other], seed=seed)
        old = _old_bench_hce(s["base"], s[other], seed)
        for key, value in old.items():
            assert ours[key] == pytest.approx(value, abs=1e-12), (other, key)


def test_paired_difference_against_scipy_directly() -> None:
    s = _systems(3, n=120)
    a, b = s["base"], s["better"]
    d = b - a
    boot = stats.bootstrap(
        (d,), np.mean, n_resamples=5000, confidence_level=0.9, method="percentile", rng=np.random.default_rng(7)
    )
    t = stats.ttest_rel(b, a)
    perm = stats.permutation_test(
        (b, a),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        n_resamples=5000,
        rng=np.random.default_rng(7),
    )
    r_t = paired_difference(a, b, test="t", seed=7, n_resamples=5000, confidence=0.9)
    r_perm = paired_difference(a, b, test="randomization", seed=7, n_resamples=5000, confidence=0.9)
    assert r_t["ci_low"] == pytest.approx(boot.confidence_interval.low, abs=1e-12)
    assert r_t["ci_high"] == pytest.approx(boot.confidence_interval.high, abs=1e-12)
    assert r_t["p_value"] == pytest.approx(t.pvalue, rel=1e-12)
    assert r_perm["p_value"] == pytest.approx(perm.pvalue, rel=1e-12)
    assert r_t["mean_baseline"] == pytest.approx(a.mean()) and r_t["mean_system"] == pytest.approx(b.mean())
    assert r_t["wins"] + r_t["losses"] + r_t["ties"] == 120


def test_seeded_and_deterministic() -> None:
    s = _systems(5)
    one = paired_difference(s["base"], s["better"], test="randomization", seed=3)
    two = paired_difference(s["base"], s["better"], test="randomization", seed=3)
    other = paired_difference(s["base"], s["better"], test="randomization", seed=4)
    assert one == two
    assert (one["ci_low"], one["ci_high"]) != (other["ci_low"], other["ci_high"])


def test_no_spread_and_single_query() -> None:
    same = paired_difference([0.5, 0.2, 0.9], [0.5, 0.2, 0.9])
    assert same["delta"] == 0 and same["ci_low"] == same["ci_high"] == 0 and same["p_value"] == 1.0
    assert same["ties"] == 3
    shifted = paired_difference([0.1, 0.2], [0.2, 0.3])
    assert shifted["delta"] == pytest.approx(0.1) and shifted["p_value"] == 0.0
    one = paired_difference([0.1], [0.4])
    assert one["delta"] == pytest.approx(0.3) and math.isnan(one["p_value"])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"test": "wilcoxon"}, "unknown paired test"),
        ({"confidence": 1.5}, "confidence"),
        ({"n_resamples": 0}, "n_resamples"),
    ],
)
def test_paired_difference_rejects_bad_arguments(kwargs, fragment: str) -> None:
    with pytest.raises(RagHierError, match=fragment):
        paired_difference([0.1, 0.2], [0.2, 0.3], **kwargs)
    with pytest.raises(RagHierError, match="one length"):
        paired_difference([0.1, 0.2], [0.2])


def test_holm_by_hand() -> None:
    # m = 4: sorted p 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06 (monotone), 0.5
    assert holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1, then monotone
    assert holm([0.3, 0.2]) == pytest.approx([0.4, 0.4])
    assert holm([0.2]) == [0.2]
    out = holm([0.01, math.nan, 0.04])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


def _as_per_query(values: np.ndarray, metric: str = "ndcg@10") -> dict[str, dict[str, float]]:
    return {metric: {f"q{i}": float(v) for i, v in enumerate(values)}}


def test_compare_systems_three_systems_holm_and_layout() -> None:
    s = _systems(9)
    per = {name: _as_per_query(v) for name, v in s.items()}
    result = compare_systems(per, seed=9)
    assert result.systems == ("base", "better", "tied") and result.queries == 300
    by = {d.system: d for d in result.differences}
    for name in ("better", "tied"):
        direct = paired_difference(s["base"], s[name], seed=9)
        assert by[name].delta == pytest.approx(direct["delta"])
        assert by[name].p_value == pytest.approx(direct["p_value"])
    assert [by["better"].p_holm, by["tied"].p_holm] == pytest.approx(holm([by["better"].p_value, by["tied"].p_value]))
    assert result.means["better"]["ndcg@10"] == pytest.approx(s["better"].mean())
    md = result.to_markdown()
    assert "p (Holm)" in md and "| ndcg@10 | better |" in md and "300 queries; baseline: base" in md
    body = result.to_dict()
    json.dumps(body)  # JSON-ready
    assert body["holm"] is True and len(body["differences"]) == 2
    two = compare_systems({"base": per["base"], "better": per["better"]}, seed=9)
    assert two.differences[0].p_holm == two.differences[0].p_value
    assert "p (Holm)" not in two.to_markdown()


def test_compare_systems_rejects_mismatched_queries_and_metrics() -> None:
    a = {"ndcg@10": {"q1": 0.1, "q2": 0.2}}
    b = {"ndcg@10": {"q1": 0.3, "q3": 0.2}}
    with pytest.raises(RagHierError, match="do not hold the same queries"):
        compare_systems({"a": a, "b": b})
    with pytest.raises(RagHierError, match="has no values of 'mrr@10'"):
        compare_systems({"a": a, "b": a}, metrics=["mrr@10"])
    with pytest.raises(RagHierError, match="at least two"):
        compare_systems({"a": a})


# ------------------------------------------------------------------------------------------------------
# per-query files
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["per.tsv", "per.json"])
def test_per_query_round_trip(tmp_path: Path, name: str) -> None:
    per = {"ndcg@10": {"q1": 0.25, "q2": 1.0}, "mrr@10": {"q1": 0.5, "q2": 1.0}}
    path = tmp_path / name
    write_per_query(per, path)
    assert read_per_query(path) == per
    if name.endswith(".tsv"):
        lines = path.read_text().splitlines()
        assert lines[:2] == ["ndcg@10\tq1\t0.250000", "mrr@10\tq1\t0.500000"]
        assert lines[-2:] == ["ndcg@10\tall\t0.625000", "mrr@10\tall\t0.750000"]
    else:
        assert json.loads(path.read_text())["mean"] == {"ndcg@10": 0.625, "mrr@10": 0.75}


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        ("ndcg@10\tq1\t0.5\nndcg@10\tq1\n", 2, "expected 3 columns"),
        ("ndcg@10\tq1\t0.5\nndcg@10\tq2\thigh\n", 2, "'high' is not a number"),
        ("ndcg@10\tq1\t0.5\n\nndcg@10\tq1\t0.6\n", 3, "given twice (first on line 1)"),
        ("ndcg@10\tq1\tnan\n", 1, "not a finite number"),
    ],
)
def test_per_query_malformed(tmp_path: Path, content: str, line: int, fragment: str) -> None:
    path = tmp_path / "per.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusFormatError) as exc:
        read_per_query(path)
    assert str(exc.value).startswith(f"{path}:{line}: ") and fragment in str(exc.value)


def test_per_query_json_malformed(tmp_path: Path) -> None:
    path = tmp_path / "per.json"
    path.write_text('{"per_query": {"q1": {"ndcg@10": "x"}}}', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match="not a number"):
        read_per_query(path)
    path.write_text("{broken", encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=f"{path}:1: malformed JSON"):
        read_per_query(path)


def test_compare_systems_does_not_depend_on_query_order() -> None:
    s = _systems(2, n=80)
    per = {name: _as_per_query(v) for name, v in s.items()}
    rng = np.random.default_rng(0)
    shuffled = {}
    for name, values in per.items():
        order = list(values["ndcg@10"])
        rng.shuffle(order)
        shuffled[name] = {"ndcg@10": {q: values["ndcg@10"][q] for q in order}}
    assert compare_systems(per).to_dict() == compare_systems(shuffled).to_dict()
