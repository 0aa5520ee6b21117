"""The model proxy refuses in the caller's own API: wrong tokens in each header, unknown
routes, server-side state, hostile sizes, budgets, broken upstreams (real HTTP on loopback)."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse

import pytest
import test_proxy_apis
from test_proxy_apis import (
    ALL,
    KEY,
    answer_of,
    first_turn,
    path_of,
    second_turn,
    send,
)
from test_proxy_apis import (
    auth as auth_headers,
)

from orchestrator.models.manifest import Budget
from orchestrator.services.apis.ledger import input_bound
from orchestrator.services.apis.scripted import Script
from orchestrator.services.exchanges import read_exchanges, recorded_answers
from orchestrator.services.proxy import ModelProxy
from orchestrator.services.replay import ReplayServer

stack = test_proxy_apis.stack  # the suite's fixture: a proxy before a scripted upstream


def shape(api: str, body: dict) -> str:
    """Which API's error shape a body is in, and of what kind ('' when none)."""
    if api == "messages":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        return body["error"]["type"]
    if api == "gemini":
        assert set(body["error"]) == {"code", "message", "status"}
        return body["error"]["status"]
    assert {"message", "type", "code"} <= set(body["error"])
    return body["error"]["type"]


WRONG = {"chat": {"Authorization": "Bearer nope"}, "responses": {"Authorization": "Bearer nope"},
         "messages": {"x-api-key": "nope"}, "gemini": {"x-goog-api-key": "nope"}}
AUTH_KIND = {"chat": "invalid_api_key", "responses": "invalid_api_key", "messages": "authentication_error",
             "gemini": "UNAUTHENTICATED"}


@pytest.mark.parametrize("api", ALL)
def test_a_wrong_or_missing_token_in_each_apis_header_is_refused_in_its_shape(stack, api):
    proxy, upstream = stack()
    for headers in (WRONG[api], {}, {"Authorization": f"Basic {proxy.token}"}):
        status, body, _ = send(proxy, api, path_of(api, False), first_turn(api, False), headers=headers)
        assert status == 401 and shape(api, body) == AUTH_KIND[api]
        assert proxy.token not in json.dumps(body)
    if api == "gemini":
        assert body["error"]["code"] == 401
        status, body, _ = send(proxy, api, path_of(api, False) + "?key=nope", first_turn(api, False), headers={})
        assert status == 401 and shape(api, body) == "UNAUTHENTICATED"
    assert upstream.seen == [] and proxy.stats.calls == 0


def test_the_token_is_taken_from_the_query_for_gemini_and_the_asked_model_is_the_paths(stack, tmp_path):
    from orchestrator.services.exchanges import read_exchanges

    proxy, upstream = stack()
    key = urllib.parse.quote(proxy.token)
    status, body, _ = send(proxy, "gemini", f"/v1beta/models/gemini-2.5-flash:generateContent?key={key}",
                           first_turn("gemini", False), headers={})
    assert status == 200 and answer_of("gemini", body, [])[0][0]["name"] == "shell"
    record = read_exchanges(tmp_path / "model" / "exchanges.jsonl")[-1]
    assert record["asked_model"] == "gemini-2.5-flash" and upstream.seen[-1].body["model"] == "trial-model"


@pytest.mark.parametrize("api,path,kind", [
    ("chat", "/v1/embeddings", "not_found_error"), ("responses", "/v1/responses/resp_1/cancel", "not_found_error"),
    ("messages", "/v1/messages/batches", "not_found_error"), ("gemini", "/v1beta/models/g:embedContent", "NOT_FOUND"),
    ("gemini", "/v1beta/cachedContents", "NOT_FOUND")])
def test_an_unknown_route_is_a_404_in_the_shape_the_caller_understands(stack, api, path, kind):
    proxy, upstream = stack()
    status, body, _ = send(proxy, api, path, {})
    assert status == 404 and shape(api, body) == kind and upstream.seen == []


@pytest.mark.parametrize("extra", [{"previous_response_id": "resp_123"}, {"conversation": "conv_1"},
                                   {"input": [{"type": "item_reference", "id": "msg_1"}]}])
def test_server_side_state_is_refused_in_the_responses_shape(stack, extra):
    proxy, upstream = stack()
    status, body, _ = send(proxy, "responses", "/v1/responses", first_turn("responses", True, **extra))
    assert status == 400 and shape("responses", body) == "invalid_request_error"
    assert "no server-side state" in body["error"]["message"] or "stored items" in body["error"]["message"]
    assert upstream.seen == []


@pytest.mark.parametrize("api,extra,kind", [
    ("chat", {"n": 1000}, "invalid_request_error"),
    ("gemini", {"generationConfig": {"candidateCount": 1000}}, "INVALID_ARGUMENT")])
def test_a_huge_number_of_choices_is_refused(stack, api, extra, kind):
    proxy, upstream = stack()
    status, body, _ = send(proxy, api, path_of(api, False), first_turn(api, False, **extra))
    assert status == 400 and shape(api, body) == kind and upstream.seen == []


@pytest.mark.parametrize("apis", [("chat",), ALL], ids=["translated", "relayed"])
def test_each_call_is_capped_to_what_the_token_budget_has_left_after_its_input(stack, apis):
    proxy, upstream = stack(apis=apis, budget=Budget(tokens=5000))
    huge = {"chat": {"max_tokens": 10**9, "n": 3}, "responses": {"max_output_tokens": 10**9},
            "messages": {"max_tokens": 10**9}, "gemini": {"generationConfig": {"maxOutputTokens": 10**9,
                                                                              "candidateCount": 3}}}
    caps, before, sizes = {}, {}, {}
    field = {"chat": "max_tokens", "responses": "max_output_tokens", "messages": "max_tokens",
             "gemini": "maxOutputTokens"}
    for api in ALL:
        body = first_turn(api, False, **huge[api])
        before[api] = 5000 - proxy.stats.budget_charged_tokens
        status, _, _ = send(proxy, api, path_of(api, False), body)
        assert status == 200
        sent = upstream.seen[-1].body
        caps[api] = sent.get("generationConfig", sent)[field[api]] if apis == ALL else sent["max_tokens"]
        sizes[api] = max(len(json.dumps(body)), len(json.dumps(sent)))
        assert sent.get("n", 1) == 1 and sent.get("generationConfig", {}).get("candidateCount", 1) == 1
    assert proxy.stats.budget_charged_tokens == 4 * 18  # the upstream's counts (11 + 7 a call) settled each
    assert proxy.stats.counted_prompt_tokens == 44 and proxy.stats.usage_estimated_calls == 0
    for api in ALL:  # the input (every byte a token, at worst) and the cap fit in what was left...
        assert caps[api] + input_bound(sizes[api], tools=True) <= before[api], api
        assert caps[api] > before[api] - input_bound(sizes[api], tools=True) - 200, api  # ...and no less


@pytest.mark.parametrize("api,status,kind", [("chat", 402, "budget_exceeded"), ("responses", 402, "budget_exceeded"),
                                             ("messages", 402, "billing_error"), ("gemini", 400, "FAILED_PRECONDITION")])
def test_a_spent_budget_is_refused_in_each_apis_shape(stack, api, status, kind):
    proxy, upstream = stack(budget=Budget(max_calls=0))
    got, body, _ = send(proxy, api, path_of(api, True), first_turn(api, True))
    assert (got, shape(api, body)) == (status, kind) and "budget exceeded" in json.dumps(body)
    assert upstream.seen == [] and proxy.stats.refused_budget == 1


@pytest.mark.parametrize("api", ALL)
def test_a_body_that_is_not_a_json_object_is_refused_in_its_shape(stack, api):
    proxy, _ = stack()
    for body in (b"{not json", b"[1, 2]"):
        status, answer, _ = send(proxy, api, path_of(api, False), body)
        assert status == 400 and shape(api, answer) in ("invalid_request_error", "INVALID_ARGUMENT")


@pytest.mark.parametrize("api", ["responses", "messages", "gemini"])
def test_an_upstream_refusal_reaches_a_translated_caller_in_its_shape_without_the_key(api):
    upstream = ReplayServer({"rules": [], "fail_first": {"status": 400, "times": 9}}).start()
    proxy = ModelProxy("127.0.0.1", upstream.url, "m", KEY, Budget(), {}, deadline=time.time() + 30).start()
    try:
        status, body, _ = send(proxy, api, path_of(api, False), first_turn(api, False))
        assert status == 400 and shape(api, body) in ("invalid_request_error", "INVALID_ARGUMENT")
        assert "scripted failure" in json.dumps(body) and KEY not in json.dumps(body)
        assert proxy.stats.upstream_refusals == 1
    finally:
        proxy.stop()
        upstream.stop()


@pytest.mark.parametrize("api,stream", [("messages", False), ("messages", True), ("gemini", True)])
def test_an_endpoint_that_is_down_is_an_error_in_the_callers_shape(api, stream):
    proxy = ModelProxy("127.0.0.1", "http://127.0.0.1:9/v1", "m", KEY, Budget(), {}, deadline=time.time() + 30,
                       max_attempts=2, backoff_max=0.05).start()
    try:
        status, body, evs = send(proxy, api, path_of(api, stream), first_turn(api, stream))
        assert status == 502 and shape(api, body) in ("api_error", "UNAVAILABLE") and not evs
        assert proxy.stats.upstream_errors == 1
    finally:
        proxy.stop()


def test_token_counts_and_the_model_list_are_answered_here(stack):
    proxy, upstream = stack()
    status, body, _ = send(proxy, "messages", "/v1/messages/count_tokens", first_turn("messages", False))
    assert status == 200 and body["input_tokens"] > 10
    status, body, _ = send(proxy, "gemini", "/v1beta/models/g:countTokens", first_turn("gemini", False))
    assert status == 200 and body["totalTokens"] > 10
    assert upstream.seen == [] and proxy.stats.calls == 0  # never a budget call
    status, body, _ = send(proxy, "chat", "/v1/models", {})
    assert status == 404 and shape("chat", body) == "not_found_error"  # the model list is a GET
    url = urllib.parse.urlsplit(proxy.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("GET", "/v1/models?client_version=1", headers={"Authorization": f"Bearer {proxy.token}"})
    listed = json.loads(conn.getresponse().read())
    conn.close()
    assert [m["id"] for m in listed["data"]] == ["trial-model"]
    relayed, upstream = stack(apis=ALL)
    assert send(relayed, "messages", "/v1/messages/count_tokens", first_turn("messages", False))[1] == {
        "input_tokens": 42}
    assert send(relayed, "gemini", "/v1beta/models/g:countTokens", first_turn("gemini", False))[1] == {
        "totalTokens": 42}
    assert [s.path for s in upstream.seen] == ["/v1/messages/count_tokens", "/v1/models/trial-model:countTokens"]
    assert {k.lower(): v for k, v in upstream.seen[0].headers.items()}["x-api-key"] == KEY


def test_a_recorded_conversation_in_each_api_is_replayed_through_chat(stack, tmp_path):
    proxy, _ = stack()
    turns = {}
    for api in ALL:
        first = first_turn(api, False)
        _, body, _ = send(proxy, api, path_of(api, False), first)
        call = answer_of(api, body, [])[0][0]
        second = second_turn(api, first, {**call, "id": call["id"] or "c1"}, f"{api} ran")
        turns[api] = [(first, body), (second, send(proxy, api, path_of(api, False), second)[1])]
    proxy.stop()
    (tmp_path / "trials" / "t").mkdir(parents=True)
    (tmp_path / "model").rename(tmp_path / "trials" / "t" / "model")
    (tmp_path / "trials" / "t" / "result.json").write_text('{"task": "ds/t", "attempt": 0}')
    replay = ReplayServer({"recorded": recorded_answers(tmp_path)}).start()
    again = ModelProxy("127.0.0.1", f"{replay.url}/trial/{urllib.parse.quote('ds/t#0', safe='')}", "trial-model",
                       None, Budget(), {}, deadline=time.time() + 30).start()
    try:
        for api in ALL:
            for request, answer in turns[api]:
                status, body, _ = send(again, api, path_of(api, False), request)
                assert status == 200 and answer_of(api, body, []) == answer_of(api, answer, [])
        assert replay.engine.diverged == 0
    finally:
        again.stop()
        replay.stop()


def test_a_refusal_before_the_body_is_read_ends_the_connection(stack):
    proxy, _ = stack()
    url = urllib.parse.urlsplit(proxy.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("POST", "/v1/messages", json.dumps(first_turn("messages", False)), {"x-api-key": "nope"})
    response = conn.getresponse()
    response.read()
    assert response.status == 401 and response.getheader("Connection") == "close"  # its body was never read
    conn.close()


def test_a_large_exchange_keeps_its_chat_shaped_pair_before_the_agents_own_copy(tmp_path):
    from orchestrator.services import exchanges
    from orchestrator.services.exchanges import ExchangeLog, read_exchanges

    log = ExchangeLog(tmp_path / "x.jsonl", lambda data: data)
    big = json.dumps({"messages": [{"role": "user", "content": "x" * (exchanges.MAX_LINE // 2 + 10)}]}).encode()
    log.write(big, 200, b'{"choices": []}', time.time(), 1, False, meta={"api": "messages"},
              api_request=big, api_response=b"{}")
    record = read_exchanges(tmp_path / "x.jsonl")[0]
    assert record["request"]["messages"] and "api_request" not in record and record["api"] == "messages"


@pytest.mark.parametrize("apis", [("chat",), ALL], ids=["translated", "relayed"])
def test_an_upstream_that_counts_no_tokens_is_estimated_and_said_so_and_the_budget_still_holds(stack, apis):
    proxy, upstream = stack(apis=apis, script=Script(usage=(0, 0)), budget=Budget(tokens=2500))
    bodies = [first_turn("messages", stream) for stream in (True, False)]
    codes = [send(proxy, "messages", "/v1/messages", body)[0] for body in bodies]
    s = proxy.stats
    assert codes == [200, 200] and (s.usage_estimated_calls, s.usage_counted_calls) == (2, 0)
    assert s.counted_prompt_tokens == s.counted_completion_tokens == 0  # never shown as counted
    sent = [len(json.dumps(seen.body)) for seen in upstream.seen]  # what went upstream (translated or not)
    assert s.estimated_prompt_tokens == sum(n // 4 for n in sent) and s.prompt_tokens == s.estimated_prompt_tokens
    assert s.completion_tokens == s.estimated_completion_tokens > 5  # ~4 bytes a token of the answer
    # the budget is charged each call's upper bound (its input bound, a token a byte of answer)
    assert sum(input_bound(n, tools=True) for n in sent) < s.budget_charged_tokens <= 2500
    assert not s.cost_known and s.cost == 0.0  # no usage: its dollars are unknown, not $0
    status, body, _ = send(proxy, "messages", "/v1/messages", first_turn("messages", True))
    assert (status, shape("messages", body)) == (402, "billing_error") and len(upstream.seen) == 2
    usage = [x["usage"] for x in read_exchanges(proxy.record.path)]
    assert [u["counted"] for u in usage] == [False, False] and [u["cost"] for u in usage] == [None, None]


@pytest.mark.parametrize("api", ["messages", "gemini"])
def test_broken_framing_is_refused_before_the_body_is_read_in_the_callers_shape(stack, api):
    import socket

    proxy, upstream = stack()
    url = urllib.parse.urlsplit(proxy.url)
    token = "".join(f"{k}: {v}\r\n" for k, v in auth_headers(api, proxy.token).items()).encode()
    got = {}
    for name, head in (("negative", token + b"Content-Length: -5\r\n"), ("chunked", token + b"Transfer-Encoding: chunked\r\n"),
                       ("huge", token + b"Content-Length: 50000000\r\n"), ("no_token", b"Content-Length: 50000000\r\n")):
        with socket.create_connection((url.hostname, url.port), timeout=5) as conn:
            conn.sendall(b"POST " + path_of(api, False).encode() + b" HTTP/1.1\r\nHost: p\r\n" + head + b"\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        head_, _, body = answer.partition(b"\r\n\r\n")
        got[name] = (int(head_.split()[1]), shape(api, json.loads(body)))
    kinds = {"messages": ("invalid_request_error", "request_too_large", "authentication_error"),
             "gemini": ("INVALID_ARGUMENT", "INVALID_ARGUMENT", "UNAUTHENTICATED")}[api]
    assert got == {"negative": (400, kinds[0]), "chunked": (411, kinds[0]), "huge": (413, kinds[1]),
                   "no_token": (401, kinds[2])}
    assert upstream.seen == []
