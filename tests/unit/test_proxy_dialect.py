"""Each API's own order and keep-alive in a translated stream (issue 59): reasoning before
the answer where the API puts it first (Gemini's thought parts, Responses' reasoning item),
and a Gemini client that hears a chunk it parses while the upstream is silent."""

from __future__ import annotations

import json
import time

import test_proxy_faults
from test_proxy_apis import path_of, send
from test_proxy_faults import Upstream, _chunk, _end, _send, _start_stream, prompt

proxy_before = test_proxy_faults.proxy_before  # the fault matrix's fixture: a proxy before its upstream

THOUGHT, ANSWER = "let me think", "the answer"


def reasoning_first(h, body) -> None:
    _start_stream(h)
    _send(h, _chunk({"role": "assistant", "content": ""}))
    for piece in ("let me ", "think"):
        _send(h, _chunk({"reasoning_content": piece}))
    for piece in ("the ", "answer"):
        _send(h, _chunk({"content": piece}))
    _send(h, _chunk({}, "stop"))
    _send(h, b"data: [DONE]\n\n")
    _end(h)


def test_gemini_thoughts_stream_before_the_answer(proxy_before):  # noqa: F811
    proxy = proxy_before(Upstream([reasoning_first]))
    code, _, evs = send(proxy, "gemini", path_of("gemini", True), prompt("gemini", True))
    parts = [p for _, d in evs for c in d.get("candidates", []) for p in c["content"]["parts"]]
    thoughts = [i for i, p in enumerate(parts) if p.get("thought") and p["text"]]
    texts = [i for i, p in enumerate(parts) if not p.get("thought") and p.get("text")]
    assert code == 200 and thoughts and texts and max(thoughts) < min(texts)
    assert "".join(parts[i]["text"] for i in thoughts) == THOUGHT  # once, not again at the end
    assert "".join(parts[i]["text"] for i in texts) == ANSWER


def test_responses_reasoning_is_the_first_item_streamed_and_in_the_response(proxy_before):  # noqa: F811
    proxy = proxy_before(Upstream([reasoning_first]))
    code, _, evs = send(proxy, "responses", path_of("responses", True), prompt("responses", True))
    added = [(d["output_index"], d["item"]["type"]) for name, d in evs if name == "response.output_item.added"]
    assert code == 200 and added == [(0, "reasoning"), (1, "message")]
    deltas = "".join(d["delta"] for name, d in evs if name == "response.reasoning_summary_text.delta")
    (done,) = [d["response"] for name, d in evs if name == "response.completed"]
    assert deltas == THOUGHT and [i["type"] for i in done["output"]] == ["reasoning", "message"]
    assert done["output"][0]["summary"][0]["text"] == THOUGHT
    assert done["output"][1]["content"][0]["text"] == ANSWER
    sequence = [d["sequence_number"] for _, d in evs if isinstance(d, dict) and "sequence_number" in d]
    assert sequence == list(range(len(sequence)))


def test_a_waiting_gemini_client_hears_empty_thoughts_that_add_nothing(proxy_before):  # noqa: F811
    from test_proxy_faults import slow

    proxy = proxy_before(Upstream([slow(1.2)]), keepalive_sec=0.2)
    started = time.monotonic()
    code, _, evs = send(proxy, "gemini", path_of("gemini", True), prompt("gemini", True))
    chunks = [d for _, d in evs if isinstance(d, dict)]
    waits = [c for c in chunks if c["candidates"][0]["content"]["parts"] == [{"text": "", "thought": True}]]
    assert code == 200 and len(waits) >= 3 and time.monotonic() - started >= 1.2
    text = "".join(p.get("text", "") for c in chunks for p in c["candidates"][0]["content"]["parts"]
                   if not p.get("thought"))
    assert text == "hello from the upstream"
    assert all(json.dumps(c).startswith('{"candidates"') for c in waits)  # what `^data: {` parsers read


def test_text_only_content_parts_are_joined_for_an_upstream_that_takes_strings(proxy_before):  # noqa: F811
    parts = {"model": "m", "messages": [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "text", "text": "say"}, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]}]}
    for text_parts, expected in (("keep", parts["messages"]), ("join", [
            {**parts["messages"][0], "content": ""},  # llama-cpp-python's models refuse a null (500)
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "say\n\nhello"},
            parts["messages"][3]])):  # an image part keeps its list
        upstream = Upstream()
        proxy = proxy_before(upstream, text_parts=text_parts)
        code, _, _ = send(proxy, "chat", path_of("chat", False), json.loads(json.dumps(parts)))
        assert code == 200 and upstream.requests[0]["messages"] == expected, text_parts


def test_an_upstream_asked_for_whole_answers_streams_to_the_agent_with_its_own_counts(proxy_before):  # noqa: F811
    from test_proxy_apis import ALL
    from test_proxy_faults import ended, text_of

    upstream = Upstream(usage=True)
    proxy = proxy_before(upstream, upstream_streams=False)
    for api in ALL:
        code, body, evs = send(proxy, api, path_of(api, True), prompt(api, True))
        assert code == 200 and ended(api, evs) == "normal" and text_of(api, body, evs) == "hello from the upstream"
    assert [r.get("stream") for r in upstream.requests] == [False] * 4  # every call asked whole
    billed_in, billed_out = map(sum, zip(*upstream.billed, strict=True))
    s = proxy.stats
    assert (s.counted_prompt_tokens, s.counted_completion_tokens, s.usage_estimated_calls) == (billed_in, billed_out, 0)
