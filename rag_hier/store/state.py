"""The committed state of a store and the files it lists: validation, locating, recovery.

The state is one JSON object in ``store.sqlite`` (table ``state``, key ``manifest``) committed with the data;
``manifest.json`` mirrors it plus the SQLite file's checksum. It lists every index file with its size, its
SHA-256 and, for files written by the latest commit, the temporary name they were written under
(``pending``) until they are renamed into place.

Everything here treats the state as untrusted input: :func:`validate_state` checks its shape (every field a
later step reads, with a message naming the field), and every file name goes through
:func:`~rag_hier.store.files.check_name` before it touches the file system.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from rag_hier.errors import StoreCorruptedError
from rag_hier.store.files import check_name, fsync_dir, regular_file, sha256_file
from rag_hier.store.models import MODELS_DIR, check_model_name

logger = logging.getLogger(__name__)

__all__ = [
    "DATABASE",
    "DENSE_FILE",
    "FORMAT_VERSION",
    "MANIFEST",
    "committed_path",
    "finish_renames",
    "remove_stray_files",
    "retrying",
    "validate_state",
]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATABASE = "store.sqlite"
DENSE_FILE = "dense.faiss"
_STRAY = re.compile(r"(?:.+\.g\d+\.tmp|\.manifest\.json\.tmp-\d+)")

T = TypeVar("T")


def _field(where: str, name: str, value: Any, kinds: type | tuple[type, ...], *, optional: bool = False) -> Any:
    if value is None and optional:
        return value
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise StoreCorruptedError(f"{where}: {name} must be {_kind_names(kinds)}, got {value!r}")
    if not isinstance(value, kinds):
        raise StoreCorruptedError(f"{where}: {name} must be {_kind_names(kinds)}, got {value!r}")
    return value


def _kind_names(kinds: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", dict: "an object", list: "a list", bool: "true or false"}
    seq = kinds if isinstance(kinds, tuple) else (kinds,)
    return " or ".join(names.get(k, k.__name__) for k in seq)


def validate_state(state: Any, where: str | Path) -> dict[str, Any]:
    """Check the shape of a committed state (or manifest) and every file name in it; returns it.

    Raises:
        StoreCorruptedError: A field is missing or of the wrong type, or a file name is not a plain name
            inside the store directory. The message names the field.

    """
    w = str(where)
    if not isinstance(state, dict):
        raise StoreCorruptedError(f"{w}: the store state is not a JSON object")
    if state.get("format") != "rag-hier-store":
        raise StoreCorruptedError(f"{w}: not a rag-hier manifest")
    _field(w, "generation", state.get("generation"), int)
    if state["generation"] < 0:
        raise StoreCorruptedError(f"{w}: generation must be >= 0, got {state['generation']}")
    dim = _field(w, "dimension", state.get("dimension"), int, optional=True)
    if dim is not None and not 0 < dim <= 1 << 20:
        raise StoreCorruptedError(f"{w}: dimension must be between 1 and 1048576, got {dim}")
    for key in ("encoder", "encoder_previous", "encoder_original"):
        encoder = _field(w, key, state.get(key), dict, optional=True)
        if encoder is None:
            continue
        model = _field(w, f"{key}.model", encoder.get("model"), str)
        _field(w, f"{key}.dimension", encoder.get("dimension"), int, optional=True)
        _field(w, f"{key}.since", encoder.get("since"), int, optional=True)
        _field(w, f"{key}.weights_sha256", encoder.get("weights_sha256"), str, optional=True)
        if _field(w, f"{key}.stored", encoder.get("stored", False), bool):
            # a model inside the store: models/<plain name>, with the digest it is checked against
            prefix = f"{MODELS_DIR}/"
            if not model.startswith(prefix):
                raise StoreCorruptedError(f"{w}: {key}.model of a stored model must be {prefix}<name>, got {model!r}")
            check_model_name(model[len(prefix) :], f"{w}: {key}.model")
            _field(w, f"{key}.sha256", encoder.get("sha256"), str)
    indexes = _field(w, "indexes", state.get("indexes"), dict)
    dense = _field(w, "indexes.dense", indexes.get("dense"), dict)
    if dense.get("file") != DENSE_FILE:
        raise StoreCorruptedError(f"{w}: indexes.dense.file must be {DENSE_FILE!r}, got {dense.get('file')!r}")
    _field(w, "indexes.dense.config", dense.get("config"), dict)
    _field(w, "indexes.dense.written", dense.get("written"), int, optional=True)
    _segments_field(w, "indexes.dense.segments", dense.get("segments"))
    if set(indexes) != {"dense"}:
        raise StoreCorruptedError(f"{w}: unknown index(es) {sorted(set(indexes) - {'dense'})}")
    _field(w, "corpus", state.get("corpus", {}), dict)
    counts = _field(w, "counts", state.get("counts"), dict)
    for key in ("documents", "passages", "vectors"):
        _field(w, f"counts.{key}", counts.get(key), int)
    files = _field(w, "files", state.get("files"), dict)
    for name, info in files.items():
        check_name(name, f"{w}: files")
        _field(w, f"files[{name!r}]", info, dict)
        _field(w, f"files[{name!r}].bytes", info.get("bytes"), int)
        _field(w, f"files[{name!r}].sha256", info.get("sha256"), str)
        pending = info.get("pending")
        if pending is not None and (
            not isinstance(pending, str) or not re.fullmatch(re.escape(name) + r"\.g\d+\.tmp", pending)
        ):
            raise StoreCorruptedError(f"{w}: files[{name!r}].pending must be {name!r}.g<N>.tmp, got {pending!r}")
    extensions = _field(w, "extensions", state.get("extensions", {}), dict)
    for name, info in extensions.items():
        _field(w, f"extensions[{name!r}]", info, dict)
        _field(w, f"extensions[{name!r}].config", info.get("config", {}), dict)
        for fname in _field(w, f"extensions[{name!r}].files", info.get("files", []), list):
            check_name(fname, f"{w}: extensions[{name!r}].files")
        _segments_field(w, f"extensions[{name!r}].segments", info.get("segments"))
    return state


def _segments_field(w: str, where: str, segments: Any) -> None:
    """A ``segments`` entry (``count``, ``entries``, ``last``: integers >= 0), or none."""
    if _field(w, where, segments, dict, optional=True) is None:
        return
    for key in ("count", "entries", "last"):
        if _field(w, f"{where}.{key}", segments.get(key), int) < 0:
            raise StoreCorruptedError(f"{w}: {where}.{key} must be >= 0")


def _matches(path: Path, info: Mapping[str, Any], verify: bool) -> bool:
    st = regular_file(path)
    if st is None or st.st_size != info.get("bytes"):
        return False
    return not verify or sha256_file(path) == info.get("sha256")


def committed_path(root: Path, name: str, info: Mapping[str, Any], *, verify: bool) -> Path:
    """The file holding the committed content of ``name``: its temporary name while a rename is pending, else ``name``.

    Read-only: renames nothing. A pending file exists only between a commit and the rename that follows
    it, so when it exists it is the committed content; a concurrent rename moves it to ``name`` (callers
    retry through :func:`retrying`).

    Raises:
        StoreCorruptedError: Neither name holds the committed size (and checksum, with ``verify``).

    """
    pending = info.get("pending")
    if pending:
        path = root / pending
        if _matches(path, info, verify):
            return path
    path = root / name
    if _matches(path, info, verify):
        return path
    if regular_file(path) is None:
        raise StoreCorruptedError(f"{path} is missing")
    raise StoreCorruptedError(f"{path}: size or checksum does not match the committed state")


def retrying(load: Callable[[], T], *, attempts: int = 8) -> T:
    """Run ``load``, again after a short pause when a file vanished or changed under it.

    A reader locating files of the committed generation can race with the writer of that same generation
    renaming them into place (the content is identical under both names); a second look finds them.
    """
    for attempt in range(attempts):
        try:
            return load()
        except (FileNotFoundError, StoreCorruptedError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def finish_renames(root: Path, files: Mapping[str, Mapping[str, Any]], *, verify: bool = False) -> int:
    """Rename every committed file still under its temporary name into place; returns how many.

    Run only by the holder of the writer lock (recovery of a commit whose writer died after the SQLite
    commit, or the writer itself). A pending file that is gone was renamed already.
    """
    done = 0
    for name, info in files.items():
        pending = info.get("pending")
        if not pending:
            continue
        src = root / pending
        # a pending file exists only until its rename: when it is there, it holds the committed content
        if not _matches(src, info, verify):
            continue  # renamed already (a leftover of another size is removed with the stray files)
        src.replace(root / name)
        done += 1
    if done:
        fsync_dir(root)
    return done


def remove_stray_files(root: Path, keep: set[str]) -> int:
    """Delete temporary files of writes that never committed (only under the writer lock); returns how many."""
    removed = 0
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name in keep or not _STRAY.fullmatch(entry.name):
                continue
            if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    Path(entry.path).unlink()
                    removed += 1
    return removed
