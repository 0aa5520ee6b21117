"""The model proxy: keys stay on the host (DESIGN 3.3, 4).

One per trial, bound to the trial network's gateway. The agent calls it in its own API
(orchestrator.services.apis: Chat Completions, Responses, Messages, Gemini), at the paths
its client uses, with the per-trial token in the header that API uses (`Authorization:
Bearer`, `x-api-key`, `x-goog-api-key` or `?key=`), compared in constant time. The proxy
maps every model name asked for to the trial's model (recording the name asked), caps the
call to what the budget has left (or refuses it), then either

- relays it (the upstream speaks the agent's API, `apis` in the endpoint config): the
  body as the agent sent it, the key added in that API's header, a stream passed on event
  by event as it arrives; or
- translates it to Chat Completions, asks the upstream without streaming, and answers in
  the agent's API (as server-sent events when it asked for a stream, with that API's
  keep-alive lines while the upstream works).

Upstream calls are retried on 429 and 5xx (apis.forward: never past the trial's deadline,
never once the agent left). Tokens and cost are counted per API (prices from the
manifest); every refusal is in the agent's API's error shape; error bodies from upstream
are scrubbed of the key before they reach the agent. Every exchange is recorded
(services.exchanges), chat-shaped, with the agent's API and its own request beside it.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from email.message import Message
from http.client import HTTPException, HTTPResponse
from pathlib import Path
from typing import TYPE_CHECKING

from tenacity import RetryError

from orchestrator import scrub
from orchestrator.log import get_logger
from orchestrator.models.manifest import Budget
from orchestrator.services import apis
from orchestrator.services.apis import chat
from orchestrator.services.apis.common import Api, Route, Usage, as_dict, event_data
from orchestrator.services.apis.forward import (
    ClientGone,
    Retryable,
    events_of,
    open_upstream,
    upstream_said,
)
from orchestrator.services.exchanges import ExchangeLog
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
MAX_CHOICES = 8  # n / candidateCount: more choices a call are refused (each is a generation)
KEEPALIVE_SEC = 5.0  # a streaming client waiting on a translated call hears from us this often
KIND_OF_STATUS = {401: "auth", 402: "budget", 404: "not_found", 413: "too_large", 429: "rate", 499: "gone"}

__all__ = ["ClientGone", "ModelProxy", "ProxyStats", "Retryable", "Upstream", "Upstreams", "upstream_said"]


class Refusal(Exception):
    """orchestra's own answer to a call, in the caller's API's error shape."""

    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.kind, self.status, self.retry_after = kind, status, retry_after


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
    by_api: dict[str, int] = field(default_factory=dict)  # calls per agent API


@dataclass
class Call:
    """One model call under way: the agent's API and request, and what became of it."""

    route: Route
    request: dict  # the agent's, its model mapped and its output capped
    asked: str | None  # the model name the agent asked for
    stream: bool
    started: float = field(default_factory=time.time)
    attempts: list[int] = field(default_factory=lambda: [0])

    @property
    def api(self) -> Api:
        return self.route.api


@dataclass
class Upshot:
    """What the upstream made of a call: an open 2xx answer, or a status and a body (the
    upstream's, or `kind`: orchestra's own refusal with `message`)."""

    status: int
    response: HTTPResponse | None = None
    body: bytes = b""
    kind: str | None = None
    message: str = ""


class ModelProxy(OnOneServer):
    def __init__(self, host: str, upstream: str, model: str, api_key: str | None,
                 budget: Budget, prices: dict[str, float], deadline: float,
                 max_attempts: int = 6, backoff_max: float = 8.0, record: Path | None = None,
                 upstream_apis: tuple[str, ...] = ("chat",), keepalive_sec: float = KEEPALIVE_SEC):
        self.upstream, self.model, self.api_key = upstream.rstrip("/"), model, api_key
        self.budget, self.prices, self.deadline = budget, prices, deadline
        self.max_attempts, self.backoff_max = max_attempts, backoff_max
        self.upstream_apis, self.keepalive_sec = tuple(upstream_apis), keepalive_sec
        self.token = secrets.token_hex(24)
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._in_flight = 0
        self.record = ExchangeLog(record, self.scrub) if record is not None else None
        proxy = self

        class Handler(JsonHandler):
            event = "proxy.request"
            disable_nagle_algorithm = True  # a streamed event is on the wire when written

            def do_POST(self) -> None:  # noqa: N802
                proxy.serve(self, "POST")

            def do_GET(self) -> None:  # noqa: N802
                proxy.serve(self, "GET")

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
        return cls(host, url, upstream.model, upstream.api_key, budget, prices.get(upstream.model, {}),
                   deadline=deadline, record=record, upstream_apis=upstream.apis).start()

    @property
    def root_url(self) -> str:
        """The proxy's address without `/v1`: what clients that add `/v1/...` or
        `/v1beta/...` themselves are given (Claude Code, Gemini CLI)."""
        return self.url.removesuffix("/v1")

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

    # ---- one request: route, token, body, then the call ----------------------------------
    def serve(self, handler: JsonHandler, method: str) -> None:
        route = apis.route(method, handler.path)
        api = route.api if route else apis.guess(handler.path, handler.headers.keys())
        try:  # the token is checked before the body is read, the size before reading
            if not self._authorized(handler.headers, handler.path):
                raise Refusal("auth", "bad or missing trial token")
            if route is None:
                raise Refusal("not_found", f"no route {method} {urllib.parse.urlsplit(handler.path).path[:200]}")
            if route.op == "models":
                handler.reply(200, {"object": "list", "data": [
                    {"id": self.model, "object": "model", "created": 0, "owned_by": "orchestra"}]})
                return
            try:
                request = json.loads(handler.read_body(MAX_REQUEST) or b"{}")
            except (ValueError, RecursionError):
                raise Refusal("invalid", "body is not JSON") from None
            if not isinstance(request, dict):
                raise Refusal("invalid", "body is not a JSON object")
            self._call(handler, route, request)
        except HttpError as exc:
            self._refuse(handler, api, Refusal(KIND_OF_STATUS.get(exc.status, "invalid"), str(exc), exc.status,
                                               exc.retry_after))
        except Refusal as exc:
            self._refuse(handler, api, exc)

    def _refuse(self, handler: JsonHandler, api: Api, refusal: Refusal) -> None:
        body = json.dumps(api.error(refusal.kind, f"orchestra proxy: {refusal}")).encode()
        handler.reply(refusal.status or api.status(refusal.kind), self.scrub(body), refusal.retry_after)

    def _authorized(self, headers: Message, path: str) -> bool:
        """The trial token in any of the places the four APIs put a key, compared in
        constant time (every place is compared, found or not)."""
        bearer = headers.get("Authorization", "")
        offered = [bearer[7:] if bearer.startswith("Bearer ") else "", headers.get("x-api-key", ""),
                   headers.get("x-goog-api-key", "")]
        offered += urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).get("key", [])[:1]
        token, ok = self.token.encode(), False
        for value in offered:
            ok |= hmac.compare_digest(value.encode(errors="replace"), token)
        return ok

    def _call(self, handler: JsonHandler, route: Route, request: dict) -> None:
        api = route.api
        if reason := api.stateful(request):
            raise Refusal("invalid", reason)
        if api.choices(request) > MAX_CHOICES:
            raise Refusal("invalid", f"{api.choices(request)} choices asked; at most {MAX_CHOICES} a call")
        relayed = api.name in self.upstream_apis
        if not relayed and "chat" not in self.upstream_apis:
            raise Refusal("unsupported", f"this endpoint speaks {', '.join(self.upstream_apis)}; "
                                         f"orchestra translates {api.name} through chat only")
        call = Call(route, request, api.asked_model(request, route), api.streams(request, route))
        api.set_model(request, self.model)
        if route.op == "count_tokens":
            self._count_tokens(handler, call, relayed)
            return
        self._admit(api)
        if (left := self._left()) is not None:
            api.cap(request, left)
        log.debug("proxy.call", api=api.name, asked_model=call.asked, stream=call.stream, relayed=relayed)
        with self._lock:
            self._in_flight += 1
        try:
            (self._relay if relayed else self._translate)(handler, call)
        finally:
            with self._lock:
                self._in_flight -= 1

    # ---- the budget -----------------------------------------------------------------------
    def _over_budget(self) -> str | None:
        b, s = self.budget, self.stats
        if b.max_calls is not None and s.calls >= b.max_calls:
            return f"max_calls={b.max_calls} reached"
        if b.tokens is not None and s.prompt_tokens + s.completion_tokens >= b.tokens:
            return f"tokens={b.tokens} reached"
        if b.cost is not None and s.cost >= b.cost:
            return f"cost={b.cost} reached"
        return None

    def _admit(self, api: Api) -> None:
        with self._lock:
            refusal = self._over_budget()
            if refusal:
                self.stats.refused_budget += 1
            else:
                self.stats.calls += 1
                self.stats.by_api[api.name] = self.stats.by_api.get(api.name, 0) + 1
        if refusal:
            # Worded so agent CLIs stop instead of retrying: aider, for one, retries every
            # APIError except a 402 that says "insufficient credits".
            raise Refusal("budget", f"orchestra budget exceeded: {refusal}; no more model calls in this "
                                    'trial (insufficient credits, "code":402)')

    def _left(self) -> int | None:
        if self.budget.tokens is None:
            return None
        with self._lock:
            return max(1, self.budget.tokens - self.stats.prompt_tokens - self.stats.completion_tokens)

    def _cap(self, request: dict) -> None:
        """A chat call may not spend more than the token budget has left (apis.chat.cap)."""
        if (left := self._left()) is not None:
            chat.API.cap(request, left)

    def _count(self, usage: Usage) -> None:
        with self._lock:
            self.stats.prompt_tokens += usage.input
            self.stats.completion_tokens += usage.output
            self.stats.cost += (usage.input * self.prices.get("input", 0.0)
                                + usage.output * self.prices.get("output", 0.0)) / 1e6

    # ---- upstream -------------------------------------------------------------------------
    def _headers(self, api: Api, handler: JsonHandler | None = None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **(api.auth_headers(self.api_key) if self.api_key else {})}
        for name in api.forward_headers:
            if handler is not None and handler.headers.get(name):
                headers[name] = str(handler.headers[name])
        return headers

    def _forward(self, data: bytes, client_gone: Callable[[], bool] = lambda: False,
                 attempts: list[int] | None = None) -> tuple[int, bytes]:
        """POST a chat request upstream and read the answer (retried; ClientGone)."""
        status, answer = open_upstream(self.upstream + "/chat/completions", data, self._headers(chat.API),
                                       self.deadline, self.max_attempts, self.backoff_max, client_gone,
                                       self._retried, attempts if attempts is not None else [0])
        if isinstance(answer, bytes):
            return status, answer
        with answer:
            return status, answer.read()

    def _retried(self) -> None:
        with self._lock:
            self.stats.retries += 1

    def _send(self, call: Call, data: bytes, path: str, headers: dict[str, str],
              client_gone: Callable[[], bool]) -> Upshot:
        try:
            status, answer = open_upstream(self.upstream + path, data, headers, self.deadline, self.max_attempts,
                                           self.backoff_max, client_gone, self._retried, call.attempts)
        except ClientGone:
            with self._lock:
                self.stats.abandoned += 1
            return Upshot(499, kind="gone", message="the client stopped waiting")
        except RetryError as exc:
            last = self._cut(str(exc.last_attempt.exception()))
            with self._lock:
                self.stats.upstream_errors += 1
                self.stats.last_error = last
            return Upshot(502, kind="upstream", message=f"endpoint failed after retries ({last})")
        if isinstance(answer, HTTPResponse):
            return Upshot(status, response=answer)
        with self._lock:
            self.stats.upstream_refusals += 1
            self.stats.last_error = self._cut(upstream_said(status, answer))
        return Upshot(status, body=answer)

    def _cut(self, text: str) -> str:
        return self.scrub(text.encode())[:500].decode(errors="replace")

    # ---- relay: the upstream speaks the agent's API ---------------------------------------
    def _relay(self, handler: JsonHandler, call: Call) -> None:
        api, request = call.api, call.request
        wants_usage = bool(as_dict(request.get("stream_options")).get("include_usage"))
        if api is chat.API and call.stream:  # usage is counted from the stream's last chunk
            request["stream_options"] = {**as_dict(request.get("stream_options")), "include_usage": True}
        data = json.dumps(request).encode()
        up = self._send(call, data, api.upstream_path(call.route, self.model), self._headers(api, handler),
                        handler.client_gone)
        if up.response is None:
            body = json.dumps(api.error(up.kind, f"orchestra proxy: {up.message}")).encode() if up.kind else up.body
            self._record(call, data, up.status, body, None)
            handler.reply(up.status, self.scrub(body))
            return
        kind = up.response.headers.get("Content-Type", "application/json")
        streamed = call.stream and "event-stream" in kind
        if streamed:
            native = api.collect(self._pump(handler, call, up.response, wants_usage))
        else:
            with up.response:
                body = up.response.read()
            native = _object(body)
        self._count(api.usage(native))
        self._record(call, data, 200, json.dumps(native).encode(), native)  # before the client's last byte
        if streamed:
            handler.end_stream()
        elif call.stream:  # an upstream that answered a stream request all at once
            asked = {**request, "stream_options": {"include_usage": wants_usage}}
            self._stream(handler, api, api.stream_from_chat(api.as_chat(native), call.asked or "", asked))
        else:
            handler.reply(200, self.scrub(body), content_type=kind)

    def _pump(self, handler: JsonHandler, call: Call, response: HTTPResponse, wants_usage: bool) -> list[dict]:
        """Pass a streamed answer on event by event as it arrives (the caller ends the
        stream); its decoded events."""
        handler.start_stream(200, response.headers.get("Content-Type", "text/event-stream"))
        events: list[dict] = []
        try:
            with response:
                for raw in events_of(response):
                    data = event_data(raw)
                    if data is not None:
                        events.append(data)
                        if call.api is chat.API and not wants_usage and data.get("usage") \
                                and not data.get("choices"):
                            continue  # the usage chunk we asked for, not the agent
                    if not handler.send_chunk(self.scrub(raw)):
                        with self._lock:
                            self.stats.abandoned += 1
                        break
        except (OSError, HTTPException) as exc:  # the upstream broke off mid-stream
            handler.send_chunk(call.api.stream_error("upstream", f"orchestra proxy: the endpoint broke off: {exc}"))
        return events

    def _stream(self, handler: JsonHandler, api: Api, events: object, started: bool = False) -> None:
        if not started:
            handler.start_stream(200, api.stream_type)
        for event in events:  # type: ignore[attr-defined]
            if not handler.send_chunk(self.scrub(event)):
                return
        handler.end_stream()

    # ---- translate: the upstream speaks chat -----------------------------------------------
    def _translate(self, handler: JsonHandler, call: Call) -> None:
        api = call.api
        request = api.to_chat(call.request)
        request.update(model=self.model, stream=False)
        request.pop("stream_options", None)
        data = json.dumps(request).encode()
        del request
        outcome: list[tuple[Upshot, bytes]] = []

        def ask() -> None:
            up = self._send(call, data, "/chat/completions", self._headers(chat.API), handler.client_gone)
            if up.response is not None:
                with up.response:
                    try:
                        outcome.append((up, up.response.read()))
                    except (OSError, HTTPException) as exc:
                        outcome.append((Upshot(502, kind="upstream", message=f"the endpoint broke off: {exc}"), b""))
                return
            outcome.append((up, up.body))

        started = False
        if call.stream:  # the client hears from us while the upstream works
            worker = threading.Thread(target=ask, name="model-proxy-call", daemon=True)
            worker.start()
            worker.join(self.keepalive_sec)
            while worker.is_alive():
                if not started:
                    handler.start_stream(200, api.stream_type)
                    started = True
                handler.send_chunk(api.keepalive)
                worker.join(self.keepalive_sec)
        else:
            ask()
        up, body = outcome[0]
        completion = _object(body) if up.status == 200 else None
        if up.status == 200 and not completion:
            up, completion = Upshot(502, kind="upstream", message="the endpoint's answer is not a completion"), None
        self._record(call, data, up.status, body, None, translated=True)
        if completion is None:
            message = up.message or upstream_said(up.status, body)
            kind = up.kind or KIND_OF_STATUS.get(up.status, "upstream" if up.status >= 500 else "invalid")
            if started:
                self._stream(handler, api, [api.stream_error(kind, f"orchestra proxy: {message}")], started)
            else:
                self._refuse(handler, api, Refusal(kind, message, up.status))
            return
        self._count(chat.API.usage(completion))
        if call.stream:
            self._stream(handler, api, api.stream_from_chat(completion, call.asked or self.model, call.request),
                         started)
        else:
            answer = api.from_chat(completion, call.asked or self.model, call.request)
            handler.reply(200, self.scrub(json.dumps(answer).encode()))

    # ---- token counts ------------------------------------------------------------------------
    def _count_tokens(self, handler: JsonHandler, call: Call, relayed: bool) -> None:
        """Relayed where the upstream speaks the API, else estimated here; never a budget call."""
        if not relayed:
            handler.reply(200, call.api.count_tokens(call.request))
            return
        up = self._send(call, json.dumps(call.request).encode(), call.api.upstream_path(call.route, self.model),
                        self._headers(call.api, handler), handler.client_gone)
        if up.response is not None:
            with up.response:
                handler.reply(up.status, self.scrub(up.response.read()))
        elif up.kind:
            self._refuse(handler, call.api, Refusal(up.kind, up.message, up.status))
        else:
            handler.reply(up.status, self.scrub(up.body))

    # ---- the record ----------------------------------------------------------------------------
    def _record(self, call: Call, sent: bytes, status: int, answer: bytes, native: dict | None,
                translated: bool = False) -> None:
        """One exchange, chat-shaped (what went upstream when translated; the agent's API
        translated to chat when relayed), with the agent's own request and answer beside it."""
        if self.record is None:
            return
        api = call.api
        meta = {"api": api.name, "asked_model": call.asked, "mode": "translate" if translated else "relay"}
        if api is chat.API or translated:
            request, response = sent, answer
        else:
            request = json.dumps(api.to_chat(call.request)).encode()
            response = json.dumps(api.as_chat(native)).encode() if native is not None else answer
        native_request = None if api is chat.API else json.dumps(call.request).encode()
        native_response = json.dumps(native).encode() if native is not None and api is not chat.API else None
        self.record.write(request, status, response, call.started, call.attempts[0], call.stream,
                          meta=meta, api_request=native_request, api_response=native_response)

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


def _object(body: bytes) -> dict:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class Upstream:
    """Where one endpoint's calls go from the host: a real base URL, or a replay server."""

    name: str
    url: str
    model: str
    api_key: str | None
    env: dict
    replay: bool = False  # a --replay-from recording: each trial names itself in the path
    apis: tuple[str, ...] = ("chat",)  # the model APIs it speaks (replay servers: chat)


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
            speaks = ("chat",) if recorded is not None or endpoint.provider == "replay" else tuple(endpoint.apis)
            upstreams.by_name[name] = Upstream(name, url, endpoint.model, key, dict(endpoint.env),
                                               replay=recorded is not None, apis=speaks)
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
