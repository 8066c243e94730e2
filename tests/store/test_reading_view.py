"""HierStore.reading(): several reads from one committed generation, while writers elsewhere wait."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np

from rag_hier import HierStore, Passage

WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from rag_hier import HierStore, Passage

    store = HierStore.open(sys.argv[1])
    print("ready", flush=True)
    store.add_passages([Passage("p9", "d9", 0, "from the writer process")], np.ones((1, 4), np.float32))
    print("written", flush=True)
    """
)


def _store(path) -> HierStore:
    store = HierStore.create(path, model=None)
    vectors = np.eye(4, dtype=np.float32)
    store.add_passages([Passage(f"p{i}", f"d{i}", 0, f"passage {i}") for i in range(4)], vectors)
    return store


def test_reads_in_the_block_see_one_generation_and_a_writer_process_waits(tmp_path):
    store = _store(tmp_path / "s")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path / "s")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with store.reading() as view:
            assert view is store
            generation, before = store.generation, store.count_passages()
            assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
            time.sleep(1.5)  # the writer tries to commit meanwhile
            assert writer.poll() is None  # it waits for the read to end
            assert (store.generation, store.count_passages()) == (generation, before)
            assert [p.id for p in store.filter_passages()] == ["p0", "p1", "p2", "p3"]
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err
    assert out.strip().endswith("written")
    assert store.count_passages() == 5 and store.generation == generation + 1
    store.close()


# a write inside the block is refused on every backend: GenerationsContract (tests/store/contract)


def test_a_handle_dropped_while_another_store_opens_does_not_deadlock(tmp_path, monkeypatch) -> None:
    """A handle dropped without close() releases its core from a finalizer; the garbage collector may run it
    while this thread holds the registry lock inside ``StoreCore.shared`` (seen as a hung test suite)."""
    import threading

    from rag_hier import HierStore
    from rag_hier.store import core as core_module

    lock = core_module._CORES_LOCK
    with lock:  # re-entrant: a plain lock would refuse (and the finalizer would wait forever)
        assert lock.acquire(timeout=1)
        lock.release()
    HierStore.create(tmp_path / "a", model=None, dimension=4).close()
    dropped = [HierStore.create(tmp_path / "b", model=None, dimension=4)]
    real_load = core_module.StoreCore.load.__func__

    def load(cls, *args, **kwargs):
        dropped.clear()  # the last reference: its finalizer runs here, inside shared()
        return real_load(cls, *args, **kwargs)

    monkeypatch.setattr(core_module.StoreCore, "load", classmethod(load))
    opened: list[object] = []
    worker = threading.Thread(target=lambda: opened.append(HierStore.open(tmp_path / "a")), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and opened
    opened[0].close()  # type: ignore[attr-defined]
    monkeypatch.undo()
    HierStore.open(tmp_path / "b").close()  # its core was released: it opens afresh
