"""A write killed part-way leaves a loadable store holding either the old or the new state."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rag_hier import HierStore, Passage

STEPS = [
    "index_files_written",
    "before_sqlite_commit",
    "after_sqlite_commit",
    "after_index_rename",
    "after_manifest",
]
COMMITTED = {"after_sqlite_commit", "after_index_rename", "after_manifest"}

CHILD_PRELUDE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import rag_hier.store.core as st
    from rag_hier import HierStore, Passage

    path, crash_at, op, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    if mode == "whole":  # no segment: the write rewrites its files whole
        st.SEGMENT_MERGE_MIN, st.SEGMENT_MERGE_RATIO = 0, 0.0

    def step(name):
        if name == crash_at:
            os._exit(77)

    st._step = step
    store = HierStore.open(path)
    rng = np.random.default_rng(1)
    """
)
"""Child script head: open the store at argv[1], die (exit 77) at commit step argv[2] of the write (argv[3]) below."""

CHILD = CHILD_PRELUDE + textwrap.dedent(
    """
    store.delete_passages(["p0"]) if op == "delete" else store.add_passages(
        [Passage(f"n{i}", f"nd{i}", 0, f"new {i}") for i in range(50)], rng.standard_normal((50, 8)).astype("float32")
    )
    os._exit(0)
    """
)


def _make_store(path, kind: str = "flat") -> None:
    store = HierStore.create(path, model=None, index={"kind": kind, "nlist": 4, "train_min": 40})
    rng = np.random.default_rng(0)
    store.add_passages(
        [Passage(f"p{i}", f"d{i % 10}", i, f"old {i}") for i in range(100)],
        rng.standard_normal((100, 8)).astype("float32"),
    )
    store.close()


@pytest.mark.parametrize("mode", ["segment", "whole"])
@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
@pytest.mark.parametrize("op", ["add", "delete"])
@pytest.mark.parametrize("crash_at", STEPS)
def test_crash_at_each_step(tmp_path, crash_at: str, op: str, kind: str, mode: str) -> None:
    path = tmp_path / "store"
    _make_store(path, kind)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), crash_at, op, mode], capture_output=True, text=True)
    assert proc.returncode == 77, proc.stderr
    store = HierStore.open(path)  # must load (rolling forward if the commit happened)
    committed = crash_at in COMMITTED
    if op == "add":
        assert store.count_passages() == (150 if committed else 100)
    else:
        assert store.count_passages() == (99 if committed else 100)
    n = store.count_passages()
    assert len(store.index) == n
    # the store is writable and consistent afterwards
    store.add_passages([Passage("after", "after", 0, "after")], np.ones((1, 8), np.float32))
    store.close()
    again = HierStore.open(path)
    assert again.count_passages() == n + 1
    assert not [p.name for p in path.iterdir() if ".tmp" in p.name]
    again.close()


def test_sigkill_during_large_write(tmp_path) -> None:
    """Kill a process in the middle of a big batch at an arbitrary moment: the old state loads."""
    path = tmp_path / "store"
    _make_store(path)
    child = textwrap.dedent(
        """
        import sys, numpy as np
        from rag_hier import HierStore, Passage
        store = HierStore.open(sys.argv[1])
        rng = np.random.default_rng(2)
        print("ready", flush=True)
        for round_ in range(1000):
            store.add_passages([Passage(f"r{round_}-{i}", f"rd{i}", 0, "x" * 200) for i in range(2000)],
                               rng.standard_normal((2000, 8)).astype("float32"))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(2.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    store = HierStore.open(path)
    n = store.count_passages()
    assert n >= 100 and (n - 100) % 2000 == 0  # whole commits only
    assert len(store.index) == n
    store.close()


EXT_CHILD = CHILD_PRELUDE + textwrap.dedent(
    """
    if op == "delete":
        store.delete_documents(["d3"])
    else:
        store.add_passages([Passage(f"n{i}", "nd", i, f"whales and tides {i}") for i in range(3)],
                           rng.standard_normal((3, 8)).astype("float32"))
    os._exit(0)
    """
)


@pytest.fixture(scope="module")
def ext_store(tmp_path_factory, tiny_model_path: str):
    """A store with a token index, a document index and a tree (copied by each test)."""
    from rag_hier.store.extensions.doc_index import DocumentIndex
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.extensions.tree import TreeExtension

    path = tmp_path_factory.mktemp("ext") / "store"
    _make_store(path)
    store = HierStore.open(path)
    store.add_extension(TokenIndexExtension(model=tiny_model_path))
    store.add_extension(DocumentIndex())
    store.add_extension(TreeExtension(branching=3))
    store.add_passages([Passage("acked", "acked", 0, "acknowledged before")], np.ones((1, 8), np.float32))
    store.close()
    return path


EXT_CASES = [(step, "segment", op) for step in STEPS for op in ("add", "delete")] + [
    (step, "whole", "add") for step in ("before_sqlite_commit", "after_sqlite_commit")
]


@pytest.mark.parametrize(("crash_at", "mode", "op"), EXT_CASES)
def test_crash_at_each_step_with_extensions(tmp_path, ext_store, crash_at: str, op: str, mode: str) -> None:
    """Token index, document index and tree: a kill at any step keeps every acknowledged write, loses nothing."""
    import shutil

    from rag_hier.store.extensions.doc_index import DocumentIndex
    from rag_hier.store.extensions.token_index import TokenIndexExtension
    from rag_hier.store.extensions.tree import TreeExtension

    path = tmp_path / "store"
    shutil.copytree(ext_store, path)
    proc = subprocess.run(
        [sys.executable, "-c", EXT_CHILD, str(path), crash_at, op, mode], capture_output=True, text=True
    )
    assert proc.returncode == 77, proc.stderr
    store = HierStore.open(path)  # loads, verifies every extension against the passages (rolled forward if committed)
    committed = crash_at in COMMITTED
    n = 101 + (0 if not committed else 3 if op == "add" else -10)
    assert store.count_passages() == n
    doc_index = store.extension("doc-index")
    assert isinstance(doc_index, DocumentIndex)
    assert "acked" in doc_index.doc_ids()
    assert ("nd" in doc_index.doc_ids()) == (committed and op == "add")
    assert ("d3" in doc_index.doc_ids()) == (not committed or op != "delete")
    tokens = TokenIndexExtension.of(store)
    assert len(tokens.index.rows) == n
    tree = store.extension("tree")
    assert isinstance(tree, TreeExtension) and len(tree.require_tree()) == n
    store.add_passages([Passage("after", "after", 0, "after")], np.ones((1, 8), np.float32))
    store.close()
    again = HierStore.open(path)
    assert again.count_passages() == n + 1 and len(TokenIndexExtension.of(again).index.rows) == n + 1
    assert not [p.name for p in path.iterdir() if ".tmp" in p.name]
    again.close()
