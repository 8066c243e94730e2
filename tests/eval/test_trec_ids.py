"""TREC run writing refuses ids that would break its whitespace-separated lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_hier.errors import InvalidInputError
from rag_hier.eval.trec import read_run, write_run


def test_round_trip_of_ordinary_ids(tmp_path: Path) -> None:
    run = {"q1": {"doc/a#0": 0.5, "été#1": 0.25}, "q-2": {"x": 1.0}}
    write_run(run, tmp_path / "run.trec")
    assert read_run(tmp_path / "run.trec") == run


@pytest.mark.parametrize("bad", ["a b", "a\tb", "a\nb", "a\rb", "a\x00b", "a\x1fb", "a\u2028b", "a\u00a0b", ""])
@pytest.mark.parametrize("where", ["qid", "doc", "tag"])
def test_unwritable_ids_are_refused_before_writing(tmp_path: Path, bad: str, where: str) -> None:
    path = tmp_path / "run.trec"
    run = {bad if where == "qid" else "q1": {bad if where == "doc" else "d1": 1.0}}
    with pytest.raises(InvalidInputError, match="into a TREC run") as info:
        write_run(run, path, tag=bad if where == "tag" else "rag-hier")
    assert repr(bad) in str(info.value)
    assert not path.exists()
