"""One model call's way through the proxy, after its route, token and budget were
checked (services.proxy, apis.ledger): upstream (apis.forward), then either relayed in the
agent's API or translated through chat, settled against the budget, and recorded.

- relay: the body as the agent sent it (model mapped, output capped), the key added in
  that API's header; a stream is passed on event by event as it arrives (each event's
  data also decoded, to read usage and to record the answer it adds up to); a whole
  answer to a stream request (a replay server, say) is played back as that API's events.
- translate: the request as a chat request. A whole answer is asked whole. A streaming
  agent's call is asked as a chat stream (with its usage chunk) and answered in its own
  API's events as the chunks arrive: its text live, its tool calls, stop reason and usage
  when the upstream is done (usage estimated, ~4 bytes a token, from an upstream that
  sends none, said as estimated); an upstream that answers whole (a replay server) is
  played back the same way. Until the upstream's answer starts, the agent hears the API's
  keep-alive line every `keepalive_sec` (its headers sent at the first one).

Errors are in the agent's API's shape: orchestra's own as `Refusal`, the upstream's
relayed as they came (same API) or re-worded in the agent's shape (translated). An upstream
that fails after its stream began (an error event, a broken connection, a stream that
stops before its end) is the upstream's fault, never the answer: the agent gets its API's
error event, the exchange is recorded with status 502, and `upstream_errors` makes the
trial an endpoint error (retried, never graded). A 429 that outlasts the retries reaches
the agent as its API's rate-limit error, with the upstream's Retry-After.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.client import HTTPException

from tenacity import RetryError

from orchestrator.log import get_logger
from orchestrator.models import ProxyCounts
from orchestrator.services.apis import chat
from orchestrator.services.apis.common import (
    Api,
    Live,
    Route,
    Usage,
    as_dict,
    as_list,
    chat_choice,
    event_data,
    stable_id,
)
from orchestrator.services.apis.forward import (
    MAX_ANSWER,
    Answer,
    Broke,
    ClientGone,
    Deadlines,
    NotSent,
    Pool,
    Retryable,
    events_of,
    open_upstream,
    upstream_said,
)
from orchestrator.services.apis.ledger import Ledger, Reservation
from orchestrator.services.apis.textcalls import with_text_calls
from orchestrator.services.exchanges import ExchangeLog
from orchestrator.services.httpserve import JsonHandler
from orchestrator.util import JsonObject

log = get_logger()
# a request's conversation: not kept while the call waits upstream (decoded, a 2 MB body can
# be ten times its size); what the answer's translation needs (tools, options) is kept
CONVERSATION = {"messages", "input", "contents", "system", "instructions", "systemInstruction",
                "system_instruction"}
KIND_OF_STATUS = {401: "auth", 402: "budget", 404: "not_found", 413: "too_large", 429: "rate", 499: "gone"}


class Refusal(Exception):
    """orchestra's own answer to a call, in the caller's API's error shape."""

    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.kind, self.status, self.retry_after = kind, status, retry_after




@dataclass
class Call:
    """One model call under way: the agent's API and request, and what became of it."""

    route: Route
    request: JsonObject  # the agent's, its model mapped and its output capped
    asked: str | None  # the model name the agent asked for
    stream: bool
    started: float = field(default_factory=time.time)
    attempts: list[int] = field(default_factory=lambda: [0])
    recorded_request: bytes = b""  # chat-shaped, for the record
    api_request: bytes | None = None  # the agent's own, for the record (when not chat)
    reservation: Reservation | None = None  # what the budget holds for it (apis.ledger)
    usage: JsonObject | None = None  # what it spent, for the record (counted or estimated)
    fault: str | None = None  # the upstream failed after the answer began

    def encoded(self, sent: bytes, chat_shaped: bytes | None, recording: bool) -> None:
        """Keep the request as the record needs it (encoded) and drop its conversation."""
        if recording:
            self.recorded_request = sent if chat_shaped is None else chat_shaped
            self.api_request = None if self.api is chat.API else json.dumps(self.request).encode()
        self.request = {k: v for k, v in self.request.items() if k not in CONVERSATION}

    @property
    def api(self) -> Api:
        return self.route.api


@dataclass
class Upshot:
    """What the upstream made of a call: an open 2xx answer, or a status and a body (the
    upstream's, or `kind`: orchestra's own refusal with `message`)."""

    status: int
    response: Answer | None = None
    body: bytes = b""
    kind: str | None = None
    message: str = ""
    retry_after: float | None = None


class CallWays:
    """The proxy's calls upstream, relayed or translated, and their record (ModelProxy's
    base: it sets these attributes)."""

    upstream: str
    model: str
    api_key: str | None
    deadline: float
    deadlines: Deadlines
    max_attempts: int
    backoff_max: float
    keepalive_sec: float
    output_field: str  # the chat output cap's field the upstream takes
    text_parts: str  # "join": a chat message's text-only content parts sent as one string
    upstream_streams: bool  # False: the upstream is asked for whole answers (its usage counted)
    tool_calls: str  # "from_text": calls a server left in a whole answer's text made tool_calls
    stats: ProxyCounts
    ledger: Ledger
    record: ExchangeLog | None
    pool: Pool  # kept-alive HTTPS connections upstream
    _lock: threading.Lock

    def scrub(self, data: bytes) -> bytes:
        raise NotImplementedError

    def _refuse(self, handler: JsonHandler, api: Api, refusal: Refusal, close: bool = False) -> None:
        """`close`: the request's body was not read (the connection cannot carry another)."""
        body = json.dumps(api.error(refusal.kind, f"orchestra proxy: {refusal}")).encode()
        handler.reply(refusal.status or api.status(refusal.kind), self.scrub(body), refusal.retry_after, close=close)

    def _settle(self, call: Call, usage: Usage, sent: int = 0, answer: object = None) -> None:
        """Charge the call's tokens and cost to the budget and keep them for the record: as
        the upstream counted them, or, from an upstream that counted none, estimated (~4
        bytes a token of the request `sent` and of the `answer`) and said so."""
        if call.reservation is None:
            return
        counted = bool(usage.input or usage.output)
        answer_bytes = len(json.dumps(answer, default=str)) if answer is not None and not counted else 0
        recorded = self.ledger.settle(call.reservation, usage if counted else None, sent, answer_bytes)
        cost = round(self.ledger.cost_of(recorded.input, recorded.output), 8) \
            if counted and self.ledger.priced else None
        call.usage = {"input": recorded.input, "output": recorded.output, "counted": counted, "cost": cost}

    def _fault(self, call: Call, message: str) -> None:
        """The upstream failed the call after its answer began (orchestra's fault kinds: an
        endpoint error for the trial)."""
        call.fault = self._cut(message)
        with self._lock:
            self.stats.upstream_errors += 1
            self.stats.stream_errors += 1
            self.stats.last_error = call.fault
        log.warning("proxy.stream_failed", api=call.api.name, error=call.fault)

    # ---- upstream -------------------------------------------------------------------------
    def _headers(self, api: Api, handler: JsonHandler | None = None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **(api.auth_headers(self.api_key) if self.api_key else {})}
        for name in api.forward_headers:
            if handler is not None and handler.headers.get(name):
                headers[name] = str(handler.headers[name])
        return headers

    def _retried(self) -> None:
        with self._lock:
            self.stats.retries += 1

    def _send(self, call: Call, data: bytes, path: str, headers: dict[str, str],
              client_gone: Callable[[], bool]) -> Upshot:
        try:
            status, answer = open_upstream(self.upstream + path, data, headers, self.deadline, self.max_attempts,
                                           self.backoff_max, client_gone, self._retried, call.attempts, self.pool,
                                           self.deadlines)
        except ClientGone:
            with self._lock:
                self.stats.abandoned += 1
            return Upshot(499, kind="gone", message="the client stopped waiting")
        except Broke as exc:  # sent, then unanswered: never re-sent (it may have been generated)
            return self._failed(call, str(exc), 504 if exc.timeout else 502)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            if isinstance(last, Retryable) and last.status == 429:
                with self._lock:
                    self.stats.rate_limited += 1
                return self._failed(call, f"rate limited after {call.attempts[0]} attempts ({last})", 429,
                                    kind="rate", retry_after=last.retry_after, said=str(last))
            what = "unreachable" if isinstance(last, NotSent) else "failed"
            return self._failed(call, f"endpoint {what} after {call.attempts[0]} attempts ({last})", 502,
                                said=str(last))
        if not isinstance(answer, bytes):
            return Upshot(status, response=answer)
        with self._lock:
            self.stats.upstream_refusals += 1
            self.stats.last_error = self._cut(upstream_said(status, answer))
        return Upshot(status, body=answer)

    def _failed(self, call: Call, message: str, status: int, kind: str = "upstream",
                retry_after: float | None = None, said: str | None = None) -> Upshot:
        """The upstream failed the call (after any retries): `message` for the agent, `said`
        (the upstream's own last word, when it had one) kept as the trial's last error."""
        last = self._cut(message)
        with self._lock:
            self.stats.upstream_errors += 1
            self.stats.last_error = self._cut(said) if said else last
        log.warning("proxy.upstream_failed", api=call.api.name, attempts=call.attempts[0], error=last)
        return Upshot(status, kind=kind, message=last, retry_after=retry_after)

    def _cut(self, text: str) -> str:
        return self.scrub(text.encode())[:500].decode(errors="replace")

    # ---- relay: the upstream speaks the agent's API ---------------------------------------
    def _relay(self, handler: JsonHandler, call: Call) -> None:
        api, request = call.api, call.request
        if api is chat.API and self.text_parts == "join":
            join_text_parts(request)
        wants_usage = bool(as_dict(request.get("stream_options")).get("include_usage"))
        if api is chat.API and call.stream:  # usage is counted from the stream's last chunk
            request["stream_options"] = {**as_dict(request.get("stream_options")), "include_usage": True}
        data = json.dumps(request).encode()
        recording = self.record is not None
        chat_shaped = json.dumps({**api.to_chat(request), "model": self.model}).encode() \
            if recording and api is not chat.API else None
        call.encoded(data, chat_shaped, recording)
        del request, chat_shaped
        up = self._send(call, data, api.upstream_path(call.route, self.model), self._headers(api, handler),
                        handler.client_gone)
        if up.response is None:
            body = json.dumps(api.error(up.kind, f"orchestra proxy: {up.message}")).encode() if up.kind else up.body
            self._record(call, up.status, body, None)
            handler.reply(up.status, self.scrub(body), up.retry_after)
            return
        kind = up.response.headers.get("Content-Type", "application/json")
        streamed = call.stream and "event-stream" in kind
        if streamed:
            native = api.collect(self._pump(handler, call, up.response, wants_usage))
        else:
            try:
                with up.response:
                    body = read_capped(up.response)
            except (OSError, HTTPException, Broke) as exc:
                up = self._failed(call, f"the endpoint broke off its answer: {exc}", 502)
                body = json.dumps(api.error("upstream", f"orchestra proxy: {up.message}")).encode()
                self._record(call, 502, body, None)
                handler.reply(502, self.scrub(body))
                return
            native = _object(body)
            if (failure := api.stream_failure(native)) is not None:  # a 200 that is an error
                up = self._failed(call, f"the endpoint answered 200 with an error: {failure}", 502)
                self._record(call, 502, body, None)
                handler.reply(502, self.scrub(body))
                return
        self._settle(call, api.usage(native), len(data), native)
        answer = json.dumps(native).encode() if streamed else body  # a whole answer: as it came
        self._record(call, 502 if call.fault else 200, answer, native)  # before the client's last byte
        if not streamed and api is chat.API and self.tool_calls == "from_text" and with_text_calls(
                native, call.request):
            body = json.dumps(native).encode()  # the agent gets the calls; the record, what came
        if streamed:
            handler.end_stream()
        elif call.stream:  # an upstream that answered a stream request all at once
            asked = {**call.request, "stream_options": {"include_usage": wants_usage}}
            self._stream(handler, api, api.stream_from_chat(api.as_chat(native), call.asked or "", asked))
        else:
            handler.reply(200, self.scrub(body), content_type=kind)

    def _pump(self, handler: JsonHandler, call: Call, response: Answer, wants_usage: bool) -> list[JsonObject]:
        """Pass a streamed answer on event by event as it arrives (the caller ends the
        stream); its decoded events. An error event passes on as it came (it is the
        agent's API's) and is the upstream's fault; a break, or an end before the answer's
        last event, is said to the agent in its API's error event."""
        handler.start_stream(200, response.headers.get("Content-Type", "text/event-stream"))
        events: list[JsonObject] = []
        finished, gone = False, False
        try:
            with response:
                for raw in events_of(response):
                    data = event_data(raw)
                    if data is not None:
                        events.append(data)
                        finished = finished or call.api.stream_finished(data)
                        if (failure := call.api.stream_failure(data)) is not None:
                            self._fault(call, f"the endpoint's stream failed: {failure}")
                        if call.api is chat.API and not wants_usage and data.get("usage") \
                                and not data.get("choices"):
                            continue  # the usage chunk we asked for, not the agent
                    if not handler.send_chunk(self.scrub(raw)):
                        gone = True
                        with self._lock:
                            self.stats.abandoned += 1
                        break
        except (OSError, HTTPException, Broke) as exc:  # the upstream broke off mid-stream
            self._fault(call, f"the endpoint broke off mid-stream: {exc}")
            handler.send_chunk(call.api.stream_error("upstream", f"orchestra proxy: {call.fault}"))
            return events
        if not finished and not gone and call.fault is None:
            self._fault(call, "the endpoint's stream ended before the answer did")
            handler.send_chunk(call.api.stream_error("upstream", f"orchestra proxy: {call.fault}"))
        return events

    def _stream(self, handler: JsonHandler, api: Api, events: Iterable[bytes], started: bool = False) -> None:
        if not started:
            handler.start_stream(200, api.stream_type)
        for event in events:
            if not handler.send_chunk(self.scrub(event)):  # the client stopped reading: abandoned
                with self._lock:
                    self.stats.abandoned += 1
                return
        handler.end_stream()

    # ---- translate: the upstream speaks chat -----------------------------------------------
    def _chat_request(self, call: Call) -> JsonObject:
        """The agent's request as the upstream's chat request (its output cap in the field
        the upstream takes)."""
        request = call.api.to_chat(call.request)
        streams = call.stream and self.upstream_streams
        request.update(model=self.model, stream=streams)
        request.pop("stream_options", None)
        if streams:  # the upstream streams too (its text passes on as it comes), usage last
            request["stream_options"] = {"include_usage": True}
        if self.text_parts == "join":
            join_text_parts(request)
        other = "max_tokens" if self.output_field == "max_completion_tokens" else "max_completion_tokens"
        if other in request:
            cap = request.pop(other)
            request.setdefault(self.output_field, cap)
        return request

    def _translate(self, handler: JsonHandler, call: Call) -> None:
        api = call.api
        data = json.dumps(self._chat_request(call)).encode()
        call.encoded(data, None, self.record is not None)
        outcome: list[Upshot] = []

        def ask() -> None:
            nonlocal data
            up = self._send(call, data, "/chat/completions", self._headers(chat.API), handler.client_gone)
            if (learned := self._learn_output_field(up)) is not None:  # said once, asked again once
                data = learned(data)
                call.recorded_request = data if call.recorded_request else b""
                up = self._send(call, data, "/chat/completions", self._headers(chat.API), handler.client_gone)
            outcome.append(up)

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
        up, body = outcome[0], outcome[0].body
        if up.response is not None:
            if call.stream and "event-stream" in up.response.headers.get("Content-Type", ""):
                self._translate_stream(handler, call, up.response, len(data), started)
                return
            try:
                with up.response:
                    body = read_capped(up.response)
            except (OSError, HTTPException, Broke) as exc:
                up = self._failed(call, f"the endpoint broke off its answer: {exc}", 502)
        self._translate_whole(handler, call, up, body, len(data), started)

    def _learn_output_field(self, up: Upshot) -> Callable[[bytes], bytes] | None:
        """A 400 that names the other output-cap field (OpenAI's reasoning models take
        max_completion_tokens only; some servers max_tokens only): the field is switched for
        the rest of the trial, said in the result, and this call asked again (nothing was
        generated)."""
        if up.status != 400 or up.response is not None:
            return None
        said = up.body[:2000].decode(errors="replace")
        if "max_tokens" not in said or "max_completion_tokens" not in said:
            return None
        old = self.output_field
        new = "max_completion_tokens" if old == "max_tokens" else "max_tokens"
        if f"'{old}'" not in said and f'"{old}"' not in said and f"`{old}`" not in said and old not in said.split():
            return None
        with self._lock:
            self.output_field = new
            self.stats.output_field = new
            self.stats.upstream_refusals -= 1  # not the agent's request failing: the dialect
        log.info("proxy.output_field_learned", field=new)

        def switch(data: bytes) -> bytes:
            request = json.loads(data)
            if old in request:
                request[new] = request.pop(old)
            return json.dumps(request).encode()
        return switch

    def _translate_whole(self, handler: JsonHandler, call: Call, up: Upshot, body: bytes, sent: int,
                         started: bool) -> None:
        """A whole chat answer (or the upstream's refusal) in the agent's API."""
        api = call.api
        completion = _object(body) if up.status == 200 else None
        if up.status == 200 and not completion:
            up, completion = self._failed(call, "the endpoint's answer is not a completion", 502), None
        if completion is not None and (failure := chat.API.stream_failure(completion)) is not None:
            up, completion = self._failed(call, f"the endpoint answered 200 with an error: {failure}", 502), None
        if completion is None:
            message = up.message or upstream_said(up.status, body)
            kind = up.kind or KIND_OF_STATUS.get(up.status, "upstream" if up.status >= 500 else "invalid")
            self._record(call, up.status, body, None, translated=True)
            if started:
                self._stream(handler, api, [api.stream_error(kind, f"orchestra proxy: {message}")], started)
            else:
                self._refuse(handler, api, Refusal(kind, message, up.status, up.retry_after))
            return
        self._settle(call, chat.API.usage(completion), sent, chat_choice(completion)[0])
        self._record(call, up.status, body, None, translated=True)  # what the upstream said
        if self.tool_calls == "from_text":
            with_text_calls(completion, api.to_chat(call.request))
        if call.stream:
            self._stream(handler, api, api.stream_from_chat(completion, call.asked or self.model, call.request),
                         started)
        else:
            answer = api.from_chat(completion, call.asked or self.model, call.request)
            handler.reply(200, self.scrub(json.dumps(answer).encode()))

    def _translate_stream(self, handler: JsonHandler, call: Call, response: Answer, sent: int,
                          started: bool) -> None:
        """The upstream's chat chunks as the agent's API's stream: text as it arrives, the
        rest (tool calls, stop reason, usage) when the upstream is done. An error event, a
        break or a stream that stops before its finish reason ends the agent's stream with
        its API's error event, never with a normal end."""
        api, live, chunks = call.api, Live(call.asked or self.model, call.request), list[JsonObject]()
        if not started:
            handler.start_stream(200, api.stream_type)
        finished, gone, said = False, False, time.monotonic()
        tools: dict[object, list[str]] = {}  # a tool call's chunk index -> [its id, its name]
        try:
            with response:
                for raw in events_of(response):
                    if (data := event_data(raw)) is None:
                        continue
                    if (failure := chat.API.stream_failure(data)) is not None:
                        self._fault(call, f"the endpoint's stream failed: {failure}")
                        break
                    out = b""
                    if not chunks:
                        live.rid = str(data.get("id") or live.rid)
                        out = api.live_start(live)
                    chunks.append(data)
                    finished = finished or chat.API.stream_finished(data)
                    delta = as_dict(as_dict((as_list(data.get("choices")) or [{}])[0]).get("delta"))
                    if isinstance(delta.get("reasoning_content"), str) and delta["reasoning_content"]:
                        out += api.live_reasoning(live, delta["reasoning_content"])
                    if isinstance(delta.get("content"), str) and delta["content"]:
                        out += api.live_text(live, delta["content"])
                    for piece in map(as_dict, as_list(delta.get("tool_calls"))):
                        out += self._live_tool(api, live, tools, piece)
                    if not out and time.monotonic() - said > self.keepalive_sec:
                        out = api.keepalive  # a long tool call: nothing to say until its end
                    if out:
                        said = time.monotonic()
                        if not handler.send_chunk(self.scrub(out)):
                            gone = True
                            break
        except (OSError, HTTPException, Broke) as exc:  # the upstream broke off mid-stream
            self._fault(call, f"the endpoint broke off mid-stream: {exc}")
        if not finished and not gone and call.fault is None:
            self._fault(call, "the endpoint's stream ended before its finish reason")
        completion = {**chat.API.collect(chunks), "id": live.rid}
        self._settle(call, chat.API.usage(completion), sent, chat_choice(completion)[0])
        self._record(call, 502 if call.fault else 200, json.dumps(completion).encode(), None, translated=True)
        if gone:
            with self._lock:
                self.stats.abandoned += 1
            return
        if not chunks:
            handler.send_chunk(self.scrub(api.live_start(live)))
        end = api.stream_error("upstream", f"orchestra proxy: {call.fault}") if call.fault \
            else api.live_end(live, completion)
        handler.send_chunk(self.scrub(end))
        handler.end_stream()

    @staticmethod
    def _live_tool(api: Api, live: Live, tools: dict[object, list[str]], piece: JsonObject) -> bytes:
        """One chat tool-call piece as the agent's API streams a call: begun once its name
        is known (the id the upstream gave, else one of ours), its arguments as they come."""
        function = as_dict(piece.get("function"))
        index = piece.get("index", len(tools))
        call = tools.setdefault(index if isinstance(index, (int, str)) else len(tools), ["", "", ""])
        call[0] = call[0] or str(piece.get("id") or "")
        call[1] += str(function.get("name") or "")
        arguments = str(function.get("arguments") or "")
        if not call[1]:  # no name yet: its arguments wait for it
            call[2] += arguments
            return b""
        call[0] = call[0] or stable_id("toolu_", live.rid, index)
        arguments, call[2] = call[2] + arguments, ""
        return api.live_tool(live, call[0], call[1], arguments)

    # ---- the record ----------------------------------------------------------------------------
    def _record(self, call: Call, status: int, answer: bytes, native: JsonObject | None,
                translated: bool = False) -> None:
        """One exchange, chat-shaped (what went upstream when translated; the agent's API
        translated to chat when relayed), with the agent's own request and answer beside it,
        its usage (counted or estimated, and its cost) and the upstream's fault if any."""
        if self.record is None:
            return
        api = call.api
        meta: JsonObject = {"api": api.name, "asked_model": call.asked, "mode": "translate" if translated else "relay"}
        if call.usage is not None:
            meta["usage"] = call.usage
        if call.fault is not None:
            meta["fault"] = call.fault
        relayed_other = native is not None and api is not chat.API
        response = json.dumps(api.as_chat(native)).encode() if relayed_other and native is not None else answer
        native_response = json.dumps(native).encode() if relayed_other else None
        self.record.write(call.recorded_request, status, response, call.started, call.attempts[0], call.stream,
                          meta=meta, api_request=call.api_request, api_response=native_response)


def join_text_parts(request: JsonObject) -> None:
    """Each chat message whose content is a list of text parts only, as one string (the
    parts a paragraph each), and an assistant's null content (beside its tool calls) as
    "": servers whose chat templates concatenate content as a string (llama-cpp-python's
    Jinja templates) fail on a list, mid-stream, and its request models refuse a null
    with a 500."""
    for message in as_list(request.get("messages")):
        if isinstance(message, dict) and "content" in message and message["content"] is None:
            message["content"] = ""
        content = as_dict(message).get("content")
        if isinstance(content, list) and content and all(
                isinstance(p, dict) and p.get("type") == "text" for p in content):
            message["content"] = "\n\n".join(str(p.get("text") or "") for p in content)


def read_capped(response: Answer) -> bytes:
    """A whole answer's body, at most MAX_ANSWER bytes; past it, or short of its
    Content-Length (the connection dropped), Broke: an upstream fault."""
    pieces, total = [], 0
    while total <= MAX_ANSWER:
        piece = response.read(min(1 << 20, MAX_ANSWER + 1 - total))
        if not piece:
            break
        pieces.append(piece)
        total += len(piece)
    if total > MAX_ANSWER:
        raise Broke(f"the answer is larger than {MAX_ANSWER // (1024 * 1024)} MiB")
    short = getattr(getattr(response, "response", response), "length", None)
    if short:
        raise Broke(f"the answer ended {short} bytes short of its Content-Length")
    return b"".join(pieces)


def _object(body: bytes) -> JsonObject:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
