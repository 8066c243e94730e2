"""An adoption that survives a crash: the measured candidate and its encoded parts kept in the store until the switch.

Adopting re-encodes every passage: hours for a large store on a CPU. Before that encode starts, ``tune`` copies the
candidate into ``<store>/adoption-pending/`` (``model/``, fsynced, and ``adoption.json``: the model's digest, the
store model it was measured against, the facts recorded with it, the run's report) and saves the encoded passages
there in parts (:func:`~rag_hier.store.encode_parts.encode_in_parts`). A run killed during the encode leaves that
folder; ``rag-hier tune --store S --resume`` (``store.tune(resume=True)``) encodes what is missing and switches.
The folder is removed once the switch is committed, or when the store's model changed since the measurement
(the candidate was measured against a model the store no longer has: it is not adopted). A new tuning run refuses to
start while one waits; removing the folder by hand discards it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_hier.errors import ModelChangedError, RagHierError
from rag_hier.store.files import atomic_write_bytes, fsync_dir, fsync_file
from rag_hier.store.models import tree_digest

__all__ = [
    "PENDING_DIR",
    "PendingAdoption",
    "check_model",
    "check_no_pending",
    "find_pending",
    "start_pending",
    "still_current",
]

PENDING_DIR = "adoption-pending"
"""The folder, inside the store directory, of an adoption whose encode has not finished."""
_MANIFEST = "adoption.json"
_INCOMING = f".{PENDING_DIR}-incoming-"
"""A copy being made, named by the process making it."""
_FORMAT = "rag-hier pending adoption 1"


@dataclass(frozen=True)
class PendingAdoption:
    """A measured candidate waiting for its passages to be encoded and switched in.

    Attributes:
        path: The folder (``<store>/adoption-pending``).
        digest: The digest of ``model/``'s files (checked before the model is loaded).
        expected: The store's recorded model the candidate was measured against.
        details: The facts recorded with the adopted model.
        report: The run's report (:meth:`~rag_hier.tuning.TuneReport.to_dict`).
        created: When the adoption started (ISO 8601, UTC).

    """

    path: Path
    digest: str
    expected: dict[str, Any]
    details: dict[str, Any]
    report: dict[str, Any]
    created: str

    @property
    def model_dir(self) -> Path:
        """The candidate's model directory."""
        return self.path / "model"

    @property
    def parts_dir(self) -> Path:
        """Where the encoded parts are saved."""
        return self.path / "parts"

    def describe(self) -> str:
        """One clause: when it started and what it measured."""
        diff = (self.report.get("difference") or {}).get(self.details.get("metric", ""), {})
        delta = diff.get("delta")
        what = f"{self.details.get('metric')} {delta:+.4f} on dev" if isinstance(delta, (int, float)) else "measured"
        return f"a tuned model ({what}, started {self.created})"

    def discard(self) -> None:
        """Remove the folder (the candidate and its parts)."""
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            fsync_dir(self.path.parent)


def _bad(path: Path, what: str) -> RagHierError:
    return RagHierError(
        f"{path}: {what}; this folder holds an interrupted adoption: remove it to discard that adoption"
    )


def find_pending(store_path: str | Path) -> PendingAdoption | None:
    """The adoption waiting in ``store_path``, or ``None``.

    Raises:
        RagHierError: The folder is there but its ``adoption.json`` is missing or malformed (file and field named).

    """
    folder = Path(store_path) / PENDING_DIR
    if not folder.is_dir() or folder.is_symlink():
        return None
    manifest = folder / _MANIFEST
    if not manifest.is_file():
        # the copy of the model was not finished: nothing was encoded yet, the run can simply be repeated
        shutil.rmtree(folder, ignore_errors=True)
        return None
    try:
        data = json.loads(manifest.read_bytes())
    except (OSError, ValueError) as exc:
        raise _bad(manifest, f"unreadable ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise _bad(manifest, f"field 'format' must be {_FORMAT!r}")
    for key, kind in (("digest", str), ("expected", dict), ("details", dict), ("report", dict), ("created", str)):
        if not isinstance(data.get(key), kind):
            raise _bad(manifest, f"field {key!r} must be a {kind.__name__}")
    return PendingAdoption(folder, data["digest"], data["expected"], data["details"], data["report"], data["created"])


def check_no_pending(store_path: str | Path) -> None:
    """Refuse to start a tuning run while an interrupted adoption waits (it would be lost or raced)."""
    pending = find_pending(store_path)
    if pending is not None:
        raise RagHierError(
            f"{pending.path} holds {pending.describe()} whose re-encoding was interrupted: finish it with "
            f"`rag-hier tune --store {store_path} --resume` (Python: store.tune(resume=True)), or remove that "
            "folder to discard it"
        )


def start_pending(
    store_path: str | Path,
    candidate: Path,
    *,
    expected: dict[str, Any],
    details: dict[str, Any],
    report: dict[str, Any],
) -> PendingAdoption:
    """Copy ``candidate`` into the store's pending folder and record what adopting it needs (fsynced)."""
    folder = Path(store_path) / PENDING_DIR
    if folder.exists() or folder.is_symlink():
        raise RagHierError(f"{folder} exists already: another adoption is waiting (see `rag-hier tune --resume`)")
    _remove_dead_copies(folder.parent)
    incoming = folder.with_name(f"{_INCOMING}{os.getpid()}")
    shutil.rmtree(incoming, ignore_errors=True)
    try:
        shutil.copytree(candidate, incoming / "model", symlinks=False)
        for base, _dirs, files in os.walk(incoming):
            for name in files:
                fsync_file(Path(base) / name)
            fsync_dir(Path(base))
        digest = tree_digest(incoming / "model")
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        data = {
            "format": _FORMAT,
            "digest": digest,
            "expected": expected,
            "details": details,
            "report": report,
            "created": created,
        }
        atomic_write_bytes(incoming / _MANIFEST, (json.dumps(data, indent=2, default=str) + "\n").encode("utf-8"))
        incoming.replace(folder)
        fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    return PendingAdoption(folder, digest, expected, details, report, created)


def _remove_dead_copies(root: Path) -> None:
    """Remove the half-made copies of processes that are gone (a crash while the candidate was being copied)."""
    for path in root.glob(f"{_INCOMING}*"):
        pid = path.name[len(_INCOMING) :]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue  # alive, another user's


def check_model(pending: PendingAdoption) -> None:
    """The kept model's files still match the digest recorded when it was kept."""
    if not pending.model_dir.is_dir() or tree_digest(pending.model_dir) != pending.digest:
        raise _bad(pending.model_dir, "the kept model's files do not match the digest recorded with it")


def still_current(pending: PendingAdoption, current: dict[str, Any] | None) -> None:
    """Raise :class:`ModelChangedError` (and discard) when the store's model is no longer the measured one."""
    from rag_hier.store.encoder_switch import same_encoder

    if current is None or not same_encoder(current, pending.expected):
        pending.discard()
        raise ModelChangedError(
            f"the store's model changed since {pending.describe()} was measured against it (now "
            f"{(current or {}).get('model')}, measured against {pending.expected.get('model')}): that adoption is "
            "discarded; tune again to measure against the store's current model"
        )
