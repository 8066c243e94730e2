"""Damaged store files with checksums recomputed to match: the store opens and searches, or refuses in one error.

Each trial copies a small store (dense index, token index, document index, BM25), damages one of its files (bytes
flipped, a block zeroed, the file cut short or lengthened), records the damaged file's size and SHA-256 in the
committed state and the manifest as a writer would, then opens the store, searches it and uses each extension.
Every outcome must be a normal answer or a :class:`~rag_hier.errors.RagHierError`: never another exception,
never an allocation the file merely declares (the arrays' readers check headers against the bytes first).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rag_hier import HierStore, Passage
from rag_hier.errors import RagHierError
from rag_hier.store.extensions.doc_index import DocumentIndex
from rag_hier.store.extensions.token_index import TokenIndexExtension

TRIALS = int(os.environ.get("RAG_HIER_FUZZ_TRIALS", "60"))
SEED = int(os.environ.get("RAG_HIER_FUZZ_SEED", "11"))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "store"
    store = HierStore.create(root, model=None, dimension=8)
    rng = np.random.default_rng(0)
    passages = [Passage(f"p{i}", f"d{i % 5}", i, f"text word{i % 7} number {i}") for i in range(30)]
    store.add_passages(passages, rng.standard_normal((30, 8)))
    store.add_extension(TokenIndexExtension())
    store.add_extension(DocumentIndex())
    store.ensure_extension("bm25")
    store.close()
    return root


def _damage(data: bytes, rnd: random.Random) -> tuple[str, bytes]:
    kind = rnd.choice(["flip", "zero", "cut", "grow", "header"])
    buf = bytearray(data)
    if kind == "flip":
        for _ in range(rnd.randint(1, 8)):
            buf[rnd.randrange(len(buf))] ^= 1 << rnd.randrange(8)
    elif kind == "zero":
        start = rnd.randrange(len(buf))
        buf[start : start + 64] = bytes(len(buf[start : start + 64]))
    elif kind == "cut":
        del buf[rnd.randrange(1, len(buf)) :]
    elif kind == "grow":
        buf += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 512)))
    else:  # a declared size or shape in the first bytes, set huge
        at = rnd.randrange(min(len(buf), 128))
        buf[at : at + 4] = b"\xff\xff\xff\x7f"
    return kind, bytes(buf)


def _record(store_dir: Path, name: str) -> None:
    """Record ``name``'s size and SHA-256 in the committed state and the manifest, as a writer would."""
    data = (store_dir / name).read_bytes()
    entry = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    db = sqlite3.connect(store_dir / "store.sqlite")
    state = json.loads(db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()[0])
    state["files"][name] = entry
    db.execute("UPDATE state SET value=? WHERE key='manifest'", (json.dumps(state),))
    db.commit()
    db.close()
    manifest = json.loads((store_dir / "manifest.json").read_text())
    manifest["files"][name] = entry
    database = (store_dir / "store.sqlite").read_bytes()
    manifest["files"]["store.sqlite"] = {"bytes": len(database), "sha256": hashlib.sha256(database).hexdigest()}
    (store_dir / "manifest.json").write_text(json.dumps(manifest))


def _use(store_dir: Path) -> None:
    from rag_hier.retrieval.base import Queries
    from rag_hier.retrieval.registry import build_retriever

    queries = Queries(texts=["word3 number"], vectors=np.ones((1, 8), dtype=np.float32))
    with HierStore.open(store_dir) as store:
        for name in ("dense", "hierarchical", "svdr-lexical", "bm25"):
            (result,) = build_retriever(name, store).run(queries, top_k=3)
            assert result.hits, name


def test_damaged_files_with_matching_checksums_never_escape_as_other_errors(template: Path, tmp_path: Path) -> None:
    rnd = random.Random(SEED)
    files = sorted(n for n in json.loads((template / "manifest.json").read_text())["files"] if n != "store.sqlite")
    outcomes: dict[str, int] = {"answered": 0, "refused": 0}
    escaped: list[str] = []
    for trial in range(TRIALS):
        store_dir = tmp_path / f"t{trial}"
        shutil.copytree(template, store_dir)
        name = files[trial % len(files)]
        kind, data = _damage((store_dir / name).read_bytes(), rnd)
        (store_dir / name).write_bytes(data)
        _record(store_dir, name)
        try:
            _use(store_dir)
            outcomes["answered"] += 1
        except RagHierError:
            outcomes["refused"] += 1
        except Exception as exc:  # anything else is a defect: a traceback instead of one line
            escaped.append(f"{name} ({kind}): {type(exc).__name__}: {exc}")
        shutil.rmtree(store_dir)
    print(f"{TRIALS} damaged stores: {outcomes}")
    assert not escaped, escaped
    assert outcomes["refused"] > 0  # the damage is noticed, not all shrugged off
    assert outcomes["answered"] > 0  # and the undamaged parts of the check work (e.g. bytes appended to JSON)
