"""Hard negatives mined from the store: never a judged-relevant id, never above the false-negative margin."""

from __future__ import annotations

import numpy as np

from rag_hier import HierStore
from rag_hier.eval.judged import judged_from_mappings
from rag_hier.tuning.mining import mine_examples, training_rows


def test_negatives_respect_judgements_and_margin(judged_store, judged_maps) -> None:
    path, _ = judged_store
    queries, qrels = judged_maps
    # every query also judges the next document relevant: it must never come back as a negative
    qrels = {q: {**r, f"d{(int(q[1:].split('_')[0]) + 1) % 40}": 1} for q, r in qrels.items()}
    store = HierStore.open(path, read_only=True)
    judged = judged_from_mappings(store, queries, qrels, "doc")
    vectors = store.encoder.encode_queries(list(judged.queries.values()))
    examples = mine_examples(store, judged, vectors, range_max=20, relative_margin=0.05)
    embedded = {p.doc_id: p.embedding_text for p in store.iter_passages()}  # one passage a document here
    assert examples
    distinct = sorted({t for e in examples for t in (*e.positives, *e.negatives)})
    encoded = dict(zip(distinct, store.encoder.encode_documents(distinct), strict=True))
    for example in examples:
        qv = vectors[list(judged.queries).index(example.qid)]
        relevant = {embedded[d] for d in qrels[example.qid]}
        assert set(example.positives) <= relevant
        assert not relevant & set(example.negatives)
        floor = min(float(encoded[p] @ qv) for p in example.positives)
        assert all(float(encoded[n] @ qv) <= floor - abs(floor) * 0.05 + 1e-5 for n in example.negatives)
    rows = training_rows(examples, num_negatives=2, rows=50, seed=0)
    assert len(rows["anchor"]) == 50 and set(rows) == {"anchor", "positive", "negative_1", "negative_2"}
    assert np.all([a in queries.values() for a in rows["anchor"]])
    store.close()
