"""Models kept inside a store directory: ``models/<name>/``, installed whole before a commit names them.

A store whose encoder was tuned (:mod:`rag_hier.tuning`) keeps its model inside its own directory, so the
store never depends on a path outside it. The committed state names the model (``encoder.model`` is
``models/<name>``, ``encoder.stored`` is true) and records the SHA-256 of its files (:func:`tree_digest`);
the model is checked against it before it is loaded, so files swapped under a store are refused.

- :func:`install_model` copies a model directory under a temporary name, fsyncs every file, and renames it
  into place: a directory named by a committed state is always complete.
- Nothing here follows a symbolic link: a model directory holds regular files and directories only.
- :func:`prune_models` removes model directories no committed state names any more (the writer lock held).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from rag_hier.encoders.dense import DenseEncoder, resolve_model_path
from rag_hier.encoders.identity import weights_digest
from rag_hier.errors import ModelMismatchError, StoreCorruptedError, StoreError
from rag_hier.store.files import fsync_dir, fsync_file

logger = logging.getLogger(__name__)

__all__ = [
    "KEPT_ENCODERS",
    "MODELS_DIR",
    "check_given_encoder",
    "check_model_name",
    "earlier_model",
    "install_model",
    "new_model_name",
    "prune_models",
    "prune_unnamed_models",
    "recorded_encoder_key",
    "same_model",
    "still_given_encoder",
    "stored_model_dir",
    "tree_digest",
]

KEPT_ENCODERS = ("encoder", "encoder_previous", "encoder_original")
"""The recorded encoders whose stored models a store keeps: current, previous, and the one it was built with."""
MODELS_DIR = "models"
"""The folder of a store directory that holds its stored models."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,100}")
_INCOMING = ".incoming-"
_MAX_FILES = 10_000


def recorded_encoder_key(recorded: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """The ``encoder_key`` of a recorded encoder (:class:`~rag_hier.store.capabilities.EncoderIdentity`).

    The model, the generation it was switched to at (so a later switch back to the same model still changes it)
    and its digest; ``None`` for a store without a recorded encoder.
    """
    if not recorded:
        return None
    return (recorded.get("model"), recorded.get("since"), recorded.get("sha256"))


def still_given_encoder(
    given: DenseEncoder, given_key: tuple[Any, ...] | None, recorded: Mapping[str, Any] | None, location: Any
) -> DenseEncoder | None:
    """A handle's ``encoder=`` while the store still encodes with the recorded encoder it was given for.

    ``given_key`` is the store's :func:`recorded_encoder_key` when the handle was opened. Once the store switched
    models, ``given`` belongs to the old vectors: ``None`` (with a warning), and the handle uses the store's own new
    model from then on.
    """
    if given_key == recorded_encoder_key(recorded):
        return given
    logger.warning(
        "%s now encodes with %s; the encoder this handle was opened with (%s) is no longer used",
        location,
        (recorded or {}).get("model"),
        given.model_name,
    )
    return None


def check_model_name(name: Any, where: str | Path) -> str:
    """``name`` if it is a plain directory name for ``models/``, else a :class:`StoreCorruptedError`."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise StoreCorruptedError(f"{where}: {name!r} is not a plain model directory name")
    return name


def new_model_name(generation: int) -> str:
    """A fresh, never reused name for a model stored by the commit of ``generation``."""
    return f"g{generation}-{uuid.uuid4().hex[:12]}"


def _is_plain_dir(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise StoreCorruptedError(f"{path} is not a plain directory (a store follows no symbolic link)")
    return True


def _walk(root: Path) -> list[Path]:
    """Every regular file under ``root`` (relative, sorted); a link or special file is refused."""
    out: list[Path] = []
    for base, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs):
            path = Path(base) / name
            if path.is_symlink():
                raise StoreCorruptedError(f"{path} is a symbolic link; a stored model holds only plain files")
        for name in files:
            path = Path(base) / name
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise StoreCorruptedError(f"{path} is not a regular file; a stored model holds only plain files")
            out.append(path.relative_to(root))
            if len(out) > _MAX_FILES:
                raise StoreError(f"{root} holds more than {_MAX_FILES} files; not a model directory")
    return sorted(out, key=lambda p: p.as_posix())


def tree_digest(root: Path) -> str:
    """SHA-256 over every file of a directory: relative names, sizes and contents, in name order."""
    digest = hashlib.sha256()
    for rel in _walk(root):
        path = root / rel
        digest.update(rel.as_posix().encode("utf-8") + b"\0")
        digest.update(str(os.lstat(path).st_size).encode() + b"\0")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()


def install_model(root: Path, source: Path, name: str) -> str:
    """Copy the model directory ``source`` to ``root/models/name`` (complete and fsynced when it returns).

    Returns:
        The digest (:func:`tree_digest`) of the installed copy.

    """
    check_model_name(name, root / MODELS_DIR)
    source = Path(source)
    if not source.is_dir():
        raise StoreError(f"model directory {source} does not exist")
    models = root / MODELS_DIR
    if not _is_plain_dir(models):
        models.mkdir()
        fsync_dir(root)
    final = models / name
    if final.exists() or final.is_symlink():
        raise StoreError(f"{final} exists already")
    incoming = models / f"{_INCOMING}{name}"
    if incoming.exists():
        shutil.rmtree(incoming)
    files = _walk(source)
    try:
        for rel in files:
            target = incoming / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, target, follow_symlinks=False)
            fsync_file(target)
        incoming.mkdir(parents=True, exist_ok=True)
        for base, _dirs, _files in os.walk(incoming):
            fsync_dir(Path(base))
        digest = tree_digest(incoming)
        incoming.replace(final)
        fsync_dir(models)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    return digest


def stored_model_dir(root: Path, encoder: Mapping[str, Any], *, verify: bool = True) -> Path:
    """The directory of a stored encoder (``encoder.stored``), checked against its recorded digest.

    Raises:
        StoreCorruptedError: The directory is missing, not plain, or its files do not match the digest.

    """
    model = str(encoder.get("model", ""))
    prefix = f"{MODELS_DIR}/"
    if not model.startswith(prefix):
        raise StoreCorruptedError(f"{root}: a stored model must be named {prefix}<name>, got {model!r}")
    name = check_model_name(model[len(prefix) :], root)
    path = root / MODELS_DIR / name
    if not _is_plain_dir(root / MODELS_DIR) or not _is_plain_dir(path):
        raise StoreCorruptedError(f"{path}: the store's model is missing")
    if verify:
        recorded = encoder.get("sha256")
        if tree_digest(path) != recorded:
            raise StoreCorruptedError(
                f"{path}: the model's files do not match the digest the store recorded; refusing to load it"
            )
    return path


def prune_models(root: Path, keep: Collection[str]) -> int:
    """Delete every directory of ``root/models`` not named in ``keep`` (writer lock held); returns how many."""
    models = root / MODELS_DIR
    if not _is_plain_dir(models):
        return 0
    removed = 0
    with os.scandir(models) as entries:
        for entry in entries:
            if entry.name in keep:
                continue
            path = Path(entry.path)
            if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                path.unlink(missing_ok=True)
            else:
                shutil.rmtree(path, ignore_errors=True)
            removed += 1
    if removed:
        fsync_dir(models)
    return removed


def prune_unnamed_models(root: Path, state: Mapping[str, Any]) -> int:
    """Remove what interrupted switches left in ``root/models`` (writer lock held): directories no state names.

    ``models/.incoming-*`` copies and ``models/g*`` directories a switch installed but never committed.
    """
    keep = set()
    for key in KEPT_ENCODERS:
        enc = state.get(key)
        if isinstance(enc, Mapping) and enc.get("stored"):
            model = str(enc.get("model", ""))
            keep.add(model.split("/", 1)[1] if "/" in model else model)
    removed = prune_models(root, keep)
    if removed:
        logger.info("%s: removed %d model directories of interrupted switches", root / MODELS_DIR, removed)
    return removed


def same_model(encoder: DenseEncoder, recorded: Mapping[str, Any], root: Path | None) -> bool:
    """Whether ``encoder`` loads the weights of the recorded encoder ``recorded`` (of the store at ``root``)."""
    return _same_model(encoder, recorded, root)


def _same_model(encoder: DenseEncoder, recorded: Mapping[str, Any], root: Path | None) -> bool:
    """Whether ``encoder`` loads the weights the store recorded (by digest where both are known, else by name)."""
    model = str(recorded.get("model", ""))
    if recorded.get("stored"):
        if root is None:
            return False
        expected = weights_digest(str(stored_model_dir(root, recorded)))[1]
    else:
        expected = recorded.get("weights_sha256")
        if encoder.model_name == model:
            return expected is None or encoder.weights_digest() in (None, expected)
    given = encoder.weights_digest()
    if expected is not None and given is not None:
        return bool(given == expected)

    def where(name: str) -> str:
        resolved = resolve_model_path(name)
        return str(Path(resolved).absolute()) if Path(resolved).exists() else resolved

    return where(encoder.model_name) == where(model)


def earlier_model(encoder: DenseEncoder, state: Mapping[str, Any], root: Path | None) -> Mapping[str, Any] | None:
    """The recorded encoder ``encoder`` loads, when it is one the store encoded with before its current model.

    The model the store was built with, the one before the last switch, or the base a tuned model was trained from:
    a pipeline saved with that model, reloaded after ``tune`` adopted, follows the store to its current model.
    """
    current = state.get("encoder")
    if not isinstance(current, Mapping):
        return None
    candidates = [state.get(k) for k in ("encoder_original", "encoder_previous")]
    base = (current.get("adopted") or {}).get("base_model")
    if isinstance(base, str) and not base.startswith(f"{MODELS_DIR}/"):
        candidates.append({"model": base})
    for recorded in candidates:
        if not isinstance(recorded, Mapping) or recorded.get("model") in (None, "", current.get("model")):
            continue
        try:
            if _same_model(encoder, recorded, root):
                return recorded
        except StoreError:  # an earlier stored model removed since: not this one
            continue
    return None


def check_given_encoder(
    encoder: DenseEncoder | None,
    recorded: Mapping[str, Any] | None,
    *,
    location: str,
    root: Path | None = None,
    allow_other_model: bool = False,
) -> None:
    """Refuse an ``encoder=`` given to open a store when it is not the model the store was built with.

    The same weights under another name or path are the same model. ``allow_other_model=True`` lets the
    caller encode with another model anyway (logged as a warning): its queries are compared with vectors of
    the store's model.

    Raises:
        ModelMismatchError: ``encoder`` is another model and ``allow_other_model`` is false.

    """
    if encoder is None or not recorded or _same_model(encoder, recorded, root):
        return
    model = recorded.get("model")
    if allow_other_model:
        logger.warning(
            "%s was built with model %s; encoding with %s instead (allow_other_model=True)",
            location,
            model,
            encoder.model_name,
        )
        return
    if encoder.model_name == model:  # the same name, other weights (files swapped at the recorded path)
        what = f"the weights at {model!r} are not the ones the store at {location} was built with"
    else:
        what = f"the store at {location} was built with model {model!r}, not {encoder.model_name!r}"
    raise ModelMismatchError(
        f"{what}: queries and passages would come from different models. Open it without encoder= (model= in the "
        "Haystack and LlamaIndex stores) to use its model, or pass allow_other_model=True to encode with this one "
        "anyway"
    )
