"""Every benchmark script answers ``--help`` from the repository root and runs its smallest setting on the tiny model.

Scripts are discovered (``benchmarks/<folder>/<script>.py``; names starting with ``_`` are helpers), so a new one is
covered by the ``--help`` test at once, and :func:`test_every_script_has_a_smoke_setting` fails until ``SMOKE`` (or
``NO_SMOKE``, with a reason) names it. The few runs in ``HEAVY`` take longer than the suite can spend on them and
run with ``RAG_HIER_BENCH_SMOKE=all``. The smoke runs happen in this process (``runpy``, as ``python -m`` runs
them), on generated data (:mod:`benchmarks.common.smoke`) and the tiny random model, writing only under
``tmp_path``; what a script changes in the process (environment, logging, thread counts, signal handlers) is put
back afterwards.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import runpy
import shlex
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = sorted(p.parent.name for p in (REPO / "benchmarks").glob("*/__init__.py") if p.parent.name != "common")
SCRIPTS = sorted(
    f"benchmarks.{folder}.{p.stem}"
    for folder in FOLDERS
    for p in (REPO / "benchmarks" / folder).glob("*.py")
    if not p.stem.startswith("_") and p.stem != "common"
)


def run(module: str, args: str) -> tuple[str, list[str]]:
    """One run of ``module`` (``args`` split as a shell would; ``{data}``, ``{model}``, ``{out}`` filled in later)."""
    return module, shlex.split(args)


R, T, F, S, D = (f"benchmarks.{x}." for x in ("retrieval", "training", "frameworks", "stress", "device"))
EHI_INPUTS = "--data {data} --base-model {model} --out {out}"
EHI_ENCODE = run(R + "bench_ehi", "encode " + EHI_INPUTS)
DENSE_SMALL = "--sizes 1000 --kinds ivf,hnsw --queries 10 --target 0.9 --no-memory --out-dir {out}"

SMOKE: dict[str, list[tuple[str, list[str]]]] = {
    # retrieval
    R + "bench_dense": [run(R + "bench_dense", DENSE_SMALL)],
    R + "bench_dhr_speed": [
        run(
            R + "bench_dhr_speed",
            "--docs 50 --passages-per-doc 4 --queries 10 --k1 5,10 --lambdas 0,1 --dim 32 --chunk 100 --out {out}",
        )
    ],
    R + "bench_dhr_prune": [
        run(R + "bench_dhr_prune", "--data {data} --model {model} --out {out} --k1 2 5 --max-passage-words 20"),
    ],
    R + "bench_dhr_xquad": [
        run(R + "bench_dhr_xquad", "--data {data} --base-model {model} --out {out} --only-untrained"),
    ],
    R + "bench_ehi": [
        EHI_ENCODE,
        run(R + "bench_ehi", "sweep --split test --branching 4 --no-tree --epochs 1 " + EHI_INPUTS),
        *(
            run(
                R + "bench_ehi",
                f"train --split dev --branching 4 --steps 1 --encoder-scope {s} --tag=-{s} " + EHI_INPUTS,
            )
            for s in ("last", "all")
        ),
        run(
            R + "bench_ehi",
            "paired --split dev --vectors joint-dev-B4H1-s0-last joint-dev-B4H1-s0-all "
            "--indexer-of joint-dev-B4H1-s0-last joint-dev-B4H1-s0-all " + EHI_INPUTS,
        ),
    ],
    R + "bench_fusion": [run(R + "bench_fusion", "--data {data} --model {model} --out {out} --depth 10")],
    R + "bench_hce": [
        run(R + "bench_hce", "base --data {data} --base-model {model} --out {out} --max-seq-length 32"),
    ],
    R + "bench_hit_path": [
        run(R + "bench_hit_path", "--n 2000 --kinds flat --queries 20 --block 10 --batch 10 --raw --out {out}"),
    ],
    R + "bench_hit_rows_memory": [
        run(R + "bench_hit_rows_memory", "--sizes 500 --queries 3 --commits 2 --rounds 1 --words 5 --out {out}"),
    ],
    R + "bench_scifact": [
        run(R + "bench_scifact", "--data {data} --model {model} --out {out}/scifact.json --top-k 10"),
    ],
    R + "bench_sentence_segmenters": [run(R + "bench_sentence_segmenters", "--data {data} --docs 20")],
    R + "bench_splitter": [
        run(R + "bench_splitter", "--data {data} --eval --model {model} --out {out}/splitter.json"),
    ],
    R + "bench_startup": [run(R + "bench_startup", "--rounds 1 --commands=--version")],
    R + "bench_svdr": [
        run(
            R + "bench_svdr",
            "--data {data} --model {model} --phase untrained --out {out}/svdr.json --cache {out}/cache "
            "--model-dir {out}/model",
        ),
    ],
    R + "bench_tied_atomic": [run(R + "bench_tied_atomic", "bm25 --data {data} --out {out}")],
    R + "bench_token_build": [run(R + "bench_token_build", "--data {data} --rounds 1 --out {out}/token.json")],
    R + "profile_search_path": [run(R + "profile_search_path", "--n 2000 --queries 20")],
    R + "report": [
        run(R + "bench_dense", "--sizes 500 --kinds flat --queries 5 --no-memory --out-dir {out}"),
        run(R + "report", "--out {out}"),
    ],
    # training
    T + "bench_attention_dropout": [run(T + "bench_attention_dropout", "4 32 1 --model {model}")],
    T + "bench_train_cost": [
        run(
            T + "bench_train_cost",
            "hce-u --dataset scifact --data {data} --model {model} --steps 1 --no-anchor --out {out}",
        ),
    ],
    T + "bench_tune": [
        run(T + "bench_tune", "scifact --data {data} --model {model} --steps 2 --no-test --out {out}"),
    ],
    T + "bench_tune_cost": [
        run(T + "bench_tune_cost", "scifact --data {data} --model {model} --out {out} --set max_steps=2"),
        run(T + "bench_tune_cost", "scifact-small --data {data} --model {model} --out {out} --small 12 --seeds 1"),
    ],
    T + "bench_tune_null": [run(T + "bench_tune_null", "--seeds 1 --epochs 0.1 --out {out}/null.json")],
    T + "ehi_dev_grid": [EHI_ENCODE, run(T + "ehi_dev_grid", "smoke 'branching=4, epochs=1' " + EHI_INPUTS)],
    T + "svdr_dev_pilot": [
        run(
            T + "svdr_dev_pilot",
            "2e-5 1.0 1 4 --untrained --data {data} --model {model} --dev-queries 10 --max-steps 2",
        ),
    ],
    # frameworks
    F + "bench_framework_filters": [
        run(F + "bench_framework_filters", "--n 2000 --dim 16 --queries 6 --after-write-queries 3 --out {out}/f.json"),
    ],
    F + "bench_framework_writes": [
        run(F + "bench_framework_writes", "--sizes 200,400 --dim 16 --writes 3 --out-dir {out}"),
    ],
    F + "bench_embedded_stores": [run(F + "bench_embedded_stores", "--smoke --out {out}/embedded.json")],
    F + "bench_haystack": [run(F + "bench_haystack", "--n 500 --dim 16 --queries 5")],
    F + "bench_llama_index": [
        run(F + "bench_llama_index", "--n 300 --dim 16 --queries 5 --after-write-queries 2 --out {out}/llama.json"),
    ],
    F + "profile_llama_index": [run(F + "profile_llama_index", "--n 300 --dim 16 --queries 5 --rounds 1")],
    F + "bench_meta_aggregates": [run(F + "bench_meta_aggregates", "--n 200 --repeats 1")],
    F + "bench_milvus": [
        run(F + "bench_milvus", "--n 500 --dim 16 --queries 5 --kinds flat --embedded --dhr --out {out}/milvus.json"),
    ],
    F + "bench_milvus_cli": [
        run(F + "bench_milvus_cli", "--data {data} --model {model} --docs 20 --queries 5 --rounds 1 --out {out}"),
    ],
    F + "bench_milvus_fields": [
        run(F + "bench_milvus_fields", "--n 60 --queries 5 --data {data} --model {model} --out {out}"),
    ],
    F + "bench_milvus_svdr": [run(F + "bench_milvus_svdr", "60 5 --data {data} --model {model}")],
    F + "bench_store_open": [run(F + "bench_store_open", "--n 200 --dim 8 --rounds 1 --no-imports --out {out}/o.json")],
    # stress
    S + "bench_writer_wait": [
        run(
            S + "bench_writer_wait",
            "--data {data} --model {model} --modes groups --rounds 1 --seconds 1 --hold 1 --settle 1 --out {out}",
        ),
    ],
    S + "stress_store": [run(S + "stress_store", "kill --trials 1"), run(S + "stress_store", "readers --writes 10")],
    # device: the experiments run their --smoke mode through run.sh in test_device_scripts.py
    D + "device_pack": [
        run(
            D + "device_pack",
            "pack {model} {out}/packed --texts {data}/scifact/corpus.jsonl.gz {data}/scifact/queries.jsonl",
        ),
        run(D + "device_pack", "unpack {out}/packed {out}/unpacked"),
    ],
}
"""Per script, the runs of its smallest setting (module, arguments): ``{data}``, ``{model}``, ``{out}`` filled in."""

NO_SMOKE = {
    name: "a device experiment: its --smoke mode runs through benchmarks/device/run.sh in test_device_scripts.py"
    for name in SCRIPTS
    if name.startswith(D) and name != D + "device_pack"
}
"""Scripts without a run here, and why."""

HEAVY = {
    F + "bench_milvus_cli": "two stores built and seven `rag-hier` processes, three of them on Milvus Lite: ~60 s here",
    S + "bench_writer_wait": "a store index, `rag-hier eval` reader processes and a holder process: ~20 s here",
    F + "bench_milvus_fields": "three Milvus Lite collections, each behind its own server process: ~15 s here",
    F + "bench_milvus_svdr": "a migration into two Milvus Lite layouts, each reopened per mode: ~15 s here",
}
"""Smoke runs skipped unless ``RAG_HIER_BENCH_SMOKE=all`` (the time they take on a shared 2-core machine)."""

NEEDS = {
    F + "bench_framework_filters": ("haystack", "llama_index.core"),
    F + "bench_framework_writes": ("haystack", "llama_index.core"),
    F + "bench_haystack": ("haystack",),
    F + "bench_llama_index": ("llama_index.core",),
    F + "profile_llama_index": ("llama_index.core",),
    F + "bench_milvus": ("milvus_lite", "psutil"),
    F + "bench_milvus_cli": ("milvus_lite",),
    F + "bench_milvus_fields": ("milvus_lite",),
    F + "bench_milvus_svdr": ("milvus_lite",),
    T + "bench_attention_dropout": ("psutil",),
    T + "bench_train_cost": ("psutil",),
    R + "bench_scifact": ("bm25s",),
    R + "bench_svdr": ("bm25s",),
    R + "bench_tied_atomic": ("bm25s",),
}
"""Optional packages (the ``bench`` and framework extras) a script's smoke run needs; skipped without them."""


def test_every_script_has_a_smoke_setting() -> None:
    missing = sorted(set(SCRIPTS) - set(SMOKE) - set(NO_SMOKE))
    assert not missing, f"add the smallest setting of {missing} to SMOKE (or a reason to NO_SMOKE)"
    assert not set(SMOKE) & set(NO_SMOKE)
    assert sorted(set(SMOKE) | set(NO_SMOKE)) == SCRIPTS, "SMOKE names a script that does not exist"


@pytest.mark.parametrize("module", SCRIPTS)
def test_script_answers_help_from_the_repository_root(module: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage:" in proc.stdout


@pytest.fixture(scope="session")
def smoke_inputs(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> dict[str, str]:
    """A generated data folder (``scifact/``, ``xquad_en/``) and the suite's tiny random model."""
    sys.path.insert(0, str(REPO))  # the benchmarks package, as `python -m` from the repository root sees it
    try:
        from benchmarks.common.smoke import smoke_data
    finally:
        sys.path.remove(str(REPO))
    return {"data": str(smoke_data(tmp_path_factory.mktemp("benchmark-smoke"))), "model": tiny_model_path}


@pytest.fixture
def in_repository(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run as ``python -m`` from the repository root would, then put back what a script changed in the process."""
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    environ = dict(os.environ)
    argv = sys.argv[:]
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {n: lg.level for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    disabled = logging.root.manager.disable
    sigterm = signal.getsignal(signal.SIGTERM)
    threads = _threads()
    with warnings.catch_warnings():
        # runpy's note when a script was imported before (e.g. bench_dense by profile_search_path): harmless here
        warnings.filterwarnings("ignore", "'benchmarks\\..*' found in sys.modules", RuntimeWarning)
        yield
    sys.argv[:] = argv
    os.environ.clear()
    os.environ.update(environ)
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, value in levels.items():
        logging.getLogger(name).setLevel(value)
    logging.disable(disabled)
    signal.signal(signal.SIGTERM, sigterm)
    _set_threads(threads)


def _threads() -> dict[str, int]:
    out = {}
    if "torch" in sys.modules:
        out["torch"] = sys.modules["torch"].get_num_threads()
    if "faiss" in sys.modules:
        out["faiss"] = sys.modules["faiss"].omp_get_max_threads()
    return out


def _set_threads(threads: dict[str, int]) -> None:
    if "torch" in threads:
        sys.modules["torch"].set_num_threads(threads["torch"])
    if "faiss" in threads:
        sys.modules["faiss"].omp_set_num_threads(threads["faiss"])


@pytest.mark.usefixtures("in_repository")
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_script_runs_its_smallest_setting(
    script: str, smoke_inputs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if script in HEAVY and os.environ.get("RAG_HIER_BENCH_SMOKE") != "all":
        pytest.skip(f"{HEAVY[script]}; RAG_HIER_BENCH_SMOKE=all runs it")
    for name in NEEDS.get(script, ()):
        if importlib.util.find_spec(name.split(".")[0]) is None or importlib.util.find_spec(name) is None:
            pytest.skip(f"{script} needs {name}, not installed (pip install 'rag-hier[bench]')")
    values = {**smoke_inputs, "out": str(tmp_path)}
    # a script's default results folder, and its children's, under tmp_path (never benchmarks/out)
    monkeypatch.setattr("benchmarks.common.report.OUT", tmp_path / "default-out")
    monkeypatch.setenv("RAG_HIER_BENCH_OUT", str(tmp_path / "default-out"))
    for module, args in SMOKE[script]:
        sys.argv[:] = [module, *(a.format(**values) for a in args)]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as stop:
            assert stop.code in (0, None), f"{module} {sys.argv[1:]} exited with {stop.code}"
