"""The proxy's calls upstream: one POST, retried on connection errors, timeouts, 429 and
5xx (tenacity: exponential backoff with jitter), never past the trial's deadline and never
once the agent stopped waiting. A 2xx answer comes back open, so that a stream can be
passed on as it arrives; anything else comes back read."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.client import HTTPResponse

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


def open_upstream(url: str, data: bytes, headers: dict[str, str], deadline: float, max_attempts: int,
                  backoff_max: float, client_gone: Callable[[], bool], on_retry: Callable[[], None],
                  attempts: list[int]) -> tuple[int, HTTPResponse | bytes]:
    """(status, open response) for a 2xx, (status, body) otherwise. Raises ClientGone, or
    tenacity's RetryError when every attempt failed."""
    remaining = max(1.0, deadline - time.time())
    for attempt in Retrying(
        retry=retry_if_exception_type((Retryable, urllib.error.URLError, TimeoutError)),
        wait=wait_random_exponential(multiplier=0.25, max=backoff_max),
        stop=stop_after_attempt(max_attempts) | stop_before_delay(remaining),
    ):
        with attempt:
            attempts[0] = attempt.retry_state.attempt_number
            if attempt.retry_state.attempt_number > 1:
                if client_gone():  # never re-send a generation nobody waits for
                    raise ClientGone()
                on_retry()
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            left = max(1.0, deadline - time.time())
            try:
                response = urllib.request.urlopen(request, timeout=min(MAX_WAIT_SEC, left))  # noqa: S310
            except urllib.error.HTTPError as exc:
                body = exc.read()
                exc.close()
                if exc.code == 429 or exc.code >= 500:
                    raise Retryable(exc.code, body) from None
                return exc.code, body
            return response.status, response
    raise AssertionError("unreachable")


def events_of(response: HTTPResponse) -> Iterator[bytes]:
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
