"""The connection to Milvus: a Milvus Lite file or a server URI, shared per process, with one-line errors.

``pymilvus`` (and ``milvus-lite`` for ``.db`` files) is imported here only, on first use, so ``import rag_hier``
never needs it; a missing package is a :class:`~rag_hier.errors.MissingDependencyError` naming the extra.
Every Milvus exception is turned into a :class:`~rag_hier.errors.StoreError` whose message names the URI and
what failed, on one line.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from rag_hier.errors import MissingDependencyError, StoreError

if TYPE_CHECKING:
    from rag_hier.store.milvus.capabilities import Capabilities

logger = logging.getLogger(__name__)

__all__ = [
    "SECRET_CLIENT_OPTIONS",
    "Connection",
    "MilvusUnavailableError",
    "check_connection_options",
    "is_milvus_uri",
    "milvus_errors",
    "split_uri",
]

SECRET_CLIENT_OPTIONS = frozenset({"token", "password", "user", "api_key"})
"""``client_options`` keys that hold credentials: the framework stores refuse them (they would be saved in clear)."""


def check_connection_options(uri: Any, timeout: Any, client_options: Any, *, credentials_hint: str) -> None:
    """Check the connection options a framework store takes with a Milvus ``uri`` (before connecting).

    Raises:
        ValueError: ``uri`` (when given) is not a non-empty string, ``timeout`` not a positive number or None,
            ``client_options`` not a mapping or holding credentials (``credentials_hint`` says what to pass
            instead).

    """
    if uri is not None and (not isinstance(uri, str) or not uri.split("#", 1)[0]):
        raise ValueError(f"uri must be a non-empty string (a Milvus Lite .db file or a server URI), got {uri!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    if client_options is not None and not isinstance(client_options, Mapping):
        raise ValueError(f"client_options must be a dict of pymilvus MilvusClient options, got {client_options!r}")
    secrets = sorted(SECRET_CLIENT_OPTIONS & set(client_options or {}))
    if secrets:
        raise ValueError(f"client_options must not hold credentials ({', '.join(secrets)}): {credentials_hint}")


T = TypeVar("T")

_SCHEMES = ("http://", "https://", "tcp://", "grpc://", "unix:")
_LITE_GRPC_OPTIONS = {
    "grpc.keepalive_time_ms": 2**31 - 1,
    "grpc.keepalive_permit_without_calls": 0,
    "grpc.use_local_subchannel_pool": 1,
}
"""gRPC channel options of a Milvus Lite connection (``client_options={"grpc_options": ...}`` overrides them).

No keep-alive pings (a local server); a subchannel pool of the channel's own, so a channel to a port that an earlier,
stopped Milvus Lite server used does not inherit the connection back-off of that server's channels."""


class MilvusUnavailableError(StoreError):
    """The Milvus server cannot be reached (or went away during an operation)."""


def is_milvus_uri(location: str | Path) -> bool:
    """Whether ``location`` names a Milvus database: a server URI or a Milvus Lite ``.db`` file."""
    text = str(location)
    if text.startswith(_SCHEMES):
        return True
    base = text.split("#", 1)[0]
    return base.endswith(".db")


def split_uri(location: str, collection: str | None = None) -> tuple[str, str]:
    """``(uri, collection)`` from ``URI#collection`` (the fragment, when given, names the collection)."""
    uri, _, fragment = str(location).partition("#")
    name = collection or fragment or "rag_hier"
    return uri, name


class _LiteNoise(logging.Filter):
    """Drops the two log records Milvus Lite causes on every paged query, and nothing else.

    Milvus Lite does not implement ``AllocTimestamp``: its in-process gRPC server logs the call as an error
    with a traceback (logger ``grpc._server``) and pymilvus' query iterator warns that it falls back to a
    client-side timestamp. Reads use consistency level ``Strong`` anyway, so neither says anything to a user.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("failed to get mvccTs" in message or "Method not implemented" in message)


_NOISE = _LiteNoise()


def _pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise MissingDependencyError(
            "Milvus stores need pymilvus (and milvus-lite for .db files): pip install 'rag-hier[milvus]'"
        ) from exc
    for name in ("grpc._server", "pymilvus.client.iterator.query_iterator"):
        target = logging.getLogger(name)
        if _NOISE not in target.filters:
            target.addFilter(_NOISE)
    return pymilvus


def _short(exc: BaseException) -> str:
    """One line from a pymilvus exception."""
    message = getattr(exc, "message", None) or str(exc)
    return " ".join(str(message).split())[:400]


def _unavailable(exc: BaseException) -> bool:
    text = _short(exc).lower()
    code = getattr(exc, "code", None)
    return code in (2, 503) or any(
        s in text
        for s in (
            "unavailable",
            "fail connecting",
            "failed to connect",
            "connection refused",
            "deadline",
            "closed",
            "server is not ready",
            "not connected",
            "channel",
        )
    )


@contextlib.contextmanager
def milvus_errors(uri: str, what: str) -> Iterator[None]:
    """Turn pymilvus exceptions raised inside into one-line :class:`StoreError` naming ``uri`` and ``what``."""
    try:
        yield
    except StoreError:
        raise
    except Exception as exc:
        mod = type(exc).__module__
        if not (mod.startswith(("pymilvus", "grpc", "milvus_lite")) or isinstance(exc, ConnectionError)):
            raise
        if _unavailable(exc):
            raise MilvusUnavailableError(f"the Milvus server at {uri} is unreachable ({what}): {_short(exc)}") from exc
        raise StoreError(f"Milvus at {uri} refused {what}: {_short(exc)}") from exc


class Connection:
    """A pymilvus ``MilvusClient`` shared by every handle on one URI in this process (reference-counted).

    Args:
        uri: A Milvus Lite file (``./x.db``) or a server (``http://host:19530``, ``https://...``).
        token: ``"user:password"`` or an API key (servers).
        db_name: The Milvus database (servers; default ``"default"``).
        timeout: Seconds for each call (and for connecting).
        client_options: Passed to ``MilvusClient`` as given (TLS: ``server_pem_path``, ``server_name``,
            ``ca_pem_path``, ``client_pem_path``, ``client_key_path``, ``secure``; ...).

    """

    _SHARED: ClassVar[dict[tuple[Any, ...], tuple[Any, int]]] = {}
    _CAPABILITIES: ClassVar[dict[tuple[Any, ...], Any]] = {}
    """What each shared client's server offers (:mod:`.capabilities`), read once per connection."""
    _orphans: ClassVar[dict[Any, tuple[Any, int]]] = {}
    """Clients no longer shared (their server went away), by ``id``, with the handles still holding them."""
    _LOCK = threading.Lock()

    def __init__(
        self,
        uri: str,
        *,
        token: str = "",
        db_name: str = "",
        timeout: float | None = 30.0,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        self.uri = uri
        self.timeout = timeout
        self.options: dict[str, Any] = {
            "token": token,
            "db_name": db_name,
            "timeout": timeout,
            "client_options": dict(client_options or {}),
        }
        """The arguments that open another connection like this one (:meth:`MilvusStore.reopen`)."""
        self._key = (str(Path(uri).resolve()) if uri.endswith(".db") else uri, token, db_name)
        options = dict(client_options or {})
        # a pymilvus handler of this connection's own, closed with its last reference: pymilvus otherwise shares
        # one per address (without the database) and keeps it, channel open, after every client closed it; a
        # later Milvus Lite server on that port, or another database on that server, would get the old handler
        options.setdefault("dedicated", True)
        with self._LOCK:
            shared = self._SHARED.get(self._key)
            if shared is None:
                pymilvus = _pymilvus()
                if uri.endswith(".db"):
                    try:
                        import milvus_lite  # noqa: F401
                    except ImportError as exc:  # pragma: no cover - the test extra installs it
                        raise MissingDependencyError(
                            f"{uri} is a Milvus Lite file: pip install milvus-lite (or 'rag-hier[milvus]')"
                        ) from exc
                    Path(uri).parent.mkdir(parents=True, exist_ok=True)
                    # a local server on a socket: no keep-alive pings, which Milvus Lite answers with a
                    # "GOAWAY too_many_pings" line on stderr once the connection has been idle a while
                    options.setdefault("grpc_options", dict(_LITE_GRPC_OPTIONS))
                with milvus_errors(uri, "connecting"):
                    client = pymilvus.MilvusClient(uri=uri, token=token, db_name=db_name, timeout=timeout, **options)
                shared = (client, 0)
            self._SHARED[self._key] = (shared[0], shared[1] + 1)
            self.client = shared[0]
        self._closed = False

    def call(self, what: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` with Milvus errors turned into one-line store errors."""
        if self._closed:
            raise StoreError(f"the connection to {self.uri} is closed")
        try:
            with milvus_errors(self.uri, what):
                return fn(*args, **kwargs)
        except MilvusUnavailableError:
            self._forget()
            raise

    @property
    def capabilities(self) -> Capabilities:
        """What the server offers (asked once per connection; see :mod:`rag_hier.store.milvus.capabilities`)."""
        caps = self._CAPABILITIES.get(self._key)
        if caps is None:
            from rag_hier.store.milvus.capabilities import detect

            def call(what: str, method: str, *args: Any, **kwargs: Any) -> Any:
                return self.call(what, getattr(self.client, method), *args, **kwargs)

            caps = detect(call, self.client, lite_file=self.uri.endswith(".db"))
            with self._LOCK:
                if self._SHARED.get(self._key, (None,))[0] is self.client:
                    self._CAPABILITIES[self._key] = caps
        return caps

    def _forget(self) -> None:
        """Stop sharing a client whose server went away: the next handle on this URI connects afresh."""
        with self._LOCK:
            self._CAPABILITIES.pop(self._key, None)  # another server may answer there next
            shared = self._SHARED.get(self._key)
            if shared is not None and shared[0] is self.client:
                del self._SHARED[self._key]
                self._orphans[id(self.client)] = shared

    def close(self) -> None:
        """Release this reference; the last one closes the client."""
        if self._closed:
            return
        self._closed = True
        with self._LOCK:
            shared = self._SHARED.get(self._key)
            table = self._SHARED
            key: Any = self._key
            if shared is None or shared[0] is not self.client:  # forgotten: counted among the orphans
                table, key = self._orphans, id(self.client)
                shared = table.get(key)
            if shared is None:
                return
            client, count = shared
            if count <= 1:
                del table[key]
                if table is self._SHARED:
                    self._CAPABILITIES.pop(key, None)
                with contextlib.suppress(Exception):
                    client.close()
            else:
                table[key] = (client, count - 1)
