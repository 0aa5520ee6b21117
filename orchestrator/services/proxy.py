"""The model proxy: keys stay on the host (DESIGN 3.3, 4).

One per trial, bound to the trial network's gateway. The agent calls it in its own API
(orchestrator.services.apis: Chat Completions, Responses, Messages, Gemini), at the paths
its client uses, with the per-trial token in the header that API uses (`Authorization:
Bearer`, `x-api-key`, `x-goog-api-key` or `?key=`), compared in constant time. The proxy
maps every model name asked for to the trial's model (recording the name asked), admits the
call against the budget (apis.ledger: its input bound and output cap reserved beside the
calls in flight, the cap sent upstream lowered to what is left, or refused), then either

- relays it (the upstream speaks the agent's API, `apis` in the endpoint config): the
  body as the agent sent it, the key added in that API's header, a stream passed on event
  by event as it arrives; or
- translates it to Chat Completions and answers in the agent's API (a stream translated
  as the upstream's chunks arrive, with that API's keep-alive lines until they do).

Upstream calls are retried only where nothing was generated (apis.forward: the request
never sent, 429 with its Retry-After, 5xx; never past the trial's deadline, never once the
agent left), under the endpoint's connect, first-byte and idle deadlines. Usage read from
the upstream settles each call's reservation (estimated, and said so, where it sent none);
cost from the prices of the manifest, the endpoint config or the default table
(models.prices). Every refusal is in the agent's API's error shape; error bodies from
upstream are scrubbed of the key before they reach the agent. Every exchange is recorded
(services.exchanges), chat-shaped, with the agent's API and its own request beside it.
"""

from __future__ import annotations

import hmac
import json
import secrets
import ssl
import threading
import urllib.parse
from email.message import Message
from pathlib import Path

from orchestrator.models import Budget, ModelUsage
from orchestrator.services import apis
from orchestrator.services.apis import chat
from orchestrator.services.apis.calls import KIND_OF_STATUS, Call, CallWays, ProxyCounts, Refusal
from orchestrator.services.apis.common import Route
from orchestrator.services.apis.forward import ClientGone, Deadlines, Pool, Retryable, upstream_said
from orchestrator.services.apis.ledger import MAX_OUTPUT, Ledger, Refused, Reservation, input_bound
from orchestrator.services.apis.upstreams import Upstream, Upstreams
from orchestrator.services.exchanges import ExchangeLog
from orchestrator.services.httpserve import BackgroundServer, HttpError, JsonHandler, OnOneServer
from orchestrator.util import JsonObject

# A request body's cap (~500k tokens of context). Decoded, 2 MB of tiny JSON values is
# ~20 MB of objects: the cap and the byte rate (httpserve) bound what an agent costs us.
MAX_REQUEST = 2 * 1024 * 1024
# Calls a second through one trial's proxy (httpserve's request rate): an agent with 16
# workers at one call a second each is well under it; a flood of tiny calls is held to it.
REQUEST_RATE = 25
MAX_CHOICES = 8  # n / candidateCount: more choices a call are refused (each is a generation)
KEEPALIVE_SEC = 5.0  # a streaming client waiting on a translated call hears from us this often
# the output cap a budgeted call gets when the agent asks for none (the endpoint config's
# max_output_tokens overrides it): what the budget reserves for the answer
UNASKED_OUTPUT = 32_768
__all__ = ["ClientGone", "Deadlines", "ModelProxy", "ProxyCounts", "Retryable", "Upstream", "Upstreams",
           "upstream_said"]


class ModelProxy(CallWays, OnOneServer):
    def __init__(self, host: str, upstream: str, model: str, api_key: str | None,
                 budget: Budget, prices: dict[str, float], deadline: float,
                 max_attempts: int = 6, backoff_max: float = 8.0, record: Path | None = None,
                 upstream_apis: tuple[str, ...] = ("chat",), keepalive_sec: float = KEEPALIVE_SEC,
                 tls: ssl.SSLContext | None = None, deadlines: Deadlines | None = None,
                 output_field: str = "max_tokens", max_output: int | None = None, text_parts: str = "keep",
                 upstream_streams: bool = True, tool_calls: str = "native"):
        """`tls`: how an HTTPS upstream is verified (default: the system's CAs); `deadlines`:
        each call's connect, first-byte and idle waits upstream; `output_field`: the chat
        output cap's field the upstream takes (learned from its 400 otherwise); `max_output`:
        the cap a budgeted call gets when the agent asks for none; `text_parts`: "join" sends
        a chat message's text-only content parts as one string (apis.calls.join_text_parts);
        `upstream_streams` False: every call is asked whole upstream, a streaming agent's
        answered as a stream from it (for servers that count no usage in a stream);
        `tool_calls` "from_text": tool calls a server left in a whole answer's text are
        given to the agent as tool calls (apis.textcalls)."""
        self.upstream, self.model, self.api_key = upstream.rstrip("/"), model, api_key
        self.budget, self.prices, self.deadline = budget, prices, deadline
        self.max_attempts, self.backoff_max = max_attempts, backoff_max
        self.upstream_apis, self.keepalive_sec = tuple(upstream_apis), keepalive_sec
        self.deadlines, self.output_field = deadlines or Deadlines(), output_field
        self.max_output = max_output or UNASKED_OUTPUT
        self.text_parts, self.upstream_streams, self.tool_calls = text_parts, upstream_streams, tool_calls
        self.token = secrets.token_hex(24)
        self.pool = Pool(tls)
        self.stats = ProxyCounts()
        self._lock = threading.Lock()
        self.ledger = Ledger(budget, prices, self.stats, self._lock)
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

            def error_body(self, status: int, message: str) -> JsonObject:  # the rate cap's 429
                route = apis.route(self.command, self.path)
                api = route.api if route else apis.guess(self.path, self.headers.keys())
                return api.error(KIND_OF_STATUS.get(status, "invalid"), message)

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
        return cls(host, url, upstream.model, upstream.api_key, budget, upstream.prices_for(prices),
                   deadline=deadline, record=record, upstream_apis=upstream.apis, deadlines=upstream.deadlines,
                   output_field=upstream.output_field, max_output=upstream.max_output_tokens,
                   text_parts=upstream.text_parts, upstream_streams=upstream.upstream_streams,
                   tool_calls=upstream.tool_calls).start()

    @property
    def root_url(self) -> str:
        """The proxy's address without `/v1`: what clients that add `/v1/...` or
        `/v1beta/...` themselves are given (Claude Code, Gemini CLI)."""
        return self.url.removesuffix("/v1")

    def stop(self) -> None:
        """Stop serving. A request still waiting upstream now was abandoned by the agent
        (which has ended): counted, and never re-sent."""
        self.server.stop()
        self.pool.close()
        with self._lock:
            self.stats.abandoned += self._in_flight
            self.stats.last_abandoned = self.stats.last_abandoned or self._in_flight > 0

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
        unread = method == "POST"  # a refusal before the body is read closes the connection
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
                body = handler.read_body(MAX_REQUEST)
                unread = False
                request = json.loads(body or b"{}")
                size = len(body)
                del body
            except (ValueError, RecursionError):
                raise Refusal("invalid", "body is not JSON") from None
            if not isinstance(request, dict):
                raise Refusal("invalid", "body is not a JSON object")
            self._call(handler, route, request, size)
        except HttpError as exc:
            self._refuse(handler, api, Refusal(KIND_OF_STATUS.get(exc.status, "invalid"), str(exc), exc.status,
                                               exc.retry_after), close=True)
        except Refusal as exc:
            self._refuse(handler, api, exc, close=unread)

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

    def _call(self, handler: JsonHandler, route: Route, request: JsonObject, size: int) -> None:
        api = route.api
        if reason := api.stateful(request):
            raise Refusal("invalid", reason)
        if api.choices(request) > MAX_CHOICES:
            raise Refusal("invalid", f"{api.choices(request)} choices asked; at most {MAX_CHOICES} a call")
        # an upstream asked for whole answers (upstream_streams false) gets a streaming chat
        # caller's call through the translation, which keeps the caller alive while it waits
        relayed = api.name in self.upstream_apis and not (
            api is chat.API and api.streams(request, route) and not self.upstream_streams)
        if not relayed and "chat" not in self.upstream_apis:
            raise Refusal("unsupported", f"this endpoint speaks {', '.join(self.upstream_apis)}; "
                                         f"orchestra translates {api.name} through chat only")
        call = Call(route, request, api.asked_model(request, route), api.streams(request, route))
        api.set_model(request, self.model)
        if route.op == "count_tokens":
            self._count_tokens(handler, call, relayed)
            return
        call.reservation = self._admit(handler, call, size, relayed)
        with self._lock:
            self.stats.by_api[api.name] = self.stats.by_api.get(api.name, 0) + 1
            self._in_flight += 1
        abandoned = self.stats.abandoned
        try:
            (self._relay if relayed else self._translate)(handler, call)
        finally:
            self.ledger.release(call.reservation)  # a call that spent nothing: its hold back
            with self._lock:
                self._in_flight -= 1
                if self.stats.abandoned > abandoned:
                    self.stats.last_abandoned = True
                elif call.usage is not None and call.fault is None:  # answered: the agent went on
                    self.stats.last_abandoned = False

    def _admit(self, handler: JsonHandler, call: Call, size: int, relayed: bool) -> Reservation:
        """Reserve the call's input bound and output cap (apis.ledger) and send upstream the
        cap it was given; refused in the agent's API when the budget cannot hold it. The
        bound is of the larger of the agent's request and what goes upstream (a translated
        request can be the larger), with room for the cap's own digits."""
        api, request = call.api, call.request
        asked = api.output_cap(request)
        budgeted = self.budget.tokens is not None or self.budget.cost is not None
        want = asked or (self.max_output if budgeted else None)
        if want is not None:
            want *= max(1, api.choices(request))
        budgeted_size = size if relayed or not budgeted else max(size, len(json.dumps(api.to_chat(request))))
        try:
            reservation = self.ledger.admit(input_bound(budgeted_size + 64, bool(request.get("tools"))), want,
                                            self.deadline, handler.client_gone)
        except Refused as exc:
            # Worded so agent CLIs stop instead of retrying: aider, for one, retries every
            # APIError except a 402 that says "insufficient credits".
            raise Refusal("budget", f"orchestra budget exceeded: {exc}; no more model calls in this "
                                    'trial (insufficient credits, "code":402)') from None
        if budgeted or (asked is not None and asked > MAX_OUTPUT):
            api.cap(request, reservation.output)
        return reservation

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

    def summary(self) -> ModelUsage:
        """What the trial's result records of this proxy: the call counts, then the
        server's own refusals and waits, then the exchanges record's."""
        budget, requests = self.server.httpd.budget, self.server.httpd.requests
        usage = ModelUsage.model_validate(self.stats, from_attributes=True)  # ProxyCounts' fields
        usage.connections_refused = self.server.refused
        if budget:
            usage.body_rate_refused, usage.body_rate_waited_sec = budget.refused, round(budget.waited, 2)
        if requests:
            usage.request_rate_refused = requests.refused
            usage.request_rate_waited_sec = round(requests.waited, 2)
        if (record := self.record) is not None:
            usage.exchanges_written, usage.exchanges_dropped = record.written, record.dropped
            usage.exchanges_dropped_bytes = record.dropped_bytes
        return usage
