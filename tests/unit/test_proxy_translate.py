"""The translators alone (pure functions): images, stop reasons, usage, free-form and shell
tools, Gemini's id-less calls, JSON answers, and folding each API's stream into its answer."""

from __future__ import annotations

import json

from orchestrator.services.apis import APIS, guess, route
from orchestrator.services.apis.common import chat_completion, event_data, split_events
from orchestrator.services.apis.scripted import ANSWERS, Script

PNG = "iVBORw0KGgo="


def completion(content=None, calls=(), finish="stop", reasoning=None) -> dict:
    message: dict = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for i, (name, args) in enumerate(calls)]
    if reasoning:
        message["reasoning_content"] = reasoning
    return {"id": "chatcmpl-1", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 5}}


def test_images_reach_chat_from_each_api():
    messages = APIS["messages"].to_chat({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]})
    assert messages["messages"][0]["content"][1] == {"type": "image_url",
                                                     "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    gemini = APIS["gemini"].to_chat({"contents": [{"role": "user", "parts": [
        {"text": "what is this"}, {"inlineData": {"mimeType": "image/png", "data": PNG}}]}]})
    assert gemini["messages"][0]["content"][1]["image_url"]["url"].endswith(PNG)
    responses = APIS["responses"].to_chat({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what"}, {"type": "input_image", "image_url": "https://x/y.png"}]}]})
    assert responses["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": "https://x/y.png"}}


def test_an_image_in_a_tool_result_follows_the_tool_message():
    chat = APIS["messages"].to_chat({"messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": [
            {"type": "text", "text": "failed"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]}]})
    tool, user = chat["messages"][1:]
    assert tool == {"role": "tool", "tool_call_id": "t1", "content": "[error] failed"}
    assert user["role"] == "user" and user["content"][0]["type"] == "image_url"


def test_stop_reasons_and_usage_are_said_in_each_apis_words():
    cut = completion("partial", finish="length")
    assert APIS["messages"].from_chat(cut, "m", {})["stop_reason"] == "max_tokens"
    assert APIS["gemini"].from_chat(cut, "m", {})["candidates"][0]["finishReason"] == "MAX_TOKENS"
    answer = APIS["responses"].from_chat(cut, "m", {})
    assert answer["status"] == "incomplete" and answer["incomplete_details"] == {"reason": "max_output_tokens"}
    for name in ("messages", "responses", "gemini"):
        api = APIS[name]
        native = api.from_chat(cut, "m", {})
        assert (api.usage(native).input, api.usage(native).output) == (30, 5), name
        back = api.as_chat(native)
        assert back["choices"][0]["finish_reason"] == "length" and back["usage"]["prompt_tokens"] == 30, name


def test_codex_free_form_and_shell_tools_go_back_as_their_own_item_types():
    request = {"tools": [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar",
                                                                              "definition": "start: x"}},
                         {"type": "local_shell"}, {"type": "web_search"}]}
    api = APIS["responses"]
    tools = api.to_chat({**request, "input": "hi"})["tools"]
    assert [t["function"]["name"] for t in tools] == ["apply_patch", "local_shell"]
    assert "start: x" in tools[0]["function"]["description"]
    answer = api.from_chat(completion(calls=[("apply_patch", {"input": "*** Begin Patch"}),
                                             ("local_shell", {"command": ["ls"]})], finish="tool_calls"), "m", request)
    patch, shell = answer["output"]
    assert patch == {"type": "custom_tool_call", "id": "fc_call_0", "call_id": "call_0", "status": "completed",
                     "name": "apply_patch", "input": "*** Begin Patch"}
    assert shell["type"] == "local_shell_call" and shell["action"] == {"type": "exec", "command": ["ls"]}
    again = api.to_chat({**request, "input": [patch, {"type": "custom_tool_call_output", "call_id": "call_0",
                                                      "output": "applied"}]})
    assert json.loads(again["messages"][0]["tool_calls"][0]["function"]["arguments"]) == {"input": "*** Begin Patch"}
    assert again["messages"][1] == {"role": "tool", "tool_call_id": "call_0", "content": "applied"}


def test_gemini_calls_without_ids_are_answered_by_name_in_order_and_schemas_lowered():
    chat = APIS["gemini"].to_chat({
        "contents": [{"role": "user", "parts": [{"text": "go"}]},
                     {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}},
                                                 {"functionCall": {"name": "ls", "args": {"a": 1}}}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "one"}}},
                                                {"functionResponse": {"name": "ls", "response": {"x": 2}}}]}],
        "tools": [{"functionDeclarations": [{"name": "ls", "parameters": {
            "type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}}}]}],
        "generationConfig": {"responseMimeType": "application/json", "maxOutputTokens": 9}})
    calls = chat["messages"][1]["tool_calls"]
    results = chat["messages"][2:]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls] and calls[0]["id"] != calls[1]["id"]
    assert [r["content"] for r in results] == ["one", '{"x": 2}']
    assert chat["tools"][0]["function"]["parameters"] == {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert chat["response_format"] == {"type": "json_object"} and chat["max_tokens"] == 9
    request = {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]}]}
    assert APIS["gemini"].to_chat(request) == APIS["gemini"].to_chat(request)  # ids: the same on replay


def test_reasoning_becomes_each_apis_own_and_thinking_is_not_made_up():
    thought = completion("answer", reasoning="because")
    assert APIS["gemini"].from_chat(thought, "m", {})["candidates"][0]["content"]["parts"][0] == {
        "text": "because", "thought": True}
    assert APIS["responses"].from_chat(thought, "m", {})["output"][0]["type"] == "reasoning"
    assert [b["type"] for b in APIS["messages"].from_chat(thought, "m", {})["content"]] == ["text"]


def test_each_apis_scripted_stream_folds_into_the_answer_it_streams():
    for name in ("chat", "messages", "responses", "gemini"):
        for text in (None, "Done: ok"):
            whole = next(ANSWERS[name](Script(), text, False))
            raw = b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode()
                           for e in ANSWERS[name](Script(), text, True))
            events, rest = split_events(raw)
            folded = APIS[name].collect([d for d in map(event_data, events) if d is not None])
            assert rest == b""
            mine, theirs = APIS[name].as_chat(folded), APIS[name].as_chat(whole)
            assert mine["choices"] == theirs["choices"], (name, text)
            assert mine["usage"]["completion_tokens"] == theirs["usage"]["completion_tokens"] == 7, name


def test_routes_and_guesses():
    assert route("POST", "/v1/messages?beta=true").op == "generate"
    assert route("POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse").stream
    assert route("POST", "/v1beta/models/a%2Fb:countTokens").model == "a/b"
    assert route("GET", "/v1/models").op == "models" and route("GET", "/v1/messages") is None
    assert route("POST", "/v2/messages") is None and route("POST", "/v1/chat/completions/x") is None
    assert guess("/x", ["X-Api-Key"]).name == "messages" and guess("/v1beta/x", []).name == "gemini"
    assert guess("/x", ["Authorization"]).name == "chat"


def test_a_record_shaped_completion_is_what_chat_readers_expect():
    built = chat_completion({"role": "assistant", "content": "hi"}, "stop", APIS["chat"].usage(completion()), "m", "i")
    assert built["choices"][0]["message"]["content"] == "hi" and built["usage"]["total_tokens"] == 35


def test_leading_instructions_become_one_system_message_and_text_blocks_stay_paragraphs():
    chat = APIS["responses"].to_chat({"instructions": "You are Codex.", "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "skills"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "context"},
                                                        {"type": "input_text", "text": "task"}]}]})
    assert chat["messages"] == [{"role": "system", "content": "You are Codex.\n\nskills"},
                                {"role": "user", "content": "context\n\ntask"}]
    claude = APIS["messages"].to_chat({"system": [{"type": "text", "text": "header;"}, {"type": "text", "text": "You"}],
                                       "messages": [{"role": "user", "content": "hi"}]})
    assert claude["messages"][0] == {"role": "system", "content": "header;\n\nYou"}
