"""A scripted model endpoint that speaks each agent CLI's own API natively, written to the
APIs' documented shapes: OpenAI Chat Completions (`/v1/chat/completions`), OpenAI
Responses (`/v1/responses`), Anthropic Messages (`/v1/messages`, `count_tokens`) and
Gemini (`/v1beta/models/M:generateContent`, `:streamGenerateContent?alt=sse`,
`:countTokens`), each streamed (server-sent events) when asked and plain JSON otherwise.

Its script is one episode: while the conversation holds no tool result yet, it answers
with a call of the agent's own shell tool (found among the tools the request offers) that
runs `command`; after a tool result, a short closing text. A request offering no tools (a
title, a summary, a routing side call) gets a short text. Every request is kept (path,
headers, body) for the test to read."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DONE_TEXT = "Done: the file is written."

# the agents' shell tools: name -> how the command goes into its arguments
SHELL_TOOLS = {
    "Bash": lambda c: {"command": c, "description": "write the file"},  # Claude Code
    "run_shell_command": lambda c: {"command": c, "description": "write the file"},  # Gemini, Qwen
    "shell": lambda c: {"command": ["bash", "-lc", c]},  # Codex (function tool)
    "exec_command": lambda c: {"cmd": c},  # Codex (unified exec)
    "shell_command": lambda c: {"command": c},  # Codex (string form)
    "bash": lambda c: {"command": c},
}


class Scripted:
    """Serve on 127.0.0.1 (or `host`) until stop(); `requests` is what arrived."""

    def __init__(self, command: str, host: str = "127.0.0.1", key: str | None = None):
        self.command, self.key = command, key
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802  (model listings)
                scripted.keep(self, None)
                self.send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}],
                                     "models": []})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode(errors="replace")}
                scripted.keep(self, body)
                if scripted.key is not None and scripted.key not in (
                        self.headers.get("x-api-key"), self.headers.get("x-goog-api-key"),
                        (self.headers.get("Authorization") or "").removeprefix("Bearer ")):
                    self.send_json(401, {"error": {"message": "bad key"}})
                    return
                path = self.path.split("?")[0]
                try:
                    if path.endswith("/chat/completions"):
                        self.chat(body)
                    elif path.endswith("/responses"):
                        self.openai_responses(body)
                    elif path.endswith("/messages/count_tokens"):
                        self.send_json(200, {"input_tokens": 100})
                    elif path.endswith("/messages"):
                        self.messages(body)
                    elif path.endswith(":countTokens"):
                        self.send_json(200, {"totalTokens": 100})
                    elif ":generateContent" in path or ":streamGenerateContent" in path:
                        self.gemini(body, stream=":streamGenerateContent" in path)
                    else:
                        self.send_json(404, {"error": {"message": f"no route {path}"}})
                except (BrokenPipeError, ConnectionResetError):
                    pass

            # ---- replies --------------------------------------------------------------
            def send_json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def send_events(self, events: list[tuple[str | None, dict | str]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, data in events:
                    text = data if isinstance(data, str) else json.dumps(data)
                    self.wfile.write(((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode())
                    self.wfile.flush()
                self.close_connection = True

            def chat(self, body: dict) -> None:
                call = scripted.next_call(_chat_tools(body), _chat_done(body))
                message: dict = {"role": "assistant", "content": None if call else DONE_TEXT}
                if call:
                    message["tool_calls"] = [{"id": call["id"], "type": "function", "function": {
                        "name": call["name"], "arguments": json.dumps(call["args"])}}]
                usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
                finish = "tool_calls" if call else "stop"
                if not body.get("stream"):
                    self.send_json(200, {"id": "chatcmpl-1", "object": "chat.completion",
                                         "created": int(time.time()), "model": body.get("model"),
                                         "choices": [{"index": 0, "message": message,
                                                      "finish_reason": finish}], "usage": usage})
                    return
                base = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": body.get("model")}
                delta: dict = {"role": "assistant", "content": message["content"]}
                if call:
                    delta["tool_calls"] = [{"index": 0, **message["tool_calls"][0]}]
                self.send_events([
                    (None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
                    (None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                            "usage": usage}),
                    (None, "[DONE]")])

            def messages(self, body: dict) -> None:
                tools = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
                call = scripted.next_call(tools, _messages_done(body))
                block = ({"type": "tool_use", "id": f"toolu_{call['id']}", "name": call["name"],
                          "input": call["args"]} if call else {"type": "text", "text": DONE_TEXT})
                stop = "tool_use" if call else "end_turn"
                message = {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
                           "model": body.get("model"), "content": [block], "stop_reason": stop,
                           "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 10}}
                if not body.get("stream"):
                    self.send_json(200, message)
                    return
                start = {**message, "content": [], "stop_reason": None,
                         "usage": {"input_tokens": 100, "output_tokens": 1}}
                if call:
                    first = {**block, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(call["args"])}
                else:
                    first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": DONE_TEXT}
                self.send_events([
                    ("message_start", {"type": "message_start", "message": start}),
                    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": first}),
                    ("ping", {"type": "ping"}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta",
                                       "delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": {"output_tokens": 10}}),
                    ("message_stop", {"type": "message_stop"})])

            def openai_responses(self, body: dict) -> None:
                tools = [t.get("name") or t.get("type") for t in body.get("tools") or [] if isinstance(t, dict)]
                call = scripted.next_call(tools, _responses_done(body))
                rid = f"resp_{uuid.uuid4().hex[:12]}"
                if call:
                    item = {"type": "function_call", "id": f"fc_{call['id']}", "call_id": f"call_{call['id']}",
                            "name": call["name"], "arguments": json.dumps(call["args"]), "status": "completed"}
                else:
                    item = {"type": "message", "id": f"msg_{uuid.uuid4().hex[:12]}", "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": DONE_TEXT, "annotations": []}]}
                usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": 110}
                response = {"id": rid, "object": "response", "created_at": int(time.time()),
                            "status": "completed", "model": body.get("model"), "output": [item],
                            "usage": usage}
                if not body.get("stream"):
                    self.send_json(200, response)
                    return
                events: list[tuple[str | None, dict | str]] = [
                    ("response.created", {"type": "response.created", "sequence_number": 0,
                                          "response": {**response, "status": "in_progress", "output": []}}),
                    ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1,
                                                    "output_index": 0, "item": {**item, "status": "in_progress"}})]
                if not call:
                    events.append(("response.output_text.delta", {
                        "type": "response.output_text.delta", "sequence_number": 2, "item_id": item["id"],
                        "output_index": 0, "content_index": 0, "delta": DONE_TEXT}))
                events += [
                    ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 3,
                                                   "output_index": 0, "item": item}),
                    ("response.completed", {"type": "response.completed", "sequence_number": 4,
                                            "response": response})]
                self.send_events(events)

            def gemini(self, body: dict, stream: bool) -> None:
                tools = [d.get("name") for t in body.get("tools") or [] if isinstance(t, dict)
                         for d in t.get("functionDeclarations") or t.get("function_declarations") or []
                         if isinstance(d, dict)]
                call = scripted.next_call(tools, _gemini_done(body))
                part = ({"functionCall": {"name": call["name"], "args": call["args"]}} if call
                        else {"text": DONE_TEXT})
                answer = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                          "finishReason": "STOP", "index": 0}],
                          "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10,
                                            "totalTokenCount": 110},
                          "modelVersion": "scripted"}
                if stream:
                    self.send_events([(None, answer)])
                else:
                    self.send_json(200, answer)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Scripted:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def keep(self, handler: BaseHTTPRequestHandler, body: dict | None) -> None:
        with self.lock:
            self.requests.append({"method": handler.command, "path": handler.path,
                                  "headers": dict(handler.headers.items()), "body": body})

    def next_call(self, tools: list, done: bool) -> dict | None:
        """The shell call to make now, or None (a closing text)."""
        if done:
            return None
        for name in SHELL_TOOLS:
            if name in tools:
                return {"id": uuid.uuid4().hex[:12], "name": name, "args": SHELL_TOOLS[name](self.command)}
        return None


def _chat_tools(body: dict) -> list:
    return [(t.get("function") or {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]


def _chat_done(body: dict) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "tool" for m in body.get("messages") or [])


def _messages_done(body: dict) -> bool:
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in m["content"])
               for m in body.get("messages") or [])


def _responses_done(body: dict) -> bool:
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output",
                                                  "local_shell_call_output") for i in items)


def _gemini_done(body: dict) -> bool:
    return any(isinstance(p, dict) and ("functionResponse" in p or "function_response" in p)
               for c in body.get("contents") or [] if isinstance(c, dict)
               for p in c.get("parts") or [])
