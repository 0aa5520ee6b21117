"""The proxy's calls upstream: one POST, retried only where nothing was generated yet
(the request never reached the upstream; a 429, with its Retry-After honoured; a 5xx
before any answer), with exponential backoff and jitter (tenacity), never past the trial's
deadline and never once the agent stopped waiting. A request that was sent and then went
unanswered (no first byte within the endpoint's deadline, a connection broken while the
upstream may be generating) is never sent again: it would be generated, and billed, twice.

Each call has three deadlines (`Deadlines`, per endpoint): to connect, for the answer's
first byte (a CPU server evaluates a 15k-token prompt for minutes before it says anything),
and between bytes once the answer flows. A 2xx answer comes back open, so that a stream can
be passed on as it arrives; anything else comes back read.

An HTTPS upstream is reached over connections kept alive between calls (`Pool`: a remote
provider's TLS handshake is several round trips a call otherwise). A plain-HTTP upstream
(a local server: llama.cpp, a replay server, whose connection cap a whole job shares) gets
a connection per call; one behind the environment's proxy (HTTPS_PROXY) is reached through
urllib (one deadline for connect and first byte)."""

from __future__ import annotations

import email.utils
import http.client
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from http.client import HTTPException, HTTPResponse
from typing import Self

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from orchestrator.services.apis.common import split_events

READ_SIZE = 64 * 1024
MAX_EVENT = 8 * 1024 * 1024  # one SSE event of a streamed answer
MAX_ANSWER = 32 * 1024 * 1024  # a whole answer, streamed or not; past either the call failed


@dataclass(frozen=True)
class Deadlines:
    """One call's waits upstream, in seconds: to connect, for the answer's first byte, and
    between bytes after it (the defaults suit a CPU server: minutes, not seconds)."""

    connect: float = 10.0
    first_byte: float = 600.0
    idle: float = 300.0


def upstream_said(status: int, body: bytes) -> str:
    return f"upstream answered {status}: {body[:300].decode(errors='replace')}"


class Retryable(Exception):
    """A 429 or 5xx answer: the upstream generated nothing; asked again after a wait."""

    def __init__(self, status: int, body: bytes, retry_after: float | None = None):
        super().__init__(upstream_said(status, body))
        self.status, self.body, self.retry_after = status, body, retry_after


class NotSent(Exception):
    """The request never reached the upstream (refused, unresolvable, connect timeout)."""


class Broke(Exception):
    """The request was sent, then its answer failed or did not come in time: never re-sent."""

    def __init__(self, message: str, timeout: bool = False):
        super().__init__(message)
        self.timeout = timeout


class ClientGone(Exception):
    """The agent stopped waiting: its request is never sent again."""


class Kept:
    """An open answer over its own connection. The socket waits `first_byte` for the body's
    first bytes, then `idle` between reads. Closing it gives a pooled connection back when
    the answer was read to its end (and the upstream keeps it open)."""

    def __init__(self, response: HTTPResponse, conn: http.client.HTTPConnection, pool: Pool | None,
                 idle: float):
        self.response, self._conn, self._pool, self._idle = response, conn, pool, idle
        self.status, self.headers = response.status, response.headers
        self._flowing = False

    def _read(self, reader: Callable[[], bytes]) -> bytes:
        try:
            data = reader()
        except TimeoutError:
            raise Broke("the endpoint said nothing for "
                        + (f"{self._idle:g} s mid-answer" if self._flowing else "too long before its answer"),
                        timeout=True) from None
        if data and not self._flowing and self._conn.sock is not None:
            self._flowing = True
            self._conn.sock.settimeout(self._idle)
        return data

    def read(self, amt: int | None = None) -> bytes:
        return self._read(lambda: self.response.read(amt))

    def read1(self, n: int = -1) -> bytes:
        return self._read(lambda: self.response.read1(n))

    def close(self) -> None:
        if self._conn is None:
            return
        if self._pool is not None and self.response.isclosed() and not self.response.will_close:
            self._pool.put(self._conn)
        else:
            self.response.close()
            self._conn.close()
        self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Answer = HTTPResponse | Kept


class Pool:
    """Idle HTTPS connections to one proxy's upstream, reused by its next calls (plain HTTP:
    a new connection a call, never kept)."""

    def __init__(self, context: ssl.SSLContext | None = None, max_idle: int = 4):
        self.context = context or ssl.create_default_context()
        self.max_idle = max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.opened = 0  # connections made (a test's and bench's measure of reuse)

    @staticmethod
    def behind_proxy(url: str) -> bool:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(parts.hostname or "")

    @staticmethod
    def serves(url: str) -> bool:
        """Whether calls to `url` reuse kept-alive connections."""
        return urllib.parse.urlsplit(url).scheme == "https" and not Pool.behind_proxy(url)

    def post(self, url: str, data: bytes, headers: dict[str, str], deadlines: Deadlines, first_byte: float,
             keep: bool) -> Kept:
        """POST over an idle connection (one the upstream closed meanwhile is replaced by a
        new one, at once), or a new one. NotSent when the request could not be sent."""
        parts = urllib.parse.urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        conn = None
        if keep:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
        if conn is not None:
            try:
                return self._ask(conn, target, data, headers, deadlines, first_byte, keep, reused=True)
            except NotSent:
                pass  # closed while idle: the request never reached the upstream
        with self._lock:
            self.opened += 1
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=deadlines.connect,
                                               context=self.context)
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=deadlines.connect)
        try:
            conn.connect()
        except (OSError, HTTPException) as exc:
            conn.close()
            raise NotSent(f"could not reach the endpoint: {exc}") from None
        return self._ask(conn, target, data, headers, deadlines, first_byte, keep, reused=False)

    def _ask(self, conn: http.client.HTTPConnection, target: str, data: bytes, headers: dict[str, str],
             deadlines: Deadlines, first_byte: float, keep: bool, reused: bool) -> Kept:
        if conn.sock is not None:
            conn.sock.settimeout(first_byte)
        try:
            conn.request("POST", target, data, {"Connection": "keep-alive" if keep else "close", **headers})
        except (OSError, HTTPException) as exc:
            conn.close()
            raise NotSent(f"could not send the request: {exc}") from None
        try:
            response = conn.getresponse()
        except TimeoutError:
            conn.close()
            raise Broke(f"no answer within {first_byte:g} s (first-byte deadline)", timeout=True) from None
        except (OSError, HTTPException) as exc:
            conn.close()
            if reused and isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                raise NotSent(f"a kept connection was closed: {exc}") from None
            raise Broke(f"the endpoint broke off before its answer: {exc}") from None
        except BaseException:
            conn.close()
            raise
        return Kept(response, conn, self if keep else None, deadlines.idle)

    def put(self, conn: http.client.HTTPConnection) -> None:
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


def _post(url: str, data: bytes, headers: dict[str, str], deadlines: Deadlines, remaining: float,
          pool: Pool | None) -> tuple[int, Answer | bytes]:
    """One POST: (status, open answer) for a 2xx, (status, body) for another answer.
    Raises NotSent (nothing reached the upstream: retried), Retryable (429, 5xx: nothing
    was generated: retried) or Broke (the request was sent and then the answer failed or
    was too slow: never re-sent, the upstream may have generated it)."""
    first_byte = max(1.0, min(deadlines.first_byte, remaining))
    if Pool.behind_proxy(url):  # the environment's proxy: urllib's own way there
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            response = urllib.request.urlopen(request, timeout=first_byte)  # noqa: S310
            return response.status, response
        except urllib.error.HTTPError as exc:
            status, said = exc.code, exc.headers
            body = exc.read()
            exc.close()
        except urllib.error.URLError as exc:
            raise NotSent(f"could not reach the endpoint: {exc.reason}") from None
        except TimeoutError:
            raise Broke(f"no answer within {first_byte:g} s", timeout=True) from None
        except (OSError, HTTPException) as exc:
            raise Broke(f"the endpoint broke off: {exc}") from None
    else:
        answer = (pool or Pool()).post(url, data, headers, deadlines, first_byte,
                                       keep=urllib.parse.urlsplit(url).scheme == "https")
        status, said = answer.status, answer.headers
        if status < 300:
            return status, answer
        with answer:
            try:
                body = answer.read()
            except (OSError, HTTPException, Broke) as exc:
                raise Broke(f"the endpoint broke off in its {status} answer: {exc}") from None
    if status == 429 or status >= 500:
        raise Retryable(status, body, _retry_after_of(said))
    return status, body


def _retry_after_of(headers: Message | None) -> float | None:
    """Retry-After in seconds (a number or an HTTP date), None when absent or unreadable."""
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _wait(backoff_max: float) -> Callable[[RetryCallState], float]:
    """Exponential backoff with jitter; a 429's Retry-After when it asks for longer (the stop
    rule then ends the retries when that is past the trial's deadline)."""
    backoff = wait_random_exponential(multiplier=0.25, max=backoff_max)

    def wait(state: RetryCallState) -> float:
        delay = backoff(state)
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, Retryable) and exc.retry_after is not None:
            delay = max(delay, exc.retry_after)
        return delay
    return wait


def open_upstream(url: str, data: bytes, headers: dict[str, str], deadline: float, max_attempts: int,
                  backoff_max: float, client_gone: Callable[[], bool], on_retry: Callable[[], None],
                  attempts: list[int], pool: Pool | None = None,
                  deadlines: Deadlines | None = None) -> tuple[int, Answer | bytes]:
    """(status, open answer) for a 2xx, (status, body) otherwise. Retried only where nothing
    was generated (NotSent, Retryable); raises ClientGone, Broke, or tenacity's RetryError
    when every attempt failed."""
    deadlines = deadlines or Deadlines()
    remaining = max(1.0, deadline - time.time())
    for attempt in Retrying(
        retry=retry_if_exception_type((Retryable, NotSent)),
        wait=_wait(backoff_max),
        stop=stop_after_attempt(max_attempts) | stop_before_delay(remaining),
    ):
        with attempt:
            attempts[0] = attempt.retry_state.attempt_number
            if attempt.retry_state.attempt_number > 1:
                if client_gone():  # never re-send a generation nobody waits for
                    raise ClientGone()
                on_retry()
            return _post(url, data, headers, deadlines, deadline - time.time(), pool)
    raise AssertionError("unreachable")


def events_of(response: Answer) -> Iterator[bytes]:
    """A streamed answer's whole SSE events (each with its blank line), as they arrive; an
    event past MAX_EVENT or a stream past MAX_ANSWER is Broke (memory stays bounded)."""
    buffer, total = b"", 0
    while True:
        piece = response.read1(READ_SIZE)
        if not piece:
            break
        total += len(piece)
        if total > MAX_ANSWER:
            raise Broke(f"the streamed answer is larger than {MAX_ANSWER // (1024 * 1024)} MiB")
        buffer += piece
        events, buffer = split_events(buffer)
        if len(buffer) > MAX_EVENT:
            raise Broke(f"a streamed event is larger than {MAX_EVENT // (1024 * 1024)} MiB")
        for event in events:
            if event.strip():
                yield event + b"\n\n"
    if buffer.strip():
        yield buffer + b"\n\n"
