"""Google's Gemini API (`POST /v1beta/models/M:generateContent`, `:streamGenerateContent
?alt=sse`, `:countTokens`): Gemini CLI's API.

Parts map to chat as: text to text (`thought` parts to reasoning_content), `inlineData` /
`fileData` images to image parts, `functionCall` to tool calls, `functionResponse` to tool
messages. Gemini's calls may carry no id: each gets one derived from its place in the
conversation, and a response without an id answers the oldest open call of its name.
Schemas in Gemini's upper-case types (OBJECT, STRING) are lower-cased for chat. Both the
REST API's camelCase and the snake_case fields are read. Finish reasons: STOP <-> stop,
MAX_TOKENS <-> length, SAFETY and the like -> content_filter.
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
    estimate_tokens,
    parse_args,
    sse,
    stable_id,
    text_of,
)
from orchestrator.util import JsonObject

STATUS = {"invalid": (400, "INVALID_ARGUMENT"), "auth": (401, "UNAUTHENTICATED"),
          "budget": (400, "FAILED_PRECONDITION"), "not_found": (404, "NOT_FOUND"),
          "too_large": (413, "INVALID_ARGUMENT"), "rate": (429, "RESOURCE_EXHAUSTED"),
          "upstream": (502, "UNAVAILABLE"), "gone": (499, "CANCELLED"), "unsupported": (501, "UNIMPLEMENTED")}
TO_CHAT_STOP = {"STOP": "stop", "MAX_TOKENS": "length"}
FROM_CHAT_STOP = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}


def field(value: JsonObject, camel: str) -> object:
    """A field by its camelCase name or its snake_case one."""
    if camel in value:
        return value[camel]
    return value.get("".join("_" + c.lower() if c.isupper() else c for c in camel))


def _lower_types(schema: object) -> object:
    """A Gemini (OpenAPI-style) schema with JSON Schema's lower-case type names."""
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def _media_part(data: JsonObject, url: str) -> JsonObject | None:
    mime = str(field(data, "mimeType") or "")
    return {"type": "image_url", "image_url": {"url": url}} if mime.startswith("image/") else None


def _content_messages(role: str, parts: list[Any], turn: int, open_calls: dict[str, list[str]]) -> list[JsonObject]:
    """One Gemini content (a user or model turn) as chat messages."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[JsonObject] = []
    results: list[JsonObject] = []
    media: list[JsonObject] = []
    for k, part in enumerate(map(as_dict, parts)):
        call, reply = as_dict(field(part, "functionCall")), as_dict(field(part, "functionResponse"))
        inline, file = as_dict(field(part, "inlineData")), as_dict(field(part, "fileData"))
        if call:
            name = str(call.get("name", ""))
            call_id = str(call.get("id") or stable_id("call_", turn, k, name))
            open_calls.setdefault(name, []).append(call_id)
            calls.append(chat_tool_call(call_id, name, as_dict(call.get("args"))))
        elif reply:
            name = str(reply.get("name", ""))
            pending = open_calls.get(name) or []
            call_id = str(reply.get("id") or (pending[0] if pending else stable_id("call_", turn, k, name)))
            if call_id in pending:
                pending.remove(call_id)
            response = as_dict(reply.get("response"))
            output = response.get("output") if set(response) == {"output"} else None
            results.append({"role": "tool", "tool_call_id": call_id,
                            "content": output if isinstance(output, str) else json.dumps(response)})
        elif inline and (image := _media_part(inline, f"data:{field(inline, 'mimeType')};base64,"
                                                     f"{inline.get('data', '')}")):
            media.append(image)
        elif file and (image := _media_part(file, str(field(file, "fileUri") or ""))):
            media.append(image)
        elif "text" in part:
            (thoughts if part.get("thought") else texts).append(str(part.get("text") or ""))
    if role == "model":
        message: JsonObject = {"role": "assistant", "content": "".join(texts) or (None if calls else "")}
        if thoughts:
            message["reasoning_content"] = "".join(thoughts)
        if calls:
            message["tool_calls"] = calls
        return [message]
    out = list(results)
    content: str | list[JsonObject] = "\n\n".join(texts)
    if texts and not media:
        out.append({"role": "user", "content": content})
    elif texts or media:
        content = [{"type": "text", "text": t} for t in texts] + media
        out.append({"role": "user", "content": content})
    return out


def _config_of(request: JsonObject) -> JsonObject:
    return as_dict(field(request, "generationConfig"))


class GeminiApi(Api):
    name = "gemini"
    # Google's SDKs read a stream with an anchored `^data: ...` pattern: a comment line
    # would stall them, so a waiting Gemini client hears an empty thought (a valid chunk
    # that adds no text: Gemini CLI keeps thoughts out of the answer and its history)
    keepalive = b'data: {"candidates": [{"content": {"role": "model", "parts": [{"text": "", "thought": true}]}, ' \
                b'"index": 0}]}\n\n'


    def error(self, kind: str, message: str) -> JsonObject:
        code, status = STATUS.get(kind, (400, "INVALID_ARGUMENT"))
        return {"error": {"code": code, "message": message, "status": status}}

    def status(self, kind: str) -> int:
        return STATUS.get(kind, (400, ""))[0]

    def upstream_path(self, route: Route, model: str) -> str:
        if route.op == "count_tokens":
            return f"/models/{model}:countTokens"
        return f"/models/{model}:streamGenerateContent?alt=sse" if route.stream else f"/models/{model}:generateContent"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def set_model(self, request: JsonObject, model: str) -> None:
        """The model is named in the path (upstream_path), never in the body."""

    def streams(self, request: JsonObject, route: Route) -> bool:
        return route.stream

    def choices(self, request: JsonObject) -> int:
        return as_int(field(_config_of(request), "candidateCount")) or 1

    def output_cap(self, request: JsonObject) -> int | None:
        return as_int(field(_config_of(request), "maxOutputTokens"))

    def stream_failure(self, event: JsonObject) -> str | None:
        if "error" not in event:
            return None
        return str(as_dict(event.get("error")).get("message") or event.get("error"))[:500]

    def stream_finished(self, event: JsonObject) -> bool:
        candidate = as_dict((as_list(event.get("candidates")) or [{}])[0])
        return bool(candidate.get("finishReason") or candidate.get("finish_reason"))

    def cap(self, request: JsonObject, left: int) -> None:
        key = "generation_config" if "generation_config" in request and "generationConfig" not in request \
            else "generationConfig"
        config = request[key] = dict(_config_of(request))
        out_key = "max_output_tokens" if "max_output_tokens" in config else "maxOutputTokens"
        per = config[out_key] = capped(config.get(out_key), left)
        count_key = "candidate_count" if "candidate_count" in config else "candidateCount"
        if count_key in config:
            count = as_int(config[count_key]) or 1
            config[count_key] = max(1, min(count, left // per))

    def count_tokens(self, request: JsonObject) -> JsonObject:
        return {"totalTokens": estimate_tokens(request)}

    def to_chat(self, request: JsonObject) -> JsonObject:
        messages: list[JsonObject] = []
        system = as_dict(field(request, "systemInstruction"))
        if system:
            messages.append({"role": "system", "content": text_of(system.get("parts"))})
        open_calls: dict[str, list[str]] = {}
        for turn, content in enumerate(map(as_dict, as_list(request.get("contents")))):
            role = "model" if content.get("role") == "model" else "user"
            messages += _content_messages(role, as_list(content.get("parts")), turn, open_calls)
        chat: JsonObject = {"model": request.get("model"), "messages": messages}
        tools = [{"type": "function", "function": {
                    "name": str(d.get("name", "")), "description": str(d.get("description", "")),
                    "parameters": _lower_types(field(d, "parametersJsonSchema") or d.get("parameters")
                                              or {"type": "object", "properties": {}})}}
                 for tool in map(as_dict, as_list(request.get("tools")))
                 for d in map(as_dict, as_list(field(tool, "functionDeclarations")))]
        if tools:
            chat["tools"] = tools
            calling = as_dict(field(as_dict(field(request, "toolConfig")), "functionCallingConfig"))
            mode, allowed = str(calling.get("mode", "")).upper(), as_list(field(calling, "allowedFunctionNames"))
            if mode == "ANY" and len(allowed) == 1:
                chat["tool_choice"] = {"type": "function", "function": {"name": str(allowed[0])}}
            elif mode in ("ANY", "NONE", "AUTO"):
                chat["tool_choice"] = {"ANY": "required", "NONE": "none", "AUTO": "auto"}[mode]
        config = _config_of(request)
        for ours, theirs in (("maxOutputTokens", "max_tokens"), ("temperature", "temperature"),
                             ("topP", "top_p"), ("stopSequences", "stop"), ("candidateCount", "n")):
            if field(config, ours) is not None:
                chat[theirs] = field(config, ours)
        schema = field(config, "responseJsonSchema") or field(config, "responseSchema")
        if isinstance(schema, dict):  # a side call wanting JSON (Gemini CLI's next-speaker check)
            chat["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "response", "schema": _lower_types(schema)}}
        elif field(config, "responseMimeType") == "application/json":
            chat["response_format"] = {"type": "json_object"}
        return chat

    def from_chat(self, completion: JsonObject, model: str, request: JsonObject) -> JsonObject:
        message, finish = chat_choice(completion)
        parts: list[JsonObject] = []
        if message.get("reasoning_content"):
            parts.append({"text": str(message["reasoning_content"]), "thought": True})
        content = message.get("content")
        text = text_of(content) if isinstance(content, list) else str(content or "")
        if text:
            parts.append({"text": text})
        for call in map(as_dict, as_list(message.get("tool_calls"))):
            function = as_dict(call.get("function"))
            parts.append({"functionCall": {"id": call.get("id"), "name": function.get("name"),
                                           "args": parse_args(function.get("arguments"))}})
        usage = chat_usage(completion)
        return {"candidates": [{"content": {"role": "model", "parts": parts or [{"text": ""}]},
                                "finishReason": FROM_CHAT_STOP.get(str(finish), "STOP"), "index": 0}],
                "usageMetadata": {"promptTokenCount": usage.input, "candidatesTokenCount": usage.output,
                                  "totalTokenCount": usage.input + usage.output},
                "modelVersion": model, "responseId": str(completion.get("id") or "")}

    def live_reasoning(self, live: Live, text: str) -> bytes:
        """Thought parts as they come, before the answer's text (Gemini's order)."""
        live.reasoned = True
        return sse({"candidates": [{"content": {"role": "model", "parts": [{"text": text, "thought": True}]},
                                    "index": 0}], "modelVersion": live.model, "responseId": live.rid})

    def live_text(self, live: Live, text: str) -> bytes:
        live.opened = True
        return sse({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}],
                    "modelVersion": live.model, "responseId": live.rid})

    def live_end(self, live: Live, completion: JsonObject) -> bytes:
        """The last chunk: the parts not streamed (thoughts, function calls), the finish
        reason and usage (a chunk is a whole GenerateContentResponse)."""
        answer = self.from_chat(completion, live.model, live.request)
        candidate = answer["candidates"][0]
        parts = [p for p in candidate["content"]["parts"]
                 if "text" not in p or (not live.reasoned if p.get("thought") else not live.opened)]
        candidate["content"]["parts"] = parts or [{"text": ""}]
        return sse(answer)

    def as_chat(self, response: JsonObject) -> JsonObject:
        candidate = as_dict((as_list(response.get("candidates")) or [{}])[0])
        parts = as_list(as_dict(candidate.get("content")).get("parts"))
        message = _content_messages("model", parts, -1, {})[0]
        finish = "tool_calls" if message.get("tool_calls") else TO_CHAT_STOP.get(
            str(field(candidate, "finishReason")), "content_filter" if field(candidate, "finishReason") else "stop")
        return chat_completion(message, finish, self.usage(response), str(field(response, "modelVersion") or ""),
                               str(field(response, "responseId") or ""))

    def usage(self, response: JsonObject) -> Usage:
        usage = as_dict(field(response, "usageMetadata"))
        output = sum(as_int(field(usage, k)) or 0 for k in ("candidatesTokenCount", "thoughtsTokenCount"))
        return Usage(as_int(field(usage, "promptTokenCount")) or 0, output)

    def collect(self, events: list[JsonObject]) -> JsonObject:
        """Chunks folded: their parts in order (adjacent texts joined), the last finish
        reason and usage."""
        parts: list[JsonObject] = []
        out: JsonObject = {}
        for chunk in events:
            candidate = as_dict((as_list(chunk.get("candidates")) or [{}])[0])
            for part in map(as_dict, as_list(as_dict(candidate.get("content")).get("parts"))):
                same = parts and set(parts[-1]) == set(part) and "text" in part
                if same and parts[-1].get("thought") == part.get("thought"):
                    parts[-1] = {**parts[-1], "text": str(parts[-1]["text"]) + str(part.get("text") or "")}
                else:
                    parts.append(dict(part))
            for key in ("finishReason", "finish_reason"):
                if candidate.get(key):
                    out["finishReason"] = candidate[key]
            for key in ("usageMetadata", "modelVersion", "responseId"):
                if field(chunk, key):
                    out[key] = field(chunk, key)
        candidate_out = {"content": {"role": "model", "parts": parts}, "index": 0}
        if "finishReason" in out:
            candidate_out["finishReason"] = out.pop("finishReason")
        return {"candidates": [candidate_out], **out}


API = GeminiApi()
