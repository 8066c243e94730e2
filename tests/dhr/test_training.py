"""DHRTrainer: training rows with In-Doc / In-Sec / BM25 negatives, a few steps on a tiny model, saved models."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rag_hier import Document, Section
from rag_hier.corpus.readers import QAQuestion, read_qa_documents, read_qa_questions
from rag_hier.errors import CorpusFormatError, RagHierError
from rag_hier.training.dhr import (
    DHRExample,
    DHRTrainer,
    DHRTrainingConfig,
    build_training_rows,
    examples_from_pairs,
    examples_from_questions,
    read_examples,
)


def sectioned_docs() -> list[Document]:
    return [
        Document(
            "rome",
            "Rome",
            ("Rome is the capital of Italy.", "Rome has many fountains."),
            (
                Section("History", ("Rome was founded in 753 BC.", "The Roman Empire fell in 476.")),
                Section("Food", ("Carbonara comes from Rome.",)),
            ),
        ),
        Document("paris", "Paris", ("Paris is the capital of France.", "The Seine flows through Paris.")),
        Document("oslo", "Oslo", ("Oslo is the capital of Norway.", "Oslo was founded around 1040.")),
    ]


def test_rows_have_in_sec_in_doc_and_bm25_negatives_without_the_answer() -> None:
    docs = sectioned_docs()
    # paragraph 2 of rome = first History paragraph (lead has 2 paragraphs)
    q = QAQuestion("q1", "When was Rome founded?", ("753 BC",), "rome", 2)
    examples = examples_from_questions([q], docs, max_passage_words=0)
    assert examples == [DHRExample("When was Rome founded?", "rome", ("rome#2",), ("753 BC",))]
    cfg = DHRTrainingConfig(max_passage_words=0, doc_negatives=2, in_doc_negatives=1, in_sec_negatives=1)
    rows = build_training_rows(docs, examples, cfg)
    p = rows["passage"]
    assert list(p) == ["anchor", "positive", "negative_1", "negative_2", "negative_3"]
    assert p["positive"] == ["Rome, History, Rome was founded in 753 BC."]
    in_sec, in_doc, bm25 = p["negative_1"][0], p["negative_2"][0], p["negative_3"][0]
    assert in_sec == "Rome, History, The Roman Empire fell in 476."  # same section
    assert in_doc.startswith("Rome, ") and "History" not in in_doc  # same document, other section
    assert not bm25.startswith("Rome")  # BM25 from another document ("founded" → Oslo)
    assert "founded" in bm25
    assert all("753 BC" not in p[c][0] for c in ("negative_1", "negative_2", "negative_3"))
    d = rows["document"]
    assert d["positive"][0] == "Rome, Rome is the capital of Italy. Rome has many fountains., History, Food"
    assert {d["negative_1"][0].split(",")[0], d["negative_2"][0].split(",")[0]} == {"Paris", "Oslo"}


def test_document_negatives_never_contain_the_answer() -> None:
    docs = sectioned_docs()
    # BM25 ranks Oslo first ("founded around 1040"), but Oslo holds the answer string: Paris is the negative
    ex = DHRExample("What was founded around 1040?", "rome", ("rome#2",), ("1040",))
    cfg = DHRTrainingConfig(max_passage_words=0, doc_negatives=1, levels=("document",))
    d = build_training_rows(docs, [ex], cfg)["document"]
    assert d["negative_1"][0].startswith("Paris")
    assert build_training_rows(docs, [DHRExample("founded", "rome", (), ())], cfg)["document"]["negative_1"][
        0
    ].startswith("Oslo")  # without answers only the gold document is excluded
    # every other document holds the answer: the question gets no document row
    capital = DHRExample("capital?", "rome", ("rome#0",), ("capital",))
    assert "document" not in build_training_rows(docs, [capital], cfg)


def test_document_negatives_are_ranked_on_summaries_by_default_as_the_papers_table_3() -> None:
    docs = [
        Document("gold", "Fjords", ("Fjords are long sea inlets.",)),
        # "glacier" in its abstract: the summary ranks it first
        Document("alps", "Alps", ("The Alps hold a glacier above every valley.", "Cows graze in summer.")),
        # "glacier" only deep in a section, three times: the full text ranks it first
        Document(
            "norway",
            "Norway",
            ("Norway lies in the north.",),
            (Section("Ice", ("A glacier, then another glacier, then a third glacier.",)),),
        ),
    ]
    ex = DHRExample("glacier", "gold", (), ())

    def first_negative(text: str, n: int = 1) -> list[str]:
        cfg = DHRTrainingConfig(max_passage_words=0, doc_negatives=n, doc_negative_text=text, levels=("document",))
        d = build_training_rows(docs, [ex], cfg)["document"]
        return [d[f"negative_{j + 1}"][0].split(",")[0] for j in range(n)]

    assert DHRTrainingConfig().doc_negative_text == "summary"
    assert first_negative("summary") == ["Alps"]
    assert first_negative("full_text") == ["Norway"]
    assert first_negative("alternate", 2) == ["Alps", "Norway"]  # summary, then full text, in turn
    with pytest.raises(ValueError, match="doc_negative_text"):
        DHRTrainingConfig(doc_negative_text="title")  # type: ignore[arg-type]


def test_second_iteration_adds_mined_negatives_to_the_first(tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    docs = sectioned_docs()
    examples = [
        DHRExample("When was Rome founded?", "rome", ("rome#2",), ("753 BC",)),
        DHRExample("What flows through Paris?", "paris", ("paris#1",), ("Seine",)),
    ]
    cfg = DHRTrainingConfig(max_passage_words=0)
    model = SentenceTransformer(tiny_model_path, device="cpu")
    first = build_training_rows(docs, examples, cfg)
    second = build_training_rows(docs, examples, cfg, model=model, keep_bm25=True)
    replaced = build_training_rows(docs, examples, cfg, model=model)
    for level, n in (("document", 1), ("passage", 2)):
        assert len(first[level]) == 2 + n and len(replaced[level]) == 2 + n
        assert len(second[level]) == 2 + 2 * n
        for j in range(1, n + 1):  # the first iteration's negatives come first, unchanged
            assert second[level][f"negative_{j}"] == first[level][f"negative_{j}"]
        for i in range(len(examples)):
            negs = [second[level][f"negative_{j}"][i] for j in range(1, 2 * n + 1)]
            assert len(set(negs)) == len(negs) and second[level]["positive"][i] not in negs
    with pytest.raises(ValueError, match="mined_negatives"):
        DHRTrainingConfig(mined_negatives="merge")  # type: ignore[arg-type]


def test_rows_fall_back_when_the_document_has_one_passage() -> None:
    docs = [Document("a", "A", ("alpha beta",)), Document("b", "B", ("gamma",)), Document("c", "C", ("delta",))]
    cfg = DHRTrainingConfig(max_passage_words=0, in_doc_negatives=1)
    rows = build_training_rows(docs, [DHRExample("alpha", "a", ("a#0",))], cfg)
    p = rows["passage"]
    negs = [p[f"negative_{i}"][0] for i in (1, 2)]
    assert len(p) == 4 and sorted(negs) == ["B, gamma", "C, delta"]  # 3 wanted, 2 exist


def test_examples_from_pairs_and_files(tmp_path: Path) -> None:
    docs, examples = examples_from_pairs([("q1", "text one"), ("q2", "text two"), ("q3", "text one")])
    assert [d.doc_id for d in docs] == ["p0", "p1"] and examples[2].passage_ids == ("p0#0",)
    corpus = sectioned_docs()
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        json.dumps({"query": "capital of norway", "passage_id": "oslo#0"})
        + "\n"
        + json.dumps({"query": "x", "doc_id": "paris"})
        + "\n"
    )
    got = read_examples(pairs, corpus, max_passage_words=0)
    assert got == [DHRExample("capital of norway", "oslo", ("oslo#0",)), DHRExample("x", "paris")]
    pairs.write_text(json.dumps({"query": "q", "passage_id": "oslo#9"}) + "\n")
    with pytest.raises(CorpusFormatError, match="oslo#9"):
        read_examples(pairs, corpus, max_passage_words=0)
    with pytest.raises(RagHierError, match="nowhere"):
        examples_from_questions([QAQuestion("q", "?", (), "nowhere", 0)], corpus)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="iterations"):
        DHRTrainingConfig(iterations=3)
    with pytest.raises(ValueError, match="levels"):
        DHRTrainingConfig(levels=("sentence",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="in_doc_negatives"):
        DHRTrainingConfig(in_doc_negatives=-1)


def test_trainer_runs_and_saves_loadable_models(tmp_path: Path, tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    docs = sectioned_docs()
    qs = [
        QAQuestion("q1", "When was Rome founded?", ("753 BC",), "rome", 2),
        QAQuestion("q2", "What flows through Paris?", ("Seine",), "paris", 1),
        QAQuestion("q3", "Capital of Norway?", ("Oslo",), "oslo", 0),
        QAQuestion("q4", "Where is carbonara from?", ("Rome",), "rome", 4),
    ]
    examples = examples_from_questions(qs, docs, max_passage_words=0)
    cfg = DHRTrainingConfig(
        base_model=tiny_model_path, max_passage_words=0, batch_size=2, iterations=2, mini_batch_size=2, device="cpu"
    )
    result = DHRTrainer(cfg).train(docs, tmp_path / "shared", examples=examples, eval_examples=examples[:2])
    assert result.document_model == result.passage_model == tmp_path / "shared"
    assert result.rows == {"document": 4, "passage": 4} and len(result.losses) == 2
    assert result.steps > 0
    assert (tmp_path / "shared" / "iteration-1" / "modules.json").is_file()
    assert "passage_cosine_accuracy@1" in result.metrics
    model = SentenceTransformer(str(result.passage_model), device="cpu")
    assert model.encode(["x"]).shape == (1, 32)
    report = json.loads((tmp_path / "shared" / "dhr_training.json").read_text())
    # iteration 2: the first iteration's negatives (1 BM25 document; BM25 + In-Doc passages) plus as many mined
    assert report["negatives"] == {"document": 2, "passage": 4}
    assert report["steps"] == result.steps


def test_trainer_takes_queries_and_qrels_like_every_trainer(tmp_path: Path, tiny_model_path: str) -> None:
    docs = sectioned_docs()
    cfg = DHRTrainingConfig(max_passage_words=0, batch_size=2, max_steps=1, device="cpu")
    trainer = DHRTrainer(cfg, model=tiny_model_path)
    queries, qrels = (
        {"q1": "When was Rome founded?", "q2": "Capital of Norway?"},
        {"q1": {"rome": 1}, "q2": {"oslo": 1}},
    )
    with pytest.raises(RagHierError, match="not both"):
        trainer.train(docs, tmp_path / "x", queries=queries, qrels=qrels, examples=[])
    with pytest.raises(RagHierError, match="needs queries and qrels"):
        trainer.train(docs, tmp_path / "x", queries=queries)
    result = trainer.train(docs, tmp_path / "m", queries=queries, qrels=qrels)
    assert result.steps == 1 and result.rows["document"] == 2 and result.output_dir == tmp_path / "m"
    assert result.to_dict()["passage_model"] == str(tmp_path / "m")


@pytest.mark.slow
def test_trainer_separate_encoders_with_mined_negatives(tmp_path: Path, tiny_model_path: str) -> None:
    from sentence_transformers import SentenceTransformer

    docs = sectioned_docs()
    examples = [
        DHRExample("When was Rome founded?", "rome", ("rome#2",), ("753 BC",)),
        DHRExample("Seine", "paris", ("paris#1",)),
    ]
    cfg = DHRTrainingConfig(
        base_model=tiny_model_path, max_passage_words=0, batch_size=2, shared_encoder=False, device="cpu"
    )
    separate = DHRTrainer(cfg).train(docs, tmp_path / "separate", examples=examples)
    assert separate.document_model.name == "document" and separate.passage_model.name == "passage"
    for path in (separate.document_model, separate.passage_model):
        assert SentenceTransformer(str(path), device="cpu").encode(["x"]).shape == (1, 32)
    # the second iteration on its own: negatives mined with the first run's document and passage models
    mined = DHRTrainer(
        dataclasses.replace(cfg, shared_encoder=False, negatives_model=str(tmp_path / "separate"), levels=("passage",))
    ).train(docs, tmp_path / "mined", examples=examples)
    assert (mined.passage_model / "modules.json").is_file()


@pytest.mark.data
def test_xquad_training_rows(shared_data: Path) -> None:
    data = shared_data / "xquad_en"
    if not data.is_dir():
        pytest.skip("xquad_en not in the shared data")
    docs = read_qa_documents(data)[:6]
    ids = {d.doc_id for d in docs}
    qs = [q for q in read_qa_questions(data) if q.doc_id in ids]
    examples = examples_from_questions(qs, docs, max_passage_words=0)
    by_id = {p.id: p for d in docs for p in __import__("rag_hier").split_document(d, 0)}
    assert all(by_id[e.passage_ids[0]].text.find(e.answers[0]) >= 0 for e in examples)  # gold paragraph holds it
    rows = build_training_rows(docs, examples, DHRTrainingConfig(max_passage_words=0))
    p = rows["passage"]
    assert len(p["anchor"]) == len(examples)
    for i, e in enumerate(examples):
        for c in ("negative_1", "negative_2"):
            assert p[c][i] != p["positive"][i]
            assert not any(a in p[c][i].split(", ", 1)[1] for a in e.answers)
