"""Tool calls a server left in the answer's text (issue 59: llama-cpp-python returns
Qwen2.5's calls as text, so no agent CLI ever saw a call), given to the agent as tool calls
where the endpoint says `tool_calls: from_text`; shapes are the ones recorded from the
real server (tests/fixtures/llamacpp-agents)."""

from __future__ import annotations

import json

import test_proxy_faults
from test_proxy_apis import answer_of, path_of, send
from test_proxy_faults import Upstream, _whole

from orchestrator.services.apis.textcalls import calls_in_text

proxy_before = test_proxy_faults.proxy_before
NAMES = {"write", "bash"}


def test_each_written_form_naming_an_offered_tool_is_a_call():
    tagged = '<tool_call>\n{"name": "write", "arguments": {"filePath": "/app/hello.txt", "content": "hi"}}\n</tool_call>'
    fenced = 'I will write it.\n```json\n{"name": "bash", "arguments": {"command": "ls"}}\n```'
    bare = '{"name": "write", "arguments": {"content": "Hello, world!", "filePath": "/app/hello.txt"}}'
    assert calls_in_text(tagged, NAMES) == ([{"name": "write", "arguments": json.dumps(
        {"filePath": "/app/hello.txt", "content": "hi"})}], "")
    assert calls_in_text(fenced, NAMES) == ([{"name": "bash", "arguments": '{"command": "ls"}'}], "I will write it.")
    assert calls_in_text(bare, NAMES)[0][0]["name"] == "write"
    # what the 0.5B model wrote for Claude Code: a "tool" no request offered stays text
    hallucinated = '```json\n{\n  "name": "hello.txt",\n  "arguments": {\n    "content": "Hello, world!"\n  }\n}\n```'
    assert calls_in_text(hallucinated, {"Write", "Bash"}) == ([], hallucinated)
    assert calls_in_text("just prose {not json}", NAMES) == ([], "just prose {not json}")


def test_a_call_written_as_text_reaches_each_api_as_a_tool_call(proxy_before):  # noqa: F811
    text = '<tool_call>\n{"name": "shell", "arguments": {"command": "echo hello > hello.txt"}}\n</tool_call>'

    def answer(h, body):
        _whole(h, 200, json.dumps({"id": "c1", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}}).encode())
    from test_proxy_apis import ALL, first_turn

    for api in ALL:
        for stream in (False, True):
            upstream = Upstream([answer])
            proxy = proxy_before(upstream, tool_calls="from_text", upstream_streams=False)
            code, body, evs = send(proxy, api, path_of(api, stream), first_turn(api, stream))
            calls, said, _ = answer_of(api, body, evs)
            assert code == 200 and [(c["name"], c["args"]) for c in calls] == [
                ("shell", {"command": "echo hello > hello.txt"})], (api, stream, body, evs)
            assert "<tool_call>" not in said
            (line,) = [json.loads(x) for x in proxy.record.path.read_text().splitlines()]
            assert "<tool_call>" in json.dumps(line["response"])  # the record: what the server said
    upstream = Upstream([answer])
    proxy = proxy_before(upstream)  # native (the default): the text as it came
    code, body, _ = send(proxy, "chat", path_of("chat", False), first_turn("chat", False))
    assert body["choices"][0]["message"]["content"] == text and not body["choices"][0]["message"].get("tool_calls")
