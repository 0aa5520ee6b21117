"""Replay endpoint, model proxy and endpoint configs over real HTTP on loopback."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from orchestrator.errors import InputError
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import Budget
from orchestrator.services.proxy import ModelProxy
from orchestrator.services.replay import ReplayEngine, ReplayServer, load_script

SCRIPT = {"rules": [
    {"when": {"instruction": "fast-check", "turn": 0}, "extract": {"cmd": "make check-fast --tag=MEMKEY-[A-Z0-9]+"},
     "reply": {"tool_calls": [{"name": "shell", "arguments": {"command": "echo '{cmd}'"}}]}},
    {"when": {"instruction": "fast-check", "turn": 0}, "reply": {"content": "guess: make check"}},
    {"when": {}, "reply": {"content": "Done."}},
]}


def ask(text: str, turn: int = 0) -> dict:
    messages = [{"role": "user", "content": text}] + [{"role": "assistant", "content": "x"}] * turn
    return {"model": "m", "messages": messages}


def test_replay_uses_a_fact_only_when_the_conversation_holds_it():
    engine = ReplayEngine(SCRIPT)
    _, with_fact = engine.answer(ask("<recall>make check-fast --tag=MEMKEY-EXACT7Q</recall> fast-check?"))
    call = with_fact["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"command": "echo 'make check-fast --tag=MEMKEY-EXACT7Q'"}
    assert with_fact["choices"][0]["finish_reason"] == "tool_calls" and with_fact["usage"]["total_tokens"] > 0
    _, without = engine.answer(ask("fast-check?"))
    assert without["choices"][0]["message"]["content"] == "guess: make check"
    _, later = engine.answer(ask("fast-check?", turn=1))
    assert later["choices"][0]["message"]["content"] == "Done."


def test_replay_scripts_are_validated(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("rules:\n  - when: {}\n")
    with pytest.raises(InputError, match="rules.0.reply"):
        load_script(bad)
    bad.write_text("rules:\n  - reply: {content: x}\n    extract: {a: '('}\n")
    with pytest.raises(InputError, match="bad regex"):
        load_script(bad)


def post(url: str, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture()
def upstream():
    servers = []

    def start(script: dict) -> ReplayServer:
        server = ReplayServer(script).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def proxy_for(server, budget=Budget(), key="sk-test-SECRET-123"):
    return ModelProxy("127.0.0.1", server.url, "replay-model", key, budget,
                      {"input": 1.0, "output": 2.0}, deadline=time.time() + 60, backoff_max=0.2).start()


def test_the_proxy_adds_the_key_upstream_and_the_agent_never_needs_it(upstream):
    server = upstream(SCRIPT)
    proxy = proxy_for(server)
    try:
        status, body = post(proxy.url, proxy.token, ask("hello"))
        assert status == 200 and body["choices"][0]["message"]["content"] == "Done."
        assert server.engine.authorizations == ["Bearer sk-test-SECRET-123"]
        assert "sk-test-SECRET-123" not in json.dumps(proxy.env())
        status, body = post(proxy.url, "not-the-token", ask("hello"))
        assert status == 401
        assert proxy.stats.calls == 1 and proxy.stats.prompt_tokens > 0
        assert proxy.stats.cost == pytest.approx((proxy.stats.prompt_tokens * 1 + proxy.stats.completion_tokens * 2) / 1e6)
    finally:
        proxy.stop()


def test_a_budget_of_two_calls_refuses_the_third_with_an_error_the_agent_sees(upstream):
    proxy = proxy_for(upstream(SCRIPT), budget=Budget(max_calls=2))
    try:
        codes = [post(proxy.url, proxy.token, ask("hello"))[0] for _ in range(2)]
        status, body = post(proxy.url, proxy.token, ask("hello"))
        assert codes == [200, 200] and status == 402
        assert "budget exceeded: max_calls=2" in body["error"]["message"]
        assert proxy.stats.refused_budget == 1
    finally:
        proxy.stop()


def test_429_twice_then_200_is_retried_and_succeeds(upstream):
    server = upstream({**SCRIPT, "fail_first": {"status": 429, "times": 2}})
    proxy = proxy_for(server)
    try:
        status, body = post(proxy.url, proxy.token, ask("hello"))
        assert status == 200 and proxy.stats.retries == 2 and server.engine.calls == 3
    finally:
        proxy.stop()


def test_an_endpoint_that_keeps_failing_is_an_endpoint_error_without_the_key(upstream):
    server = upstream({**SCRIPT, "fail_first": {"status": 503, "times": 100}})
    proxy = ModelProxy("127.0.0.1", server.url, "m", "sk-test-SECRET-123", Budget(), {},
                       deadline=time.time() + 60, max_attempts=3, backoff_max=0.1).start()
    try:
        status, body = post(proxy.url, proxy.token, ask("hello"))
        assert status == 502 and body["error"]["type"] == "endpoint_error"
        assert "SECRET" not in json.dumps(body) and proxy.stats.upstream_errors == 1
    finally:
        proxy.stop()


def test_endpoint_configs_refuse_wiring_overrides_and_name_a_missing_key(tmp_path, monkeypatch):
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"x": {"model": "m", "env": {"ORCHESTRA_RELAY_URL": "evil"}}}))
    with pytest.raises(InputError, match="wiring variables: ORCHESTRA_RELAY_URL"):
        load_endpoints([path])
    path.write_text(json.dumps({"live": {"base_url": "https://example.invalid/v1", "model": "m",
                                         "api_key_env": "ORCH_TEST_KEY"}}))
    monkeypatch.delenv("ORCH_TEST_KEY", raising=False)
    config = load_endpoints([path])
    with pytest.raises(InputError) as info:
        config.api_key("live")
    assert "$ORCH_TEST_KEY" in str(info.value) and "replay" in str(info.value)
    with pytest.raises(InputError, match="not in the endpoint config"):
        config.resolve("nope")


def test_the_upstream_error_is_kept_and_a_4xx_is_the_agents_request_failing(upstream):
    server = upstream({**SCRIPT, "fail_first": {"status": 503, "times": 100}})
    proxy = ModelProxy("127.0.0.1", server.url, "m", None, Budget(), {},
                       deadline=time.time() + 60, max_attempts=2, backoff_max=0.1).start()
    try:
        post(proxy.url, proxy.token, ask("hello"))
        assert proxy.stats.last_error.startswith("upstream answered 503")  # status and body kept
    finally:
        proxy.stop()
    overflow = upstream({**SCRIPT, "fail_first": {"status": 400, "times": 100}})
    proxy = proxy_for(overflow)
    try:
        status, _ = post(proxy.url, proxy.token, ask("hello"))
        assert status == 400 and proxy.stats.upstream_refusals == 1 and overflow.engine.calls == 1
        assert proxy.stats.upstream_errors == 0 and "400" in proxy.stats.last_error
    finally:
        proxy.stop()


def test_a_request_the_client_abandoned_is_never_sent_again():
    from orchestrator.services.apis.forward import open_upstream
    from orchestrator.services.proxy import ClientGone

    attempts, retried, tries = [], [], [0]

    def gone():
        attempts.append(1)
        return True

    with pytest.raises(ClientGone):  # port 9 refuses: one try, then the client is gone
        open_upstream("http://127.0.0.1:9/v1/chat/completions", b"{}", {}, time.time() + 60, 5, 0.05, gone,
                      lambda: retried.append(1), tries)
    assert attempts == [1] and retried == [] and tries == [2]


def stream_post(url: str, token: str, body: dict) -> tuple[str, list[dict]]:
    request = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        kind, text = response.headers.get("Content-Type", ""), response.read().decode()
    events = [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return kind, [json.loads(e) for e in events[:-1]]


def test_a_stream_request_is_answered_as_server_sent_events_and_every_exchange_is_recorded(upstream, tmp_path):
    from orchestrator.services.exchanges import read_exchanges

    server = upstream(SCRIPT)
    record = tmp_path / "model" / "exchanges.jsonl"
    proxy = ModelProxy("127.0.0.1", server.url, "replay-model", "sk-test-SECRET-123", Budget(), {},
                       deadline=time.time() + 60, backoff_max=0.2, record=record).start()
    try:
        kind, chunks = stream_post(proxy.url, proxy.token, {
            **ask("<recall>make check-fast --tag=MEMKEY-AB12</recall> fast-check?"), "stream": True,
            "stream_options": {"include_usage": True}})
        assert kind.startswith("text/event-stream")
        delta = chunks[0]["choices"][0]["delta"]
        call = delta["tool_calls"][0]
        assert call["index"] == 0 and call["function"]["name"] == "shell"
        assert chunks[1]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[2]["usage"]["total_tokens"] > 0 and chunks[2]["choices"] == []
        status, body = post(proxy.url, proxy.token, ask("hello"))
        assert status == 200 and body["choices"][0]["message"]["content"] == "Done."
    finally:
        proxy.stop()
    exchanges = read_exchanges(record)
    assert [(e["seq"], e["stream"], e["status"]) for e in exchanges] == [(1, True, 200), (2, False, 200)]
    assert exchanges[1]["response"]["choices"][0]["message"]["content"] == "Done."
    assert "sk-test-SECRET-123" not in record.read_text()


def test_a_replay_endpoint_with_a_key_refuses_calls_without_it(upstream):
    server = ReplayServer(SCRIPT, api_key="sk-fake-777").start()
    try:
        status, body = post(server.url, "sk-wrong", ask("hello"))
        assert status == 401 and body["error"]["type"] == "invalid_api_key"
        proxy = proxy_for(server, key="sk-fake-777")
        try:
            status, body = post(proxy.url, proxy.token, ask("hello"))
            assert status == 200 and server.engine.authorizations[-1] == "Bearer sk-fake-777"
        finally:
            proxy.stop()
    finally:
        server.stop()


def test_a_recorded_job_is_served_back_in_order_and_a_diverging_call_is_refused(upstream, tmp_path):
    from orchestrator.services.exchanges import recorded_answers

    server = upstream(SCRIPT)
    job = tmp_path / "job"
    record = job / "trials" / "t1" / "model" / "exchanges.jsonl"
    proxy = ModelProxy("127.0.0.1", server.url, "replay-model", None, Budget(), {},
                       deadline=time.time() + 60, backoff_max=0.2, record=record).start()
    first = [ask("<recall>make check-fast --tag=MEMKEY-Z9</recall> fast-check?"), ask("hello", turn=1)]
    try:
        answers = [post(proxy.url, proxy.token, body) for body in first]
    finally:
        proxy.stop()
    (job / "trials" / "t1" / "result.json").write_text('{"task": "ds/t", "attempt": 0}')
    engine = ReplayEngine({"recorded": recorded_answers(job)})
    assert [engine.answer(body, "ds/t#0") for body in first] == answers  # the same bodies, byte for byte
    status, body = engine.answer(ask("something never asked"), "ds/t#0")
    assert status == 400 and body["error"]["type"] == "replay_diverged" and engine.diverged == 1


def test_the_conversation_key_sees_past_canned_example_turns_and_side_calls():
    from orchestrator.services.exchanges import conversation_key

    def aider(task: str) -> dict:
        return {"messages": [{"role": "system", "content": "Act as an expert"},
                             {"role": "user", "content": "Change the greeting"},
                             {"role": "assistant", "content": "canned"},
                             {"role": "user", "content": task + " (format reminder)"}]}
    assert conversation_key(aider("make a.txt")) != conversation_key(aider("make b.txt"))
    prompt = "You are an agent. " + "Be careful. " * 30
    main = {"messages": [{"role": "system", "content": prompt + "Today is 2026-12-03"},
                         {"role": "user", "content": "make a.txt"}]}
    later = {"messages": [{"role": "system", "content": prompt + "Today is 2026-12-04"},
                          {"role": "user", "content": "make a.txt"}]}
    title = {"messages": [{"role": "system", "content": "You are a title generator."},
                          {"role": "user", "content": "make a.txt"}]}
    assert conversation_key(main) != conversation_key(title)
    assert conversation_key(main) == conversation_key(later)  # a date deep in the prompt does not
