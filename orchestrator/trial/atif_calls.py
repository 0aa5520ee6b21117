"""The model calls of a trial, read from the proxy's record (model/exchanges.jsonl) for its
ATIF (trial/atif.py): per call, when it started, the model that answered, its token usage,
its text, reasoning and tool calls, and the tool results the agent sent back in its request.

The record holds what each API sent: a Chat Completions call (`choices`), an Anthropic
Messages call (`content` blocks, `usage.input_tokens`), a Responses call (`output` items)
or a Gemini generateContent call (`candidates`, `usageMetadata`); a record's other keys
(`api`, `asked_model`, ...) are ignored. A streamed answer recorded as text, an error
answer and a line cut for size have no answer to read: they are counted, never steps. It
is what the agent sent and the upstream said, so nothing in it is trusted: whatever does
not fit is read as absent, never an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.util import JsonObject


@dataclass
class Call:
    """A tool call: its id (None when the API gave none), name and arguments."""

    id: str | None
    name: str
    arguments: JsonObject


@dataclass
class ModelCall:
    """One answered model call."""

    index: int
    started: float | None
    model: str | None
    text: str = ""
    reasoning: str | None = None
    calls: list[Call] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    results: list[tuple[str, str]] = field(default_factory=list)  # (call id, output) sent back


@dataclass
class Record:
    """What a trial's exchanges file holds: the answered calls, and how many were not."""

    calls: list[ModelCall]
    unanswered: int  # an error status, a streamed or cut answer: nothing to read
    tools: list[JsonObject] | None = None  # the first chat request's tool definitions


# The most of an exchanges file read for an ATIF (the proxy caps its own record; a copy
# larger than this is not the proxy's): read a line at a time, each line's dict dropped as
# soon as its call is taken, so a flood of 2 MB requests costs the orchestrator one line.
MAX_READ = 256 * 1024 * 1024


def read_calls(path: Path, since: float | None = None) -> Record:
    """The answered calls of an exchanges file, in order (none when it does not exist);
    `since`: only those started then or later (a multi-step task's later step)."""
    calls: list[ModelCall] = []
    unanswered, tools = 0, None
    for item in _items(path):
        started = item.get("started")
        if since is not None and isinstance(started, (int, float)) and started < since:
            continue
        if tools is None:
            tools = _chat_tools(item)
        call = _call(item, len(calls))
        if call is None:
            unanswered += 1
        else:
            calls.append(call)
    return Record(calls, unanswered, tools)


def _items(path: Path) -> Iterator[JsonObject]:
    """The file's readable lines as dicts, one at a time (a malformed line is skipped)."""
    if not path.is_file() or path.is_symlink():
        return
    read = 0
    with path.open("rb") as f:
        for line in f:
            read += len(line)
            if read > MAX_READ:
                return
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(item, dict):
                yield item


def _chat_tools(item: JsonObject) -> list[JsonObject] | None:
    """A chat request's tools, when each is a function definition (ATIF's own shape)."""
    tools = _dict(item.get("request")).get("tools")
    if isinstance(tools, list) and tools and all(
            isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
            for t in tools):
        return tools
    return None


def _call(item: JsonObject, index: int) -> ModelCall | None:
    response, request = item.get("response"), item.get("request")
    status = item.get("status", 200)
    if not isinstance(response, dict) or not (isinstance(status, int) and 200 <= status < 300):
        return None
    started = item.get("started")
    call = ModelCall(index, float(started) if isinstance(started, (int, float)) else None,
                     _str(response.get("model") or response.get("modelVersion")))
    if "choices" in response:
        _chat(response, call)
    elif "candidates" in response:
        _gemini(response, call)
    elif isinstance(response.get("output"), list):
        _responses(response, call)
    elif isinstance(response.get("content"), list):
        _messages(response, call)
    else:
        return None
    call.results = _results(request) if isinstance(request, dict) else []
    return call


# ---- answers, per API ----------------------------------------------------------------
def _chat(response: JsonObject, call: ModelCall) -> None:
    choice = _first(response.get("choices"))
    message = _dict(choice.get("message"))
    call.text = text_of(message.get("content"))
    call.reasoning = _str(message.get("reasoning_content") or message.get("reasoning"))
    for tool in _list(message.get("tool_calls")):
        function = _dict(_dict(tool).get("function"))
        call.calls.append(Call(_str(_dict(tool).get("id")), _str(function.get("name")) or "",
                               arguments(function.get("arguments"))))
    usage = _dict(response.get("usage"))
    call.prompt_tokens, call.completion_tokens = _int(usage.get("prompt_tokens")), \
        _int(usage.get("completion_tokens"))
    call.cached_tokens = _int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens"))


def _messages(response: JsonObject, call: ModelCall) -> None:
    """Anthropic Messages: text, thinking and tool_use blocks; input_tokens leaves out the
    cache's, which ATIF's prompt_tokens includes."""
    texts: list[str] = []
    thoughts: list[str] = []
    for block in map(_dict, response["content"]):
        kind = block.get("type")
        if kind == "text":
            texts.append(text_of(block.get("text")))
        elif kind == "thinking":
            thoughts.append(text_of(block.get("thinking")))
        elif kind == "tool_use":
            call.calls.append(Call(_str(block.get("id")), _str(block.get("name")) or "",
                                   arguments(block.get("input"))))
    call.text, call.reasoning = "".join(texts), "".join(thoughts) or None
    usage = _dict(response.get("usage"))
    cached = (_int(usage.get("cache_read_input_tokens")) or 0) + \
        (_int(usage.get("cache_creation_input_tokens")) or 0)
    fresh = _int(usage.get("input_tokens"))
    call.prompt_tokens = None if fresh is None else fresh + cached
    call.completion_tokens = _int(usage.get("output_tokens"))
    call.cached_tokens = _int(usage.get("cache_read_input_tokens"))


def _responses(response: JsonObject, call: ModelCall) -> None:
    """OpenAI Responses: message, reasoning and function_call output items."""
    texts: list[str] = []
    thoughts: list[str] = []
    for item in map(_dict, response["output"]):
        kind = item.get("type")
        if kind == "message":
            texts += [text_of(_dict(p).get("text")) for p in _list(item.get("content"))]
        elif kind == "reasoning":
            thoughts += [text_of(_dict(p).get("text")) for p in _list(item.get("summary"))]
        elif kind == "function_call":
            call.calls.append(Call(_str(item.get("call_id") or item.get("id")),
                                   _str(item.get("name")) or "", arguments(item.get("arguments"))))
    call.text, call.reasoning = "".join(texts), "".join(thoughts) or None
    usage = _dict(response.get("usage"))
    call.prompt_tokens, call.completion_tokens = _int(usage.get("input_tokens")), \
        _int(usage.get("output_tokens"))
    call.cached_tokens = _int(_dict(usage.get("input_tokens_details")).get("cached_tokens"))


def _gemini(response: JsonObject, call: ModelCall) -> None:
    """Gemini generateContent: text parts (thought parts are reasoning) and functionCall
    parts (an id only where the API gave one)."""
    texts: list[str] = []
    thoughts: list[str] = []
    for part in map(_dict, _list(_dict(_first(response.get("candidates")).get("content")).get("parts"))):
        if "functionCall" in part:
            function = _dict(part["functionCall"])
            call.calls.append(Call(_str(function.get("id")), _str(function.get("name")) or "",
                                   arguments(function.get("args"))))
        elif "text" in part:
            (thoughts if part.get("thought") else texts).append(text_of(part["text"]))
    call.text, call.reasoning = "".join(texts), "".join(thoughts) or None
    usage = _dict(response.get("usageMetadata"))
    call.prompt_tokens, call.completion_tokens = _int(usage.get("promptTokenCount")), \
        _int(usage.get("candidatesTokenCount"))
    call.cached_tokens = _int(usage.get("cachedContentTokenCount"))


# ---- the tool results a request sends back -------------------------------------------
def _results(request: JsonObject) -> list[tuple[str, str]]:
    """(call id, output) of every tool result in the request, whichever API's shape."""
    out: list[tuple[str, str]] = []
    for message in map(_dict, _list(request.get("messages"))):
        if message.get("role") == "tool":  # chat
            out.append((str(message.get("tool_call_id")), text_of(message.get("content"))))
        for block in map(_dict, _list(message.get("content"))):  # messages
            if block.get("type") == "tool_result":
                out.append((str(block.get("tool_use_id")), text_of(block.get("content"))))
    for item in map(_dict, _list(request.get("input"))):  # responses
        if item.get("type") == "function_call_output":
            out.append((str(item.get("call_id")), text_of(item.get("output"))))
    for content in map(_dict, _list(request.get("contents"))):  # gemini
        for part in map(_dict, _list(content.get("parts"))):
            if "functionResponse" in part:
                response = _dict(part["functionResponse"])
                out.append((str(response.get("id") or response.get("name")),
                            json.dumps(response.get("response"))))
    return out


# ---- tolerant readers ----------------------------------------------------------------
def text_of(content: object) -> str:
    """A message's text: a string, or the text of its parts (other parts left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(text_of(_dict(p).get("text")) for p in content)
    return "" if content is None else json.dumps(content)


def arguments(value: object) -> JsonObject:
    """A tool call's arguments as an object: JSON text parsed; anything else kept under
    `input` (ATIF wants an object)."""
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except (ValueError, RecursionError):
            return {"input": value}
    return value if isinstance(value, dict) else {"input": value}


def _first(value: object) -> JsonObject:
    return _dict(value[0]) if isinstance(value, list) and value else {}


def _dict(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
