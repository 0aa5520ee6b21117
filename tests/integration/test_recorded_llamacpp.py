"""The reference agent against exchanges recorded from a real llama.cpp server
(tests/fixtures/llamacpp, see its README), served back with --replay-from: what small open
models and their servers really send, in every `make test`."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest
from conftest import ROOT

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import load_manifest
from orchestrator.models.result import TrialResult
from orchestrator.tasks.load import load_tasks

FIXTURES = ROOT / "tests/fixtures/llamacpp"
# Nothing listens there: every answer comes from the recording.
ENDPOINTS = {"local": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                       "model": "qwen2.5-coder-0.5b-instruct", "env": {}},
             "small-ctx": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                           "model": "small-ctx", "env": {}}}


def replay(runtime, tmp_path, case: str) -> tuple[TrialResult, list[dict]]:
    shutil.copytree(ROOT / "tasks/examples/hello-file", tmp_path / "ds" / "hello-file")
    endpoints = tmp_path / "endpoints.json"
    endpoints.write_text(json.dumps(ENDPOINTS))
    options = JobOptions(job_name=f"rec-{uuid.uuid4().hex[:8]}", jobs_dir=tmp_path / "jobs", n_concurrent=1,
                         endpoints=load_endpoints([endpoints]), replay_from=FIXTURES / case, max_retries=0)
    run_job(runtime, load_tasks(tmp_path / "ds"), load_manifest(FIXTURES / case / "manifest.yaml"), options)
    (folder,) = (tmp_path / "jobs" / options.job_name / "trials").iterdir()
    result = TrialResult.model_validate_json((folder / "result.json").read_text())
    lines = [json.loads(x) for x in (folder / "agent/trajectory.jsonl").read_text().splitlines()]
    events = [line["event"] for line in lines if "event" in line]
    return result, events


def texts(events: list[dict]) -> list[str]:
    return [e.get("text") or "" for e in events if e["kind"] == "text"]


def test_a_tool_call_written_as_fenced_json_is_run_and_a_looping_model_is_stopped(runtime, tmp_path):
    result, events = replay(runtime, tmp_path, "text-tool-calls")
    assert result.reward == {"reward": 1.0}, result.error
    dispatched = [e["tool"] for e in events if e["kind"] == "tool_dispatch"]
    assert dispatched[0]["name"] == "write_file" and dispatched[0]["args"]["path"] == "/app/hello.txt"
    assert result.model.calls == 5 and result.agent_outcome == "step_limit" and result.agent_exit_code == 5
    assert any("same tool call(s) 5 turns in a row" in t for t in texts(events))


def test_replies_cut_at_length_are_never_taken_as_the_answer(runtime, tmp_path):
    result, events = replay(runtime, tmp_path, "length-cut")
    assert len([t for t in texts(events) if t.startswith("reply cut at max_tokens")]) == 3
    assert texts(events)[-1] == "stopped: max_turns reached (3 replies cut at max_tokens)"
    assert not [e for e in events if e["kind"] == "message"][1:]  # only the instruction
    assert result.agent_outcome == "step_limit" and result.reward == {"reward": 0.0}
    assert result.failure_mode == "none"  # graded: the agent's own 0


def test_a_context_overflow_is_the_agents_request_failing_graded_as_usual(runtime, tmp_path):
    result, events = replay(runtime, tmp_path, "context-overflow")
    assert result.agent_outcome == "endpoint_error" and result.failure_mode == "none"
    assert result.reward == {"reward": 0.0} and result.model.upstream_refusals == 1
    assert "maximum context length is 512 tokens" in result.model.last_error
    assert any(t.startswith("endpoint error:") and "400" in t for t in texts(events))


def test_a_server_that_keeps_answering_500_is_an_endpoint_error_not_the_agents_zero(runtime, tmp_path):
    result, events = replay(runtime, tmp_path, "server-500")
    assert result.failure_mode == "endpoint_error" and result.agent_outcome == "endpoint_error"
    assert result.model.retries == 5 and "internal_server_error" in result.model.last_error
    assert result.error and "failed after retries" in result.error
    assert any(t.startswith("endpoint error:") for t in texts(events))


@pytest.mark.parametrize("case", ["text-tool-calls", "length-cut", "context-overflow", "server-500"])
def test_every_fixture_is_a_real_recording(case):
    lines = (FIXTURES / case / "trials/hello-file/model/exchanges.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["request"]["messages"][0]["role"] == "system" and "status" in first
    assert "usage" in first["response"] or "error" in first["response"]


def test_a_replay_reads_no_exchanges_the_agent_wrote(runtime, tmp_path):
    """A past agent plants `exchanges.jsonl` files in its own artifacts and logs, answering
    the first call with a write of "pwned": a replay of that job takes only the record the
    model proxy wrote on the host (tests/hostile/README.md, the dataset's replay row)."""
    source = tmp_path / "recorded"
    shutil.copytree(FIXTURES / "text-tool-calls", source)
    trial = source / "trials/hello-file"
    first = json.loads((trial / "model/exchanges.jsonl").read_text().splitlines()[0])
    message = first["response"]["choices"][0]["message"]
    message["content"] = message["content"].replace("Hello, world!", "pwned")
    forged = json.dumps(first) + "\n"
    for planted in ("agent/exchanges.jsonl", "artifacts/exchanges.jsonl", "artifacts/model/exchanges.jsonl"):
        (trial / planted).parent.mkdir(parents=True, exist_ok=True)
        (trial / planted).write_text(forged * 6)
    # the attack in place: each planted answer is the first call's own key, scripted to "pwned"
    from orchestrator.services.exchanges import conversation_key
    for planted in trial.rglob("exchanges.jsonl"):
        record = json.loads(planted.read_text().splitlines()[0])
        assert conversation_key(record["request"]) == conversation_key(first["request"])
    assert len(list(trial.rglob("exchanges.jsonl"))) == 4
    shutil.copytree(ROOT / "tasks/examples/hello-file", tmp_path / "ds" / "hello-file")
    endpoints = tmp_path / "endpoints.json"
    endpoints.write_text(json.dumps(ENDPOINTS))
    options = JobOptions(job_name="replayed", jobs_dir=tmp_path / "jobs", n_concurrent=1,
                         endpoints=load_endpoints([endpoints]), replay_from=source, max_retries=0)
    run_job(runtime, load_tasks(tmp_path / "ds"), load_manifest(source / "manifest.yaml"), options)
    (folder,) = (tmp_path / "jobs/replayed/trials").iterdir()
    result = TrialResult.model_validate_json((folder / "result.json").read_text())
    assert result.reward == {"reward": 1.0} and result.model.calls == 5, result.error
    assert b"pwned" not in (folder / "agent/trajectory.jsonl").read_bytes()
