"""OpenAI Chat Completions (`POST /v1/chat/completions`): the hub every other API is
translated through, so its translations are the identity."""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.services.apis.common import (
    Api,
    Route,
    Usage,
    as_dict,
    as_int,
    as_list,
    capped,
    chat_usage,
    sse,
)
from orchestrator.util import JsonObject

OPENAI_TYPES = {"invalid": "invalid_request_error", "auth": "invalid_api_key", "budget": "budget_exceeded",
                "not_found": "not_found_error", "too_large": "invalid_request_error",
                "rate": "rate_limit_exceeded", "upstream": "endpoint_error", "gone": "client_gone",
                "unsupported": "invalid_request_error"}


def openai_error(kind: str, message: str) -> JsonObject:
    """OpenAI's error shape (Chat Completions and Responses share it)."""
    kind_type = OPENAI_TYPES.get(kind, "invalid_request_error")
    return {"error": {"message": message, "type": kind_type, "param": None, "code": kind_type}}


class ChatApi(Api):
    name = "chat"

    def error(self, kind: str, message: str) -> JsonObject:
        return openai_error(kind, message)

    def upstream_path(self, route: Route, model: str) -> str:
        return "/chat/completions"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def choices(self, request: JsonObject) -> int:
        return as_int(request.get("n")) or 1

    def cap(self, request: JsonObject, left: int) -> None:
        """max_tokens and max_completion_tokens lowered to `left` (max_tokens set when
        neither is given), and `n` choices only as many as it covers (at least 1)."""
        keys = [k for k in ("max_tokens", "max_completion_tokens") if k in request]
        for key in keys:
            request[key] = capped(request[key], left)
        if not keys:
            request["max_tokens"] = left
        per_choice = min(request[k] for k in keys or ["max_tokens"])
        n = request.get("n")
        if n is not None and (as_int(n) or left + 1) * per_choice > left:
            request["n"] = max(1, min(as_int(n) or 1, left // per_choice))

    def output_cap(self, request: JsonObject) -> int | None:
        caps = [c for c in (as_int(request.get("max_tokens")), as_int(request.get("max_completion_tokens"))) if c]
        return min(caps) if caps else None

    def stream_failure(self, event: JsonObject) -> str | None:
        error = event.get("error")
        if error is None:
            return None
        return str(as_dict(error).get("message") or error)[:500]

    def stream_finished(self, event: JsonObject) -> bool:
        return any(as_dict(c).get("finish_reason") for c in as_list(event.get("choices")))

    def to_chat(self, request: JsonObject) -> JsonObject:
        return request

    def from_chat(self, completion: JsonObject, model: str, request: JsonObject) -> JsonObject:
        return completion

    def stream_from_chat(self, completion: JsonObject, model: str, request: JsonObject) -> Iterator[bytes]:
        """A finished completion as the chunks a streaming client expects: one with the
        whole message, one with the finish reason (and one with usage when the request's
        stream_options asked for it), then [DONE]."""
        choice = as_dict((as_list(completion.get("choices")) or [{}])[0])
        message = as_dict(choice.get("message"))
        base = {"id": completion.get("id", "chatcmpl-orchestra"), "object": "chat.completion.chunk",
                "created": completion.get("created", 0), "model": completion.get("model", model)}
        delta: JsonObject = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("reasoning_content"):
            delta["reasoning_content"] = message["reasoning_content"]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(as_list(message["tool_calls"]))]
        yield sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        yield sse({**base, "choices": [{"index": 0, "delta": {},
                                        "finish_reason": choice.get("finish_reason", "stop")}]})
        if as_dict(request.get("stream_options")).get("include_usage") and completion.get("usage"):
            yield sse({**base, "choices": [], "usage": completion["usage"]})
        yield b"data: [DONE]\n\n"

    def as_chat(self, response: JsonObject) -> JsonObject:
        return response

    def usage(self, response: JsonObject) -> Usage:
        return chat_usage(response)

    def collect(self, events: list[JsonObject]) -> JsonObject:
        """Chunks folded into the completion they stream: content, reasoning, tool calls
        (their argument pieces joined by index), the finish reason and usage."""
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[object, JsonObject] = {}
        finish, usage, head = None, None, dict[str, object]()
        for chunk in events:
            head = head or {k: chunk.get(k) for k in ("id", "created", "model")}
            usage = chunk.get("usage") or usage
            for choice in as_list(chunk.get("choices"))[:1]:
                choice = as_dict(choice)
                finish = choice.get("finish_reason") or finish
                delta = as_dict(choice.get("delta"))
                content.append(str(delta.get("content") or ""))
                reasoning.append(str(delta.get("reasoning_content") or ""))
                for piece in as_list(delta.get("tool_calls")):
                    piece = as_dict(piece)
                    call = calls.setdefault(piece.get("index", len(calls)), {
                        "id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                    call["id"] = piece.get("id") or call["id"]
                    function = as_dict(piece.get("function"))
                    call["function"]["name"] += str(function.get("name") or "")
                    call["function"]["arguments"] += str(function.get("arguments") or "")
        message: JsonObject = {"role": "assistant", "content": "".join(content) or None}
        if any(reasoning):
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = [calls[k] for k in sorted(calls, key=str)]
        return {**head, "object": "chat.completion", "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


API = ChatApi()
