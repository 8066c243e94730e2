"""HierStore.reading(): several reads from one committed generation, while writers elsewhere wait."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.errors import StoreError

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


def test_a_write_inside_the_block_is_refused_and_nothing_changes(tmp_path):
    store = _store(tmp_path / "s")
    with store.reading():
        with pytest.raises(StoreError, match=r"inside store\.reading"):
            store.delete_passages(["p0"])
        assert store.count_passages() == 4
    assert store.delete_passages(["p0"]) == 1  # after the block writes work again
    store.close()
