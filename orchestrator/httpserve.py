"""The small HTTP servers orchestra runs on the host (relay, model proxy, replay endpoint):
a threading server on a background thread, JSON replies, quiet logs."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog

log = structlog.get_logger()


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    event = "http.request"

    def reply(self, status: int, body: dict | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # structlog, not stderr
        log.debug(self.event, line=format % args)


class BackgroundServer:
    """`handler` served on host:port (0: any free port) until stop()."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str, port: int = 0,
                 name: str = "http", path: str = ""):
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.path = path
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, name=name, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}{self.path}"

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
