"""Anthropic Messages (`POST /v1/messages`, `/v1/messages/count_tokens`): Claude Code's API.

Content blocks map to chat as: text and images to message parts, `tool_use` to tool calls,
`tool_result` to tool messages (its images to a user message after them: chat tool
messages carry text), `thinking` to reasoning_content one way (its signature cannot be
made up, so a translated answer carries no thinking block). Stop reasons: end_turn <->
stop, max_tokens <-> length, tool_use <-> tool_calls, stop_sequence -> stop.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.services.apis.common import (
    Api,
    Live,
    Route,
    Usage,
    as_dict,
    as_int,
    as_list,
    capped,
    chat_choice,
    chat_completion,
    chat_tool_call,
    chat_usage,
    parse_args,
    sse,
    stable_id,
    text_of,
)
from orchestrator.util import JsonObject

TYPES = {"invalid": "invalid_request_error", "auth": "authentication_error", "budget": "billing_error",
         "not_found": "not_found_error", "too_large": "request_too_large", "rate": "rate_limit_error",
         "upstream": "api_error", "gone": "api_error", "unsupported": "invalid_request_error"}
TO_CHAT_STOP = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                "stop_sequence": "stop", "pause_turn": "stop", "refusal": "content_filter"}
FROM_CHAT_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                  "function_call": "tool_use", "content_filter": "refusal"}


def _image_part(block: JsonObject) -> JsonObject | None:
    """An Anthropic image block as a chat image part (base64 or URL sources)."""
    source = as_dict(block.get("source"))
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _user_parts(blocks: list[Any]) -> list[JsonObject]:
    parts: list[JsonObject] = []
    for block in blocks:
        block = as_dict(block)
        if block.get("type") == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image" and (image := _image_part(block)):
            parts.append(image)
        elif block.get("type") == "document" and as_dict(block.get("source")).get("type") == "text":
            parts.append({"type": "text", "text": str(as_dict(block["source"]).get("data", ""))})
    return parts


def _user_messages(content: object) -> list[JsonObject]:
    """One user turn: its tool results as tool messages first, then the rest."""
    if not isinstance(content, list):
        return [{"role": "user", "content": text_of(content)}]
    out: list[JsonObject] = []
    images: list[JsonObject] = []
    for block in content:
        block = as_dict(block)
        if block.get("type") != "tool_result":
            continue
        result = block.get("content")
        text = text_of(result) if isinstance(result, list) else str(result or "")
        images += [p for p in _user_parts(as_list(result)) if p["type"] == "image_url"]
        out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")),
                    "content": ("[error] " if block.get("is_error") else "") + text})
    parts = _user_parts(content) + images
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts) if only_text else parts})
    return out


def _assistant_message(content: object) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": text_of(content) if isinstance(content, list)
                     else str(content or "")}
    blocks = [as_dict(b) for b in as_list(content)]
    thinking = "".join(str(b.get("thinking") or "") for b in blocks if b.get("type") == "thinking")
    if thinking:
        message["reasoning_content"] = thinking
    calls = [chat_tool_call(str(b.get("id", "")), str(b.get("name", "")), as_dict(b.get("input")))
             for b in blocks if b.get("type") == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    message["content"] = message["content"] or None if calls else message["content"]
    return message


def tool_choice(choice: object) -> tuple[object, bool | None]:
    choice = as_dict(choice)
    kind = choice.get("type")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    if kind == "any":
        return "required", parallel
    if kind == "tool":
        return {"type": "function", "function": {"name": str(choice.get("name", ""))}}, parallel
    if kind in ("auto", "none"):
        return kind, parallel
    return None, parallel


def _blocks_from_chat(message: JsonObject) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    content = message.get("content")
    text = text_of(content) if isinstance(content, list) else str(content or "")
    if text:
        blocks.append({"type": "text", "text": text})
    for call in as_list(message.get("tool_calls")):
        call = as_dict(call)
        function = as_dict(call.get("function"))
        blocks.append({"type": "tool_use", "id": str(call.get("id") or stable_id("toolu_", function)),
                       "name": str(function.get("name", "")), "input": parse_args(function.get("arguments"))})
    return blocks


class MessagesApi(Api):
    name = "messages"
    keepalive = b'event: ping\ndata: {"type": "ping"}\n\n'
    forward_headers = ("anthropic-version", "anthropic-beta")

    def error(self, kind: str, message: str) -> JsonObject:
        return {"type": "error", "error": {"type": TYPES.get(kind, "api_error"), "message": message}}

    def stream_error(self, kind: str, message: str) -> bytes:
        return sse(self.error(kind, message), "error")

    def upstream_path(self, route: Route, model: str) -> str:
        return "/messages/count_tokens" if route.op == "count_tokens" else "/messages"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def cap(self, request: JsonObject, left: int) -> None:
        request["max_tokens"] = capped(request.get("max_tokens"), left)

    def output_cap(self, request: JsonObject) -> int | None:
        return as_int(request.get("max_tokens"))

    def stream_failure(self, event: JsonObject) -> str | None:
        if event.get("type") != "error":
            return None
        return str(as_dict(event.get("error")).get("message") or event.get("error"))[:500]

    def stream_finished(self, event: JsonObject) -> bool:
        return event.get("type") == "message_stop"

    def to_chat(self, request: JsonObject) -> JsonObject:
        system = request.get("system")
        messages: list[JsonObject] = []
        if system:
            messages.append({"role": "system", "content": text_of(system)})
        for message in as_list(request.get("messages")):
            message = as_dict(message)
            if message.get("role") == "assistant":
                messages.append(_assistant_message(message.get("content")))
            else:
                messages += _user_messages(message.get("content"))
        chat: JsonObject = {"model": request.get("model"), "messages": messages}
        tools = [{"type": "function", "function": {
                    "name": str(t.get("name", "")), "description": str(t.get("description", "")),
                    "parameters": as_dict(t.get("input_schema")) or {"type": "object", "properties": {}}}}
                 for t in map(as_dict, as_list(request.get("tools"))) if "input_schema" in t or not t.get("type")]
        if tools:
            chat["tools"] = tools
            choice, parallel = tool_choice(request.get("tool_choice"))
            if choice is not None:
                chat["tool_choice"] = choice
            if parallel is not None:
                chat["parallel_tool_calls"] = parallel
        if as_int(request.get("max_tokens")):
            chat["max_tokens"] = request["max_tokens"]
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("stop_sequences", "stop")):
            if request.get(ours) is not None:
                chat[theirs] = request[ours]
        return chat

    def from_chat(self, completion: JsonObject, model: str, request: JsonObject) -> JsonObject:
        message, finish = chat_choice(completion)
        blocks = _blocks_from_chat(message)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else FROM_CHAT_STOP.get(
            str(finish), "end_turn")
        usage = chat_usage(completion)
        return {"id": "msg_" + str(completion.get("id") or stable_id("", blocks))[-24:], "type": "message",
                "role": "assistant", "model": model, "content": blocks, "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": usage.input, "output_tokens": usage.output}}

    def live_start(self, live: Live) -> bytes:
        return sse({"type": "message_start", "message": {
            "id": "msg_" + live.rid[-24:], "type": "message", "role": "assistant", "model": live.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": live.input_tokens, "output_tokens": 0}}}, "message_start")

    def live_text(self, live: Live, text: str) -> bytes:
        if live.tools:  # after a tool call began: the text waits for the end (a block of its own)
            live.held.append(text)
            return b""
        head = b""
        if not live.opened:
            live.opened = True
            head = sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                       "content_block_start")
        return head + sse({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": text}}, "content_block_delta")

    @staticmethod
    def _tool_index(live: Live, position: int) -> int:
        return (1 if live.opened else 0) + position

    def live_tool(self, live: Live, call_id: str, name: str, arguments: str) -> bytes:
        """A tool_use block opened at the call's first piece (the text block closed before
        it), each piece of its arguments an input_json_delta as it arrives."""
        out = b""
        if call_id not in live.tools:
            if live.opened and not live.closed:
                live.closed = True
                out += sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            if live.tools:
                out += sse({"type": "content_block_stop", "index": self._tool_index(live, len(live.tools) - 1)},
                           "content_block_stop")
            live.tools.append(call_id)
            out += sse({"type": "content_block_start", "index": self._tool_index(live, len(live.tools) - 1),
                        "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}},
                       "content_block_start")
        if arguments:
            out += sse({"type": "content_block_delta", "index": self._tool_index(live, live.tools.index(call_id)),
                        "delta": {"type": "input_json_delta", "partial_json": arguments}}, "content_block_delta")
        return out

    def live_end(self, live: Live, completion: JsonObject) -> bytes:
        """The open block closed, each block not yet streamed (text, tool calls; text that
        came after a streamed tool call) whole, then message_delta (stop reason, usage) and
        message_stop."""
        message = self.from_chat(completion, live.model, live.request)
        texts = [b for b in message["content"] if b["type"] == "text"]
        calls = [b for b in message["content"] if b["type"] == "tool_use"]
        out = []
        if live.opened and not live.closed:
            out.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        if live.tools:
            out.append(sse({"type": "content_block_stop", "index": self._tool_index(live, len(live.tools) - 1)},
                           "content_block_stop"))
        rest = ([] if live.opened else texts) + calls[len(live.tools):]
        if live.opened and live.held:
            rest.append({"type": "text", "text": "".join(live.held)})
        for index, block in enumerate(rest, self._tool_index(live, len(live.tools))):
            start: JsonObject
            delta: JsonObject
            if block["type"] == "text":
                start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            out += [sse({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start"),
                    sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"),
                    sse({"type": "content_block_stop", "index": index}, "content_block_stop")]
        out.append(sse({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                        "usage": message["usage"]}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return b"".join(out)

    def as_chat(self, response: JsonObject) -> JsonObject:
        message = _assistant_message(response.get("content"))
        finish = "tool_calls" if message.get("tool_calls") else TO_CHAT_STOP.get(
            str(response.get("stop_reason")), "stop")
        return chat_completion(message, finish, self.usage(response), str(response.get("model", "")),
                               str(response.get("id", "")))

    def usage(self, response: JsonObject) -> Usage:
        usage = as_dict(response.get("usage"))
        prompt = sum(as_int(usage.get(k)) or 0 for k in (
            "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        return Usage(prompt, as_int(usage.get("output_tokens")) or 0)

    def collect(self, events: list[JsonObject]) -> JsonObject:
        message: JsonObject = {}
        blocks: dict[int, JsonObject] = {}
        partial: dict[int, list[str]] = {}
        for event in events:
            kind = event.get("type")
            if kind == "message_start":
                message = dict(as_dict(event.get("message")))
            elif kind == "content_block_start" and isinstance(event.get("index"), int):
                blocks[event["index"]] = dict(as_dict(event.get("content_block")))
            elif kind == "content_block_delta" and event.get("index") in blocks:
                block, delta = blocks[event["index"]], as_dict(event.get("delta"))
                for field, key in (("text", "text"), ("thinking", "thinking"), ("signature", "signature")):
                    if key in delta:
                        block[field] = str(block.get(field) or "") + str(delta[key])
                if "partial_json" in delta:
                    partial.setdefault(event["index"], []).append(str(delta["partial_json"]))
            elif kind == "message_delta":
                message.update(as_dict(event.get("delta")))
                message["usage"] = {**as_dict(message.get("usage")), **as_dict(event.get("usage"))}
        for index, pieces in partial.items():
            blocks[index]["input"] = parse_args("".join(pieces))
        message["content"] = [blocks[i] for i in sorted(blocks)]
        return message


API = MessagesApi()
