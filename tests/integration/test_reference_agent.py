"""The reference agent, the model proxy and command agents in real trials."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, make_task

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import Manifest, load_manifest
from orchestrator.models.result import TrialResult
from orchestrator.services.replay import ReplayServer
from orchestrator.tasks.load import load_tasks

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
ENDPOINTS = [ROOT / "endpoints/replay.json", ROOT / "endpoints/openai-live.json"]


def run_with(runtime, path, jobs, manifest: Manifest, endpoints=ENDPOINTS, **kw):
    options = JobOptions(job_name=f"ref-{uuid.uuid4().hex[:8]}", jobs_dir=jobs, n_concurrent=3,
                         endpoints=load_endpoints(endpoints), **kw)
    job = run_job(runtime, load_tasks(path), manifest, options)
    trials = {}
    for folder in (jobs / options.job_name / "trials").iterdir():
        r = TrialResult.model_validate_json((folder / "result.json").read_text())
        trials[r.task.split("/")[-1]] = (r, folder)
    return job, trials


def test_the_reference_agent_on_replay_solves_examples_and_memory_retrieval(runtime, tmp_path):
    import shutil
    ds = tmp_path / "ds"
    shutil.copytree(ROOT / "tasks/examples", ds / "examples")
    shutil.copytree(ROOT / "tasks/relay-native/memory-retrieval", ds / "relay-native/memory-retrieval")
    _, trials = run_with(runtime, ds, tmp_path / "jobs", load_manifest(ROOT / "manifests/solo-replay.yaml"))
    assert {n: r.reward["reward"] for n, (r, _) in trials.items()} == {
        "hello-file": 1.0, "artifact-report": 1.0, "multi-metric": 1.0, "memory-retrieval": 1.0}
    for name, (result, folder) in trials.items():
        lines = (folder / "agent/trajectory.jsonl").read_text().splitlines()
        kinds = [json.loads(line).get("event", {}).get("kind") for line in lines]
        assert "tool_dispatch" in kinds and "tool_result" in kinds, name
        assert result.agent_outcome == "ok" and result.model.calls >= 2 and result.tokens > 0
    # memory-retrieval runs with its no-memory flag: nothing recalled, it used mem itself
    mr_lines = [json.loads(x) for x in (trials["memory-retrieval"][1] / "agent/trajectory.jsonl").read_text().splitlines()]
    assert not any("memory_recall" in x for x in mr_lines)
    assert [x["event"]["tool"]["name"] for x in mr_lines if x.get("event", {}).get("kind") == "tool_dispatch"] == [
        "mem_ls", "mem_get", "chan_reply"]


def script_endpoint(tmp_path, script: dict, name="scripted") -> Path:
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({name: {"provider": "replay", "model": "m", "script": "script.yaml"}}))
    return path


def manifest(endpoint: str, **member) -> Manifest:
    return Manifest.model_validate({"condition": "t", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "reference", "endpoint": endpoint, **member}]})


SHELL_FOREVER = {"rules": [{"when": {}, "reply": {"tool_calls": [{"name": "shell", "arguments": {"command": "touch /app/ok"}}]}}]}


def test_a_budget_of_two_calls_stops_the_third_and_the_agent_sees_why(runtime, tmp_path):
    make_task(tmp_path / "ds", "loop")
    endpoints = script_endpoint(tmp_path, SHELL_FOREVER)
    _, trials = run_with(runtime, tmp_path / "ds", tmp_path / "jobs",
                         manifest("scripted", budget={"max_calls": 2}), endpoints=[endpoints])
    result, folder = trials["loop"]
    assert result.model.calls == 2 and result.model.refused_budget == 1
    assert result.agent_outcome == "budget_exceeded" and result.agent_exit_code == 4
    assert "budget exceeded: max_calls=2" in (folder / "agent/trajectory.jsonl").read_text()
    assert result.reward == {"reward": 1.0}  # the work it did before still counts


def test_429_twice_then_200_is_retried_and_the_trial_succeeds(runtime, tmp_path):
    make_task(tmp_path / "ds", "flaky")
    script = {"fail_first": {"status": 429, "times": 2}, "rules": [
        {"when": {"turn": 0}, "reply": {"tool_calls": [{"name": "shell", "arguments": {"command": "touch /app/ok"}}]}},
        {"when": {}, "reply": {"content": "done"}}]}
    _, trials = run_with(runtime, tmp_path / "ds", tmp_path / "jobs", manifest("scripted"),
                         endpoints=[script_endpoint(tmp_path, script)])
    result, _ = trials["flaky"]
    assert result.reward == {"reward": 1.0} and result.model.retries == 2
    assert result.agent_outcome == "ok"


def test_the_api_key_appears_nowhere_in_the_job_folder_or_the_containers(runtime, tmp_path, monkeypatch):
    key = "sk-fake-" + uuid.uuid4().hex
    monkeypatch.setenv("ORCH_FAKE_KEY", key)
    upstream = ReplayServer({"rules": [
        {"when": {"turn": 0}, "reply": {"tool_calls": [{"name": "shell", "arguments": {"command": "env; touch /app/ok"}}]}},
        {"when": {}, "reply": {"content": "done"}}]}).start()
    endpoints = tmp_path / "live.json"
    endpoints.write_text(json.dumps({"live": {"provider": "openai", "base_url": upstream.url, "model": "gpt-test",
                                              "api_key_env": "ORCH_FAKE_KEY"}}))
    make_task(tmp_path / "ds", "secret", toml="[verifier]\nenvironment_mode = 'snapshot'\n")
    inspected: list[str] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for row in runtime.api.containers(all=True, filters={"label": "orchestra.kind"}):
                try:
                    inspected.append(json.dumps(runtime.api.inspect_container(row["Id"])))
                except Exception:
                    pass
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _, trials = run_with(runtime, tmp_path / "ds", tmp_path / "jobs", manifest("live"), endpoints=[endpoints])
    finally:
        stop.set()
        watcher.join()
        upstream.stop()
    result, _ = trials["secret"]
    assert result.reward == {"reward": 1.0}
    assert upstream.engine.authorizations[0] == f"Bearer {key}"  # the proxy did add it upstream
    kinds = {json.loads(i)["Config"]["Labels"]["orchestra.kind"] for i in inspected}
    assert {"agent", "verifier"} <= kinds
    assert not any(key in blob for blob in inspected)
    for path in (tmp_path / "jobs").rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path


@pytest.mark.parametrize("text, fragment", [
    ("roster:\n  - {id: a, kind: orchestrator, agent: reference, endpoint: replay}\n"
     "  - {id: b, kind: orchestrator, agent: nop}\n", "exactly one member"),
    ("roster:\n  - {id: a, kind: orchestrator, agent: reference, endpoint: no-such}\n", "'no-such'"),
    ("roster:\n  - {id: a, kind: orchestrator, agent: reference, endpoint: replay,\n"
     "     prompt: {path: p.md, sha256: '0000'}}\n", "roster.a.prompt.sha256"),
    ("roster:\n  - {id: a, kind: orchestrator, agent: reference, endpoint: openai-live}\n", "$OPENAI_API_KEY"),
])
def test_bad_manifests_and_missing_keys_exit_2(tmp_path, text, fragment):
    make_task(tmp_path / "ds", "t")
    (tmp_path / "p.md").write_text("You are careful.\n")
    path = tmp_path / "m.yaml"
    path.write_text(text)
    env = {k: v for k, v in __import__("os").environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(tmp_path / "ds"), "--manifest", str(path),
                           "--jobs-dir", str(tmp_path / "jobs"), "--endpoints", str(ENDPOINTS[0]),
                           "--endpoints", str(ENDPOINTS[1])],
                          capture_output=True, text=True, env={**env})
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr, proc.stderr
    assert not (tmp_path / "jobs").exists() or not list((tmp_path / "jobs").rglob("result.json"))


def test_a_command_agent_installs_once_into_a_cached_layer_and_runs_its_template(runtime, tmp_path):
    make_task(tmp_path / "ds", "cli")
    install = """
cat > /usr/local/bin/tiny-agent <<'PY'
#!/usr/bin/env python3
import json, sys
instruction, workdir, deadline = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(instruction).read()
open(workdir + "/ok", "w").write("done")
with open("/logs/agent/trajectory.jsonl", "a") as t:
    t.write(json.dumps({"seq": 0, "event": {"kind": "message", "text": "did: " + text.strip()}}) + "\\n")
print("tiny-agent finished before", deadline)
PY
chmod +x /usr/local/bin/tiny-agent
"""
    lineup = Manifest.model_validate({"condition": "cli", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "command", "install": install,
         "command": "tiny-agent {instruction_file} {workdir} {deadline}"}]})
    job1, trials = run_with(runtime, tmp_path / "ds", tmp_path / "jobs", lineup)
    result, folder = trials["cli"]
    assert result.reward == {"reward": 1.0} and result.agent_outcome == "ok"
    assert "tiny-agent finished before" in (folder / "agent/stdout.txt").read_text()
    assert "did: Do the cli thing." in (folder / "agent/trajectory.jsonl").read_text()
    assert result.image.endswith("-install-" + __import__("hashlib").sha256(install.encode()).hexdigest()[:12])
    job2, _ = run_with(runtime, tmp_path / "ds", tmp_path / "jobs", lineup)
    assert job2.images_built == 0


def test_roster_workers_run_in_their_own_containers_with_their_own_identities(runtime, tmp_path):
    make_task(tmp_path / "ds", "team", toml="[relay]\nenabled = true\n", solve="sleep 3\ntouch /app/ok\n")
    lineup = Manifest.model_validate({"condition": "team", "roster": [
        {"id": "lead", "kind": "orchestrator", "agent": "oracle"},
        {"id": "helper", "kind": "worker", "role": "researcher", "agent": "command", "count": 2,
         "command": "chan post \"$(chan whoami | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"name\"])') reporting\""},
        {"id": "idle", "kind": "worker", "agent": "nop"}]})
    _, trials = run_with(runtime, tmp_path / "ds", tmp_path / "jobs", lineup)
    result, folder = trials["team"]
    assert result.reward == {"reward": 1.0}
    assert sorted((w.name, w.exit_code) for w in result.workers) == [("helper-1", 0), ("helper-2", 0)]
    # each container's OCI runtime, read back (the engine's default here: no --runtime)
    assert set(result.container_runtimes) == {"agent", "worker:helper-1", "worker:helper-2"}
    assert len(set(result.container_runtimes.values())) == 1, result.container_runtimes
    evidence = json.loads((folder / "artifacts/relay-evidence.json").read_text())
    posts = sorted((m["author"], m["author_role"], m["content"]) for m in evidence["messages"] if m["author"] != "user")
    assert posts == [("helper-1", "worker", "helper-1 reporting"), ("helper-2", "worker", "helper-2 reporting")]
    assert {n: i["role"] for n, i in evidence["identities"].items()} == {
        "lead": "orchestrator", "helper-1": "worker", "helper-2": "worker", "idle": "worker", "user": "user"}
    assert (folder / "workers/helper-1/stdout.txt").is_file()


HELLO = "echo 'Hello, world!' > /app/hello.txt"
FENCED = "I will create the file.\n```json\n" + json.dumps(
    {"name": "shell", "arguments": {"command": HELLO}}) + "\n```"
TAGGED = "<tool_call>\n" + json.dumps({"name": "shell", "arguments": {"command": HELLO}}) + "\n</tool_call>"
NATIVE = {"tool_calls": [{"name": "shell", "arguments": {"command": HELLO}}]}


@pytest.mark.parametrize("case, script", [
    ("fenced-json", {"rules": [{"when": {"turn": 0}, "reply": {"content": FENCED}},
                               {"when": {}, "reply": {"content": "Done."}}]}),
    ("tool-call-tags", {"rules": [{"when": {"turn": 0}, "reply": {"content": TAGGED}},
                                  {"when": {}, "reply": {"content": "Done."}}]}),
    ("invalid-call-corrected", {"rules": [
        {"when": {"turn": 0}, "reply": {"content": "```json\n" + json.dumps({"name": "mem_write", "arguments": {"slug": "x"}}) + "\n```"}},
        {"when": {"turn": 1}, "reply": {"content": FENCED}}, {"when": {}, "reply": {"content": "Done."}}]}),
    ("500-once", {"fail_first": {"status": 500, "times": 1},
                  "rules": [{"when": {"turn": 0}, "reply": NATIVE}, {"when": {}, "reply": {"content": "Done."}}]}),
    ("cut-at-length", {"rules": [{"when": {"turn": 0}, "reply": {"content": "Let me think about wh",
                                                                  "finish_reason": "length"}},
                                 {"when": {"turn": 1}, "reply": NATIVE},
                                 {"when": {}, "reply": {"content": "Done."}}]}),
])
def test_the_reference_agent_survives_what_real_servers_send(runtime, tmp_path, case, script):
    import shutil
    shutil.copytree(ROOT / "tasks/examples/hello-file", tmp_path / "ds" / "hello-file")
    _, trials = run_with(runtime, tmp_path / "ds", tmp_path / "jobs", manifest("scripted"),
                         endpoints=[script_endpoint(tmp_path, script)])
    result, folder = trials["hello-file"]
    assert result.reward == {"reward": 1.0}, (case, result.error)
    trajectory = [json.loads(x) for x in (folder / "agent/trajectory.jsonl").read_text().splitlines()]
    dispatched = [x["event"]["tool"] for x in trajectory if x.get("event", {}).get("kind") == "tool_dispatch"]
    assert dispatched and dispatched[0]["name"] == "shell" and dispatched[0]["args"] == {"command": HELLO}
    if case == "invalid-call-corrected":  # told what was wrong, then called a real tool
        texts = [x["event"].get("text") or "" for x in trajectory if x.get("event", {}).get("kind") == "text"]
        assert any("there is no tool 'mem_write'" in t for t in texts) and result.model.calls == 3
    if case == "cut-at-length":
        assert any("cut at max_tokens" in (x.get("event", {}).get("text") or "") for x in trajectory)
        assert result.model.calls == 3


def test_a_slow_endpoint_is_an_endpoint_error_in_the_trajectory_not_a_crash(runtime, tmp_path):
    """The upstream never answers in time: the agent records why and exits cleanly; the
    trial is endpoint_error (the provider's failure, not the agent's 0); the proxy never
    sends the request again after the agent stopped waiting."""
    import http.server
    import socketserver

    seen: list[float] = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            seen.append(time.time())
            time.sleep(13)  # then hangs up without an answer: a retryable failure

        def log_message(self, *args):
            pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoints = tmp_path / "slow.json"
    endpoints.write_text(json.dumps({"slow": {"provider": "openai", "base_url":
                                              f"http://127.0.0.1:{server.server_address[1]}/v1",
                                              "model": "m"}}))
    make_task(tmp_path / "ds", "slow", toml="[agent]\ntimeout_sec = 15\n")  # 10 s of it the agent keeps for its end
    try:
        _, trials = run_with(runtime, tmp_path / "ds", tmp_path / "jobs", manifest("slow"),
                             endpoints=[endpoints], max_retries=0)
        time.sleep(max(0.0, seen[0] + 17 - time.time()))  # past the moment a retry would go out
    finally:
        server.shutdown()
    result, folder = trials["slow"]
    trajectory = (folder / "agent/trajectory.jsonl").read_text()
    assert "endpoint" in trajectory and "Traceback" not in (folder / "agent/stderr.txt").read_text()
    assert result.agent_outcome == "endpoint_error" and result.agent_exit_code != 1
    assert result.failure_mode == "endpoint_error" and "stopped waiting" in result.error
    assert result.model.abandoned == 1 and len(seen) == 1, seen  # never re-sent


def test_model_and_endpoint_config_pick_an_endpoint_without_a_manifest(tmp_path):
    proc = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples/hello-file"),
                           "--endpoint-config", str(ROOT / "endpoints/replay.json"), "-m", "replay",
                           "--jobs-dir", str(tmp_path), "--job-name", "m", "-q"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    job = json.loads((tmp_path / "m/result.json").read_text())
    assert job["agent"] == "reference" and job["mean_reward"] == 1.0
    refused = subprocess.run([ORCHESTRA, "run", "--path", str(ROOT / "tasks/examples/hello-file"),
                              "--agent", "command", "--jobs-dir", str(tmp_path)], capture_output=True, text=True)
    assert refused.returncode == 2 and "run template" in refused.stderr
