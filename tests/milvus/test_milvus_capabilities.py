"""What a Milvus server offers, read from its version: the parsing, the choices made from it, and the errors.

The choices are exercised end to end by the Milvus tests on each server kind (Milvus Lite here; a milvus 2.3.5
server in ``scripts/test-milvus-server.sh``). Needs no Milvus.
"""

from __future__ import annotations

import pytest

from rag_hier.store.milvus.capabilities import FALSE, TRUE, Capabilities, MissingCapabilityError, parse_version
from rag_hier.store.milvus.filters import translate


@pytest.mark.parametrize(
    ("version", "lite", "parsed"),
    [
        ("milvus_lite-3.2.2", True, (3, 2, 2)),
        ("v2.3.5-lite", False, (2, 3, 5)),  # PyPI `milvus`: the real server, embedded; not Milvus Lite
        ("v2.4.10", False, (2, 4, 10)),
        ("2.5", False, (2, 5, 0)),
        ("", False, None),
        ("custom-build", False, None),
    ],
)
def test_versions_are_read_as_lite_or_server(version: str, lite: bool, parsed) -> None:
    assert parse_version(version) == (lite, parsed)


def test_capabilities_follow_the_version() -> None:
    old = Capabilities.of_version("v2.3.5-lite")
    assert old is not None and not old.lite
    assert old.missing() == [
        "inverted_index",
        "sparse_vectors",
        "nullable_fields",
        "json_null_check",
        "json_path_index",
    ]
    mid = Capabilities.of_version("v2.4.10")
    assert mid is not None and mid.missing() == ["nullable_fields", "json_null_check", "json_path_index"]
    new = Capabilities.of_version("v2.5.4")
    assert new is not None and new.missing() == ["json_path_index"]
    newest = Capabilities.of_version("v2.5.11")
    assert newest is not None and newest.missing() == []
    lite = Capabilities.of_version("milvus_lite-3.2.2", lite_file=True)
    assert lite is not None and lite.lite and lite.missing() == ["json_path_index"]
    native_lite = Capabilities.of_version("", lite_file=True)  # the native Milvus Lite 2.4 / 2.5 binaries
    assert native_lite is not None and native_lite.lite and not native_lite.nullable_fields
    assert Capabilities.of_version("custom-build") is None  # probed


def test_scalar_indexes_and_null_checks_follow_the_capabilities() -> None:
    old = Capabilities("v2.3.5-lite", False, False, False, False, False, False)
    new = Capabilities("v2.5.4", False)
    assert (old.scalar_index(True), old.scalar_index(False)) == ("STL_SORT", "Trie")
    assert (new.scalar_index(True), new.scalar_index(False)) == ("INVERTED", "INVERTED")
    assert old.null_check('meta["k"]', present=False) == '(not exists meta["k"])'
    assert new.null_check('meta["k"]', present=True) == '(meta["k"] is not null)'


def test_a_missing_capability_names_the_server_version_that_has_it() -> None:
    old = Capabilities("v2.3.5-lite", False, False, False, False, False, False)
    with pytest.raises(MissingCapabilityError, match=r"http://h:1#c: sparse rows needs sparse vectors.*2\.3\.5.*2\.4"):
        old.require("sparse_vectors", "sparse rows", location="http://h:1#c")
    Capabilities("v2.5.4", False).require("sparse_vectors", "sparse rows", location="x")


def test_no_expression_holds_a_boolean_literal() -> None:
    for nulls in (True, False):
        for filters in (None, {}, {"operator": "AND", "conditions": []}, {"operator": "OR", "conditions": []}):
            expr = translate(filters, json_null_check=nulls)
            assert expr in (TRUE, FALSE)
        expr = translate({"field": "position", "operator": "==", "value": "x"}, json_null_check=nulls)
        assert expr == FALSE and "true" not in TRUE + FALSE and "false" not in TRUE + FALSE


def test_without_is_null_a_comparison_is_guarded_by_exists_and_none_is_left_to_the_client() -> None:
    eq = {"field": "meta.k", "operator": "==", "value": 1}
    assert translate(eq) == '(meta["k"] is not null and meta["k"] == 1)'
    assert translate(eq, json_null_check=False) == '((exists meta["k"]) and meta["k"] == 1)'
    ge = {"field": "meta.k", "operator": ">=", "value": 2}
    assert translate(ge, json_null_check=False) == '((exists meta["k"]) and meta["k"] >= 2)'
    none = {"field": "meta.k", "operator": "==", "value": None}
    assert translate(none) == '(meta["k"] is null)'
    assert translate(none, json_null_check=False) is None  # `exists` counts a stored JSON null as present
    within = {"field": "meta.k", "operator": "in", "value": ["a", None]}
    assert translate(within, json_null_check=False) is None
