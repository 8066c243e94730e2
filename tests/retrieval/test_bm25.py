"""The ``bm25`` extension and strategy: bm25s's own Lucene scores (the oracle) through writes, deletes, updates,
reopening, segments, filters, a failed or crashed write, a tampered file, a missing stemmer, fusion, Milvus."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import bm25s
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rag_hier.index.bm25 as bm25_mod
import rag_hier.store.core as core_mod
from rag_hier import HierStore, Passage
from rag_hier.errors import StoreCorruptedError, StoreError
from rag_hier.index.bm25 import BM25Index, BM25Tokenizer, term_hashes
from rag_hier.retrieval import Queries, build_retriever
from rag_hier.retrieval.fusion import FUSIONS
from rag_hier.store.extensions.bm25 import BM25Extension

Stemmer = pytest.importorskip("Stemmer")

D = 4
CORPUS = [
    ("tides", ("Tides", "Causes"), "The Moon's gravity pulls the oceans; spring tides are the strongest tides."),
    ("tides", ("Tides", "Timing"), "High tide comes twice a day, about every twelve hours and 25 minutes."),
    ("bees", ("Bees",), "Honeybees live in colonies. Worker bees turn nectar into honey in wax cells."),
    ("bees", ("Bees", "Dance"), "A waggle dance tells the hive where the flowers are."),
    ("volcano", ("Volcanoes",), "Magma rises through the crust; a volcano erupts lava, ash and gas."),
    ("volcano", (), "The and of to in: stopwords only, or nearly."),
    ("unicode", ("Café",), "Naïve résumés of the café's snake_case recipes, 2020 edition."),
    ("running", ("Sport",), "Runners were running; the runner ran faster than any other runners ran."),
]
QUERIES = [
    "why are spring tides strong?",
    "tide tide moon",  # a repeated query term counts twice
    "honey bees and nectar",
    "volcano erupts",
    "the of and",  # stopwords only: nothing
    "running runner",
    "café 2020 snake_case naïve",
    "unknown words nowhere",
]
STEMMERS = ["english", None]


def _passages(rows: Sequence[tuple[str, tuple[str, ...], str]], prefix: str = "p", start: int = 0) -> list[Passage]:
    return [
        Passage(f"{prefix}{i}", f"{prefix}-{doc}", i, text, title_path, meta={"group": "ab"[i % 2], "n": i})
        for i, (doc, title_path, text) in enumerate(rows, start=start)
    ]


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, D)).astype(np.float32)


def _oracle(texts: list[str], stemmer: str | None, k1: float = 1.5, b: float = 0.75) -> Callable[[str], np.ndarray]:
    """bm25s's own Lucene BM25 over ``texts``: a query's score for every text."""
    stem = Stemmer.Stemmer(stemmer) if stemmer else None
    index = bm25s.BM25(method="lucene", k1=k1, b=b)
    index.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)

    def scores(query: str) -> np.ndarray:
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=stem, return_ids=False, show_progress=False)[0]
        tokens = [t for t in tokens if t in index.vocab_dict]
        return np.asarray(index.get_scores(tokens)) if tokens else np.zeros(len(texts))

    return scores


def _check(
    store, stemmer: str | None, *, filters=None, k1: float = 1.5, b: float = 0.75, queries: Sequence[str] = QUERIES
) -> int:
    """The strategy's hits are exactly the passages bm25s scores above 0 (among the filtered), with its scores.

    The oracle is rebuilt over the live passages. Returns how many hits were compared.
    """
    rowids = np.asarray(store.passage_rowids(), np.int64)
    records = store.records(rowids.tolist())
    oracle = _oracle([records[int(r)].embedding_text for r in rowids], stemmer, k1, b)
    allowed = store.matching_rowids(filters, with_vector=False)
    results = build_retriever("bm25", store, k1=k1, b=b).run(
        Queries(texts=list(queries)), top_k=max(1, rowids.size), filters=filters
    )
    compared = 0
    for query, result in zip(queries, results, strict=True):
        want = {
            int(r): float(s)
            for r, s in zip(rowids, oracle(query), strict=True)
            if s > 0 and (allowed is None or r in allowed)
        }
        got = {h.rowid: h.score for h in result.hits}
        assert got.keys() == want.keys(), query
        keys = sorted(got)
        np.testing.assert_allclose([got[r] for r in keys], [want[r] for r in keys], rtol=1e-5, atol=1e-5)
        order = [(-round(h.score, 9), h.rowid) for h in result.hits]
        assert order == sorted(order)  # best first, ties by insertion order
        compared += len(got)
    return compared


def _segments(path: Path) -> list[tuple[int, int]]:
    db = sqlite3.connect(path / "store.sqlite")
    try:
        rows = db.execute("SELECT generation, entries FROM extension_segments WHERE extension='bm25'").fetchall()
        return [(int(g), int(e)) for g, e in rows]
    finally:
        db.close()


def _store(path: Path, stemmer: str | None = "english") -> HierStore:
    store = HierStore.create(path, model=None, dimension=D)
    store.add_passages(_passages(CORPUS), _vectors(len(CORPUS)))
    store.ensure_extension("bm25", stemmer=stemmer)
    return store


def _writes(store: HierStore) -> None:
    """An add bringing new terms, an update of a passage's text, deletes of passages and of a document."""
    more = [
        ("glacier", ("Glaciers",), "Glaciers carve valleys; a glacier moves a few metres a day, like a slow river."),
        ("tides", ("Tides", "Neap"), "Neap tides are the weakest tides, at the Moon's first and last quarter."),
    ]
    store.add_passages(_passages(more, prefix="n"), _vectors(2, 1))
    changed = _passages(CORPUS[:1])[0]
    store.add_passages([Passage(changed.id, changed.doc_id, 0, "Tides rise and tides fall.", changed.title_path)])
    store.delete_passages(["p3", "n0"])
    store.delete_documents(["p-volcano"])


# ----------------------------------------------------------------------------------------------------
# the oracle
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stemmer", STEMMERS)
def test_scores_equal_bm25s_through_writes_deletes_updates_and_reopening(tmp_path: Path, stemmer: str | None) -> None:
    store = _store(tmp_path / "s", stemmer)
    ext = BM25Extension.of(store)
    assert ext.config()["stemmer"] == stemmer and ext.config()["stopwords"] == "en"
    assert _check(store, stemmer) > 5
    file_before = (tmp_path / "s" / "bm25.npz").read_bytes()
    _writes(store)
    assert len(_segments(tmp_path / "s")) == 4  # small writes: segments, not rewrites
    assert (tmp_path / "s" / "bm25.npz").read_bytes() == file_before
    assert _check(store, stemmer) > 5
    for k1, b in [(0.9, 0.4), (0.0, 0.75), (1.2, 0.0), (2.0, 1.0)]:
        _check(store, stemmer, k1=k1, b=b)
    store.close()

    reopened = HierStore.open(tmp_path / "s")  # the file, then the segments replayed
    _check(reopened, stemmer)
    reopened.optimize()  # written whole, segments dropped, unused terms compacted away
    assert _segments(tmp_path / "s") == []
    _check(reopened, stemmer)
    reopened.close()
    again = HierStore.open(tmp_path / "s")
    _check(again, stemmer)
    again.close()


def test_whole_writes_give_the_same_index_as_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seg = _store(tmp_path / "seg")
    _writes(seg)
    monkeypatch.setattr(core_mod, "SEGMENT_MERGE_MIN", 0)
    monkeypatch.setattr(core_mod, "SEGMENT_MERGE_RATIO", 0.0)
    whole = _store(tmp_path / "whole")
    _writes(whole)
    assert _segments(tmp_path / "whole") == []

    def content(store: HierStore) -> dict[str, list[tuple[int, int]]]:
        ids, counts = BM25Extension.of(store).index.term_counts()
        pid = {r: rec.passage_id for r, rec in store.records(ids.tolist()).items()}
        b = counts.indptr
        rows = [
            zip(counts.terms[b[i] : b[i + 1]].tolist(), counts.counts[b[i] : b[i + 1]].tolist(), strict=True)
            for i in range(ids.size)
        ]
        return {pid[int(r)]: sorted(row) for r, row in zip(ids.tolist(), rows, strict=True)}

    assert content(seg) == content(whole)
    seg.close()
    whole.close()


def test_filters_restrict_the_passages_not_the_statistics(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    for filters in (
        {"field": "meta.group", "operator": "==", "value": "a"},
        {"field": "meta.n", "operator": "in", "value": [0, 2, 4]},
        {"field": "meta.n", "operator": ">", "value": 100},
    ):
        _check(store, "english", filters=filters)
    hits = build_retriever("bm25", store).search(
        "tides", top_k=5, filters={"field": "meta.n", "operator": "==", "value": 1}
    )
    assert [h.passage_id for h in hits] == ["p1"]
    store.close()


def test_documents_are_ranked_by_their_best_passage(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    docs = build_retriever("bm25", store).search("tides honey bees", top_k=5, aggregate="doc")
    assert [h.doc_id for h in docs] == ["p-bees", "p-tides"]  # nothing else shares a term with the query
    store.close()


_WORDS = ["tide", "tides", "moon", "honey", "bees", "bee", "the", "and", "of", "running", "ran", "café", "x", "ab"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.lists(st.sampled_from(_WORDS), max_size=12).map(" ".join), min_size=1, max_size=12),
    removed=st.lists(st.integers(0, 11), max_size=6),
    extra=st.lists(st.lists(st.sampled_from(_WORDS), max_size=8).map(" ".join), max_size=4),
    query=st.lists(st.sampled_from(_WORDS), min_size=1, max_size=5).map(" ".join),
    stemmer=st.sampled_from(STEMMERS),
)
def test_index_equals_bm25s_after_any_adds_and_removes(
    texts: list[str], removed: list[int], extra: list[str], query: str, stemmer: str | None
) -> None:
    index = BM25Index(BM25Tokenizer(stemmer=stemmer))
    index.add_texts(np.arange(len(texts)), texts)
    index.remove(removed)
    index.add_texts(np.arange(100, 100 + len(extra)), extra)
    live = {i: t for i, t in enumerate(texts) if i not in removed} | {100 + i: t for i, t in enumerate(extra)}
    got = index.scores(index.query(query))
    if any(index.tokenizer.tokenize(list(live.values()))):  # bm25s cannot index a corpus without a term
        ids = sorted(live)
        want = {i: float(s) for i, s in zip(ids, _oracle([live[i] for i in ids], stemmer)(query), strict=True) if s > 0}
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[i] for i in sorted(got)], [want[i] for i in sorted(got)], rtol=1e-5, atol=1e-5)
    else:
        assert got == {}
    # saved and read back (compacted): the same scores
    again = BM25Index.from_arrays(index.to_arrays(), index.tokenizer, where="test")
    assert again.scores(again.query(query)) == pytest.approx(got, rel=1e-6)


def test_terms_are_stable_63_bit_hashes() -> None:
    h = term_hashes(["tide", "tide", "moon", ""])
    assert h.dtype == np.int64 and (h >= 0).all() and h[0] == h[1] != h[2]
    code = "from rag_hier.index.bm25 import term_hashes; print(int(term_hashes(['tide'])[0]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == int(h[0])  # no salted hash(): the same in another process


# ----------------------------------------------------------------------------------------------------
# commits: a failed write, a crashed writer, a tampered file
# ----------------------------------------------------------------------------------------------------
def test_a_failed_write_leaves_the_previous_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path / "s")
    before = build_retriever("bm25", store).search("tides moon honey", top_k=10)
    with pytest.raises(RuntimeError, match="abort"), store.batch():
        store.add_passages(_passages(CORPUS[:2], prefix="x"), _vectors(2, 3))
        store.delete_passages(["p0"])
        raise RuntimeError("abort")
    assert _segments(tmp_path / "s") == []
    assert build_retriever("bm25", store).search("tides moon honey", top_k=10) == before
    _check(store, "english")

    def boom(self, texts):
        raise StoreError("tokenizer failed")

    monkeypatch.setattr(BM25Tokenizer, "term_counts", boom)  # the hook fails: the whole write is refused
    with pytest.raises(StoreError, match="tokenizer failed"):
        store.add_passages(_passages(CORPUS[:1], prefix="y"), _vectors(1, 4))
    monkeypatch.undo()
    assert store.count_passages() == len(CORPUS)
    _check(store, "english")
    store.close()
    reopened = HierStore.open(tmp_path / "s")
    _check(reopened, "english")
    reopened.close()


CRASH_CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import rag_hier.store.core as core
    from rag_hier import HierStore, Passage

    path, crash_at, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "whole":
        core.SEGMENT_MERGE_MIN, core.SEGMENT_MERGE_RATIO = 0, 0.0

    def step(name):
        if name == crash_at:
            os._exit(77)

    core._step = step
    store = HierStore.open(path)
    with store.batch():
        store.add_passages([Passage("c0", "cd", 0, "Crashing tides meet a glacier moon")], np.ones((1, 4), "float32"))
        store.delete_passages(["p2"])
    os._exit(0)
    """
)


@pytest.mark.parametrize(("crash_at", "mode"), [("before_sqlite_commit", "segment"), ("after_sqlite_commit", "whole")])
def test_a_crashed_writer_leaves_the_old_or_the_new_state(tmp_path: Path, crash_at: str, mode: str) -> None:
    _store(tmp_path / "s").close()
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_CHILD, str(tmp_path / "s"), crash_at, mode], capture_output=True, text=True
    )
    assert proc.returncode == 77, proc.stderr
    store = HierStore.open(tmp_path / "s")  # rolls the committed write forward, or keeps the old state
    committed = crash_at == "after_sqlite_commit"
    assert store.count_passages() == len(CORPUS)  # one passage added and one deleted, or neither
    ids = {p.id for p in store.filter_passages()}
    assert ("c0" in ids and "p2" not in ids) if committed else ("c0" not in ids and "p2" in ids)
    _check(store, "english")
    store.close()


def test_a_tampered_file_is_refused_naming_it(tmp_path: Path) -> None:
    _store(tmp_path / "s").close()
    path = tmp_path / "s" / "bm25.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptedError, match=r"bm25\.npz"):
        HierStore.open(tmp_path / "s")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.update(terms=a["terms"][:-1]), "terms array does not match"),
        (lambda a: a.update(terms=np.full_like(a["terms"], 7)), "repeated terms"),
        (lambda a: a.update(value_planes=np.zeros_like(a["value_planes"])), "positive integers"),
        (lambda a: a.pop("bm25_header"), "missing array"),
    ],
)
def test_a_well_formed_file_with_bad_content_is_refused_naming_it(tmp_path: Path, change, message: str) -> None:
    """A forged file whose checksum was forged too (in the state and the manifest): its arrays are checked."""
    root = tmp_path / "s"
    _store(root).close()
    path = root / "bm25.npz"
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    with path.open("wb") as f:
        np.savez_compressed(f, **arrays)
    forged = {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    db = sqlite3.connect(root / "store.sqlite")
    state = json.loads(db.execute("SELECT value FROM state WHERE key='manifest'").fetchone()[0])
    state["files"]["bm25.npz"] = forged
    db.execute("UPDATE state SET value=? WHERE key='manifest'", (json.dumps(state),))
    db.commit()
    db.close()
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["bm25.npz"] = forged
    sqlite_bytes = (root / "store.sqlite").read_bytes()
    manifest["files"]["store.sqlite"] = {"bytes": len(sqlite_bytes), "sha256": hashlib.sha256(sqlite_bytes).hexdigest()}
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreCorruptedError, match=rf"bm25\.npz.*{message}"):
        HierStore.open(root)


# ----------------------------------------------------------------------------------------------------
# the tokenizer an index was built with
# ----------------------------------------------------------------------------------------------------
def test_a_stemmed_index_without_pystemmer_opens_but_refuses_to_tokenize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _store(tmp_path / "s").close()
    monkeypatch.setattr(bm25_mod, "_stemmer_module", lambda: None)  # PyStemmer not installed
    assert BM25Extension().config()["stemmer"] is None  # a new index would not stem
    with caplog.at_level(logging.WARNING):
        store = HierStore.open(tmp_path / "s")
    assert "PyStemmer" in caplog.text
    assert build_retriever("dense", store).search_vectors(_vectors(1, 5), top_k=3)[0]  # the rest works
    with pytest.raises(StoreError, match="pip install PyStemmer"):
        build_retriever("bm25", store).search("tides", top_k=3)
    with pytest.raises(StoreError, match="PyStemmer"):  # unstemmed rows would corrupt the index: refused
        store.add_passages(_passages(CORPUS[:1], prefix="z"), _vectors(1, 6))
    assert store.count_passages() == len(CORPUS)
    store.delete_passages(["p1"])  # needs no tokenizer
    store.close()
    monkeypatch.undo()
    store = HierStore.open(tmp_path / "s")
    _check(store, "english")
    store.close()


def test_a_tokenizer_with_another_fingerprint_is_named() -> None:
    built = BM25Tokenizer(stopwords="en", stemmer=None)
    assert built.problem() is None and BM25Tokenizer(fingerprint=built.fingerprint, stemmer=None).problem() is None
    other = BM25Tokenizer(stopwords="en", stemmer=None, fingerprint="0123456789abcdef")
    assert "0123456789abcdef" in (other.problem() or "")
    with pytest.raises(StoreError, match="Rebuild"):
        other.tokenize(["tides"])
    assert BM25Tokenizer(stopwords="english").stopwords == "en"
    assert BM25Tokenizer(stopwords=None, stemmer=None).tokenize(["The tides"]) == [["the", "tides"]]
    with pytest.raises(ValueError, match="unknown stopword list"):
        BM25Tokenizer(stopwords="klingon")
    assert "no stemmer 'klingon'" in (BM25Tokenizer(stemmer="klingon").problem() or "")


# ----------------------------------------------------------------------------------------------------
# hybrid search, frameworks, Milvus, the command line
# ----------------------------------------------------------------------------------------------------
def test_fusion_of_dense_and_bm25(tmp_path: Path) -> None:
    store = _store(tmp_path / "s")
    query = Queries(texts=["spring tides and the moon"], vectors=_vectors(1, 9))
    fused = build_retriever("fusion", store, strategies=("dense", "bm25")).run(query, top_k=5)[0].hits
    dense = build_retriever("dense", store).run(query, top_k=100)[0].hits
    lexical = build_retriever("bm25", store).run(query, top_k=100)[0].hits
    assert lexical and len(lexical) < len(dense)  # bm25 returns only passages sharing a term with the query
    ids, scores = FUSIONS["relative_score"](
        [
            (np.array([h.rowid for h in dense]), np.array([h.score for h in dense])),
            (np.array([h.rowid for h in lexical]), np.array([h.score for h in lexical])),
        ],
        [1.0, 1.0],
        60,
    )
    want = dict(zip(ids.tolist(), scores.tolist(), strict=True))
    assert [h.score for h in fused] == pytest.approx(sorted(want.values(), reverse=True)[:5])
    bm25 = {h.rowid: h.score for h in lexical}
    for h in fused:
        assert h.score == pytest.approx(want[h.rowid])
        assert h.scores.get("bm25") == (pytest.approx(bm25[h.rowid]) if h.rowid in bm25 else None)
    store.close()


def test_haystack_and_llama_index_build_it_with_auto_extensions(tmp_path: Path) -> None:
    pytest.importorskip("haystack")
    pytest.importorskip("llama_index.core")
    from haystack import Document
    from haystack_integrations.components.retrievers.rag_hier import RagHierRetriever as HaystackRetriever
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.rag_hier import RagHierRetriever as LlamaRetriever
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    texts = [text for _, _, text in CORPUS]
    vectors = _vectors(len(texts))
    ds = RagHierDocumentStore(path=str(tmp_path / "haystack"))
    ds.write_documents([Document(id=f"d{i}", content=t, embedding=vectors[i].tolist()) for i, t in enumerate(texts)])
    retriever = HaystackRetriever(document_store=ds, strategy="bm25", strategy_params={"k1": 1.2}, auto_extensions=True)
    docs = retriever.run(query="honey bees")["documents"]
    want = _oracle(texts, "english", k1=1.2)("honey bees")
    assert [d.id for d in docs] == [f"d{i}" for i in np.argsort(-want, kind="stable") if want[i] > 0]
    assert [d.score for d in docs] == pytest.approx(sorted(want[want > 0], reverse=True), rel=1e-5)
    ds.close()

    vs = RagHierVectorStore(path=str(tmp_path / "llama"), dimension=D)
    vs.add([TextNode(text=t, id_=f"n{i}", embedding=vectors[i].tolist()) for i, t in enumerate(texts)])
    nodes = LlamaRetriever(vs, "bm25", similarity_top_k=3, auto_extensions=True).retrieve("volcano honey")
    want = _oracle(texts, "english")("volcano honey")
    assert [n.node.node_id for n in nodes] == [f"n{i}" for i in np.argsort(-want, kind="stable") if want[i] > 0][:3]
    assert [n.score for n in nodes] == pytest.approx(sorted(want[want > 0], reverse=True)[:3], rel=1e-5)
    vs.close()


def test_on_milvus_writes_keep_it_exact(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    uri = f"{tmp_path / 'm.db'}#bm25"
    store = HierStore.create(uri=uri, model=None, dimension=D)
    store.add_passages(_passages(CORPUS), _vectors(len(CORPUS)))
    store.ensure_extension("bm25")
    assert not store.extension_in_engine("bm25")  # a file of the collection, scored in the client
    _check(store, "english")
    _writes(store)
    _check(store, "english", filters={"field": "meta.group", "operator": "==", "value": "b"})
    store.close()
    again = HierStore.open(uri=uri)
    _check(again, "english")
    again.close()


def test_cli_index_search_eval(tmp_path: Path) -> None:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from rag_hier.cli.main import main

    def run(*argv: object) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in argv])
        return code, out.getvalue(), err.getvalue()

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": " ".join(title), "text": text} for i, (_, title, text) in enumerate(CORPUS)]
    (beir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = {"q1": "honey bees", "q2": "volcano erupts", "q3": "running runner"}
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td4\t1\nq3\td7\t1\n")
    store = tmp_path / "store"
    code, out, err = run("index", beir, "--store", store, "--no-dense", "--bm25", "--no-progress")
    assert code == 0, err
    assert "bm25: 8 passages" in out and "stemmer english" in out
    code, out, err = run("search", "--store", store, "--query", "honey bees", "--strategy", "bm25", "--bm25-k1", "1.2")
    assert code == 0, err
    assert out.split()[2] == "d2"
    code, out, err = run("eval", "--store", store, "--beir", beir, "--strategy", "bm25", "--no-progress")
    assert code == 0, err
    assert "ndcg@10     1.0000" in out
    code, _, err = run("search", "--store", store, "--query", "bees", "--strategy", "bm25", "--k1", "3")
    assert code == 2 and "--k1 does not apply to --strategy bm25" in err
    code, _, err = run("search", "--store", store, "--query", "bees", "--strategy", "bm25", "--bm25-b", "2")
    assert code == 2 and "--bm25-b must be <= 1" in err
    code, out, err = run("index", beir, "--store", store, "--no-progress")  # re-indexing: it follows the write
    assert code == 0 and "bm25: 8 passages" in out and "follows this write" in out, err
