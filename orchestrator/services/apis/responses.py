"""OpenAI Responses (`POST /v1/responses`): Codex CLI's API.

Input items map to chat as: messages to messages (developer to system), `function_call`
items to the previous assistant message's tool calls, `*_output` items to tool messages.
Tools: `function` as is; `custom` (free-form input, e.g. Codex's apply_patch) as a function
of one string `input`; `local_shell` as a function of `command` (a list); the hosted tools
(web search and the like) are left out. An answer's tool calls go back as the item type
the request declared for that name. No server-side state: `previous_response_id` and
`item_reference` inputs are refused.
"""

from __future__ import annotations

from typing import Any

from orchestrator.services.apis.chat import openai_error
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
    leading_system_merged,
    parse_args,
    sse,
    stable_id,
    text_of,
)
from orchestrator.util import JsonObject

STRING_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
SHELL_INPUT = {"type": "object", "properties": {
    "command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"},
    "timeout_ms": {"type": "number"}}, "required": ["command"]}
EMPTY_PART = {"type": "output_text", "text": "", "annotations": []}
OUTPUT_ITEMS = {"function_call_output", "custom_tool_call_output", "local_shell_call_output"}


def _user_content(content: object) -> str | list[JsonObject]:
    if not isinstance(content, list):
        return str(content or "")
    parts: list[JsonObject] = []
    for part in map(as_dict, content):
        if part.get("type") in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif part.get("type") == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": str(part["image_url"])}})
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _call_of(item: JsonObject) -> JsonObject:
    """A function, custom or local-shell call item as a chat tool call."""
    kind, call_id = item.get("type"), str(item.get("call_id") or item.get("id") or "")
    if kind == "custom_tool_call":
        return chat_tool_call(call_id, str(item.get("name", "")), {"input": str(item.get("input", ""))})
    if kind == "local_shell_call":
        return chat_tool_call(call_id, "local_shell", as_dict(item.get("action")))
    return chat_tool_call(call_id, str(item.get("name", "")), str(item.get("arguments") or "{}"))


def _chat_tools(tools: list[Any]) -> list[JsonObject]:
    out = []
    for tool in map(as_dict, tools):
        kind, name = tool.get("type"), str(tool.get("name", ""))
        description = str(tool.get("description", ""))
        if kind == "function":
            parameters = as_dict(tool.get("parameters")) or {"type": "object", "properties": {}}
        elif kind == "custom":
            grammar = as_dict(tool.get("format")).get("definition")
            description += f"\nThe input follows this grammar:\n{grammar}" if grammar else ""
            parameters = STRING_INPUT
        elif kind == "local_shell":
            name, description, parameters = "local_shell", "Run a command (argv list).", SHELL_INPUT
        else:
            continue
        out.append({"type": "function", "function": {"name": name, "description": description,
                                                     "parameters": parameters}})
    return out


def _tool_kinds(request: JsonObject) -> dict[str, str]:
    """Tool name -> the item type its calls come back as."""
    kinds = {}
    for tool in map(as_dict, as_list(request.get("tools"))):
        if tool.get("type") == "custom":
            kinds[str(tool.get("name", ""))] = "custom_tool_call"
        elif tool.get("type") == "local_shell":
            kinds["local_shell"] = "local_shell_call"
    return kinds


def output_item(call: JsonObject, kinds: dict[str, str]) -> JsonObject:
    function = as_dict(call.get("function"))
    name, call_id = str(function.get("name", "")), str(call.get("id") or stable_id("call_", function))
    kind = kinds.get(name, "function_call")
    item = {"type": kind, "id": "fc_" + call_id[-24:], "call_id": call_id, "status": "completed"}
    args = function.get("arguments") or "{}"
    if kind == "custom_tool_call":
        return {**item, "name": name, "input": str(parse_args(args).get("input", ""))}
    if kind == "local_shell_call":
        return {**item, "action": {"type": "exec", **parse_args(args)}}
    return {**item, "name": name, "arguments": str(args)}


class ResponsesApi(Api):
    name = "responses"

    def error(self, kind: str, message: str) -> JsonObject:
        return openai_error(kind, message)

    def stream_error(self, kind: str, message: str) -> bytes:
        error = openai_error(kind, message)["error"]
        return sse({"type": "response.failed", "response": {
            "object": "response", "status": "failed", "output": [],
            "error": {"code": error["code"], "message": message}}}, "response.failed")

    def upstream_path(self, route: Route, model: str) -> str:
        return "/responses"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def stateful(self, request: JsonObject) -> str | None:
        for field in ("previous_response_id", "conversation"):
            if request.get(field):
                return (f"{field}: orchestra's model proxy keeps no server-side state; send the "
                        "whole conversation in `input` (store: false)")
        if any(as_dict(i).get("type") == "item_reference" for i in as_list(request.get("input"))):
            return "input: an item_reference needs stored items; orchestra's model proxy keeps none"
        return None

    def cap(self, request: JsonObject, left: int) -> None:
        request["max_output_tokens"] = capped(request.get("max_output_tokens"), left)

    def output_cap(self, request: JsonObject) -> int | None:
        return as_int(request.get("max_output_tokens"))

    def stream_failure(self, event: JsonObject) -> str | None:
        kind = event.get("type")
        if kind == "error":
            return str(event.get("message") or as_dict(event.get("error")).get("message") or "error")[:500]
        if kind == "response.failed":
            error = as_dict(as_dict(event.get("response")).get("error"))
            return str(error.get("message") or "response.failed")[:500]
        return None

    def stream_finished(self, event: JsonObject) -> bool:
        return event.get("type") in ("response.completed", "response.incomplete")

    def to_chat(self, request: JsonObject) -> JsonObject:
        messages: list[JsonObject] = []
        if request.get("instructions"):
            messages.append({"role": "system", "content": text_of(request["instructions"])})
        items = request.get("input")
        for item in as_list(items) if isinstance(items, list) else [{"role": "user", "content": items}]:
            item = as_dict(item)
            kind, role = item.get("type", "message"), item.get("role")
            if kind == "message" and role in ("system", "developer"):
                messages.append({"role": "system", "content": text_of(item.get("content"))})
            elif kind == "message" and role == "assistant":
                messages.append({"role": "assistant", "content": text_of(item.get("content"))})
            elif kind == "message":
                messages.append({"role": "user", "content": _user_content(item.get("content"))})
            elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
                if not messages or messages[-1]["role"] != "assistant":
                    messages.append({"role": "assistant", "content": None})
                messages[-1].setdefault("tool_calls", []).append(_call_of(item))
            elif kind in OUTPUT_ITEMS:
                output = item.get("output")
                messages.append({"role": "tool", "tool_call_id": str(item.get("call_id", "")),
                                 "content": output if isinstance(output, str) else text_of(output)})
        chat: JsonObject = {"model": request.get("model"), "messages": leading_system_merged(messages)}
        tools = _chat_tools(as_list(request.get("tools")))
        if tools:
            chat["tools"] = tools
            choice = request.get("tool_choice")
            if choice in ("auto", "none", "required"):
                chat["tool_choice"] = choice
            elif as_dict(choice).get("name"):
                chat["tool_choice"] = {"type": "function", "function": {"name": str(as_dict(choice)["name"])}}
            if isinstance(request.get("parallel_tool_calls"), bool):
                chat["parallel_tool_calls"] = request["parallel_tool_calls"]
        if as_int(request.get("max_output_tokens")):
            chat["max_tokens"] = request["max_output_tokens"]
        for field in ("temperature", "top_p"):
            if request.get(field) is not None:
                chat[field] = request[field]
        fmt = as_dict(as_dict(request.get("text")).get("format"))
        if fmt.get("type") == "json_schema":
            chat["response_format"] = {"type": "json_schema", "json_schema": {
                k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}}
        elif fmt.get("type") == "json_object":
            chat["response_format"] = {"type": "json_object"}
        return chat

    def from_chat(self, completion: JsonObject, model: str, request: JsonObject) -> JsonObject:
        message, finish = chat_choice(completion)
        rid = str(completion.get("id") or stable_id("", message))[-24:]
        output: list[JsonObject] = []
        if message.get("reasoning_content"):
            output.append({"type": "reasoning", "id": "rs_" + rid, "summary": [
                {"type": "summary_text", "text": str(message["reasoning_content"])}]})
        text = text_of(message.get("content")) if isinstance(message.get("content"), list) \
            else str(message.get("content") or "")
        if text:
            output.append({"type": "message", "id": "msg_" + rid, "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        kinds = _tool_kinds(request)
        output += [output_item(as_dict(call), kinds) for call in as_list(message.get("tool_calls"))]
        usage = chat_usage(completion)
        cut = finish == "length"
        return {"id": "resp_" + rid, "object": "response", "created_at": completion.get("created", 0),
                "status": "incomplete" if cut else "completed", "model": model, "output": output,
                "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
                "usage": {"input_tokens": usage.input, "output_tokens": usage.output,
                          "total_tokens": usage.input + usage.output,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}

    def live_start(self, live: Live) -> bytes:
        response = {"id": "resp_" + live.rid[-24:], "object": "response", "created_at": 0, "status": "in_progress",
                    "model": live.model, "output": []}
        return self._event(live, "response.created", response=response)

    def live_reasoning(self, live: Live, text: str) -> bytes:
        """A reasoning item at output_index 0, its summary text as it comes (before the
        message, as the API orders them); closed when the text begins or at the end."""
        if live.opened:  # reasoning after the answer began: given whole at the end
            return b""
        head, out = {"output_index": 0, "item_id": "rs_" + live.rid[-24:]}, b""
        if not live.reasoned:
            live.reasoned = True
            out = self._event(live, "response.output_item.added", output_index=0,
                              item={"type": "reasoning", "id": head["item_id"], "summary": []}) + self._event(
                live, "response.reasoning_summary_part.added", **head, summary_index=0,
                part={"type": "summary_text", "text": ""})
        live.thought.append(text)
        return out + self._event(live, "response.reasoning_summary_text.delta", **head, summary_index=0, delta=text)

    def _reasoning_done(self, live: Live) -> bytes:
        if not live.reasoned or live.closed:
            return b""
        live.closed = True
        head, text = {"output_index": 0, "item_id": "rs_" + live.rid[-24:]}, "".join(live.thought)
        part = {"type": "summary_text", "text": text}
        return (self._event(live, "response.reasoning_summary_text.done", **head, summary_index=0, text=text)
                + self._event(live, "response.reasoning_summary_part.done", **head, summary_index=0, part=part)
                + self._event(live, "response.output_item.done", output_index=0,
                              item={"type": "reasoning", "id": head["item_id"], "summary": [part]}))

    def live_text(self, live: Live, text: str) -> bytes:
        index = 1 if live.reasoned else 0
        head, out = {"output_index": index, "item_id": "msg_" + live.rid[-24:]}, b""
        if not live.opened:
            out = self._reasoning_done(live)
            live.opened = True
            item = {"type": "message", "id": head["item_id"], "status": "in_progress", "role": "assistant",
                    "content": []}
            out += self._event(live, "response.output_item.added", output_index=index, item=item) + self._event(
                live, "response.content_part.added", **head, content_index=0, part=EMPTY_PART)
        return out + self._event(live, "response.output_text.delta", **head, content_index=0, delta=text)

    def live_end(self, live: Live, completion: JsonObject) -> bytes:
        """The reasoning and message items done, each other item (its arguments as one
        delta) added and done, then response.completed (or .incomplete) with the whole
        response, its output in the order streamed (reasoning, message, calls)."""
        response = self.from_chat(completion, live.model, live.request)
        items = response["output"]
        streamed = [i for i in items if (i["type"] == "reasoning" and live.reasoned)
                    or (i["type"] == "message" and live.opened)]
        response["output"] = streamed + [i for i in items if i not in streamed]
        out = [self._reasoning_done(live)]
        message = [i for i in streamed if i["type"] == "message"]
        if message:
            index = streamed.index(message[0])
            head, text = {"output_index": index, "item_id": message[0]["id"]}, message[0]["content"][0]["text"]
            out += [self._event(live, "response.output_text.done", **head, content_index=0, text=text),
                    self._event(live, "response.content_part.done", **head, content_index=0,
                                part={**EMPTY_PART, "text": text}),
                    self._event(live, "response.output_item.done", output_index=index, item=message[0])]
        for index, item in enumerate(response["output"][len(streamed):], len(streamed)):
            head = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "function_call":
                out += [self._event(live, "response.output_item.added", output_index=index,
                                    item={**item, "status": "in_progress", "arguments": ""}),
                        self._event(live, "response.function_call_arguments.delta", **head, delta=item["arguments"]),
                        self._event(live, "response.function_call_arguments.done", **head,
                                    arguments=item["arguments"])]
            else:
                out.append(self._event(live, "response.output_item.added", output_index=index, item=item))
            out.append(self._event(live, "response.output_item.done", output_index=index, item=item))
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return b"".join(out) + self._event(live, kind, response=response)

    @staticmethod
    def _event(live: Live, kind: str, **fields: object) -> bytes:
        return sse({"type": kind, "sequence_number": live.next_seq(), **fields}, kind)

    def as_chat(self, response: JsonObject) -> JsonObject:
        texts, reasoning, calls = [], [], []
        for item in map(as_dict, as_list(response.get("output"))):
            kind = item.get("type")
            if kind == "message":
                texts.append(text_of(item.get("content")))
            elif kind == "reasoning":
                reasoning.append(text_of(item.get("summary")))
            elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
                calls.append(_call_of(item))
        message: JsonObject = {"role": "assistant", "content": "".join(texts) or None}
        if any(reasoning):
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = calls
        incomplete = as_dict(response.get("incomplete_details")).get("reason") == "max_output_tokens"
        finish = "tool_calls" if calls else "length" if incomplete else "stop"
        return chat_completion(message, finish, self.usage(response), str(response.get("model", "")),
                               str(response.get("id", "")))

    def usage(self, response: JsonObject) -> Usage:
        usage = as_dict(response.get("usage"))
        return Usage(as_int(usage.get("input_tokens")) or 0, as_int(usage.get("output_tokens")) or 0)

    def collect(self, events: list[JsonObject]) -> JsonObject:
        """The stream's last whole response (completed, incomplete or failed), else its
        finished output items."""
        items: list[JsonObject] = []
        for event in events:
            if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                return as_dict(event.get("response"))
            if event.get("type") == "response.output_item.done":
                items.append(as_dict(event.get("item")))
        return {"object": "response", "status": "incomplete", "output": items}


API = ResponsesApi()
