"""The test run ends once its report is written: a thread left running prints its stack instead of holding CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

HANGING = """
import threading

def test_leaves_a_thread_that_never_ends():
    threading.Thread(target=threading.Event().wait, name="never-ends").start()
    assert {outcome}
"""


@pytest.mark.parametrize(("outcome", "status"), [("True", 0), ("False", 1)])
def test_a_thread_that_never_ends_cannot_hold_the_run(tmp_path: Path, outcome: str, status: int) -> None:
    (tmp_path / "test_hanging.py").write_text(HANGING.format(outcome=outcome))
    env = {**os.environ, "PYTHONPATH": str(TESTS), "RAG_HIER_TEST_EXIT_GRACE": "1"}
    proc = subprocess.run(  # this suite's conftest as a plugin, on a test outside the suite
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "test_hanging.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == status, (proc.stdout, proc.stderr)  # the session's own status
    assert ("1 passed" if status == 0 else "1 failed") in proc.stdout
    assert "had not exited 1 s after its report" in proc.stderr and "in wait" in proc.stderr  # the stuck thread
