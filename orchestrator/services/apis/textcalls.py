"""Tool calls a server left in the answer's text, as chat `tool_calls` (an endpoint's
`tool_calls: from_text`).

Some OpenAI-compatible servers do not parse the tool calls a model writes: llama-cpp-python's
server with a GGUF's own chat template returns Qwen2.5's `<tool_call>{...}</tool_call>` (or
a ```json block, or a bare object) as text, where llama.cpp's own server with `--jinja`
would return `tool_calls`. An agent CLI then sees prose, never a call. With the endpoint's
`tool_calls: from_text`, a whole chat completion whose message has no tool_calls, in answer
to a request that offered tools, has each call written in one of those forms taken out of
its text, when its name is one of the tools offered (anything else stays text: a model that
names a tool that does not exist has made no call). Pure functions; the exchange record
keeps what the upstream said.
"""

from __future__ import annotations

import json
import re

from orchestrator.services.apis.common import as_dict, as_list, stable_id
from orchestrator.util import JsonObject

TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
FENCED = re.compile(r"```(?:json|tool_call)?\s*\n(.*?)\n?```", re.S)
MAX_TEXT = 1 << 20  # an answer longer than this is left as it came (the scan is linear anyway)


def _offered_tools(request: JsonObject) -> set[str]:
    """The function names a chat request offers."""
    return {str(as_dict(t.get("function")).get("name") or "") for t in map(as_dict, as_list(request.get("tools")))}


def _call_of(text: str, names: set[str]) -> JsonObject | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    value = as_dict(value)
    name = value.get("name")
    arguments = value.get("arguments", value.get("parameters", {}))
    if not isinstance(name, str) or name not in names or not isinstance(arguments, (dict, str)):
        return None
    return {"name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}


def calls_in_text(text: str, names: set[str]) -> tuple[list[JsonObject], str]:
    """The tool calls written in `text` (tagged, fenced or the whole text an object) naming
    an offered tool, and the text left once they are taken out."""
    if not names or not text or len(text) > MAX_TEXT:
        return [], text
    for pattern in (TAGGED, FENCED):
        found = [(m, _call_of(m.group(1), names)) for m in pattern.finditer(text)]
        calls = [c for _, c in found if c is not None]
        if calls:
            rest = text
            for match, call in found:
                if call is not None:
                    rest = rest.replace(match.group(0), "", 1)
            return calls, rest.strip()
    whole = _call_of(text.strip(), names)
    return ([whole], "") if whole is not None else ([], text)


def with_text_calls(completion: JsonObject, request: JsonObject) -> bool:
    """Move the tool calls in a whole completion's text into its tool_calls (True: it had
    some). Left alone: a completion with tool_calls already, or a request offering none."""
    names = _offered_tools(request)
    choice = as_dict((as_list(completion.get("choices")) or [{}])[0])
    message = as_dict(choice.get("message"))
    content = message.get("content")
    if not names or message.get("tool_calls") or not isinstance(content, str):
        return False
    calls, rest = calls_in_text(content, names)
    if not calls:
        return False
    message["content"] = rest or None
    message["tool_calls"] = [{"id": stable_id("call_", completion.get("id"), i, c), "type": "function",
                              "function": c} for i, c in enumerate(calls)]
    choice["finish_reason"] = "tool_calls"
    return True
