"""Generated questions: asked once and kept in the store, resumed after a failure, refused when empty."""

from __future__ import annotations

import textwrap

import pytest

from rag_hier import HierStore
from rag_hier.cli.main import main
from rag_hier.errors import RagHierError
from tests.tuning.helpers import fingerprint as _fingerprint


class Counting:
    """A deterministic generator: two questions per passage (its first and last three words); counts its calls."""

    name = "tests.counting"

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self, text: str) -> list[str]:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise TimeoutError("the model server did not answer")
        words = text.split()
        return [" ".join(words[:3]), " ".join(words[-3:])]


def test_questions_are_generated_once_and_kept(judged_store, stays) -> None:
    path, _ = judged_store
    store = HierStore.open(path)
    gen = Counting()
    report = store.tune(generator=gen, **stays)
    assert gen.calls == 40  # every passage asked once
    assert report.dev_queries == 80 and report.details["evaluation"].startswith("cross-fitted")  # every question scored
    ext = store.extension("questions")
    assert ext is not None and ext.describe() == {"generator": "tests.counting", "passages": 40, "questions": 80}
    store.close()
    store = HierStore.open(path)  # kept in the store, checked on load
    again = Counting()
    store.tune(generator=again, **stays)
    assert again.calls == 0
    store.close()


def test_an_interrupted_generation_resumes(judged_store, stays) -> None:
    path, _ = judged_store
    store = HierStore.open(path)
    failing = Counting(fail_at=30)
    with pytest.raises(RagHierError, match=r"failed on passage .*TimeoutError: the model server did not answer"):
        store.tune(generator=failing, **stays)
    assert store.extension("questions").describe()["passages"] == 29  # what was written before the failure
    resumed = Counting()
    store.tune(generator=resumed, **stays)
    assert resumed.calls == 11
    store.close()


@pytest.mark.parametrize("answer", [[], [""], "   "])
def test_a_generator_with_nothing_to_say_changes_nothing(judged_store, stays, answer) -> None:
    path, _ = judged_store
    before = _fingerprint(path)
    store = HierStore.open(path)
    with pytest.raises(RagHierError, match="returned no question"):
        store.tune(generator=lambda text: answer, **stays)
    store.close()
    if answer == []:
        assert set(_fingerprint(path)) - set(before) <= {"questions.json"}


def test_a_generator_returning_the_wrong_type_is_named(judged_store, stays) -> None:
    path, _ = judged_store
    store = HierStore.open(path)
    with pytest.raises(RagHierError, match=r"returned int .* must return a list of strings"):
        store.tune(generator=lambda text: 3, **stays)
    store.close()


def test_cli_generator(judged_store, tmp_path, monkeypatch, capsys) -> None:
    path, _ = judged_store
    (tmp_path / "my_questions.py").write_text(
        textwrap.dedent(
            """
            def first_words(text):
                return [" ".join(text.split()[:3])]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(
        ["tune", "--store", str(path), "--generator", "my_questions:first_words", "--max-steps", "1",
         "--learning-rate", "1e-9", "--train-batch-size", "16", "--device", "cpu", "--no-progress"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "asking for 40" in err and "not adopted" in out
    code = main(["tune", "--store", str(path), "--generator", "my_questions:nowhere", "--no-progress"])
    assert code == 2 and "has no 'nowhere'" in capsys.readouterr().err
