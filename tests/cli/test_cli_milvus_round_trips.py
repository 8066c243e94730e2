"""How many times one CLI command on a Milvus Lite store connects to Milvus and calls it (round trips, counted).

A one-shot command pays each round trip against a Milvus Lite server started for it, so every call counts. The
figures below are each command's budget: a change that adds a connection or a call fails here and has to say
why. What a command needs: the connection asks the server its version once (what the server offers decides the
field layout and the filter spelling); opening a collection lists the collections once, loads the five that every
collection has (one call each on Milvus Lite; a server is asked for all loads at once, then their states), reads
the state once, describes the passage collection and reads the retired versions; a search adds one read of the
state per read block and the vector search itself.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from rag_hier.store.milvus import client as milvus_client


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts ``Connection.call`` by what it does, and every new pymilvus client under ``"connect"``."""
    counted: Counter[str] = Counter()
    call = milvus_client.Connection.call

    def counting_call(self: Any, what: str, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        counted[what] += 1
        return call(self, what, fn, *args, **kwargs)

    pymilvus = milvus_client._pymilvus()
    real = pymilvus.MilvusClient

    class CountingClient(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            counted["connect"] += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(milvus_client.Connection, "call", counting_call)
    monkeypatch.setattr(pymilvus, "MilvusClient", CountingClient)
    return counted


def _taken(calls: Counter[str]) -> Counter[str]:
    out = Counter(calls)
    calls.clear()
    return out


def test_each_command_connects_once_and_keeps_to_its_round_trips(corpora, index_cli, cli, tmp_path: Path, calls):
    uri = f"{tmp_path / 'm.db'}#docs"
    index_cli(corpora.markdown, uri)
    created = _taken(calls)
    assert created["connect"] == 1

    found = cli("search", "--store", uri, "--query", "Apples", "--top-k", 3, "--no-progress")
    assert found.code == 0, found.err
    search = _taken(calls)
    assert search["connect"] == 1
    assert search["listing collections"] == 1  # one list for every collection the store has
    assert search["reading the collection state"] <= 3  # open, the corpus settings, the search's read block
    assert search["asking the server version"] == 1
    assert search["loading the collection"] == 5  # the five every collection has, one call each on Milvus Lite
    assert sum(search.values()) <= 14, search

    info = cli("info", "--store", uri)
    assert info.code == 0, info.err
    counted = _taken(calls)
    assert counted["connect"] == 1
    assert counted["reading the collection state"] <= 2  # every figure in one read block
    assert sum(counted.values()) <= 12, counted  # with the version question

    index_cli(corpora.markdown, uri)  # the same corpus again: asks whether the collection exists, then opens it
    again = _taken(calls)
    assert again["connect"] == 1  # the existence check and the store share one connection
    assert sum(again.values()) <= 53, again  # with the version question
