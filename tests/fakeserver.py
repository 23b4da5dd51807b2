"""One fake HTTP server for every test that needs a real socket: a router, a vLLM server's
/v1/completions or /metrics, a /health endpoint.

A threaded HTTP/1.1 server on 127.0.0.1 at a free port, answering each request with ``handler``:

    def handler(req: Request) -> Reply: ...

    with FakeServer(handler) as server:
        httpx.post(server.url + "/v1/completions", json={...})
    server.requests  # what it saw

A reply is ``(status, body)`` or ``(status, body, content_type)``. The body is sent as JSON
(``application/json``) unless it is ``bytes`` or ``str`` (sent as given, ``text/plain`` unless
named) or ``None`` (no body). Status 0: the handler wrote the response itself through
``req.raw`` (to trickle bytes). Handlers may block on ``req.release``, set when the server
closes, so that a hanging handler never outlives its test.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, Any] | tuple[int, Any, str]
Handler = Callable[["Request"], Reply]


class Request:
    """What the fake server saw: method, path, the JSON body (None for a GET or a non-JSON body),
    the raw handler (``client_address``, ``wfile``) and the ``release`` event."""

    def __init__(self, method: str, path: str, body: Any, release: threading.Event, raw: BaseHTTPRequestHandler):
        self.method, self.path, self.body, self.release, self.raw = method, path, body, release, raw


class FakeServer:
    """See the module docstring. ``requests``: every request seen, in order of arrival;
    ``inflight`` / ``max_inflight``: handlers running now / at most at once."""

    def __init__(self, handler: Handler):
        self.requests: list[Request] = []
        self.release = threading.Event()
        self.inflight = self.max_inflight = 0
        lock = threading.Lock()
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(data) if data else None
                except ValueError:
                    body = None
                req = Request(self.command, self.path, body, outer.release, self)
                with lock:
                    outer.requests.append(req)
                    outer.inflight += 1
                    outer.max_inflight = max(outer.max_inflight, outer.inflight)
                try:
                    reply = handler(req)
                finally:
                    with lock:
                        outer.inflight -= 1
                status, payload = reply[0], reply[1]
                if not status:
                    return
                if payload is None:
                    content, kind = b"", None
                elif isinstance(payload, (bytes, str)):
                    content = payload.encode() if isinstance(payload, str) else payload
                    kind = "text/plain"
                else:
                    content, kind = json.dumps(payload).encode(), "application/json"
                kind = reply[2] if len(reply) > 2 else kind
                self.send_response(status)
                if kind:
                    self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _answer

        class _Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

            def handle_error(self, request, client_address) -> None:
                # a client that timed out has closed its connection: the late answer's broken
                # pipe is what the timeout tests cause, not a failure to print into the log
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.release.set()
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
