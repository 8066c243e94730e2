"""Store extensions on the local store: their files in the directory, an unknown extension in the manifest.

That extensions follow writes, persist and roll back on every backend: ``ExtensionsContract`` (tests/store/contract).
"""

from __future__ import annotations

import pytest

from rag_hier import HierStore
from rag_hier.errors import StoreCorruptedError
from tests.store.contract.extensions import RowidLog


def test_extension_files_live_in_the_directory(store: HierStore, tiny_encoder) -> None:
    # (hooks, persistence, rollback, removal on every backend: ExtensionsContract in tests/store/contract)
    store.add_extension(RowidLog("mine"))
    path = store.path
    store.close()
    again = HierStore.open(path, encoder=tiny_encoder)
    assert "rowids.npy" in again.manifest["files"] and (path / "rowids.npy").is_file()
    again.remove_extension("test-rowid-log")
    assert not (path / "rowids.npy").exists()
    again.close()


def test_unknown_extension_is_a_clear_error(store: HierStore) -> None:
    import json

    store.add_extension(RowidLog())
    path = store.path
    store.close()
    for f in ("manifest.json",):
        data = json.loads((path / f).read_text())
        data["extensions"] = {"no-such-ext": {"config": {}, "files": []}}
        (path / f).write_text(json.dumps(data))
    with pytest.raises(StoreCorruptedError):
        HierStore.open(path)
