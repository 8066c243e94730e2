"""Tuning's edges: outputs checked before training, the truth after the commit, compare-and-switch, the original
model always reachable, reports never through a link, leftovers of interrupted switches cleaned."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest

from rag_hier import HierStore
from rag_hier.errors import ModelChangedError, RagHierError, StoreError
from rag_hier.testing import build_tiny_model
from tests.tuning.helpers import COMMON, LEARN_FLAGS
from tests.tuning.helpers import fingerprint as _fingerprint
from tests.tuning.helpers import run_cli as _run

STAY_FLAGS = ["--max-steps", "1", "--learning-rate", "1e-9", "--train-batch-size", "16", "--no-refit"]


def _model(path: Path) -> str:
    store = HierStore.open(path, read_only=True)
    try:
        return str(store.model_info["current"]["model"])
    finally:
        store.close()


@pytest.fixture(scope="module")
def other_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("other") / "m", seed=7))


def test_a_report_into_a_missing_folder_is_refused_before_training(judged_store, tmp_path) -> None:
    path, beir = judged_store
    before = _fingerprint(path)
    report = tmp_path / "missing" / "tune.json"
    code, out, err = _run(
        ["tune", "--store", str(path), "--beir", str(beir), *LEARN_FLAGS, *COMMON, "--report", str(report)]
    )
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rag-hier tune: error: --report") and "does not exist" in lines[0]
    assert "estimate:" not in err
    assert _fingerprint(path) == before


def test_store_dot_adopts_writes_its_report_inside_and_exits_0(judged_store, monkeypatch) -> None:
    path, beir = judged_store
    monkeypatch.chdir(path)
    code, out, err = _run(["tune", "--store", ".", "--beir", str(beir), *LEARN_FLAGS, *COMMON])
    assert code == 0, err
    assert "ADOPTED" in out and "error" not in err
    assert (path / "tune.md").is_file() and (path / "tune.svg").is_file()


def test_ctrl_c_after_the_commit_reports_the_adoption(judged_store, monkeypatch) -> None:
    import rag_hier.tuning.workflow as workflow

    path, beir = judged_store
    base = _model(path)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(workflow, "_finish", interrupted)  # runs after the adoption's commit
    code, out, err = _run(["tune", "--store", str(path), "--beir", str(beir), *LEARN_FLAGS, *COMMON])
    now = _model(path)
    assert now != base  # the switch was committed
    assert code == 0, err
    assert "interrupted" not in err
    assert out.strip().splitlines()[-1].startswith(f"adopted: the store encodes with {now}")


def test_a_failure_after_the_commit_is_a_warning_not_an_error(judged_store, monkeypatch) -> None:
    import rag_hier.tuning.workflow as workflow

    path, beir = judged_store

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(workflow, "_finish", full)  # runs after the adoption's commit
    code, out, err = _run(["tune", "--store", str(path), "--beir", str(beir), *LEARN_FLAGS, *COMMON])
    assert code == 0, err
    assert "rag-hier tune: warning: after the switch was committed" in err and "error" not in err
    assert out.strip().splitlines()[-1].startswith(f"adopted: the store encodes with {_model(path)}")


def test_an_adoption_is_refused_when_the_model_changed_meanwhile(judged_store, learns, judged_maps, other_model):
    path, _ = judged_store
    queries, qrels = judged_maps
    store = HierStore.open(path)
    base = store.model_info["current"]["model"]

    def say(line: str) -> None:
        if line.startswith("adopting"):  # another writer switches the model under the run
            with HierStore.open(path) as other:
                other.adopt_model(other_model)

    with pytest.raises(ModelChangedError, match="that this run measured as its base"):
        store.tune(queries, qrels, say=say, force=True, **learns)
    info = store.model_info
    store.close()
    assert info["previous"]["model"] == base  # the original is still one rollback away
    assert "adopted" not in info["current"]  # the other writer's model, not this run's candidate
    assert len(list((path / "models").iterdir())) == 1  # only the other writer's model


def test_the_original_model_stays_reachable_after_two_adoptions(judged_store, other_model, tiny_model_path) -> None:
    path, _ = judged_store
    store = HierStore.open(path)
    base = store.model_info["current"]["model"]
    store.adopt_model(other_model)
    store.adopt_model(tiny_model_path)  # a second adoption: "previous" is now the first one
    info = store.model_info
    assert info["previous"]["model"].startswith("models/") and info["original"]["model"] == base
    store.close()
    code, out, err = _run(["tune", "--store", str(path), "--rollback", "original", *COMMON])
    assert code == 0, err
    assert out.startswith("rolled back to the model the store was built with") and base in out
    assert _model(path) == base
    code, out, err = _run(["tune", "--store", str(path), "--rollback", "original", *COMMON])
    assert code == 2 and "already" in err


def test_a_planted_link_is_replaced_not_followed(judged_store, tmp_path) -> None:
    path, beir = judged_store
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    for link in (path / "tune.md", path / "tune.svg", path.parent / "store.tune.md", path.parent / "store.tune.svg"):
        link.symlink_to(victim)
    code, _out, err = _run(["tune", "--store", str(path), "--beir", str(beir), *STAY_FLAGS, *COMMON])
    assert code == 0, err
    assert victim.read_text() == "keep me\n"
    assert not (path / "tune.md").is_symlink() and "| ndcg@10 |" in (path / "tune.md").read_text()


def test_leftovers_of_interrupted_switches_are_removed_at_open(judged_store, other_model) -> None:
    path, _ = judged_store
    store = HierStore.open(path)
    store.adopt_model(other_model)
    kept = sorted(p.name for p in (path / "models").iterdir())
    store.close()
    (path / "models" / ".incoming-g9-0123456789ab").mkdir()
    (path / "models" / ".incoming-g9-0123456789ab" / "config.json").write_text("{}")
    (path / "models" / "g9-ba9876543210").mkdir()
    HierStore.open(path, read_only=True).close()  # a reader removes nothing
    assert len(list((path / "models").iterdir())) == 3
    HierStore.open(path).close()
    assert sorted(p.name for p in (path / "models").iterdir()) == kept


def _one_line_error(argv: list[str], command: str) -> str:
    code, out, err = _run(argv)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rag-hier {command}: error: "), err
    return lines[0]


def test_a_lone_surrogate_in_a_query_is_refused_with_file_and_line(judged_store, tmp_path) -> None:
    path, beir = judged_store
    before = _fingerprint(path)
    bad = tmp_path / "queries.jsonl"
    lines = (beir / "queries.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace('"text": "', '"text": "abc \\ud800 def ', 1)
    assert "\\ud800" in lines[2]
    bad.write_text("\n".join(lines) + "\n")
    qrels = str(beir / "qrels" / "train.tsv")
    for command, argv in (
        ("tune", ["tune", "--store", str(path), "--queries", str(bad), "--qrels", qrels, *STAY_FLAGS, *COMMON]),
        ("eval", ["eval", "--store", str(path), "--queries", str(bad), "--qrels", qrels, *COMMON]),
        ("search", ["search", "--store", str(path), "--queries", str(bad), *COMMON]),
    ):
        line = _one_line_error(argv, command)
        assert f"{bad}:3" in line and "lone surrogate" in line, line
    line = _one_line_error(["search", "--store", str(path), "--query", "caf\udcff", *COMMON], "search")
    assert "not valid UTF-8" in line and "0xff" in line
    assert _fingerprint(path) == before


def test_epochs_inf_is_refused(judged_store, judged_maps) -> None:
    path, beir = judged_store
    before = _fingerprint(path)
    line = _one_line_error(["tune", "--store", str(path), "--beir", str(beir), "--epochs", "inf", *COMMON], "tune")
    assert "--epochs must be a finite number" in line
    with HierStore.open(path) as store, pytest.raises(RagHierError, match="epochs must be a finite number"):
        store.tune(*judged_maps, epochs=float("inf"), show_progress_bar=False, device="cpu")
    assert _fingerprint(path) == before


def test_milvus_stores_are_tuned_by_the_same_run_and_say_what_a_rollback_lacks(tmp_path, tiny_model_path) -> None:
    # (adoption, rollback and kill -9 on Milvus: tests/milvus/test_milvus_tuning.py)
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from rag_hier import Document
    from rag_hier.store.milvus import MilvusStore

    uri = f"{tmp_path / 'm.db'}#docs"
    store = MilvusStore.create(uri=uri, model=tiny_model_path)
    store.add_documents([Document(doc_id="d", title="", paragraphs=("red blue green",))])
    assert store.model_info["current"]["model"] == tiny_model_path
    with pytest.raises(RagHierError, match="not passage ids"):  # the tuning run's own checks
        store.tune({"q": "red"}, {"q": {"d": 1}})
    with pytest.raises(StoreError, match="no previous model"):
        store.rollback_model()
    store.close()
    assert "no previous model" in _one_line_error(["tune", "--store", uri, "--rollback", *COMMON], "tune")
    assert "never switched" in _one_line_error(["tune", "--store", uri, "--rollback", "original"], "tune")

    pytest.importorskip("haystack")
    pytest.importorskip("llama_index.core")
    from haystack.document_stores.errors import DocumentStoreError
    from haystack_integrations.document_stores.rag_hier import RagHierDocumentStore
    from llama_index.vector_stores.rag_hier import RagHierVectorStore

    ds = RagHierDocumentStore(uri=uri)
    with pytest.raises(RagHierError, match="not passage ids"):
        ds.tune({"q": "red"}, {"q": {"d": 1}})
    with pytest.raises(DocumentStoreError, match="no previous model"):
        ds.rollback_model()
    ds.close()
    vs = RagHierVectorStore(uri=uri)
    with pytest.raises(RagHierError, match="not passage ids"):
        vs.tune({"q": "red"}, {"q": {"d": 1}})
    with pytest.raises(StoreError, match="no previous model"):
        vs.rollback_model()
    vs.close()


def test_candidate_folders_of_dead_runs_are_removed(tmp_path, monkeypatch, judged_store, judged_maps, stays) -> None:
    from rag_hier.tuning.edges import CANDIDATE_PREFIX, clean_stale_candidates

    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))

    def folder(name: str, *, lock: bool) -> Path:
        path = root / name
        (path / "candidate").mkdir(parents=True)
        (path / "candidate" / "model.safetensors").write_bytes(b"x" * 1024)
        if lock:
            (path / ".owner.lock").write_bytes(b"")
        return path

    alive = folder(f"{CANDIDATE_PREFIX}alive", lock=True)
    holder = os.open(alive / ".owner.lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # a run still going
    dead = folder(f"{CANDIDATE_PREFIX}dead", lock=True)  # its process was killed: nobody holds the lock
    old = folder(f"{CANDIDATE_PREFIX}old", lock=False)  # an older version's, days old
    os.utime(old, (0, 0))
    young = folder(f"{CANDIDATE_PREFIX}young", lock=False)
    other = folder("someone-else", lock=False)
    assert clean_stale_candidates(root) == 2
    assert not dead.exists() and not old.exists()
    assert alive.exists() and young.exists() and other.exists()
    dead = folder(f"{CANDIDATE_PREFIX}dead2", lock=True)
    path, _ = judged_store
    with HierStore.open(path) as store:
        store.tune(*judged_maps, **stays)  # a run removes what dead runs left, and its own folder at the end
    assert not dead.exists() and alive.exists()
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(CANDIDATE_PREFIX)) == [alive.name, young.name]
    os.close(holder)


def test_document_qrels_on_a_passage_store_name_the_flag(tmp_path, judged_template, tiny_model_path) -> None:
    from rag_hier import Document
    from rag_hier.testing import translation_collection

    corpus, _queries, _qrels = translation_collection()
    path = tmp_path / "passages"
    store = HierStore.create(path, model=tiny_model_path, corpus={"max_passage_words": 0})
    store.add_documents(
        [Document(doc_id=d, title="", paragraphs=(t, f"{t} again")) for d, t in corpus.items()], max_passage_words=0
    )
    store.close()
    beir = judged_template[1]  # its qrels name document ids
    before = _fingerprint(path)
    flags = ["--queries", str(beir / "queries.jsonl"), "--qrels", str(beir / "qrels" / "train.tsv"), *COMMON]
    for command in ("eval", "tune"):
        line = _one_line_error([command, "--store", str(path), *flags], command)
        assert "name document ids of this store" in line and "--aggregate doc" in line, line
    code, _out, err = _run(["eval", "--store", str(path), *flags, "--aggregate", "doc"])
    assert code == 0, err
    assert _fingerprint(path) == before


def test_a_dry_run_summary_gives_the_estimate_once(judged_store, judged_maps, learns) -> None:
    path, _ = judged_store
    with HierStore.open(path) as store:
        summary = store.tune(*judged_maps, dry_run=True, **learns).summary()
    assert "dry run: dry run" not in summary
    assert summary.splitlines()[-2].startswith("dry run: ")
    assert summary.splitlines()[-1].startswith("estimate: about ") and " min for the whole run" in summary


def test_info_marks_a_forced_adoption_and_rollbacks_say_which_way(judged_store) -> None:
    path, beir = judged_store
    code, out, err = _run(["tune", "--store", str(path), "--beir", str(beir), "--force", *STAY_FLAGS, *COMMON])
    assert code == 0 and "ADOPTED: forced" in out, (out, err)
    code, out, err = _run(["info", "--store", str(path)])
    assert code == 0 and "(forced with --force: the adoption rule did not adopt it)" in out, err
    code, out, err = _run(["tune", "--store", str(path), "--rollback", *COMMON])
    assert code == 0 and out.startswith("rolled back: "), err
    code, out, err = _run(["tune", "--store", str(path), "--rollback", *COMMON])
    assert code == 0 and out.startswith("rolled forward: "), err


def test_the_report_lists_the_held_back_queries(judged_store, judged_maps, stays, tmp_path) -> None:
    from rag_hier.tuning.workflow import report_files

    path, _ = judged_store
    with HierStore.open(path) as store:
        report = store.tune(*judged_maps, **stays)
    assert len(report.dev_query_ids) == report.dev_queries > 0
    assert set(report.dev_query_ids) <= set(judged_maps[0])
    md, _svg = report_files(report, path)
    assert f"`{report.dev_query_ids[0]}`" in md.read_text() and "Held back" in md.read_text()
    target = tmp_path / "victim.json"
    target.write_text("keep\n")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    report.write_json(link)  # replaces the link, never writes through it
    assert target.read_text() == "keep\n" and not link.is_symlink()
    assert report.to_dict()["dev_query_ids"] == report.dev_query_ids


def test_a_lone_surrogate_given_in_python_is_one_clear_error(judged_store, judged_maps, stays) -> None:
    from rag_hier.errors import InvalidInputError

    path, _ = judged_store
    queries, qrels = judged_maps
    qid = next(iter(queries))
    before = _fingerprint(path)
    with HierStore.open(path) as store:
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            store.search("caf\udcff", top_k=3)
        with pytest.raises(InvalidInputError, match="lone surrogate"):
            store.tune({**queries, qid: "abc \ud800 def"}, qrels, **stays)
    assert _fingerprint(path) == before
