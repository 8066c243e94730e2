"""examples/tied_atomic_new_documents.py runs end to end in a fresh interpreter (tiny T5, 1 step)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tied_atomic_new_documents.py"


@pytest.mark.slow
def test_new_documents_example_runs(tmp_path: Path, tiny_t5_path: str) -> None:
    work = tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "1", "--work", str(work), "--base-model", tiny_t5_path],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "trained 1 steps" in out
    # the example asserts generate == dense search itself; here: the new document became one more docid
    counts = [int(n) for n in re.findall(r"(\d+) docids; generate", out)]
    assert len(counts) == 2 and counts[1] == counts[0] + 1
    assert "'glaciers'" in out
    assert (work / "model" / "modules.json").is_file() and (work / "store").is_dir()
