"""Upstream faults and budgets through a real trial (issue 59), not only the proxy alone
(tests/unit/test_proxy_faults.py): the agent in its container calls the trial's model
proxy, which calls a real HTTP upstream of this test's own on loopback.

- An upstream that fails after its stream began: the agent's Messages client gets the API's
  error event (never message_stop); the trial is an endpoint error, retried from a fresh
  folder, never graded, though the agent wrote its answer anyway (before: graded 1.0). The
  retry, on an upstream that answers, is graded.
- Eight calls at once on a small token budget: what the upstream billed (its own counts)
  never passes the budget (before: 720 billed on 150).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import make_task
from kit import trials_by_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import Manifest
from orchestrator.models.result import FailureMode, TrialResult
from orchestrator.tasks.load import load_tasks

SMALL = "[agent]\ntimeout_sec = 120\n[environment]\ncpus = 0.5\nmemory_mb = 256\nstorage_mb = 256\n"


class Upstream:
    """A streaming chat upstream: the first `failures` calls break off with an error event
    after some text; every call is billed (prompt: a token a 4 bytes; completion: one a
    word, at most the call's max_tokens) and held `hold` seconds before answering."""

    def __init__(self, failures: int = 0, hold: float = 0.0, words: int = 100):
        self.failures, self.hold, self.words = failures, hold, words
        self.billed: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def send(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(raw)
                with upstream.lock:
                    fail = upstream.failures > 0
                    upstream.failures -= int(fail)
                threading.Event().wait(upstream.hold)
                cap = body.get("max_tokens") or body.get("max_completion_tokens") or upstream.words
                words = min(cap, upstream.words)
                with upstream.lock:
                    upstream.billed.append((len(raw) // 4, words))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                head = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
                for i in range(words if not fail else 2):
                    delta = {"content": "w " if i else "w"}
                    self.send(b"data: " + json.dumps({**head, "choices": [{"index": 0, "delta": delta}]}).encode()
                              + b"\n\n")
                if fail:
                    self.send(b'data: {"error": {"message": "upstream exploded mid-generation", "code": 500}}\n\n')
                else:
                    self.send(b"data: " + json.dumps({**head, "choices": [
                        {"index": 0, "delta": {}, "finish_reason": "length" if words < upstream.words else "stop"}]}
                        ).encode() + b"\n\n")
                    usage = {"prompt_tokens": len(raw) // 4, "completion_tokens": words,
                             "total_tokens": len(raw) // 4 + words}
                    self.send(b"data: " + json.dumps({**head, "choices": [], "usage": usage}).encode() + b"\n\n")
                    self.send(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def endpoints(self, path: Path) -> Path:
        path.write_text(json.dumps({"upstream": {"model": "m", "apis": ["chat"], "base_url":
                                                 f"http://127.0.0.1:{self.server.server_address[1]}/v1"}}))
        return path


@pytest.fixture
def upstream_of() -> Iterator:
    made: list[Upstream] = []

    def make(**options: object) -> Upstream:
        made.append(Upstream(**options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for upstream in made:
        upstream.server.shutdown()
        upstream.server.server_close()


# the agent: one streaming Messages call (as Claude Code makes them), how its stream ended
# written where the test reads it, and the task's answer written whatever the model said
MESSAGES_CALL = r"""python3 - <<'PY'
import json, os, urllib.request
base, token = os.environ["ORCHESTRA_MODEL_URL"], os.environ["ORCHESTRA_MODEL_TOKEN"]
body = {"model": "claude-sonnet-4", "max_tokens": 64, "stream": True,
        "messages": [{"role": "user", "content": "write the answer"}]}
request = urllib.request.Request(base + "/messages", data=json.dumps(body).encode(), method="POST",
                                 headers={"x-api-key": token, "anthropic-version": "2023-06-01",
                                          "Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=60) as response:
    text = response.read().decode()
events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
os.makedirs("/logs/artifacts", exist_ok=True)
json.dump({"events": events}, open("/logs/artifacts/stream.json", "w"))
PY
touch /app/ok
"""


def test_an_upstream_error_mid_stream_is_an_endpoint_error_retried_never_graded(runtime, tmp_path, upstream_of):
    upstream = upstream_of(failures=1, words=5)
    make_task(tmp_path / "ds", "cut", toml=SMALL, solve=MESSAGES_CALL)
    manifest = Manifest.model_validate({"condition": "faults", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle", "endpoint": "upstream"}]})
    options = JobOptions(job_name="cut", jobs_dir=tmp_path / "jobs", max_retries=1, backoff_multiplier=0.0,
                         endpoints=load_endpoints([upstream.endpoints(tmp_path / "endpoints.json")]))
    run_job(runtime, load_tasks(tmp_path / "ds"), manifest, options)
    (folder,) = (tmp_path / "jobs/cut/trials").iterdir()  # the retry ran in a fresh folder of the same name
    result = TrialResult.model_validate_json((folder / "result.json").read_text())
    # the retry, on an upstream that answered, is the trial that counts: graded
    assert result.failure_mode == FailureMode.NONE and result.reward == {"reward": 1.0}, result.error
    assert len(result.retries) == 1 and result.retries[0].startswith("endpoint_error: the model endpoint failed")
    assert "exploded mid-generation" in result.retries[0]
    events = json.loads((folder / "artifacts/stream.json").read_text())["events"]
    assert events[-1] == "message_stop" and "error" not in events
    assert len(upstream.billed) == 2  # one call each attempt: the broken one was not re-sent


def test_an_upstream_error_with_no_retries_left_is_an_endpoint_error_not_a_pass(runtime, tmp_path, upstream_of):
    upstream = upstream_of(failures=5, words=5)
    make_task(tmp_path / "ds", "cut", toml=SMALL, solve=MESSAGES_CALL)
    manifest = Manifest.model_validate({"condition": "faults", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle", "endpoint": "upstream"}]})
    options = JobOptions(job_name="cut0", jobs_dir=tmp_path / "jobs", max_retries=0,
                         endpoints=load_endpoints([upstream.endpoints(tmp_path / "endpoints.json")]))
    run_job(runtime, load_tasks(tmp_path / "ds"), manifest, options)
    result, folder = trials_by_task(tmp_path / "jobs/cut0")["cut"]
    events = json.loads((folder / "artifacts/stream.json").read_text())["events"]
    assert "error" in events and "message_stop" not in events  # the agent heard the fault
    assert result.failure_mode == FailureMode.ENDPOINT_ERROR, (result.failure_mode, result.reward)
    assert result.headline == 0.0 and result.model.upstream_errors == 1 and result.model.stream_errors == 1
    (line,) = [json.loads(x) for x in (folder / "model/exchanges.jsonl").read_text().splitlines()]
    assert line["status"] == 502 and "exploded" in line["fault"]


BUDGET = 600
# the agent: eight streaming chat calls at once, each asking for as much as it can get
EIGHT_AT_ONCE = r"""python3 - <<'PY'
import json, os, threading, urllib.error, urllib.request
base, token = os.environ["ORCHESTRA_MODEL_URL"], os.environ["ORCHESTRA_MODEL_TOKEN"]
codes = []
def call():
    body = {"model": "m", "stream": True, "max_tokens": 10**6,
            "messages": [{"role": "user", "content": "as much as you can"}]}
    request = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            codes.append(response.status)
    except urllib.error.HTTPError as error:
        codes.append(error.code)
threads = [threading.Thread(target=call) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
os.makedirs("/logs/artifacts", exist_ok=True)
json.dump(codes, open("/logs/artifacts/codes.json", "w"))
PY
touch /app/ok
"""


def test_eight_calls_at_once_never_spend_past_the_token_budget(runtime, tmp_path, upstream_of):
    upstream = upstream_of(hold=0.5, words=150)
    make_task(tmp_path / "ds", "eight", toml=SMALL, solve=EIGHT_AT_ONCE)
    manifest = Manifest.model_validate({"condition": "budget", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle", "endpoint": "upstream",
         "budget": {"tokens": BUDGET}}]})
    options = JobOptions(job_name="eight", jobs_dir=tmp_path / "jobs",
                         endpoints=load_endpoints([upstream.endpoints(tmp_path / "endpoints.json")]))
    run_job(runtime, load_tasks(tmp_path / "ds"), manifest, options)
    result, folder = trials_by_task(tmp_path / "jobs/eight")["eight"]
    codes = json.loads((folder / "artifacts/codes.json").read_text())
    spent = sum(i + o for i, o in upstream.billed)
    assert spent <= BUDGET, (spent, upstream.billed)  # by the upstream's own counts
    assert sorted(codes) == sorted([200] * len(upstream.billed) + [402] * (8 - len(upstream.billed)))
    assert len(upstream.billed) >= 2 and 402 in codes  # some answered, the rest refused
    assert result.tokens == spent and result.model.counted_prompt_tokens + result.model.counted_completion_tokens \
        == spent and not result.tokens_estimated
    assert result.agent_outcome == "budget_exceeded" and result.reward == {"reward": 1.0}
