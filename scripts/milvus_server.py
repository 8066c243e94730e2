"""Start a Milvus standalone server on 127.0.0.1 for the tests, write its URI to a file, stop it on SIGTERM/SIGINT.

Runs with the Python of the venv holding the ``milvus`` package (PyPI ``milvus==2.3.5``: the real Go + C++ standalone
server with embedded etcd and local storage), not the project's: ``scripts/test-milvus-server.sh`` creates that venv
and calls this. The proxy port and the ports of the server's parts are free ones; the time tick is 20 ms (a query
waits for the next tick: the default 200 ms makes every test slow). The server is healthy (``/healthz`` answers OK)
when the URI is written.

Usage: python scripts/milvus_server.py --data DIR --uri-file FILE [--port P] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
from pathlib import Path

EXTRA_CONFIG = {
    "proxy.timeTickInterval": 20,  # ms; a Strong read waits for the next time tick
    "queryCoord.checkInterval": 100,  # ms; how often a load's progress is checked
    "queryCoord.distPullInterval": 50,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    """Start the server, write its URI once it is healthy, and stop it on SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the server's data directory (created; its own each run)")
    parser.add_argument("--uri-file", required=True, help="where the server URI is written once it is healthy")
    parser.add_argument("--port", type=int, default=0, help="the proxy (client) port; 0: a free one")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for /healthz")
    args = parser.parse_args()

    from milvus import MilvusServer, __version__

    server = MilvusServer(wait_for_started=False)
    server.set_base_dir(str(Path(args.data).resolve()))
    port = args.port or _free_port()
    server.config.set("proxy_port", port)
    for key, value in EXTRA_CONFIG.items():
        server.config.set(key, value)
    stopped = threading.Event()

    def stop(*_: object) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.start()
        server.wait_started(timeout=int(args.timeout * 1000))
        uri = f"http://127.0.0.1:{port}"
        tmp = Path(args.uri_file + ".tmp")
        tmp.write_text(uri + "\n")
        tmp.replace(args.uri_file)
        print(f"milvus {__version__} at {uri} (healthz on port {server.webservice_port})", flush=True)
        while not stopped.wait(0.5):
            if server.server_proc is None or server.server_proc.poll() is not None:
                print("the Milvus server exited", file=sys.stderr)
                return 1
    finally:
        proc = server.server_proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)
        server.server_proc = None
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
