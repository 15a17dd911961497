"""One HTTP server on 127.0.0.1 in a daemon thread: the start, stop and URL every fake shares.

The fakes differ in what they answer (their handlers), never in how they come and go: bound to
loopback only, on a port the OS picks unless one is asked for, and stopped (joined, bounded)
when the fake's `with` block ends."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-answer (a killed sync, a timed-out try) is not an error to print."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class Loopback:
    def __init__(self, handler: type[BaseHTTPRequestHandler], *, name: str, port: int = 0,
                 server_class: type[ThreadingHTTPServer] = QuietServer) -> None:
        self._handler, self._name, self._port, self._server_class = handler, name, port, server_class
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "Loopback":
        self._httpd = self._server_class(("127.0.0.1", self._port), self._handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server first"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"


class JsonHandler(BaseHTTPRequestHandler):
    """A handler that answers JSON documents and prints nothing per request."""

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Recorder:
    """A fake that keeps what it was sent (`kept()`, under `lock`): its handler class (`HANDLER`, whose
    `owner` is the fake) served on a `Loopback` for the `with` block, and `wait_for` a condition on
    what it kept, bounded."""

    HANDLER: type[BaseHTTPRequestHandler]
    NAME = "synthetic-recorder"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._loop: Loopback | None = None

    def kept(self) -> list:
        raise NotImplementedError

    def start(self):
        handler = type("Handler", (self.HANDLER,), {"owner": self})
        self._loop = Loopback(handler, name=self.NAME).start()
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._loop is not None, "start the fake first"
        return self._loop.url

    def wait_for(self, cond: Callable[[list[Any]], bool], timeout: float) -> bool:
        """Whether `cond(what was kept)` held within `timeout` s (called outside the lock: it may
        read the fake itself)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                kept = list(self.kept())
            if cond(kept) or time.monotonic() >= deadline:
                return cond(kept)
            time.sleep(0.05)
