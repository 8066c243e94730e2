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
    if not p.stem.startswith("_") and p.stem not in ("common", "device_pack", "prepare")  # tools, no experiments
)


PREPARE = (sys.executable, "-m", "benchmarks.device.prepare")


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
    specs = [f"{name}:300" for name in SCRIPTS]  # an upper bound: each ends when done (minutes on a loaded host)
    proc = subprocess.run(
        ["bash", "benchmarks/device/run.sh", *specs],
        cwd=REPO,
        env=_env(SMOKE="1", OUT=str(tmp_path), LIMIT="100000"),
        capture_output=True,
        text=True,
        timeout=1800,
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
    assert list(dhr["runs"]) == ["untrained", dhr["variant"]]  # the untrained stage is saved before training starts
    assert [r["encoder"] for r in dhr["runs"]["untrained"]["results"]] == ["untrained"]
    trained = dhr["runs"][dhr["variant"]]
    assert [r["encoder"] for r in trained["results"]][:1] == ["untrained"] and "| variant |" in trained["paired"]
    tied = json.loads((tmp_path / "tied_atomic.json").read_text())
    assert list(tied["runs"]) == ["minilm-base", "minilm-ft", "tied", "dsi"]
    assert tied["runs"]["minilm-ft"]["loss"] == "MNRL dot scale 1.0"  # Tied-Atomic's similarity and temperature
    assert all(0.0 <= run["metrics"]["ndcg@10"] <= 1.0 for run in tied["runs"].values())
    dsi = tied["runs"]["dsi"]  # the paper's DSI baseline by default, with its losses at the start and the end
    assert dsi["objective"] == "seq2seq" and set(dsi["probe"]) == {"start", "end"}
    assert dsi["docid_init"] == "random" and dsi["probe"]["start"]["retrieval"]["first_state_std"] > 0.0
    ehi = json.loads((tmp_path / "ehi.json").read_text())  # joint EHI with the end-to-end options, then its sweep
    assert ehi["trainings"]["joint"]["finished"] and ehi["trainings"]["joint"]["periods"]
    assert ehi["trainings"]["de"]["finished"]  # the dual encoder beside it, without the balance term
    assert ehi["sweeps"] == {"sweep-joint": 0, "sweep-de": 0} and (tmp_path / "ehi.tar").exists()


def test_a_stage_that_overruns_the_call_leaves_the_earlier_stages_on_disk(tmp_path: Path) -> None:
    # run_stages writes the result file after every stage; a call killed in the middle of the second stage (as
    # run.sh's timeout kills a script past its deadline) must still hold the first stage's figures
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from benchmarks.device.common import Deadline, run_stages\n"
        "def slow():\n"
        "    print('second stage started', flush=True)\n"
        "    time.sleep(600)\n"
        "    return {'never': 1}\n"
        "run_stages({}, [('first', lambda: {'ndcg@10': 0.5}), ('second', slow)], Deadline(600),\n"
        "           out=Path(sys.argv[1]), name='overrun', needs=0)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True, env=_env()
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "second stage started"
    proc.kill()
    proc.wait()
    result = json.loads((tmp_path / "overrun.json").read_text())
    assert result["runs"] == {"first": {"ndcg@10": 0.5}}


def test_the_runner_gives_a_script_no_more_than_what_is_left_of_the_call(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", "benchmarks/device/run.sh", "gpu_check:400"],
        cwd=REPO,
        env=_env(SMOKE="1", OUT=str(tmp_path), LIMIT="40"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "gpu_check: skipped" in proc.stdout  # 40 - 20 s left: under the 30 s minimum
    assert not (tmp_path / "gpu_check.json").exists()


def test_prepare_packs_the_model_and_data_of_the_chosen_scripts_and_reports_the_carried_size(tmp_path: Path) -> None:
    from benchmarks.common.smoke import smoke_data, tiny_model

    model = tiny_model(tmp_path / "model")
    data = smoke_data(tmp_path / "smoke")
    dest = tmp_path / "dev"
    proc = subprocess.run(
        [*PREPARE, "--data", str(data), "--dest", str(dest), "--for", "tied_atomic", "--model", model, "--no-wheels"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (dest / "model" / "packed.safetensors").is_file() and (dest / "scifact").is_dir()
    assert not (dest / "xquad_en").exists()  # tied_atomic reads SciFact only
    assert "carried: tree" in proc.stdout and "MiB of the device tool's 64 MiB" in proc.stdout
    small = ("--max-mib", "0.001")
    too_small = subprocess.run(
        [*PREPARE, "--data", str(data), "--dest", str(dest), "--for", "dhr", "--model", model, "--no-wheels", *small],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert too_small.returncode == 1 and "passes --max-mib" in too_small.stderr
    assert (dest / "xquad_en").is_dir() and not (dest / "scifact").exists()
