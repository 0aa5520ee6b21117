"""The model APIs the proxy speaks, one module each, over one interface (common.Api):

- `chat`: OpenAI Chat Completions, the hub the others translate through;
- `responses`: OpenAI Responses (Codex CLI);
- `messages`: Anthropic Messages (Claude Code);
- `gemini`: Google's generateContent (Gemini CLI).

`route(method, path)` names the API and operation a call's path asks for, at the paths the
agents' own clients use on the proxy's address: `/v1/...` for the OpenAI and Anthropic
APIs (also without the `/v1`: a client given a base URL that already ends in it) and
`/v1beta/models/M:op` (or `/v1/models/M:op`) for Gemini's. `guess(path, headers)` picks the
API whose error shape answers a call that matches no route.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

from orchestrator.services.apis import chat, gemini, messages, responses
from orchestrator.services.apis.common import ERROR_STATUS, Api, Route, Usage

APIS: dict[str, Api] = {api.name: api for api in (chat.API, responses.API, messages.API, gemini.API)}
NAMES = tuple(APIS)

_PATHS = {"/chat/completions": (chat.API, "generate"), "/responses": (responses.API, "generate"),
          "/messages": (messages.API, "generate"), "/messages/count_tokens": (messages.API, "count_tokens"),
          "/models": (chat.API, "models")}
_GEMINI = re.compile(r"^(?:/v1beta|/v1|/v1alpha)?/models/([^/:]+):(generateContent|streamGenerateContent|countTokens)$")


def route(method: str, path: str) -> Route | None:
    path = urllib.parse.urlsplit(path).path.rstrip("/")
    if method == "POST" and (match := _GEMINI.match(path)):
        model, op = urllib.parse.unquote(match.group(1)), match.group(2)
        return Route(gemini.API, "count_tokens" if op == "countTokens" else "generate", model=model,
                     stream=op == "streamGenerateContent")
    tail = path[3:] if path.startswith("/v1/") else path
    api, op = _PATHS.get(tail, (None, ""))
    if api is None or (method == "GET") != (op == "models"):
        return None
    return Route(api, op)


def guess(path: str, headers: Iterable[str]) -> Api:
    """`headers`: the request's header names."""
    lowered = {k.lower() for k in headers}
    if "x-goog-api-key" in lowered or path.startswith("/v1beta") or "key=" in path or ":generate" in path:
        return gemini.API
    if "x-api-key" in lowered or "anthropic-version" in lowered or "/messages" in path:
        return messages.API
    return chat.API


__all__ = ["APIS", "ERROR_STATUS", "NAMES", "Api", "Route", "Usage", "guess", "route"]
