"""StoreSession on Milvus Lite: the dimension rule at creation, handle pairing, reopening (one collection)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rag_hier.corpus.model import Passage
from rag_hier.store.contract import StoreBackend
from rag_hier.store.session import CreateOptions, DimensionRequiredError, StoreSession


def test_a_collection_takes_its_dimension_from_the_first_write_and_pairs_its_handles(milvus_db: Path) -> None:
    uri = f"{milvus_db}#session"
    connections: list[int] = []

    def connection() -> dict[str, Any]:
        connections.append(1)
        return {"timeout": 20.0}

    opened: list[StoreBackend] = []
    session = StoreSession(
        uri=uri, connection=connection, create=CreateOptions(similarity="cosine"), reads_use_writer=False
    )
    assert not session.exists()
    with pytest.raises(DimensionRequiredError, match="dimension="):
        session.reader()  # creating it now: no dimension, no model, no embeddings to take it from
    assert not session.exists()

    writer = session.writer(dimension_hint=3)  # the size of the embeddings about to be written
    assert writer.dimension == 3 and writer.similarity == "cosine" and not writer.read_only
    assert writer.path is None and writer.connection_options["timeout"] == 20.0
    reader = session.reader()
    assert reader.read_only and reader is not writer
    passages = [Passage(id=f"p{i}", doc_id="d", position=i, text=f"passage {i}") for i in range(3)]
    writer.add_passages(passages, np.eye(3, dtype=np.float32))
    assert reader.count_passages() == 3  # the read-only handle sees the write at its next read
    session.close()

    again = StoreSession(uri=uri, connection=connection, check=opened.append)
    assert again.exists()
    store = again.reader()
    assert store.read_only and opened == [store] and store.dimension == 3
    assert again.writer() is not store and again.reader() is again.open_writer
    assert len(opened) == 2 and connections  # the connection options were asked for at each open
    again.close()
