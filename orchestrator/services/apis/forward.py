"""The proxy's calls upstream: one POST, retried on connection errors, timeouts, 429 and
5xx (tenacity: exponential backoff with jitter), never past the trial's deadline and never
once the agent stopped waiting. A 2xx answer comes back open, so that a stream can be
passed on as it arrives; anything else comes back read.

An HTTPS upstream is reached over connections kept alive between calls (`Pool`: a remote
provider's TLS handshake is several round trips a call otherwise). A plain-HTTP upstream
(a local server: llama.cpp, a replay server, whose connection cap a whole job shares) and
one behind the environment's proxy (HTTPS_PROXY) get a connection per call (urllib)."""

from __future__ import annotations

import http.client
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.client import HTTPException, HTTPResponse
from typing import Self

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from orchestrator.services.apis.common import split_events

READ_SIZE = 64 * 1024
MAX_WAIT_SEC = 120  # one socket read upstream: a generation that says nothing this long is dead


def upstream_said(status: int, body: bytes) -> str:
    return f"upstream answered {status}: {body[:300].decode(errors='replace')}"


class Retryable(Exception):
    def __init__(self, status: int, body: bytes):
        super().__init__(upstream_said(status, body))
        self.status, self.body = status, body


class ClientGone(Exception):
    """The agent stopped waiting: its request is never sent again."""


class Kept:
    """An answer read over a pooled connection; closing it gives the connection back when
    the answer was read to its end (and the upstream keeps it open)."""

    def __init__(self, response: HTTPResponse, conn: http.client.HTTPSConnection, pool: Pool):
        self.response, self._conn, self._pool = response, conn, pool
        self.status, self.headers = response.status, response.headers

    def read(self, amt: int | None = None) -> bytes:
        return self.response.read(amt)

    def read1(self, n: int = -1) -> bytes:
        return self.response.read1(n)

    def close(self) -> None:
        if self._conn is None:
            return
        if self.response.isclosed() and not self.response.will_close:
            self._pool.put(self._conn)
        else:
            self._conn.close()
        self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Answer = HTTPResponse | Kept


class Pool:
    """Idle HTTPS connections to one proxy's upstream, reused by its next calls."""

    def __init__(self, context: ssl.SSLContext | None = None, max_idle: int = 4):
        self.context = context or ssl.create_default_context()
        self.max_idle = max_idle
        self._idle: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()
        self.opened = 0  # connections made (a test's and bench's measure of reuse)

    @staticmethod
    def serves(url: str) -> bool:
        parts = urllib.parse.urlsplit(url)
        behind_proxy = "https" in urllib.request.getproxies() and not urllib.request.proxy_bypass(
            parts.hostname or "")
        return parts.scheme == "https" and not behind_proxy

    def post(self, url: str, data: bytes, headers: dict[str, str], timeout: float) -> Kept:
        """POST over an idle connection (one the upstream closed meanwhile is replaced by a
        new one, at once), or a new one."""
        parts = urllib.parse.urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            try:
                return self._ask(conn, target, data, headers, timeout)
            except (ConnectionError, HTTPException):
                conn.close()  # closed while idle: the request never reached the upstream
        with self._lock:
            self.opened += 1
        conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout, context=self.context)
        return self._ask(conn, target, data, headers, timeout)

    def _ask(self, conn: http.client.HTTPSConnection, target: str, data: bytes, headers: dict[str, str],
             timeout: float) -> Kept:
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        try:
            conn.request("POST", target, data, {"Connection": "keep-alive", **headers})
            return Kept(conn.getresponse(), conn, self)
        except BaseException:
            conn.close()
            raise

    def put(self, conn: http.client.HTTPSConnection) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _post(url: str, data: bytes, headers: dict[str, str], timeout: float,
          pool: Pool | None) -> tuple[int, Answer | bytes]:
    """One POST: (status, open answer) for a 2xx, (status, body) for another answer;
    raises Retryable for 429 and 5xx."""
    if pool is not None and pool.serves(url):
        answer: Answer = pool.post(url, data, headers, timeout)
        status = answer.status
        if status < 300:
            return status, answer
        with answer:
            body = answer.read()
    else:
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310
            return response.status, response
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
            exc.close()
    if status == 429 or status >= 500:
        raise Retryable(status, body)
    return status, body


def open_upstream(url: str, data: bytes, headers: dict[str, str], deadline: float, max_attempts: int,
                  backoff_max: float, client_gone: Callable[[], bool], on_retry: Callable[[], None],
                  attempts: list[int], pool: Pool | None = None) -> tuple[int, Answer | bytes]:
    """(status, open answer) for a 2xx, (status, body) otherwise. Raises ClientGone, or
    tenacity's RetryError when every attempt failed."""
    remaining = max(1.0, deadline - time.time())
    for attempt in Retrying(
        retry=retry_if_exception_type((Retryable, urllib.error.URLError, TimeoutError, ConnectionError,
                                       HTTPException)),
        wait=wait_random_exponential(multiplier=0.25, max=backoff_max),
        stop=stop_after_attempt(max_attempts) | stop_before_delay(remaining),
    ):
        with attempt:
            attempts[0] = attempt.retry_state.attempt_number
            if attempt.retry_state.attempt_number > 1:
                if client_gone():  # never re-send a generation nobody waits for
                    raise ClientGone()
                on_retry()
            return _post(url, data, headers, min(MAX_WAIT_SEC, max(1.0, deadline - time.time())), pool)
    raise AssertionError("unreachable")


def events_of(response: Answer) -> Iterator[bytes]:
    """A streamed answer's whole SSE events (each with its blank line), as they arrive."""
    buffer = b""
    while True:
        piece = response.read1(READ_SIZE)
        if not piece:
            break
        buffer += piece
        events, buffer = split_events(buffer)
        for event in events:
            if event.strip():
                yield event + b"\n\n"
    if buffer.strip():
        yield buffer + b"\n\n"
