"""The model proxy's conformance suite: each agent API (Chat Completions, Responses,
Messages, Gemini), streaming and not, over real HTTP on loopback, against a scripted
upstream that answers in each API's documented shapes (apis.scripted)."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse

import pytest

from orchestrator.models.manifest import Budget
from orchestrator.services.apis.scripted import Script, ScriptedUpstream
from orchestrator.services.exchanges import read_exchanges, trajectory_from_exchanges
from orchestrator.services.proxy import ModelProxy

KEY = "sk-upstream-SECRET-42"
ALL = ("chat", "responses", "messages", "gemini")
HEADERS = {"chat": "authorization", "responses": "authorization", "messages": "x-api-key",
           "gemini": "x-goog-api-key"}


# ---- a client for each API, as the agents' own clients call --------------------------------
def path_of(api: str, stream: bool, model: str = "gemini-2.5-pro") -> str:
    if api == "gemini":
        return f"/v1beta/models/{model}:" + ("streamGenerateContent?alt=sse" if stream else "generateContent")
    return {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[api]


def auth(api: str, token: str) -> dict[str, str]:
    if api == "messages":
        return {"x-api-key": token, "anthropic-version": "2023-06-01"}
    if api == "gemini":
        return {"x-goog-api-key": token}
    return {"Authorization": f"Bearer {token}"}


def first_turn(api: str, stream: bool, **extra: object) -> dict:
    """A request asking for the task, with one tool offered, in each API's shape."""
    schema = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    if api == "chat":
        body: dict = {"model": "gpt-x", "messages": [{"role": "system", "content": "be brief"},
                                                     {"role": "user", "content": "make hello.txt"}],
                      "tools": [{"type": "function", "function": {"name": "shell", "parameters": schema}}]}
    elif api == "responses":
        body = {"model": "gpt-5-codex", "instructions": "be brief", "store": False,
                "input": [{"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": "make hello.txt"}]}],
                "tools": [{"type": "function", "name": "shell", "parameters": schema}]}
    elif api == "messages":
        body = {"model": "claude-sonnet-4", "max_tokens": 1024, "system": [{"type": "text", "text": "be brief"}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": "make hello.txt"}]}],
                "tools": [{"name": "shell", "input_schema": schema}]}
    else:
        body = {"systemInstruction": {"parts": [{"text": "be brief"}]},
                "contents": [{"role": "user", "parts": [{"text": "make hello.txt"}]}],
                "tools": [{"functionDeclarations": [{"name": "shell", "parametersJsonSchema": schema}]}]}
    if stream and api != "gemini":
        body["stream"] = True
    return {**body, **extra}


def second_turn(api: str, body: dict, call: dict, output: str) -> dict:
    """The first request continued: the model's tool call and the tool's result."""
    body = json.loads(json.dumps(body))
    if api == "chat":
        body["messages"] += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": json.dumps(
                call["args"])}}]}, {"role": "tool", "tool_call_id": call["id"], "content": output}]
    elif api == "responses":
        body["input"] += [{"type": "function_call", "call_id": call["id"], "name": call["name"],
                           "arguments": json.dumps(call["args"])},
                          {"type": "function_call_output", "call_id": call["id"], "output": output}]
    elif api == "messages":
        body["messages"] += [{"role": "assistant", "content": [{"type": "tool_use", "id": call["id"],
                                                                "name": call["name"], "input": call["args"]}]},
                             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
                                                           "content": [{"type": "text", "text": output}]}]}]
    else:
        body["contents"] += [{"role": "model", "parts": [{"functionCall": {"name": call["name"],
                                                                           "args": call["args"]}}]},
                             {"role": "user", "parts": [{"functionResponse": {
                                 "name": call["name"], "response": {"output": output}}}]}]
    return body


def send(proxy: ModelProxy, api: str, path: str, body: object, headers: dict | None = None) -> tuple[int, dict, list]:
    """(status, JSON body or {}, decoded SSE events with their `event:` names)."""
    url = urllib.parse.urlsplit(proxy.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json",
                                      **(auth(api, proxy.token) if headers is None else headers)})
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    if "event-stream" not in (response.getheader("Content-Type") or ""):
        return response.status, json.loads(raw or b"{}"), []
    return response.status, {}, events(raw)


def events(raw: bytes) -> list[tuple[str | None, object]]:
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, None
        for line in block.decode().split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
        if data is not None:
            out.append((name, data if data == "[DONE]" else json.loads(data)))
        elif block.startswith(b":"):
            out.append(("comment", block.decode()))
    return out


# ---- reading each API's answer back ------------------------------------------------------------
def answer_of(api: str, body: dict, evs: list) -> tuple[list[dict], str, str]:
    """(tool calls as {id, name, args}, text, stop reason) of an answer, streamed or not."""
    if evs:
        body = fold(api, evs)
    if api == "chat":
        choice = body["choices"][0]
        calls = [{"id": c["id"], "name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}
                 for c in choice["message"].get("tool_calls") or []]
        return calls, choice["message"].get("content") or "", choice["finish_reason"]
    if api == "responses":
        calls = [{"id": i["call_id"], "name": i["name"], "args": json.loads(i["arguments"])}
                 for i in body["output"] if i["type"] == "function_call"]
        text = "".join(c["text"] for i in body["output"] if i["type"] == "message" for c in i["content"])
        return calls, text, body["status"]
    if api == "messages":
        calls = [{"id": b["id"], "name": b["name"], "args": b["input"]} for b in body["content"]
                 if b["type"] == "tool_use"]
        return calls, "".join(b.get("text", "") for b in body["content"]), body["stop_reason"]
    candidate = body["candidates"][0]
    parts = candidate["content"]["parts"]
    calls = [{"id": p["functionCall"].get("id"), "name": p["functionCall"]["name"], "args": p["functionCall"]["args"]}
             for p in parts if "functionCall" in p]
    return calls, "".join(p.get("text", "") for p in parts), candidate["finishReason"]


def fold(api: str, evs: list) -> dict:
    """A client's view of a stream: each API's events folded as its SDK does."""
    data = [d for name, d in evs if name != "comment" and d != "[DONE]"]
    if api == "chat":
        text, calls, finish = "", {}, None
        for chunk in data:
            for choice in chunk["choices"]:
                finish = choice.get("finish_reason") or finish
                text += choice["delta"].get("content") or ""
                for piece in choice["delta"].get("tool_calls") or []:
                    call = calls.setdefault(piece["index"], {"id": "", "function": {"name": "", "arguments": ""}})
                    call["id"] = piece.get("id") or call["id"]
                    call["function"]["name"] += piece.get("function", {}).get("name") or ""
                    call["function"]["arguments"] += piece.get("function", {}).get("arguments") or ""
        return {"choices": [{"message": {"content": text, "tool_calls": list(calls.values())},
                             "finish_reason": finish}]}
    if api == "responses":
        assert [name for name, _ in evs if name != "comment"][-1] == "response.completed"
        return data[-1]["response"]
    if api == "messages":
        names = [name for name, _ in evs if name not in ("comment", "ping")]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        blocks, partial, stop = {}, {}, None
        for event in data:
            if event["type"] == "content_block_start":
                blocks[event["index"]] = dict(event["content_block"])
            elif event["type"] == "content_block_delta":
                delta = event["delta"]
                if delta["type"] == "text_delta":
                    blocks[event["index"]]["text"] += delta["text"]
                else:
                    partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
            elif event["type"] == "message_delta":
                stop = event["delta"]["stop_reason"]
        for index, text in partial.items():
            blocks[index]["input"] = json.loads(text)
        return {"content": [blocks[i] for i in sorted(blocks)], "stop_reason": stop}
    parts, finish = [], None
    for chunk in data:
        candidate = chunk["candidates"][0]
        parts += candidate["content"]["parts"]
        finish = candidate.get("finishReason") or finish
    return {"candidates": [{"content": {"parts": parts}, "finishReason": finish}]}


# ---- fixtures ------------------------------------------------------------------------------------
@pytest.fixture()
def stack(tmp_path):
    """start(apis=..., script=..., **proxy options) -> (proxy, upstream); all stopped after."""
    started: list = []

    def start(apis=("chat",), script: Script | None = None, **options) -> tuple[ModelProxy, ScriptedUpstream]:
        upstream = ScriptedUpstream(script).start()
        started.append(upstream)
        options.setdefault("record", tmp_path / "model" / "exchanges.jsonl")
        proxy = ModelProxy("127.0.0.1", upstream.url + "/v1", "trial-model", KEY, options.pop("budget", Budget()),
                           {"input": 1.0, "output": 2.0}, deadline=time.time() + 60, backoff_max=0.1,
                           upstream_apis=tuple(apis), **options).start()
        started.append(proxy)
        return proxy, upstream

    yield start
    for server in started:  # each stop waits out a poll of its server: not the suite's time
        threading.Thread(target=server.stop, daemon=True).start()


# ---- translation through chat: a tool call and its result round-trip ------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ALL)
def test_a_tool_call_and_its_result_round_trip_through_chat(stack, api, stream):
    proxy, upstream = stack(apis=("chat",))
    first = first_turn(api, stream)
    status, body, evs = send(proxy, api, path_of(api, stream), first)
    assert status == 200 and bool(evs) == stream
    calls, text, _ = answer_of(api, body, evs)
    assert [(c["name"], c["args"]) for c in calls] == [("shell", {"command": "echo hello > hello.txt"})]
    sent = upstream.seen[-1]
    assert sent.path == "/v1/chat/completions" and sent.body["model"] == "trial-model"
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert sent.body.get("stream", False) is stream
    assert sent.body["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent.body["tools"][0]["function"]["name"] == "shell"
    call = {**calls[0], "id": calls[0]["id"] or "call-1"}
    status, body, evs = send(proxy, api, path_of(api, stream), second_turn(api, first, call, "wrote hello.txt"))
    calls, text, stop = answer_of(api, body, evs)
    assert status == 200 and calls == [] and text == "Done: wrote hello.txt"
    assert stop in ("stop", "completed", "end_turn", "STOP")
    tool = [m for m in upstream.seen[-1].body["messages"] if m["role"] == "tool"]
    assistant = [m for m in upstream.seen[-1].body["messages"] if m.get("tool_calls")]
    assert [t["content"] for t in tool] == ["wrote hello.txt"]
    assert tool[0]["tool_call_id"] == assistant[0]["tool_calls"][0]["id"]  # the result answers its call
    assert proxy.stats.calls == 2 and proxy.stats.prompt_tokens == 22 and proxy.stats.completion_tokens == 14


def test_every_exchange_is_recorded_chat_shaped_with_the_agents_api_and_asked_model(stack, tmp_path):
    proxy, _ = stack(apis=("chat",))
    first = first_turn("messages", True)
    _, _, evs = send(proxy, "messages", "/v1/messages", first)
    call = answer_of("messages", {}, evs)[0][0]
    send(proxy, "messages", "/v1/messages", second_turn("messages", first, call, "ok"))
    records = read_exchanges(tmp_path / "model" / "exchanges.jsonl")
    assert [(r["api"], r["asked_model"], r["mode"], r["stream"]) for r in records] == [
        ("messages", "claude-sonnet-4", "translate", True)] * 2
    assert records[0]["request"]["model"] == "trial-model" and records[0]["api_request"]["system"]
    trajectory = [e["event"] for e in trajectory_from_exchanges(records)]
    assert [e["kind"] for e in trajectory] == ["tool_dispatch", "tool_result", "message"]
    assert trajectory[0]["tool"]["args"] == {"command": "echo hello > hello.txt"}
    assert KEY not in (tmp_path / "model" / "exchanges.jsonl").read_text()


# ---- relay: the upstream speaks the agent's API ----------------------------------------------------
@pytest.mark.parametrize("api", ALL)
def test_a_relayed_stream_reaches_the_client_before_the_upstream_has_finished(stack, api, tmp_path):
    proxy, upstream = stack(apis=ALL, script=Script(chunk_delay=0.07))
    url = urllib.parse.urlsplit(proxy.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("POST", path_of(api, True), json.dumps(first_turn(api, True)),
                 {"Content-Type": "application/json", **auth(api, proxy.token)})
    response = conn.getresponse()
    first_line = response.readline()
    first_at = time.monotonic()
    raw = first_line + response.read()
    conn.close()
    assert first_line.strip() and upstream.finished and first_at < upstream.finished[-1] - 0.04
    calls, _, _ = answer_of(api, {}, events(raw))
    assert [(c["name"], c["args"]) for c in calls] == [("shell", {"command": "echo hello > hello.txt"})]
    sent = upstream.seen[-1]
    headers = {k.lower(): v for k, v in sent.headers.items()}
    assert headers[HEADERS[api]].endswith(KEY)
    if api == "gemini":
        assert sent.path == "/v1/models/trial-model:streamGenerateContent?alt=sse" and "model" not in sent.body
    else:
        assert sent.body["model"] == "trial-model"
    if api == "messages":
        assert headers["anthropic-version"] == "2023-06-01"
    record = read_exchanges(tmp_path / "model" / "exchanges.jsonl")[-1]
    assert record["mode"] == "relay" and record["api"] == api
    assert record["response"]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "shell"
    assert proxy.stats.prompt_tokens == 11 and proxy.stats.completion_tokens == 7  # usage read per API


@pytest.mark.parametrize("api", ["responses", "messages", "gemini"])
def test_a_translated_stream_passes_text_on_as_the_upstreams_chunks_arrive(stack, api):
    proxy, upstream = stack(apis=("chat",), script=Script(chunk_delay=0.07))
    first = first_turn(api, True)
    call = {"id": "call-1", "name": "shell", "args": {"command": "echo hello > hello.txt"}}
    url = urllib.parse.urlsplit(proxy.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("POST", path_of(api, True), json.dumps(second_turn(api, first, call, "ran")),
                 {"Content-Type": "application/json", **auth(api, proxy.token)})
    response = conn.getresponse()
    lines, stamps = [], []
    while line := response.readline():
        lines.append(line)
        stamps.append(time.monotonic())
    conn.close()
    text_at = next(t for line, t in zip(lines, stamps, strict=True) if b"Done" in line)  # the first piece of text
    assert text_at < upstream.finished[-1] - 0.04 and upstream.seen[-1].body["stream"] is True
    assert answer_of(api, {}, events(b"".join(lines)))[1] == "Done: ran"


@pytest.mark.parametrize("api", ALL)
def test_a_relayed_whole_answer_is_passed_on_as_is(stack, api):
    proxy, upstream = stack(apis=ALL)
    status, body, _ = send(proxy, api, path_of(api, False), first_turn(api, False))
    calls, _, _ = answer_of(api, body, [])
    assert status == 200 and calls[0]["name"] == "shell"
    assert upstream.seen[-1].path.startswith("/v1/") and proxy.stats.completion_tokens == 7


def test_paths_without_the_v1_prefix_are_served_too(stack):
    proxy, _ = stack(apis=("chat",))
    for api, path in (("chat", "/chat/completions"), ("responses", "/responses"), ("messages", "/messages"),
                      ("gemini", "/v1/models/g:generateContent")):
        status, body, _ = send(proxy, api, path, first_turn(api, False))
        assert status == 200 and answer_of(api, body, [])[0], path


# ---- keep-alive: a streaming client waits on a whole answer -----------------------------------------
@pytest.mark.parametrize("api,line", [("messages", "ping"), ("responses", "comment"), ("gemini", None)])
def test_a_long_translated_call_keeps_a_streaming_client_alive(stack, api, line):
    proxy, _ = stack(apis=("chat",), script=Script(delay=0.35), keepalive_sec=0.1)
    status, _, evs = send(proxy, api, path_of(api, True), first_turn(api, True))
    names = [name for name, _ in evs]
    if line is None:  # Gemini: the headers at once, then only `data:` lines (Google's SDKs read no other)
        assert status == 200 and "comment" not in names
    else:
        assert status == 200 and names[:2] == [line, line]  # before the answer's first event
    assert answer_of(api, {}, evs)[0][0]["name"] == "shell"


def test_a_translated_tool_call_streams_its_arguments_as_they_arrive(stack):
    proxy, upstream = stack(apis=("chat",), script=Script(chunk_delay=0.08), keepalive_sec=0.05)
    status, _, evs = send(proxy, "messages", "/v1/messages", first_turn("messages", True))
    names = [name for name, _ in evs]
    assert status == 200 and "message_start" in names
    starts = [d for name, d in evs if name == "content_block_start"]
    pieces = [d["delta"]["partial_json"] for name, d in evs
              if name == "content_block_delta" and d["delta"]["type"] == "input_json_delta"]
    assert [s["content_block"]["type"] for s in starts] == ["tool_use"]
    args = json.dumps(upstream.script.args)
    assert pieces == [args[:5], args[5:]]  # the upstream's two pieces, each as it came
    assert names.index("content_block_start") < names.index("message_delta")
    assert answer_of("messages", {}, evs)[0][0] == {"id": "call_up1", "name": "shell", "args": upstream.script.args}
