"""What the Milvus server behind a connection offers, read from its version once per connection.

Real servers differ in what rag-hier relies on; each difference is one named capability, chosen here and used at
one place in the backend:

=====================  ===========================================================  ==============
capability             what the backend does with it (without it)                   first server
=====================  ===========================================================  ==============
``inverted_index``     INVERTED scalar indexes (STL_SORT on numbers, Trie on text)  2.4
``sparse_vectors``     sparse extensions as ``SPARSE_FLOAT_VECTOR`` rows in          2.4
                       ``C__sparse`` (extension files in ``C__files``)
``nullable_fields``    one nullable passage field per leaf extension (tree, EHI);    2.5
                       beam search ends in one filtered search (extension files,
                       the search restricted by a rowid list)
``json_null_check``    ``meta["k"] is null`` in pushed-down filters (``exists``;     2.5
                       a filter on ``None`` is checked in the client)
``json_path_index``    ``index_meta_field`` builds an index on ``meta["k"]``        2.5.11
                       (:class:`MissingCapabilityError`)
=====================  ===========================================================  ==============

Milvus Lite 3.x (``milvus_lite-3...``) has all of them but the JSON path index. A version string that says
nothing (a build that reports none, or an unknown format) is probed once: a scratch collection is created, tried
and dropped.
Expressions never hold a boolean literal (``true``/``false`` do not parse on every server): :data:`TRUE` and
:data:`FALSE` compare the row-version primary key ``vid`` every rag-hier collection with rows to filter has.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from rag_hier.errors import StoreError
from rag_hier.store.milvus.filters import FALSE, TRUE

logger = logging.getLogger(__name__)

__all__ = ["FALSE", "FIRST_VERSION", "TRUE", "Capabilities", "MissingCapabilityError", "detect", "parse_version"]


FIRST_VERSION: dict[str, str] = {
    "inverted_index": "2.4",
    "sparse_vectors": "2.4",
    "nullable_fields": "2.5",
    "json_null_check": "2.5",
    "json_path_index": "2.5.11",
}
"""The first Milvus server version with each capability."""

_NEEDS = {name: (*(int(x) for x in v.split(".")), 0, 0)[:3] for name, v in FIRST_VERSION.items()}


class MissingCapabilityError(StoreError):
    """The Milvus server lacks a capability an operation needs (the message names the server version that has it)."""


def parse_version(version: str) -> tuple[bool, tuple[int, int, int] | None]:
    """``(is Milvus Lite, (major, minor, patch) or None)`` of a ``get_server_version()`` answer.

    ``milvus_lite-3.2.2`` is Milvus Lite 3.2.2; ``v2.3.5-lite`` (the ``milvus`` PyPI package's embedded server)
    and ``v2.4.10`` are servers.
    """
    text = version.strip().lower()
    lite = text.startswith(("milvus_lite", "milvus-lite"))
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        return lite, None
    return lite, (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


@dataclass(frozen=True)
class Capabilities:
    """What one Milvus server offers (see the module docstring for what each capability changes)."""

    version: str
    """The server's version as it reports it (``"unknown"`` when it reports none)."""
    lite: bool
    """Milvus Lite (a ``.db`` file served in-process), not a Milvus server."""
    inverted_index: bool = True
    sparse_vectors: bool = True
    nullable_fields: bool = True
    json_null_check: bool = True
    json_path_index: bool = True

    @classmethod
    def of_version(cls, version: str, *, lite_file: bool = False) -> Capabilities | None:
        """The capabilities a version string implies, or ``None`` when it does not say (probe the server)."""
        lite, parsed = parse_version(version)
        if lite and parsed is not None and parsed >= (3, 0, 0):
            return cls(version, True, json_path_index=False)  # the pure-Python Milvus Lite: no index on JSON
        if lite_file or lite:
            # the native Milvus Lite 2.4 / 2.5 binaries: no nullable field (2.5 refuses, 2.4 crashes on insert)
            return cls(version or "unknown", True, nullable_fields=False, json_null_check=False, json_path_index=False)
        if parsed is None:
            return None
        return cls(version, False, **{name: parsed >= need for name, need in _NEEDS.items()})

    def scalar_index(self, numeric: bool) -> str:
        """The index type of a scalar field: INVERTED, else STL_SORT (numbers) or Trie (text)."""
        if self.inverted_index:
            return "INVERTED"
        return "STL_SORT" if numeric else "Trie"

    def require(self, capability: str, what: str, *, location: str) -> None:
        """Raise :class:`MissingCapabilityError` unless the server has ``capability``."""
        if not getattr(self, capability):
            raise MissingCapabilityError(
                f"{location}: {what} needs {capability.replace('_', ' ')}, which this Milvus server "
                f"({self.version}) lacks; Milvus {FIRST_VERSION[capability]} or later has it"
            )

    def missing(self) -> list[str]:
        """The capabilities this server lacks."""
        return [f.name for f in fields(self) if f.name in FIRST_VERSION and not getattr(self, f.name)]

    def null_check(self, path: str, *, present: bool) -> str:
        """A condition that ``path`` (a JSON path) holds a value (``present``) or not (``json_null_check`` only).

        Without ``json_null_check`` the check is ``exists``, which counts a JSON ``null`` as present: callers
        that must tell a stored ``null`` from a value ask :attr:`json_null_check` first.
        """
        if self.json_null_check:
            return f"({path} is not null)" if present else f"({path} is null)"
        return f"(exists {path})" if present else f"(not exists {path})"  # parenthesised: `exists` binds loosely


Call = Callable[..., Any]


def detect(call: Call, client: Any, *, lite_file: bool) -> Capabilities:
    """Ask the server its version and read the capabilities from it (probing when it does not say)."""
    try:
        version = str(call("asking the server version", "get_server_version"))
    except StoreError:
        version = ""
    caps = Capabilities.of_version(version, lite_file=lite_file)
    if caps is None:
        caps = _probe(call, client, version or "unknown")
        logger.info("Milvus server %s: capabilities probed (missing: %s)", caps.version, caps.missing() or "none")
    return caps


def _probe(call: Call, client: Any, version: str) -> Capabilities:
    """Try each capability on a scratch collection (dropped afterwards)."""
    from pymilvus import DataType

    name = f"rag_hier_probe_{uuid.uuid4().hex[:12]}"
    found: dict[str, bool] = {}
    try:
        s = client.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("vid", DataType.INT64, is_primary=True)
        s.add_field("meta", DataType.JSON)
        s.add_field("dummy", DataType.FLOAT_VECTOR, dim=2)
        try:
            s.add_field("leaf", DataType.INT64, nullable=True)
        except Exception:  # an older pymilvus
            found["nullable_fields"] = False
        call("probing the server", "create_collection", name, schema=s, consistency_level="Strong")
        if "nullable_fields" not in found:
            desc = call("probing the server", "describe_collection", name)
            found["nullable_fields"] = any(f.get("name") == "leaf" and f.get("nullable") for f in desc["fields"])
        ip = client.prepare_index_params()
        ip.add_index("vid", index_type="INVERTED")
        try:
            call("probing the server", "create_index", name, ip)
            found["inverted_index"] = True
        except StoreError:
            found["inverted_index"] = False
        ip = client.prepare_index_params()
        path = {"json_path": 'meta["k"]', "json_cast_type": "DOUBLE"}
        ip.add_index("meta", index_type="INVERTED", index_name="probe", params=path)
        try:
            call("probing the server", "create_index", name, ip)
            found["json_path_index"] = True
        except StoreError:
            found["json_path_index"] = False
        ip = client.prepare_index_params()
        ip.add_index("dummy", index_type="FLAT", metric_type="IP")
        call("probing the server", "create_index", name, ip)
        call("probing the server", "load_collection", name)
        try:
            call("probing the server", "query", name, filter='meta["k"] is null', output_fields=["vid"], limit=1)
            found["json_null_check"] = True
        except StoreError:
            found["json_null_check"] = False
    finally:
        try:
            call("probing the server", "drop_collection", name)
        except StoreError:
            logger.warning("could not drop the probe collection %s", name)
    sparse = f"{name}_sparse"
    try:
        s = client.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("vid", DataType.INT64, is_primary=True)
        s.add_field("vec", DataType.SPARSE_FLOAT_VECTOR)
        ip = client.prepare_index_params()
        ip.add_index("vec", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        call("probing the server", "create_collection", sparse, schema=s, index_params=ip)
        found["sparse_vectors"] = True
    except (StoreError, AttributeError):
        found["sparse_vectors"] = False
    finally:
        try:
            if call("probing the server", "has_collection", sparse):
                call("probing the server", "drop_collection", sparse)
        except StoreError:
            logger.warning("could not drop the probe collection %s", sparse)
    return Capabilities(version, False, **found)
