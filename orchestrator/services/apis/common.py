"""What every model API the proxy speaks has in common: one small typed interface.

An `Api` knows its own wire shapes and nothing about HTTP serving or upstreams:

- how the agent authenticates and how a key goes upstream (`auth_headers`);
- its error body (`error`) for orchestra's few kinds of refusal (`ERROR_STATUS`);
- its request's model, stream flag, output cap and choice count (`asked_model`, `streams`,
  `cap`, `choices`) and the server-side state it must not rely on (`stateful`);
- translation through Chat Completions, the hub: `to_chat` (its request as a chat request),
  `from_chat` (a finished chat completion as its answer), its stream made as chat chunks
  arrive (`live_start`, `live_text` for each piece of text, `live_end` with the folded
  completion: tool calls, stop reason, usage; `stream_from_chat` plays a whole completion
  that way), `as_chat` (its own answer as a chat completion, for the record);
- `usage` (input, output tokens of its answer) and `collect` (a relayed stream's events
  folded into the answer they add up to).

Every function here is pure and never raises on what an agent sent: a value of the wrong
type is treated as absent. Requests arrive as decoded JSON objects.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.util import JsonObject

# orchestra's refusals, each with the status every API gives it
ERROR_STATUS = {"invalid": 400, "auth": 401, "budget": 402, "not_found": 404, "too_large": 413,
                "rate": 429, "upstream": 502, "gone": 499, "unsupported": 501}


@dataclass(frozen=True)
class Route:
    """One call as the path names it: which API, which operation, and what the path says."""

    api: Api
    op: str  # "generate" | "count_tokens" | "models"
    model: str | None = None  # Gemini names the model in the path
    stream: bool = False  # Gemini's :streamGenerateContent


@dataclass
class Live:
    """A translated answer streamed as the upstream's chat chunks arrive: its reasoning and
    text pass on as they come (`Api.live_reasoning`, `Api.live_text`), its tool calls'
    arguments piece by piece where the API streams them (`Api.live_tool`), the rest (stop
    reason, usage, what was not streamed) at the end (`Api.live_end`, given the chunks
    folded into a completion)."""

    model: str
    request: JsonObject
    rid: str = "orchestra"  # the answer's id (from the upstream's first chunk)
    input_tokens: int = 0  # when known at the start (a whole answer played back)
    opened: bool = False  # the text block / message item is open
    closed: bool = False  # the text block was closed (a tool call began after it)
    reasoned: bool = False  # reasoning was streamed
    seq: int = 0  # Responses' sequence_number
    tools: list[str] = field(default_factory=list)  # the ids of the tool calls streamed, in order
    held: list[str] = field(default_factory=list)  # text after a streamed tool call: sent at the end
    thought: list[str] = field(default_factory=list)  # the reasoning streamed so far

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1


@dataclass(frozen=True)
class Usage:
    input: int = 0
    output: int = 0


class Api(ABC):
    name: ClassVar[str]
    # the SSE line that keeps a streaming client waiting (a comment, unless the API has a ping)
    keepalive: ClassVar[bytes] = b": keepalive\n\n"
    stream_type: ClassVar[str] = "text/event-stream"
    # the agent's request headers a relayed call carries upstream (lower case)
    forward_headers: ClassVar[tuple[str, ...]] = ()

    # ---- the wire ---------------------------------------------------------------------
    @abstractmethod
    def error(self, kind: str, message: str) -> JsonObject:
        """orchestra's refusal (`kind` from ERROR_STATUS) in this API's error shape."""

    def status(self, kind: str) -> int:
        return ERROR_STATUS.get(kind, 400)

    def stream_error(self, kind: str, message: str) -> bytes:
        """A refusal inside a stream already under way (its status already sent)."""
        return sse(self.error(kind, message))

    @abstractmethod
    def upstream_path(self, route: Route, model: str) -> str:
        """Where a relayed call goes, after the upstream's base URL (which ends in /v1 or
        /v1beta: the version is the base URL's)."""

    @abstractmethod
    def auth_headers(self, key: str) -> dict[str, str]:
        """How this API's provider takes a key."""

    # ---- the request ------------------------------------------------------------------
    def asked_model(self, request: JsonObject, route: Route) -> str | None:
        model = request.get("model")
        return model if isinstance(model, str) else route.model

    def set_model(self, request: JsonObject, model: str) -> None:
        request["model"] = model

    def streams(self, request: JsonObject, route: Route) -> bool:
        return request.get("stream") is True

    def stateful(self, request: JsonObject) -> str | None:
        """Why this request needs state the proxy does not keep, if it does."""
        return None

    def choices(self, request: JsonObject) -> int:
        return 1

    @abstractmethod
    def cap(self, request: JsonObject, left: int) -> None:
        """Lower the call's output cap (and choice count) to `left` tokens in all."""

    @abstractmethod
    def output_cap(self, request: JsonObject) -> int | None:
        """The output cap the request asks for, per choice (None: it names none)."""

    def count_tokens(self, request: JsonObject) -> JsonObject:
        """A token count answered here (when the upstream cannot): ~4 bytes a token."""
        return {"input_tokens": estimate_tokens(request)}

    # ---- translation through chat -----------------------------------------------------
    @abstractmethod
    def to_chat(self, request: JsonObject) -> JsonObject: ...

    @abstractmethod
    def from_chat(self, completion: JsonObject, model: str, request: JsonObject) -> JsonObject: ...

    @abstractmethod
    def as_chat(self, response: JsonObject) -> JsonObject: ...

    def live_start(self, live: Live) -> bytes:
        return b""

    def live_text(self, live: Live, text: str) -> bytes:
        """A piece of the answer's text, as this API streams text."""
        return b""

    def live_reasoning(self, live: Live, text: str) -> bytes:
        """A piece of the answer's reasoning, where this API streams it before the answer
        (b"": it is given whole at the end, or not at all)."""
        return b""

    def live_tool(self, live: Live, call_id: str, name: str, arguments: str) -> bytes:
        """A tool call's first piece (`call_id` new in live.tools: its start) or a further
        piece of its arguments, where this API streams them (b"": whole at the end)."""
        return b""

    def live_end(self, live: Live, completion: JsonObject) -> bytes:
        """The rest of the answer: what follows its streamed text (the whole completion,
        its id set to `live.rid`, is given)."""
        raise NotImplementedError

    def stream_from_chat(self, completion: JsonObject, model: str, request: JsonObject) -> Iterator[bytes]:
        """A whole completion as this API's stream: its text as one piece."""
        message, _ = chat_choice(completion)
        usage = chat_usage(completion)
        live = Live(model, request, rid=str(completion.get("id") or "orchestra"), input_tokens=usage.input)
        yield self.live_start(live)
        text = message.get("content")
        text = text_of(text) if isinstance(text, list) else str(text or "")
        if text:
            yield self.live_text(live, text)
        yield self.live_end(live, {**completion, "id": live.rid})

    # ---- the answer -------------------------------------------------------------------
    @abstractmethod
    def usage(self, response: JsonObject) -> Usage: ...

    @abstractmethod
    def collect(self, events: list[JsonObject]) -> JsonObject:
        """A relayed stream's decoded `data:` payloads folded into one answer."""

    @abstractmethod
    def stream_failure(self, event: JsonObject) -> str | None:
        """What an upstream's stream event says went wrong, when it is an error event."""

    @abstractmethod
    def stream_finished(self, event: JsonObject) -> bool:
        """Whether a stream event is the one that ends a whole answer (a stream that stops
        before it broke off)."""


# ---- helpers every API uses --------------------------------------------------------------
def sse(data: JsonObject | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Whole SSE events in `buffer` (CRLF or LF framed) and what is left of it."""
    buffer = buffer.replace(b"\r\n", b"\n")
    *events, rest = buffer.split(b"\n\n")
    return events, rest


def event_data(event: bytes) -> JsonObject | None:
    """The JSON object an SSE event carries in its `data:` lines (None: none, or [DONE])."""
    lines = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
    try:
        data = json.loads(b"\n".join(lines)) if lines else None
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def as_int(value: object) -> int | None:
    """An agent's number: a positive int, else None (bools and strings are not numbers)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def capped(value: object, left: int) -> int:
    """An output cap lowered to `left` (a missing or malformed one becomes `left`)."""
    number = as_int(value)
    return left if number is None or number > left else number


def as_dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def text_of(content: object) -> str:
    """The text of a string or a list of parts ({"text": ...} or {"type": ..., "text": ...}),
    the parts a paragraph each."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("text"))
    return ""


def leading_system_merged(messages: list[JsonObject]) -> list[JsonObject]:
    """Consecutive system messages at the start as one (some chat templates refuse a second)."""
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    if head < 2:
        return messages
    merged = "\n\n".join(str(m.get("content") or "") for m in messages[:head])
    return [{"role": "system", "content": merged}, *messages[head:]]


def parse_args(arguments: object) -> JsonObject:
    """A tool call's JSON arguments as an object ({} when they are not one)."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except (ValueError, RecursionError):
        return {"input": arguments}
    return value if isinstance(value, dict) else {"input": value}


def stable_id(prefix: str, *parts: object) -> str:
    """An id derived from what it names: a replayed conversation gets the same ids."""
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]
    return f"{prefix}{digest}"


def estimate_tokens(value: object) -> int:
    return max(1, len(json.dumps(value, default=str)) // 4)


def chat_choice(completion: JsonObject) -> tuple[JsonObject, str | None]:
    """A chat completion's first choice: its message and finish reason."""
    choice = as_dict((as_list(completion.get("choices")) or [{}])[0])
    return as_dict(choice.get("message")), choice.get("finish_reason")


def chat_usage(completion: JsonObject) -> Usage:
    usage = as_dict(completion.get("usage"))
    return Usage(as_int(usage.get("prompt_tokens")) or 0, as_int(usage.get("completion_tokens")) or 0)


def chat_completion(message: JsonObject, finish_reason: str, usage: Usage, model: str, id_: str) -> JsonObject:
    """A chat completion built from its parts (the record's shape for every API)."""
    return {"id": id_, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": usage.input, "completion_tokens": usage.output,
                      "total_tokens": usage.input + usage.output}}


def chat_tool_call(id_: str, name: str, arguments: object) -> JsonObject:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": text}}
