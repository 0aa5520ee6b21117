"""The small HTTP servers orchestra runs on the host (relay, model proxy, replay endpoint):
a bounded threading server on a background thread, JSON replies, no request-line logs.

Bounds (DESIGN 3.5), the same for every server, so one trial's agent cannot grow the
orchestrator or starve another trial:
- at most `max_connections` connections at once per server (one thread each); one past
  the cap gets `503` and is closed at once, without a thread (a client still sending a
  large body may see the close before it can read the 503); refusals are paced at 50 a
  second per server;
- a connection idle for `idle_timeout` seconds is closed (slowloris, parked keep-alives);
- a request body must be framed by a valid `Content-Length` no larger than the server's
  cap, checked before a byte of it is read: chunked bodies get `411`, a negative or
  non-numeric length `400`, a large one `413`;
- the body bytes a server accepts are rate-limited (a token bucket, `BODY_RATE` a second
  after a burst of one full body): decoding JSON holds the GIL (a 2 MB body of tiny values
  costs ~70 ms and ~20 MB), so without it one agent's flood of large bodies stalls every
  other trial's relay and proxy. A body that would wait more than `BODY_WAIT_SEC` gets
  `429` with `Retry-After`;
- requests are rate-limited too (a token bucket of `request_rate` a second, a burst of
  twice that): sixteen keep-alive connections of tiny calls are ~300 requests a second
  through one server, each a few milliseconds of the GIL, enough to triple another trial's
  latency (measured). A request past the rate waits (off the GIL) up to BODY_WAIT_SEC,
  then gets `429` with `Retry-After`.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from orchestrator.log import get_logger
from orchestrator.util import JsonObject

log = get_logger()
MAX_CONNECTIONS = 16
IDLE_TIMEOUT_SEC = 15.0
BODY_RATE = 1024 * 1024  # body bytes a second, per server
BODY_WAIT_SEC = 5.0
REQUEST_RATE = 50  # requests a second, per server
REFUSAL_PAUSE_SEC = 0.02
Request = socket.socket | tuple[bytes, socket.socket]  # socketserver's: a TCP server's is a socket


class HttpError(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class ByteBudget:
    """A token bucket over request-body bytes: `rate` a second, at most `burst` saved up.
    A taker may run into debt of up to `max_wait` seconds of refill (it sleeps that long,
    off the GIL); past that it is refused."""

    def __init__(self, rate: int, burst: int, max_wait: float = BODY_WAIT_SEC):
        self.rate, self.burst, self.max_wait = rate, burst, max_wait
        self._tokens, self._at = float(burst), time.monotonic()
        self._lock = threading.Lock()
        self.waited = 0.0  # seconds spent waiting, all takers
        self.refused = 0

    def take(self, n: int) -> float:
        """Reserve n bytes; returns how long the caller must wait, or raises HttpError 429."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            wait = max(0.0, (n - self._tokens) / self.rate)
            if wait > self.max_wait:
                self.refused += 1
                raise HttpError(429, f"request bodies arrive faster than {self.rate // 1024} KiB/s "
                                     "(this trial's rate cap); retry later", retry_after=wait)
            self._tokens -= n
            self.waited += wait
            return wait

    def pace(self, n: int) -> float:
        """Reserve n bytes of a stream already under way: how long to wait, never refused."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate) - n
            self._at = now
            wait = max(0.0, -self._tokens / self.rate)
            self.waited += wait
            return wait


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    event = "http.request"
    timeout = IDLE_TIMEOUT_SEC  # socket timeout: idle and slow connections are closed

    def reply(self, status: int, body: JsonObject | bytes, retry_after: float | None = None,
              content_type: str = "application/json", close: bool = False) -> None:
        """`close`: end the connection after this answer (say, a request body left unread)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(max(1, round(retry_after))))
        if close or status >= 400 and status not in (401, 402, 403, 404, 409):
            self.send_header("Connection", "close")  # framing may be broken: do not reuse
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, status: int, content_type: str = "text/event-stream") -> None:
        """Headers of an answer sent as it is made (chunked): then send_chunk, end_stream."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, data: bytes) -> bool:
        """One piece of a streamed answer, on the wire at once; False: the client is gone."""
        if not data:
            return True
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            return True
        except OSError:
            self.close_connection = True
            return False

    def end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def error_body(self, status: int, message: str) -> JsonObject:
        """A refusal made here, before a handler's own code runs (a server that speaks an
        API with its own error shape says it in that shape)."""
        return {"error": {"message": message}}

    def parse_request(self) -> bool:
        """The request line and headers, then this server's request rate: a request past it
        waits, or is answered 429 before its body is read."""
        if not super().parse_request():
            return False
        requests = getattr(self.server, "requests", None)
        if requests is None:
            return True
        try:
            time.sleep(requests.take(1))
        except HttpError as exc:
            self.reply(429, self.error_body(429, f"orchestra: more than {requests.rate} requests a "
                                                 "second to this trial's server; retry later"),
                       retry_after=exc.retry_after)
            return False
        return True

    def client_gone(self) -> bool:
        """The client closed its side (it stopped waiting for our answer)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def read_body(self, max_bytes: int) -> bytes:
        """The request body, framed by Content-Length and checked before reading."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raise HttpError(411, "body: send a Content-Length (chunked bodies are not accepted)")
        raw = (self.headers.get("Content-Length") or "0").strip()
        if not raw.isdigit():
            raise HttpError(400, f"Content-Length: {raw[:20]!r} is not a non-negative integer")
        length = int(raw)
        if length > max_bytes:
            raise HttpError(413, f"body: {length} bytes is over the {max_bytes} byte limit")
        if not length:
            return b""
        budget = getattr(self.server, "budget", None)
        if budget is not None:
            try:
                time.sleep(budget.take(length))
            except HttpError:
                self._discard(length)  # so that the client, still sending, can read the 429
                raise
        return self.rfile.read(length)

    def _discard(self, length: int) -> None:
        while length > 0:
            chunk = self.rfile.read(min(length, 64 * 1024))
            if not chunk:
                break
            length -= len(chunk)

    def log_message(self, format: str, *args: object) -> None:
        """Request lines are not logged: an agent's flood (or a key in a URL) must not grow
        events.jsonl; the servers count what matters themselves."""


_BUSY_BODY = b'{"error": "too many connections to this trial\'s server at once (cap)"}'
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\nConnection: close\r\n\r\n"
        + _BUSY_BODY)


class BoundedServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64  # the accept loop answers past the cap at once; a short
                             # backlog would only make a flood's connects hang instead

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 max_connections: int = MAX_CONNECTIONS,
                 budget: ByteBudget | None = None, requests: ByteBudget | None = None):
        super().__init__(address, handler)
        self.budget, self.requests = budget, requests
        self.slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0  # connections turned away at the cap

    def process_request(self, request: Request, client_address: tuple[str, int]) -> None:
        if not self.slots.acquire(blocking=False):
            assert isinstance(request, socket.socket)  # a TCP server's request: its connection
            self.refused += 1
            try:
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            # This trial's server only: a flood's refusals are paced (at most 1/REFUSAL_PAUSE a
            # second), so the flood costs the orchestrator little CPU and the other trials
            # keep their latency; further connects wait in the backlog.
            time.sleep(REFUSAL_PAUSE_SEC)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Request, client_address: tuple[str, int]) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Request,
                     client_address: tuple[str, int]) -> None:  # a reset or timeout: not a traceback
        log.debug("http.connection_error", client=str(client_address[0]))


class BackgroundServer:
    """`handler` served on host:port (0: any free port) until stop()."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str, port: int = 0,
                 name: str = "http", path: str = "", max_connections: int = MAX_CONNECTIONS,
                 max_body: int | None = None, body_rate: int = BODY_RATE,
                 request_rate: int | None = REQUEST_RATE):
        """`max_body`: the largest body a request may have; given, body bytes are also
        rate-limited (`body_rate` a second after a burst of one such body). `request_rate`:
        requests a second (a JsonHandler's; None: unbounded)."""
        budget = ByteBudget(body_rate, max(max_body, body_rate)) if max_body else None
        requests = ByteBudget(request_rate, 2 * request_rate) if request_rate else None
        self.httpd = BoundedServer((host, port), handler, max_connections, budget, requests)
        self.path = path
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, name=name, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        assert isinstance(host, str)  # a TCP server's address: (host, port)
        return f"http://{host}:{port}{self.path}"

    @property
    def refused(self) -> int:
        return self.httpd.refused

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)


__all__ = ["BackgroundServer", "ByteBudget", "HttpError", "JsonHandler"]


class OnOneServer:
    """A per-trial service (relay, model proxy, egress proxy) that serves through one
    BackgroundServer: its address, start and stop are the server's."""

    server: BackgroundServer

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
