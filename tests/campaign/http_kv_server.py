"""A tiny HTTP key-value server, written for the test of campaigns against
systems not built on pykraft (tests/campaign/test_own_system.py).

    python tests/campaign/http_kv_server.py --listen HOST:PORT --data-dir DIR [--stale-reads-ms N]

``GET /kv/KEY`` answers ``{"value": V}`` (null when unset); ``PUT /kv/KEY``
with ``{"value": V}`` sets it; ``POST /cas/KEY`` with ``{"expected": E,
"new": N}`` sets it only from ``E`` (409 otherwise). Every change is in
``DIR/state.json`` (written, fsynced and renamed into place) before the
answer, so a kill -9 loses nothing acknowledged. ``--stale-reads-ms`` is
the bug the test must find: reads come from a copy refreshed at most that
often.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BODY_BYTES_MAX = 64 * 1024


class Store:
    def __init__(self, data_dir: Path, stale_reads_ms: float) -> None:
        self.path = data_dir / "state.json"
        self.lock = threading.Lock()
        self.state = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.stale_reads_s = stale_reads_ms / 1000
        self.copy = dict(self.state)
        self.copied_at = time.monotonic()

    def read(self, key: str):
        with self.lock:
            if not self.stale_reads_s:
                return self.state.get(key)
            if time.monotonic() - self.copied_at >= self.stale_reads_s:
                self.copy, self.copied_at = dict(self.state), time.monotonic()
            return self.copy.get(key)

    def write(self, key: str, value) -> None:
        with self.lock:
            self.state[key] = value
            self._persist()

    def cas(self, key: str, expected, new) -> bool:
        with self.lock:
            if self.state.get(key) != expected:
                return False
            self.state[key] = new
            self._persist()
            return True

    def _persist(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        with open(temporary, "w") as file:
            json.dump(self.state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)


def handler_for(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: the campaign records every call
            pass

        def _answer(self, status: int, body: dict | None = None) -> None:
            data = json.dumps(body or {}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict | None:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= BODY_BYTES_MAX:
                return None
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                return None
            return body if isinstance(body, dict) else None

        def do_GET(self) -> None:
            if not self.path.startswith("/kv/"):
                return self._answer(404)
            self._answer(200, {"value": store.read(self.path[4:])})

        def do_PUT(self) -> None:
            body = self._body()
            if not self.path.startswith("/kv/") or body is None or "value" not in body:
                return self._answer(400)
            store.write(self.path[4:], body["value"])
            self._answer(200)

        def do_POST(self) -> None:
            body = self._body()
            if not self.path.startswith("/cas/") or body is None or not {"expected", "new"} <= body.keys():
                return self._answer(400)
            self._answer(200 if store.cas(self.path[5:], body["expected"], body["new"]) else 409)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--stale-reads-ms", type=float, default=0.0)
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    parent = os.getppid()

    def exit_when_orphaned() -> None:  # never outlive the test that started it
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=exit_when_orphaned, daemon=True).start()
    server = ThreadingHTTPServer((host, int(port)), handler_for(Store(args.data_dir, args.stale_reads_ms)))
    server.serve_forever()


if __name__ == "__main__":
    main()
