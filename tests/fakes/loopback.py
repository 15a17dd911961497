"""One HTTP server on 127.0.0.1 in a daemon thread: the start, stop and URL every fake shares.

The fakes differ in what they answer (their handlers), never in how they come and go: bound to
loopback only, on a port the OS picks unless one is asked for, and stopped (joined, bounded)
when the fake's `with` block ends."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
