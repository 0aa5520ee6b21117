"""A scripted upstream that speaks all four model APIs natively, streaming and not: for
the proxy's conformance tests and bench. Its answers are written from each API's documented
shapes, independently of the translators (apis.chat and friends), so a test that passes
through it checks the translation against the API, not against itself.

The script is one exchange: a conversation without a tool result gets a call of `tool`
with `args`; one with a tool result gets the text `Done: <the result>`. `delay` holds the
answer's start, `chunk_delay` spaces a stream's events. Every request is kept (path,
headers, body) in `seen`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from orchestrator.services.httpserve import BackgroundServer, JsonHandler
from orchestrator.util import JsonObject


@dataclass
class Script:
    tool: str = "shell"
    args: JsonObject = field(default_factory=lambda: {"command": "echo hello > hello.txt"})
    delay: float = 0.0
    chunk_delay: float = 0.0
    usage: tuple[int, int] = (11, 7)


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: JsonObject


def tool_result(api: str, body: JsonObject) -> str | None:
    """The latest tool result in a request, in each API's own shape (None: there is none)."""
    found = None
    if api == "chat":
        for m in body.get("messages") or []:
            if m.get("role") == "tool":
                found = str(m.get("content"))
    elif api == "messages":
        for m in body.get("messages") or []:
            blocks = m.get("content") if isinstance(m.get("content"), list) else []
            for b in blocks or []:
                if b.get("type") == "tool_result":
                    content = b.get("content")
                    found = content if isinstance(content, str) else "".join(c.get("text", "") for c in content)
    elif api == "responses":
        items = body.get("input") if isinstance(body.get("input"), list) else []
        for item in items or []:
            if item.get("type") == "function_call_output":
                found = str(item.get("output"))
    else:
        for c in body.get("contents") or []:
            for p in c.get("parts") or []:
                if "functionResponse" in p:
                    found = str(p["functionResponse"].get("response", {}).get("output"))
    return found


def _chat(script: Script, text: str | None, stream: bool) -> Iterator[JsonObject | str]:
    args = json.dumps(script.args)
    call = {"id": "call_up1", "type": "function", "function": {"name": script.tool, "arguments": args}}
    usage = {"prompt_tokens": script.usage[0], "completion_tokens": script.usage[1],
             "total_tokens": sum(script.usage)}
    finish = "stop" if text is not None else "tool_calls"
    if not stream:
        message = {"role": "assistant", "content": text, **({} if text is not None else {"tool_calls": [call]})}
        yield {"id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "up",
               "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
        return
    base = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up"}

    def chunk(delta: JsonObject, reason: str | None = None) -> JsonObject:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
    yield chunk({"role": "assistant", "content": ""})
    if text is not None:
        yield chunk({"content": text[:4]})
        yield chunk({"content": text[4:]})
    else:
        yield chunk({"tool_calls": [{"index": 0, "id": "call_up1", "type": "function",
                                     "function": {"name": script.tool, "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:5]}}]})
        yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[5:]}}]})
    yield chunk({}, finish)
    yield {**base, "choices": [], "usage": usage}
    yield "[DONE]"


def _messages(script: Script, text: str | None, stream: bool) -> Iterator[JsonObject | str]:
    block = {"type": "text", "text": text} if text is not None else \
        {"type": "tool_use", "id": "toolu_up1", "name": script.tool, "input": script.args}
    stop = "end_turn" if text is not None else "tool_use"
    message = {"id": "msg_up", "type": "message", "role": "assistant", "model": "up", "content": [block],
               "stop_reason": stop, "stop_sequence": None,
               "usage": {"input_tokens": script.usage[0], "output_tokens": script.usage[1]}}
    if not stream:
        yield message
        return
    yield {"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                "usage": {"input_tokens": script.usage[0], "output_tokens": 1}}}
    yield {"type": "ping"}
    if text is not None:
        yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        for piece in (text[:4], text[4:]):
            yield {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
    else:
        yield {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}}
        args = json.dumps(script.args)
        for piece in (args[:5], args[5:]):
            yield {"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": piece}}
    yield {"type": "content_block_stop", "index": 0}
    yield {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
           "usage": {"output_tokens": script.usage[1]}}
    yield {"type": "message_stop"}


def _responses(script: Script, text: str | None, stream: bool) -> Iterator[JsonObject | str]:
    if text is not None:
        item = {"type": "message", "id": "msg_up", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}
    else:
        item = {"type": "function_call", "id": "fc_up", "call_id": "call_up1", "name": script.tool,
                "arguments": json.dumps(script.args), "status": "completed"}
    response = {"id": "resp_up", "object": "response", "created_at": 1, "status": "completed", "model": "up",
                "output": [item], "usage": {"input_tokens": script.usage[0], "output_tokens": script.usage[1],
                                            "total_tokens": sum(script.usage)}}
    if not stream:
        yield response
        return
    yield {"type": "response.created", "sequence_number": 0, "response": {**response, "status": "in_progress",
                                                                          "output": []}}
    yield {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": item}
    if text is not None:
        for n, piece in enumerate((text[:4], text[4:])):
            yield {"type": "response.output_text.delta", "sequence_number": 2 + n, "item_id": "msg_up",
                   "output_index": 0, "content_index": 0, "delta": piece}
    else:
        yield {"type": "response.function_call_arguments.delta", "sequence_number": 2, "item_id": "fc_up",
               "output_index": 0, "delta": item["arguments"]}
    yield {"type": "response.output_item.done", "sequence_number": 4, "output_index": 0, "item": item}
    yield {"type": "response.completed", "sequence_number": 5, "response": response}


def _gemini(script: Script, text: str | None, stream: bool) -> Iterator[JsonObject | str]:
    usage = {"promptTokenCount": script.usage[0], "candidatesTokenCount": script.usage[1],
             "totalTokenCount": sum(script.usage)}
    parts = [{"text": text}] if text is not None else [{"functionCall": {"name": script.tool, "args": script.args}}]
    if not stream:
        yield {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
               "usageMetadata": usage, "modelVersion": "up"}
        return
    yield {"candidates": [{"content": {"role": "model", "parts": [{"text": text[:4]}] if text else parts},
                           "index": 0}], "modelVersion": "up"}
    parts = [{"text": text[4:] if text else ""}]
    yield {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
           "usageMetadata": usage, "modelVersion": "up"}


ANSWERS = {"chat": _chat, "messages": _messages, "responses": _responses, "gemini": _gemini}


def _api_of(path: str) -> tuple[str, bool] | None:
    """(api, streams by path) for a path the scripted upstream serves."""
    path = path.split("?")[0]
    if path.endswith("/messages/count_tokens") or path.endswith(":countTokens"):
        return "count", False
    if re.search(r"/models/[^/]+:streamGenerateContent$", path):
        return "gemini", True
    if re.search(r"/models/[^/]+:generateContent$", path):
        return "gemini", False
    for tail, api in (("/chat/completions", "chat"), ("/messages", "messages"), ("/responses", "responses")):
        if path.endswith(tail):
            return api, False
    return None


class ScriptedUpstream(BackgroundServer):
    def __init__(self, script: Script | None = None, host: str = "127.0.0.1"):
        self.script = script or Script()
        self.seen: list[Seen] = []
        self.finished: list[float] = []  # when each answer's last byte was sent (monotonic)
        lock = threading.Lock()
        upstream = self

        class Handler(JsonHandler):
            event = "scripted.request"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.read_body(8 * 1024 * 1024) or b"{}")
                with lock:
                    upstream.seen.append(Seen(self.path, dict(self.headers.items()), body))
                found = _api_of(self.path)
                if found is None:
                    self.reply(404, {"error": {"message": f"scripted: no route {self.path}"}})
                    return
                api, stream = found
                if api == "count":  # each API's token count, in its field
                    self.reply(200, {"totalTokens": 42} if ":" in self.path else {"input_tokens": 42})
                    return
                stream = stream or body.get("stream") is True
                result = tool_result(api, body)
                text = None if result is None else f"Done: {result}"
                time.sleep(upstream.script.delay)
                answers = ANSWERS[api](upstream.script, text, stream)
                if not stream:
                    whole = next(answers)
                    self.reply(200, whole if isinstance(whole, dict) else whole.encode())
                    upstream.finished.append(time.monotonic())
                else:
                    self.start_stream(200, "text/event-stream")
                    for n, event in enumerate(answers):
                        if n:
                            time.sleep(upstream.script.chunk_delay)
                        data = event if isinstance(event, str) else json.dumps(event)
                        head = f"event: {event['type']}\n" if isinstance(event, dict) and api in (
                            "messages", "responses") else ""
                        self.send_chunk(f"{head}data: {data}\n\n".encode())
                    # noted before the stream's end goes out: a client that has read it all
                    # may look at `finished` at once, before this thread runs again
                    upstream.finished.append(time.monotonic())
                    self.end_stream()

        super().__init__(Handler, host, name="scripted-upstream", path="", request_rate=None)
