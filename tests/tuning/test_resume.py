"""An adoption whose re-encoding is interrupted resumes from its saved parts; nothing else changes meanwhile."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier import HierStore
from rag_hier.errors import ModelChangedError, RagHierError
from rag_hier.store import encode_parts
from rag_hier.testing import build_tiny_model
from rag_hier.tuning.pending import PENDING_DIR
from tests.tuning.conftest import STAYS
from tests.tuning.helpers import COMMON, LEARN_FLAGS, run_cli

PARTS = 7
"""Passages per part in these tests (the collection has a few dozen)."""
_real_write = encode_parts._write_part


class Stop(Exception):
    """Stands for the crash (a KeyboardInterrupt would stop pytest itself)."""


def _arm(monkeypatch: pytest.MonkeyPatch, k: int) -> list[int]:
    """The k+1-th part written raises :class:`Stop` (k parts are saved); returns the sizes written."""
    monkeypatch.setattr(encode_parts, "PART_ROWS", PARTS)
    written: list[int] = []

    def write(path: Path, rowids: np.ndarray, *args: Any) -> None:
        if len(written) == k:
            raise Stop(f"stopped before part {k + 1}")
        _real_write(path, rowids, *args)
        written.append(len(rowids))

    monkeypatch.setattr(encode_parts, "_write_part", write)
    return written


@pytest.fixture(scope="module")
def interrupted_template(tmp_path_factory: pytest.TempPathFactory, judged_template, judged_maps) -> tuple[Path, Any]:
    """A store whose forced adoption stopped after two saved parts (built once); and its model before."""
    queries, qrels = judged_maps
    path = tmp_path_factory.mktemp("interrupted") / "store"
    shutil.copytree(judged_template[0], path)
    store = HierStore.open(path)
    before = store.model_info["current"]
    with pytest.MonkeyPatch.context() as mp:
        written = _arm(mp, 2)
        with pytest.raises(Stop):
            store.tune(queries, qrels, cross_fit="off", dev_scoring="rerank", force=True, **STAYS)
    store.close()
    assert written == [PARTS, PARTS]
    return path, before


@pytest.fixture
def interrupted(tmp_path: Path, interrupted_template: tuple[Path, Any]) -> tuple[Path, Any]:
    """A fresh copy of the interrupted store."""
    path = tmp_path / "store"
    shutil.copytree(interrupted_template[0], path)
    return path, interrupted_template[1]


def test_an_interrupted_adoption_leaves_the_old_model_and_resumes(interrupted, judged_maps, monkeypatch) -> None:
    path, before = interrupted
    store = HierStore.open(path)
    assert store.model_info["current"] == before  # nothing switched
    assert store.search("red", top_k=3)  # and the store answers
    pending = path / PENDING_DIR
    assert sorted(p.name for p in (pending / "parts").iterdir()) == [
        "part-000000.safetensors",
        "part-000001.safetensors",
    ]
    # a new run refuses to start while the adoption waits, and says how to finish it
    queries, qrels = judged_maps
    with pytest.raises(RagHierError, match="--resume"):
        store.tune(queries, qrels, cross_fit="off", force=True, **STAYS)
    # resuming encodes only what the parts lack
    encoded: list[int] = []
    real_encode = type(store.encoder).encode_documents

    def counting(self: Any, texts: list[str], **kw: Any) -> Any:
        encoded.append(len(texts))
        return real_encode(self, texts, **kw)

    monkeypatch.setattr(type(store.encoder), "encode_documents", counting)
    n = int(store.rowids_of().size)
    report = store.tune(resume=True, show_progress_bar=False)
    assert report.adopted and "resumed" in report.reason
    after = store.model_info["current"]
    assert after["model"] != before["model"] and after["adopted"]["forced"] is True
    assert not pending.exists()
    # the encoding-rate sample aside (64 passages at most), only the passages of no saved part were encoded
    assert sum(encoded) - min(64, n) - 2 == n - 2 * PARTS
    # the index holds the adopted model's vectors, the ones from saved parts included
    rowids = store.rowids_of()
    texts = [r.to_passage().embedding_text for r in store.records(rowids.tolist()).values()]
    fresh = np.asarray(store.encoder.encode_documents(texts), np.float32)
    np.testing.assert_allclose(store.vectors(rowids), fresh, atol=1e-5)
    store.close()


def test_a_model_switched_meanwhile_discards_the_pending_adoption(interrupted, tmp_path) -> None:
    path, _before = interrupted
    store = HierStore.open(path)
    store.adopt_model(build_tiny_model(tmp_path / "other", seed=11))
    switched = store.model_info["current"]
    with pytest.raises(ModelChangedError, match="discarded"):
        store.tune(resume=True, show_progress_bar=False)
    assert store.model_info["current"] == switched
    assert not (path / PENDING_DIR).exists()
    with pytest.raises(RagHierError, match="nothing to resume"):
        store.tune(resume=True, show_progress_bar=False)
    store.close()


def test_damaged_pending_files_are_named(interrupted) -> None:
    path, before = interrupted
    manifest = path / PENDING_DIR / "adoption.json"
    good = manifest.read_bytes()
    data = json.loads(good)
    data["expected"] = "gone"
    manifest.write_text(json.dumps(data))
    store = HierStore.open(path)
    with pytest.raises(RagHierError, match=r"adoption\.json.*'expected'"):
        store.tune(resume=True, show_progress_bar=False)
    manifest.write_bytes(good)
    weights = next((path / PENDING_DIR / "model").rglob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(RagHierError, match="do not match the digest"):
        store.tune(resume=True, show_progress_bar=False)
    assert store.model_info["current"] == before
    part = path / PENDING_DIR / "parts" / "part-000001.safetensors"
    part.write_bytes(b"not a part")
    from rag_hier.store.encode_parts import read_parts

    with pytest.raises(RagHierError, match="part-000001"):
        read_parts(part.parent, json.loads(good)["digest"], None)
    store.close()


def test_the_command_line_resumes(interrupted, judged_template) -> None:
    path, before = interrupted
    beir = str(judged_template[1])
    code, _out, err = run_cli(["tune", "--store", str(path), "--beir", beir, *LEARN_FLAGS, *COMMON])
    assert code != 0 and "--resume" in err and "adoption-pending" in err
    code, out, err = run_cli(["tune", "--store", str(path), "--resume", "--beir", beir, *COMMON])
    assert code != 0 and "--resume takes only --store" in err
    code, out, err = run_cli(["tune", "--store", str(path), "--resume", *COMMON])
    assert code == 0, err
    assert "adopted" in out and "resuming" in err
    store = HierStore.open(path)
    assert store.model_info["current"]["model"] != before["model"]
    store.close()
    assert (path / "tune.md").is_file()


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from rag_hier import HierStore
    from rag_hier.store import encode_parts
    from tests.tuning.conftest import STAYS, read_queries
    from pathlib import Path

    path, beir = sys.argv[1], Path(sys.argv[2])
    encode_parts.PART_ROWS = 7
    real = encode_parts._write_part
    written = []

    def write(*args):
        real(*args)
        written.append(1)
        if len(written) == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    encode_parts._write_part = write
    queries, qrels = read_queries(beir)
    HierStore.open(path).tune(queries, qrels, cross_fit="off", dev_scoring="rerank", force=True, **STAYS)
    os._exit(0)
    """
)


def test_kill_9_during_the_encode_resumes(judged_store) -> None:
    path, beir = judged_store
    before = HierStore.open(path)
    model = before.model_info["current"]["model"]
    before.close()
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(beir)], env=env, cwd=root, timeout=600)
    assert proc.returncode == -signal.SIGKILL
    store = HierStore.open(path)
    assert store.model_info["current"]["model"] == model
    assert len(list((path / PENDING_DIR / "parts").glob("part-*.safetensors"))) == 2
    report = store.tune(resume=True, show_progress_bar=False)
    assert report.adopted and store.model_info["current"]["model"] != model
    assert store.search("red", top_k=3)
    store.close()
