"""A small judged collection on the tiny model (:func:`rag_hier.testing.translation_collection`).

The tiny random model ranks it poorly (dev nDCG@10 about 0.13) and a few seconds of contrastive training lift
it far above that (about 0.70), so adoption, refusal and forcing can all be tested on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rag_hier import Document, HierStore
from rag_hier.testing import translation_collection, write_beir

LEARNS = {
    "epochs": 3.0,
    "learning_rate": 5e-3,
    "batch_size": 16,
    "num_negatives": 1,
    "show_progress_bar": False,
    "device": "cpu",
}
"""Settings under which the tiny model learns the collection (the candidate is adopted)."""
STAYS = {"max_steps": 1, "learning_rate": 1e-9, "batch_size": 16, "show_progress_bar": False, "device": "cpu"}
"""Settings under which the candidate is the base model to the last digits (it is not adopted)."""


@pytest.fixture(scope="session")
def judged_template(tmp_path_factory: pytest.TempPathFactory, tiny_model_path: str) -> tuple[Path, Path]:
    """A store of the collection (built once) and its BEIR folder (``qrels/train.tsv``)."""
    root = tmp_path_factory.mktemp("tuning")
    corpus, queries, qrels = translation_collection()
    beir = write_beir(root / "beir", corpus, queries, qrels, split="train")
    store = HierStore.create(root / "store", model=tiny_model_path, corpus={"format": "beir", "max_passage_words": 0})
    store.add_documents([Document(doc_id=d, title="", paragraphs=(t,)) for d, t in corpus.items()], max_passage_words=0)
    store.close()
    return root / "store", beir


@pytest.fixture
def judged_store(tmp_path: Path, judged_template: tuple[Path, Path]) -> tuple[Path, Path]:
    """A fresh copy of the judged store, and the BEIR folder."""
    path = tmp_path / "store"
    shutil.copytree(judged_template[0], path)
    return path, judged_template[1]


def read_queries(beir: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The BEIR folder's queries and train judgements as mappings."""
    queries = {}
    for line in (beir / "queries.jsonl").read_text().splitlines():
        row = json.loads(line)
        queries[row["_id"]] = row["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (beir / "qrels" / "train.tsv").read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        qrels.setdefault(q, {})[d] = int(g)
    return queries, qrels


@pytest.fixture
def learns() -> dict:
    """:data:`LEARNS`."""
    return dict(LEARNS)


@pytest.fixture
def stays() -> dict:
    """:data:`STAYS`."""
    return dict(STAYS)


@pytest.fixture(scope="session")
def judged_maps(judged_template: tuple[Path, Path]) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The collection's queries and judgements as mappings."""
    return read_queries(judged_template[1])
