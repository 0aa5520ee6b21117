"""The model proxy: keys stay on the host (DESIGN 3.3, 4).

One per trial, bound to the trial network's gateway. The agent calls it with a per-trial
token; the proxy forwards to the real endpoint with the API key added, retries 429 and 5xx
(tenacity: exponential backoff with jitter, never past the trial's deadline), counts tokens
and cost (prices from the manifest), and refuses calls past the budget with an error the
agent sees. Error bodies from upstream are scrubbed of the key before they reach the agent.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from email.message import Message
from pathlib import Path
from typing import TYPE_CHECKING

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from orchestrator import scrub
from orchestrator.log import get_logger
from orchestrator.models.manifest import Budget
from orchestrator.services.exchanges import ExchangeLog, event_stream
from orchestrator.services.httpserve import BackgroundServer, HttpError, JsonHandler, OnOneServer

if TYPE_CHECKING:
    from orchestrator.models.endpoint import EndpointConfig

log = get_logger()
# A request body's cap (~500k tokens of context). Decoded, 2 MB of tiny JSON values is
# ~20 MB of objects: the cap and the byte rate (httpserve) bound what an agent costs us.
MAX_REQUEST = 2 * 1024 * 1024
# Calls a second through one trial's proxy (httpserve's request rate): an agent with 16
# workers at one call a second each is well under it; a flood of tiny calls is held to it.
REQUEST_RATE = 25


def upstream_said(status: int, body: bytes) -> str:
    return f"upstream answered {status}: {body[:300].decode(errors='replace')}"


class Retryable(Exception):
    def __init__(self, status: int, body: bytes):
        super().__init__(upstream_said(status, body))
        self.status, self.body = status, body


class ClientGone(Exception):
    """The agent stopped waiting: its request is never sent again."""


@dataclass
class ProxyStats:
    calls: int = 0
    refused_budget: int = 0
    upstream_errors: int = 0  # down after every retry: an endpoint_error trial
    upstream_refusals: int = 0  # a 4xx (e.g. context overflow): the agent's request failed
    abandoned: int = 0  # the agent gave up waiting; the proxy did not re-send
    retries: int = 0
    last_error: str | None = None  # the upstream's last error: status and body, cut, scrubbed
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0


class ModelProxy(OnOneServer):
    def __init__(self, host: str, upstream: str, model: str, api_key: str | None,
                 budget: Budget, prices: dict[str, float], deadline: float,
                 max_attempts: int = 6, backoff_max: float = 8.0, record: Path | None = None):
        self.upstream, self.model, self.api_key = upstream.rstrip("/"), model, api_key
        self.budget, self.prices, self.deadline = budget, prices, deadline
        self.max_attempts, self.backoff_max = max_attempts, backoff_max
        self.token = secrets.token_hex(24)
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._in_flight = 0
        self.record = ExchangeLog(record, self.scrub) if record is not None else None
        proxy = self

        class Handler(JsonHandler):
            event = "proxy.request"

            def do_POST(self) -> None:  # noqa: N802
                try:  # the token is checked before the body is read, the size before reading
                    status, body, content_type = proxy.handle(self.path, self.headers, self.read_body,
                                                              self.client_gone)
                    retry_after = None
                except HttpError as exc:
                    status, body = exc.status, {"error": {"message": f"orchestra proxy: {exc}"}}
                    retry_after, content_type = exc.retry_after, "application/json"
                self.reply(status, proxy.scrub(json.dumps(body).encode() if isinstance(body, dict) else body),
                           retry_after, content_type=content_type)

        self.server = BackgroundServer(Handler, host, name="model-proxy", path="/v1", max_body=MAX_REQUEST,
                                       request_rate=REQUEST_RATE)

    @classmethod
    def for_upstream(cls, host: str, upstream: Upstream, budget: Budget,
                     prices: dict[str, dict[str, float]], deadline: float,
                     record: Path | None = None, trial: str | None = None) -> ModelProxy:
        """A started proxy on `host` in front of one of the job's upstreams; every exchange
        is written to `record` when given (orchestrator.services.exchanges). `trial`
        (task#attempt): under --replay-from, whose recording answers (none: nothing does)."""
        url = upstream.url
        if upstream.replay:
            url = f"{upstream.url.rstrip('/')}/trial/{urllib.parse.quote(trial or '-', safe='')}"
        return cls(host, url, upstream.model, upstream.api_key, budget,
                   prices.get(upstream.model, {}), deadline=deadline, record=record).start()

    def stop(self) -> None:
        """Stop serving. A request still waiting upstream now was abandoned by the agent
        (which has ended): counted, and never re-sent."""
        self.server.stop()
        with self._lock:
            self.stats.abandoned += self._in_flight

    def scrub(self, data: bytes) -> bytes:
        if self.api_key:
            data = data.replace(self.api_key.encode(), b"***")
        return data

    def env(self) -> dict[str, str]:
        """What the agent container gets: the proxy's address and a trial token, never a key."""
        return {"ORCHESTRA_MODEL_URL": self.url, "ORCHESTRA_MODEL_TOKEN": self.token,
                "ORCHESTRA_MODEL": self.model, "OPENAI_BASE_URL": self.url,
                "OPENAI_API_KEY": self.token}

    def _over_budget(self) -> str | None:
        b, s = self.budget, self.stats
        if b.max_calls is not None and s.calls >= b.max_calls:
            return f"max_calls={b.max_calls} reached"
        if b.tokens is not None and s.prompt_tokens + s.completion_tokens >= b.tokens:
            return f"tokens={b.tokens} reached"
        if b.cost is not None and s.cost >= b.cost:
            return f"cost={b.cost} reached"
        return None

    def _cap(self, request: dict) -> None:
        """A call may not spend more than the token budget has left: max_tokens and
        max_completion_tokens are lowered to it (max_tokens set when neither is given), and
        `n` choices only as many as it covers (at least 1)."""
        if self.budget.tokens is None:
            return
        with self._lock:
            left = max(1, self.budget.tokens - self.stats.prompt_tokens - self.stats.completion_tokens)
        keys = [k for k in ("max_tokens", "max_completion_tokens") if k in request]
        for key in keys:
            value = request[key]
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= left:
                request[key] = left
        if not keys:
            request["max_tokens"] = left
        per_choice = min(request[k] for k in keys or ["max_tokens"])
        n = request.get("n")
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1 or n * per_choice > left):
            request["n"] = max(1, min(n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1,
                                      left // per_choice))

    def handle(self, path: str, headers: Message, read_body: Callable[[int], bytes],
               client_gone: Callable[[], bool] = lambda: False) -> tuple[int, dict | bytes, str]:
        """(status, body, content type). A `stream: true` request is sent upstream without
        streaming and its completion returned as server-sent events."""
        status, body, stream = self._handle(path, headers, read_body, client_gone)
        if stream and status == 200 and isinstance(body, bytes):  # 200: the upstream's bytes
            try:
                return status, event_stream(body, stream == "usage"), "text/event-stream"
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError, IndexError):
                pass  # not a completion: passed on as it came
        return status, body, "application/json"

    def _handle(self, path: str, headers: Message, read_body: Callable[[int], bytes],
                client_gone: Callable[[], bool]) -> tuple[int, dict | bytes, str | None]:
        auth = headers.get("Authorization", "")
        if not hmac.compare_digest(auth, f"Bearer {self.token}"):
            return 401, {"error": {"message": "orchestra proxy: bad or missing trial token", "type": "auth"}}, None
        if not path.rstrip("/").endswith("/chat/completions"):
            return 404, {"error": {"message": f"orchestra proxy: no route {path}"}}, None
        try:
            request = json.loads(read_body(MAX_REQUEST) or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return 400, {"error": {"message": "orchestra proxy: body is not JSON"}}, None
        if not isinstance(request, dict):
            return 400, {"error": {"message": "orchestra proxy: body is not a JSON object"}}, None
        with self._lock:
            refusal = self._over_budget()
            if refusal:
                self.stats.refused_budget += 1
            else:
                self.stats.calls += 1
        if refusal:
            # Worded so agent CLIs stop instead of retrying: aider, for one, retries every
            # APIError except a 402 that says "insufficient credits".
            return 402, {"error": {"message": f"orchestra budget exceeded: {refusal}; no more model "
                                              'calls in this trial (insufficient credits, "code":402)',
                                   "type": "budget_exceeded", "code": "budget_exceeded"}}, None
        request["model"] = self.model
        self._cap(request)
        stream = None
        if request.get("stream"):
            include = (request.get("stream_options") or {}).get("include_usage") if isinstance(
                request.get("stream_options"), dict) else False
            stream = "usage" if include else "plain"
            request["stream"] = False
            request.pop("stream_options", None)
        data = json.dumps(request).encode()
        del request  # the decoded body can be ten times its size: not kept while waiting upstream
        with self._lock:
            self._in_flight += 1
        started = time.time()
        attempts = [0]
        try:
            status, body = self._call(data, client_gone, attempts)
            if self.record is not None:
                self.record.write(data, status, body if isinstance(body, bytes) else json.dumps(body).encode(),
                                  started, attempts[0], stream is not None)
            return status, body, stream
        finally:
            with self._lock:
                self._in_flight -= 1

    def _call(self, data: bytes, client_gone: Callable[[], bool],
              attempts: list[int]) -> tuple[int, dict | bytes]:
        try:
            status, body = self._forward(data, client_gone, attempts)
        except ClientGone:
            with self._lock:
                self.stats.abandoned += 1
            return 499, {"error": {"message": "orchestra proxy: the client stopped waiting"}}
        except RetryError as exc:
            last = self._cut(str(exc.last_attempt.exception()))
            with self._lock:
                self.stats.upstream_errors += 1
                self.stats.last_error = last
            message = f"orchestra proxy: endpoint failed after retries ({last})"
            return 502, {"error": {"message": message, "type": "endpoint_error"}}
        if status == 200:
            self._count(body)
        elif 400 <= status < 500:
            with self._lock:
                self.stats.upstream_refusals += 1
                self.stats.last_error = self._cut(upstream_said(status, body))
        return status, body

    def _cut(self, text: str) -> str:
        return self.scrub(text.encode())[:500].decode(errors="replace")

    def _forward(self, data: bytes, client_gone: Callable[[], bool] = lambda: False,
                 attempts: list[int] | None = None) -> tuple[int, bytes]:
        """POST upstream; connection errors, timeouts, 429 and 5xx are retried with backoff,
        within the trial's deadline and only while the agent still waits (ClientGone)."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        remaining = max(1.0, self.deadline - time.time())
        for attempt in Retrying(
            retry=retry_if_exception_type((Retryable, urllib.error.URLError, TimeoutError)),
            wait=wait_random_exponential(multiplier=0.25, max=self.backoff_max),
            stop=stop_after_attempt(self.max_attempts) | stop_before_delay(remaining),
        ):
            with attempt:
                if attempts is not None:
                    attempts[0] = attempt.retry_state.attempt_number
                if attempt.retry_state.attempt_number > 1:
                    if client_gone():  # never re-send a generation nobody waits for
                        raise ClientGone()
                    with self._lock:
                        self.stats.retries += 1
                request = urllib.request.Request(self.upstream + "/chat/completions", data=data,
                                                 headers=headers, method="POST")
                left = max(1.0, self.deadline - time.time())
                try:
                    with urllib.request.urlopen(request, timeout=min(120, left)) as response:
                        return response.status, response.read()
                except urllib.error.HTTPError as exc:
                    body = exc.read()
                    if exc.code == 429 or exc.code >= 500:
                        raise Retryable(exc.code, body) from None
                    return exc.code, body
        raise AssertionError("unreachable")

    def _count(self, body: bytes) -> None:
        try:
            usage = json.loads(body).get("usage") or {}
        except (json.JSONDecodeError, AttributeError):
            return
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        with self._lock:
            self.stats.prompt_tokens += prompt
            self.stats.completion_tokens += completion
            self.stats.cost += (prompt * self.prices.get("input", 0.0)
                                + completion * self.prices.get("output", 0.0)) / 1e6

    def summary(self) -> dict:
        budget, requests = self.server.httpd.budget, self.server.httpd.requests
        summary = {**asdict(self.stats), "connections_refused": self.server.refused,
                   "body_rate_refused": budget.refused if budget else 0,
                   "body_rate_waited_sec": round(budget.waited, 2) if budget else 0.0,
                   "request_rate_refused": requests.refused if requests else 0,
                   "request_rate_waited_sec": round(requests.waited, 2) if requests else 0.0}
        if self.record is not None:
            summary.update(self.record.summary())
        return summary


@dataclass
class Upstream:
    """Where one endpoint's calls go from the host: a real base URL, or a replay server."""

    name: str
    url: str
    model: str
    api_key: str | None
    env: dict
    replay: bool = False  # a --replay-from recording: each trial names itself in the path


class Upstreams:
    """The endpoints a job uses, resolved once: keys read, replay servers started."""

    def __init__(self) -> None:
        self.by_name: dict[str, Upstream] = {}
        self._servers: list = []

    @classmethod
    def open(cls, names: set[str], config: EndpointConfig, replay_from: Path | None = None) -> Upstreams:
        """`replay_from`: a job folder whose recorded exchanges answer every endpoint."""
        from orchestrator.services.exchanges import recorded_answers
        from orchestrator.services.replay import ReplayServer, load_script

        upstreams = cls()
        recorded = None  # one server answers every endpoint from the recording (one lock)
        if replay_from is not None:
            recorded = ReplayServer({"recorded": recorded_answers(replay_from)}).start()
            upstreams._servers.append(recorded)
        for name in sorted(names):
            endpoint = config.resolve(name)
            if recorded is not None:
                url, key = recorded.url, None
            elif endpoint.provider == "replay":
                key = config.api_key(name)
                server = ReplayServer(load_script(config.script_path(name)), api_key=key).start()
                upstreams._servers.append(server)
                url = server.url
            else:
                url, key = endpoint.base_url, config.api_key(name)
            upstreams.by_name[name] = Upstream(name, url, endpoint.model, key, dict(endpoint.env),
                                               replay=recorded is not None)
        scrub.register(*upstreams.secrets())
        return upstreams

    @classmethod
    def resolved(cls, by_name: dict[str, Upstream]) -> Upstreams:
        """Endpoints resolved elsewhere (the driver, for a Ray node): nothing started here."""
        upstreams = cls()
        upstreams.by_name = dict(by_name)
        scrub.register(*upstreams.secrets())
        return upstreams

    def secrets(self) -> list[str]:
        return [u.api_key for u in self.by_name.values() if u.api_key]

    def close(self) -> None:
        scrub.unregister(*self.secrets())
        for server in self._servers:
            server.stop()
