"""The agent CLIs that speak their own model API (Claude Code: Anthropic Messages, Codex:
OpenAI Responses, Gemini CLI: Gemini generateContent; Qwen Code: Chat Completions) in real
trials on the real engine: each solves tasks/examples/hello-file through the trial's model
proxy against a scripted endpoint (tests/integration/scripted_apis.py, written to the APIs'
documented shapes, streaming) that answers only with the key, first where the endpoint
speaks the agent's API (relayed), then where it speaks only Chat Completions (translated).

The key must appear in no container's environment (`docker inspect`, watched while the
trial runs; and what the agent's own shell saw, dumped by the scripted command) and in no
file of the job. The CLIs come from npm on a machine's first run (~/.cache/orchestra/agents,
about 1.1 GB for these four and Node); without the registry and the cache they skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT
from scripted_apis import DONE_TEXT, Scripted

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
FAKE_KEY = "sk-fake-api-agents-5c81d0e4"
HELLO = str(ROOT / "tasks/examples/hello-file")
# what the scripted model asks the agent's shell tool to run: the task, and the environment
# the agent's own processes have (copied out with the trial; the key must not be in it)
COMMAND = "printf 'Hello, world!\\n' > /app/hello.txt; env > /logs/agent/env-seen.txt"
API_OF = {"claude-code": "messages", "codex": "responses", "gemini-cli": "gemini", "qwen-code": "chat"}
# the agent's shell tool, as the scripted model calls it (checked in the trajectory)
TOOL_OF = {"claude-code": "Bash", "codex": "shell", "gemini-cli": "run_shell_command",
           "qwen-code": "run_shell_command"}

pytestmark = pytest.mark.part("network-host")


@pytest.fixture(autouse=True)
def _installable(host_network):
    from orchestrator.agents.installed import INSTALLED

    if not host_network and not all(INSTALLED[a].is_installed() for a in API_OF):
        pytest.skip("needs the npm registry from the host to install the agent CLIs (network-host)")


class EnvWatch:
    """Every orchestra container's configured environment (`docker inspect`), read while
    a job runs."""

    def __init__(self) -> None:
        import docker

        self.client = docker.from_env()
        self.envs: dict[str, list[str]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self) -> None:
        while not self.stop.is_set():
            try:
                for row in self.client.api.containers(all=True, filters={"label": "orchestra.kind"}):
                    if row["Id"] not in self.envs:
                        self.envs[row["Id"]] = self.client.api.inspect_container(row["Id"])["Config"]["Env"] or []
            except Exception:  # a container gone between the listing and the inspect
                pass
            time.sleep(0.1)

    def __enter__(self) -> EnvWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.client.close()


def hello_file(tmp_path: Path, memory_mb: int | None) -> str:
    """tasks/examples/hello-file as shipped (1024 MB), or a copy given other memory."""
    if memory_mb is None:
        return HELLO
    task = tmp_path / "tasks/hello-file"
    shutil.copytree(HELLO, task)
    toml = task / "task.toml"
    text = toml.read_text()
    assert "\nmemory_mb = 1024\n" in text
    toml.write_text(text.replace("\nmemory_mb = 1024\n", f"\nmemory_mb = {memory_mb}\n", 1))
    return str(task)


def run_agent(tmp_path: Path, agent: str, apis: list[str], memory_mb: int | None = None
              ) -> tuple[dict, Path, Scripted, EnvWatch]:
    with Scripted(COMMAND, key=FAKE_KEY) as upstream, EnvWatch() as watch:
        config = tmp_path / "endpoints.json"
        config.write_text(json.dumps({"scripted": {
            "base_url": upstream.url + "/v1", "model": "scripted-model", "apis": apis,
            "api_key_env": "SCRIPTED_KEY", "env": {}}}))
        started = time.monotonic()
        proc = subprocess.run(
            [ORCHESTRA, "run", "--path", hello_file(tmp_path, memory_mb), "--agent", agent, "--endpoint-config", str(config),
             "-m", "scripted", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j", "-q"],
            capture_output=True, text=True, timeout=600, env={**os.environ, "SCRIPTED_KEY": FAKE_KEY})
        assert proc.returncode == 0, proc.stderr
        print(f"{agent} ({', '.join(apis)}): {time.monotonic() - started:.1f} s")
    (folder,) = (tmp_path / "jobs/j/trials").iterdir()
    return json.loads((folder / "result.json").read_text()), folder, upstream, watch


def check_solved_without_the_key(tmp_path: Path, agent: str, result: dict, folder: Path,
                                 upstream: Scripted, watch: EnvWatch) -> None:
    stderr = (folder / "agent/stderr.txt").read_text(errors="replace")[-3000:]
    # the scripted endpoint answers 401 without the key: reward 1 shows the proxy added it
    assert result["reward"] == {"reward": 1.0}, (result.get("error"), stderr)
    assert result["agent_outcome"] == "ok" and result["agent_exit_code"] == 0, stderr
    assert result["model"]["calls"] >= 2 and result["model"]["upstream_refusals"] == 0
    # every model name the CLI asked for reached the endpoint as the endpoint's own model
    models = {str((r["body"] or {}).get("model") or r["path"].split("/models/")[-1].split(":")[0])
              for r in upstream.requests if r["method"] == "POST"}
    assert models == {"scripted-model"}, models
    # its own log, converted: the shell call with its command, its result, the closing text
    events = [json.loads(x)["event"] for x in (folder / "agent/trajectory.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["kind"] == "tool_dispatch"]
    assert [c["tool"]["name"] for c in calls] == [TOOL_OF[agent]], events
    assert "/app/hello.txt" in json.dumps(calls[0]["tool"]["args"])
    results = [e for e in events if e["kind"] == "tool_result"]
    assert len(results) == 1 and results[0]["tool"]["id"] == calls[0]["tool"]["id"]
    assert results[0]["tool"]["name"] == TOOL_OF[agent] and not results[0]["tool"].get("err")
    assert any(e["kind"] == "message" and DONE_TEXT in e["text"] for e in events), events
    assert result["memory"]["complete"] is True, result["memory"]
    # the key: in no container's configured environment (the watcher saw the agent's), not in
    # what the agent's shell had, in no file of the job; the per-trial token went to the agent
    seen = (folder / "agent/env-seen.txt").read_text()
    assert "ORCHESTRA_MODEL_TOKEN=" in seen and FAKE_KEY not in seen
    # (the watcher read the agent container's: its configured environment names the proxy)
    assert any(e.startswith("ORCHESTRA_MODEL_URL=") for env in watch.envs.values() for e in env)
    assert not any(FAKE_KEY in e for env in watch.envs.values() for e in env)
    assert not any(e.startswith("ORCHESTRA_MODEL_TOKEN=") for env in watch.envs.values() for e in env)
    holding = [str(p) for p in (tmp_path / "jobs").rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert holding == []


@pytest.mark.parametrize("agent", list(API_OF))
def test_an_agent_cli_solves_hello_file_in_its_own_api_relayed_and_never_sees_the_key(tmp_path, agent):
    # hello-file as shipped (1 GB): Qwen Code's Node heap alone reaches ~500 MB
    result, folder, upstream, watch = run_agent(tmp_path, agent, [API_OF[agent]])
    check_solved_without_the_key(tmp_path, agent, result, folder, upstream, watch)
    paths = {r["path"].split("?")[0] for r in upstream.requests if r["method"] == "POST"}
    expected = {"messages": "/v1/messages", "responses": "/v1/responses", "chat": "/v1/chat/completions",
                "gemini": "/v1/models/scripted-model:streamGenerateContent"}[API_OF[agent]]
    assert expected in paths, paths  # relayed: the endpoint was asked in the agent's own API


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini-cli"])
def test_an_agent_cli_solves_hello_file_through_translation_to_chat(tmp_path, agent):
    result, folder, upstream, watch = run_agent(tmp_path, agent, ["chat"])
    check_solved_without_the_key(tmp_path, agent, result, folder, upstream, watch)
    paths = {r["path"].split("?")[0] for r in upstream.requests if r["method"] == "POST"}
    assert paths == {"/v1/chat/completions"}, paths  # translated: the endpoint heard only chat


def test_qwen_code_is_refused_with_the_reason_where_the_task_gives_it_too_little_memory(tmp_path):
    result, folder, upstream, _ = run_agent(tmp_path, "qwen-code", ["chat"], memory_mb=512)  # a copy
    assert result["agent_exit_code"] == 127 and result["agent_outcome"] == "crashed"
    assert "qwen-code needs at least 1024 MB of memory (the task gives 512 MB" in \
        (folder / "agent/stderr.txt").read_text()
    assert upstream.requests == [] and result["model"]["calls"] == 0  # before any model call


def test_orchestra_agents_lists_each_cli_with_its_api_and_what_the_image_needs():
    proc = subprocess.run([ORCHESTRA, "agents", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    agents = {a["name"]: a for a in json.loads(proc.stdout)}
    for name, api in API_OF.items():
        assert agents[name]["api"] == api and agents[name]["needs"] and agents[name]["installed"] is True
    assert "glibc >= 2.28" in agents["gemini-cli"]["needs"] and "no Node" in agents["claude-code"]["needs"]


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini-cli"])
def test_a_budget_refusal_in_the_agents_own_api_stops_it_instead_of_retrying(tmp_path, agent):
    with Scripted(COMMAND, key=FAKE_KEY) as upstream:
        config = tmp_path / "endpoints.json"
        config.write_text(json.dumps({"scripted": {
            "base_url": upstream.url + "/v1", "model": "scripted-model", "apis": [API_OF[agent]],
            "api_key_env": "SCRIPTED_KEY", "env": {}}}))
        manifest = tmp_path / "m.yaml"
        manifest.write_text(f"schema_version: 1\ncondition: broke\nroster:\n  - id: lead\n    kind: orchestrator\n"
                            f"    agent: {agent}\n    endpoint: scripted\n    budget: {{max_calls: 0}}\n")
        proc = subprocess.run(
            [ORCHESTRA, "run", "--path", HELLO, "--manifest", str(manifest), "--endpoint-config", str(config),
             "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j", "-q"],
            capture_output=True, text=True, timeout=600, env={**os.environ, "SCRIPTED_KEY": FAKE_KEY})
        assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "jobs/j/trials").iterdir()
    result = json.loads((folder / "result.json").read_text())
    assert result["agent_outcome"] == "budget_exceeded" and result["failure_mode"] == "none", \
        (folder / "agent/stderr.txt").read_text()[-2000:]
    assert result["model"]["calls"] == 0 and 1 <= result["model"]["refused_budget"] <= 3  # no retry storm
    assert result["reward"] == {"reward": 0.0} and upstream.requests == []
