"""The device scripts (benchmarks/device/) run their CPU smoke mode here, so they cannot rot between GPU sessions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    p.stem
    for p in (REPO / "benchmarks" / "device").glob("*.py")
    if not p.stem.startswith("_") and p.stem not in ("common", "device_pack")  # device_pack: a tool, no experiment
)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PY": sys.executable, **extra}


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_device_script_answers_help_from_the_repository_root(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.device.{name}", "--help"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "--smoke" in proc.stdout and "Expected" in proc.stdout  # each says how long it takes on the device


def test_the_device_runner_runs_every_script_in_smoke_mode(tmp_path: Path) -> None:
    specs = [f"{name}:120" for name in SCRIPTS]
    proc = subprocess.run(
        ["bash", "benchmarks/device/run.sh", *specs],
        cwd=REPO,
        env=_env(SMOKE="1", OUT=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    logs = {p.name: p.read_text()[-3000:] for p in tmp_path.glob("*.log")}
    assert proc.returncode == 0, (proc.stdout, logs)
    gpu = json.loads((tmp_path / "gpu_check.json").read_text())
    assert gpu["smoke"] is True and gpu["device"] == "cpu"
    assert gpu["encode"]["device_float32"]["docs_per_s"] > 0
    assert gpu["search"]["faiss_cpu_flat"]["qps"] > 0
    assert 0.0 <= gpu["store"]["queries_on_cpu"]["ndcg@10"] <= 1.0
    assert gpu["train"]["cpu_float32"]["steps"] == 2
    hce = json.loads((tmp_path / "hce.json").read_text())
    assert set(hce["runs"]) == {"base", "ct-bm25", "hce-s", "hce-j"}
    assert all(run["steps_done"] == 4 for name, run in hce["runs"].items() if name != "base")
    pairs = [(p["a"], p["b"]) for p in hce["compare"]["pairs"]]
    assert pairs[:3] == [("base", "ct-bm25"), ("base", "hce-s"), ("base", "hce-j")]
    assert (tmp_path / "corpus-hce-s.npy").exists() and (tmp_path / "queries-hce-j.npy").exists()
    dhr = json.loads((tmp_path / "dhr.json").read_text())
    (run,) = dhr["runs"].values()
    assert [r["encoder"] for r in run["results"]][:1] == ["untrained"] and "| variant |" in run["paired"]
    tied = json.loads((tmp_path / "tied_atomic.json").read_text())
    assert list(tied["runs"]) == ["minilm-base", "minilm-ft", "tied", "dsi"]
    assert all(0.0 <= run["metrics"]["ndcg@10"] <= 1.0 for run in tied["runs"].values())
    dsi = tied["runs"]["dsi"]  # the paper's DSI baseline by default, with its losses at the start and the end
    assert dsi["objective"] == "seq2seq" and set(dsi["probe"]) == {"start", "end"}
    ehi = json.loads((tmp_path / "ehi.json").read_text())  # joint EHI with the end-to-end options, then its sweep
    assert ehi["trainings"]["joint"]["finished"] and ehi["trainings"]["joint"]["periods"]
    assert ehi["sweeps"] == {"sweep-joint": 0} and (tmp_path / "ehi.tar").exists()
