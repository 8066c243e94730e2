"""Switching a store's model: kill -9 at every step leaves the old or the new state; other processes never mix."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rag_hier import HierStore
from rag_hier.testing import build_tiny_model

STEPS = [
    "switch_encoded",  # the switch's own steps: new vectors in memory, then the model copied into the store
    "switch_model_installed",
    "before_sqlite_commit",  # the commit's (each of the five is killed in tests/store/test_crash_safety.py)
    "after_sqlite_commit",
    "after_manifest",
]
COMMITTED = {"after_sqlite_commit", "after_manifest"}
QUERY = "red blue green"

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import rag_hier.store.core as core
    from rag_hier import HierStore

    path, model, crash_at = sys.argv[1], sys.argv[2], sys.argv[3]

    def step(name):
        if name == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    core._step = step
    HierStore.open(path).adopt_model(model)
    os._exit(0)
    """
)


@pytest.fixture(scope="module")
def other_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("other") / "m", seed=7))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, judged_template, other_model) -> dict[str, list[str]]:
    """The query's top 5 before and after a completed switch."""
    root = tmp_path_factory.mktemp("switch")
    shutil.copytree(judged_template[0], root / "store")
    store = HierStore.open(root / "store")
    old = [h.doc_id for h in store.search(QUERY, top_k=5)]
    store.adopt_model(other_model)
    new = [h.doc_id for h in store.search(QUERY, top_k=5)]
    store.close()
    assert old != new
    return {"old": old, "new": new}


@pytest.mark.parametrize("crash_at", STEPS)
def test_kill_at_each_step_of_a_switch(tmp_path, judged_template, other_model, outcomes, crash_at) -> None:
    path = tmp_path / "store"
    shutil.copytree(judged_template[0], path)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), other_model, crash_at], capture_output=True, text=True, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    store = HierStore.open(path)  # loads, checksums hold (rolling the commit forward when it happened)
    current = store.model_info["current"]
    top = [h.doc_id for h in store.search(QUERY, top_k=5)]
    if crash_at in COMMITTED:
        assert current["stored"] and top == outcomes["new"]
    else:
        assert not current.get("stored") and top == outcomes["old"]
    assert store.count_vectors() == 40
    # the store goes on: a later switch completes and cleans up models no state names
    store.adopt_model(other_model)
    assert [h.doc_id for h in store.search(QUERY, top_k=5)] == outcomes["new"]
    kept = {p.name for p in (path / "models").iterdir()}
    named = {m["model"].split("/", 1)[1] for m in store.model_info.values() if m and m.get("stored")}
    assert named <= kept and not any(name.startswith(".incoming") for name in kept)
    store.close()


READER = textwrap.dedent(
    """
    import json, sys, time
    from rag_hier import HierStore

    path, query, seconds, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    store = HierStore.open(path, read_only=True)
    seen = []
    store.search(query, top_k=5)
    print("ready", flush=True)
    end = time.time() + seconds
    while time.time() < end:
        seen.append([h.doc_id for h in store.search(query, top_k=5)])
    json.dump(seen, open(out, "w"))
    """
)


def test_readers_see_the_old_model_or_the_new_never_a_mix(tmp_path, judged_template, other_model, outcomes) -> None:
    path = tmp_path / "store"
    shutil.copytree(judged_template[0], path)
    out = tmp_path / "seen.json"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path), QUERY, "8", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    store = HierStore.open(path)
    switches = 0
    deadline = time.time() + 5
    while time.time() < deadline:  # back and forth while the reader searches
        if store.model_info["previous"] is None or not store.model_info["current"].get("stored"):
            store.adopt_model(other_model)
        else:
            store.rollback_model()
        switches += 1
    store.close()
    _, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    seen = json.loads(Path(out).read_text())
    assert switches >= 2 and len(seen) > switches
    allowed = (outcomes["old"], outcomes["new"])
    mixed = [s for s in seen if s not in allowed]
    assert not mixed, mixed[:3]
    assert outcomes["new"] in seen  # the reader followed the switch
