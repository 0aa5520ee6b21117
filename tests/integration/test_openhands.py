"""OpenHands (PyPI openhands-ai 1.6.0, its headless CLI with the local runtime) in real trials
on the real engine, through the trial's model proxy in Chat Completions, against the
scripted endpoint of tests/integration/scripted_apis.py, whose script here is OpenHands'
own tools: `execute_bash` with the command that writes the file, then `finish`.

It solves tasks/examples/hello-file on its shipped image (python:3.12-slim-bookworm; on a
machine without Docker Hub the bookworm stand-in, python3 3.11): OpenHands needs Python >=
3.12 and runs on Debian trixie's python3.13, mounted with its own glibc and run through
that loader, so the image's Python is never used. It needs 1 GB (its CLI and its action
server hold ~690 MB together), which hello-file as shipped gives; a copy lowered to
memory_mb = 512 is refused with that reason before any model call. Its calls
are whole answers (as OpenHands asks) or streamed (ORCHESTRA_STREAM=1, a member's env).

Its install (wheels for 3.13 compiled to .pyc, and trixie's Python and tmux from Debian's
archive) is part of `orchestra agents --install all` (make test); where it is missing the
fixture installs it, once per machine, into ~/.cache/orchestra/agents."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT
from scripted_apis import DONE_TEXT, Scripted
from test_api_agents import FAKE_KEY, EnvWatch
from test_atif_harbor import harbor_judges

ORCHESTRA = str(Path(sys.executable).parent / "orchestra")
HELLO = ROOT / "tasks/examples/hello-file"
# the task, then which python3 the agent's shell finds (the image's, or none) and its environment
COMMAND = ("printf 'Hello, world!\\n' > /app/hello.txt; command -v python3 > /logs/agent/python3-seen.txt; "
           "env > /logs/agent/env-seen.txt")

pytestmark = pytest.mark.part("network-host")


class OpenHandsScript(Scripted):
    """The scripted model, speaking to OpenHands' tools: the bash call, then `finish`."""

    def next_call(self, tools: list, done: bool) -> dict | None:  # type: ignore[type-arg]
        if not done and "execute_bash" in tools:
            return {"id": uuid.uuid4().hex[:12], "name": "execute_bash",
                    "args": {"command": COMMAND, "security_risk": "LOW"}}
        if done and "finish" in tools:
            return {"id": uuid.uuid4().hex[:12], "name": "finish", "args": {"message": DONE_TEXT}}
        return None


@pytest.fixture(scope="module", autouse=True)
def _installed(host_network: bool) -> None:
    """OpenHands installed on this host (the test's own install, timed; once per machine)."""
    from orchestrator.agents.installed import INSTALLED

    agent = INSTALLED["openhands"]
    if not agent.is_installed():
        if not host_network:
            pytest.skip("needs PyPI from the host to install OpenHands (network-host)")
        started = time.monotonic()
        proc = subprocess.run([ORCHESTRA, "agents", "--install", "openhands"], capture_output=True,
                              text=True, timeout=3600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        print(f"openhands installed in {time.monotonic() - started:.0f} s")
    assert agent.is_installed()


def hello_file_copy(tmp_path: Path, dockerfile: str | None = None, memory_mb: int | None = None) -> str:
    """A copy of hello-file with another image (`dockerfile`) or other memory, all else as
    shipped (1024 MB)."""
    task = tmp_path / "tasks/hello-file"
    shutil.copytree(HELLO, task)
    if dockerfile is not None:
        (task / "environment/Dockerfile").write_text(dockerfile)
    if memory_mb is not None:
        toml = task / "task.toml"
        text = toml.read_text()
        assert "\nmemory_mb = 1024\n" in text
        toml.write_text(text.replace("\nmemory_mb = 1024\n", f"\nmemory_mb = {memory_mb}\n", 1))
    return str(task)


def run_openhands(tmp_path: Path, task: str, max_turns: int | None = None, stream: bool = False
                  ) -> tuple[dict, Path, Scripted, EnvWatch]:  # type: ignore[type-arg]
    with OpenHandsScript(COMMAND, key=FAKE_KEY) as upstream, EnvWatch() as watch:
        config = tmp_path / "endpoints.json"
        config.write_text(json.dumps({"scripted": {
            "base_url": upstream.url + "/v1", "model": "scripted-model", "apis": ["chat"],
            "api_key_env": "SCRIPTED_KEY", "env": {}}}))
        who = ["--agent", "openhands", "-m", "scripted"]
        if max_turns is not None or stream:
            manifest = tmp_path / "m.yaml"
            manifest.write_text("schema_version: 1\ncondition: c\nroster:\n  - id: lead\n"
                                "    kind: orchestrator\n    agent: openhands\n    endpoint: scripted\n"
                                + (f"    generation: {{max_turns: {max_turns}}}\n" if max_turns else "")
                                + ("    env: {ORCHESTRA_STREAM: '1'}\n" if stream else ""))
            who = ["--manifest", str(manifest)]
        started = time.monotonic()
        proc = subprocess.run(
            [ORCHESTRA, "run", "--path", task, *who, "--endpoint-config", str(config),
             "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j", "-q"],
            capture_output=True, text=True, timeout=600, env={**os.environ, "SCRIPTED_KEY": FAKE_KEY})
        assert proc.returncode == 0, proc.stderr
        print(f"openhands: {time.monotonic() - started:.1f} s")
    (folder,) = (tmp_path / "jobs/j/trials").iterdir()
    return json.loads((folder / "result.json").read_text()), folder, upstream, watch


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openhands_solves_hello_file_on_its_shipped_image_through_the_proxy_and_never_sees_the_key(
        tmp_path: Path, stream: bool) -> None:
    result, folder, upstream, watch = run_openhands(tmp_path, str(HELLO), stream=stream)  # as shipped
    stderr = (folder / "agent/stderr.txt").read_text(errors="replace")[-3000:]
    # the scripted endpoint answers 401 without the key: reward 1 shows the proxy added it
    assert result["reward"] == {"reward": 1.0}, (result.get("error"), stderr)
    assert result["agent_outcome"] == "ok" and result["agent_exit_code"] == 0, stderr
    # two calls: the bash call, then finish; each asked in Chat Completions for the proxy's
    # model name and relayed as the endpoint's own, streamed or not as the agent asked
    posts = [r for r in upstream.requests if r["method"] == "POST"]
    assert result["model"]["calls"] == len(posts) == 2 and result["model"]["upstream_refusals"] == 0
    assert {r["path"] for r in posts} == {"/v1/chat/completions"}
    assert {r["body"]["model"] for r in posts} == {"scripted-model"}
    assert [bool(r["body"].get("stream")) for r in posts] == [stream, stream]
    # the image's own python3 (3.11 on the stand-in, 3.12 on Docker Hub's image) was not the
    # one OpenHands ran on: its shell's PATH starts with the mounted Python's folder
    seen = (folder / "agent/env-seen.txt").read_text()
    assert "PATH=/opt/orchestra-agents/openhands-runtime/root/usr/bin:" in seen, seen
    # OpenHands' packages are not on its shell's PYTHONPATH (the image sets none): the task's
    # python3 there imports the image's packages, not OpenHands' builds for 3.13
    assert not [line for line in seen.splitlines() if line.startswith("PYTHONPATH=")], seen
    # and its python3 is still the image's own (/usr/bin on the stand-in, /usr/local/bin on Docker Hub's)
    assert (folder / "agent/python3-seen.txt").read_text().strip() in ("/usr/bin/python3", "/usr/local/bin/python3")
    # its own trajectory, converted: the bash call with its command, its result, finish's
    # message as the closing text
    events = [json.loads(x)["event"] for x in (folder / "agent/trajectory.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["kind"] == "tool_dispatch"]
    assert [c["tool"]["name"] for c in calls] == ["execute_bash"], events
    assert calls[0]["tool"]["args"]["command"] == COMMAND
    results = [e for e in events if e["kind"] == "tool_result"]
    assert len(results) == 1 and results[0]["tool"]["id"] == calls[0]["tool"]["id"]
    # the exit code is OpenHands' own report, carried over by the converter (its mapping is
    # tests/unit/test_openhands_convert.py's). OpenHands' report is not always 0 here: on an
    # image without git its runtime's own `git config` fails in the same shell just before
    # (command not found, 127, every run), and the first command has at times been reported
    # 127 (2 of ~12 clean-clone runs; most likely that failure's code; the file written and
    # reward 1 all the same). What this asserts is orchestra's part: the report carried over
    own = [e for e in json.loads((folder / "agent/openhands.trajectory.json").read_text())
           if e.get("observation") == "run"]
    reported = own[0]["extras"]["metadata"]["exit_code"]
    assert len(own) == 1 and isinstance(reported, int), own
    assert results[0]["tool"]["name"] == "execute_bash" and results[0]["tool"].get("exit_code") == reported, results
    assert bool(results[0]["tool"].get("err")) == (reported not in (0, -1)), results
    assert events[-1] == {"kind": "message", "text": DONE_TEXT}
    assert result["memory"]["complete"] is True, result["memory"]
    # ATIF: written from the same trajectory, the call in it, valid by Harbor's own models
    atif = json.loads((folder / "agent/trajectory.atif.json").read_text())
    verdict = harbor_judges([folder / "agent/trajectory.atif.json"])
    assert verdict["invalid"] == {} and len(verdict["valid"]) == 1, verdict
    assert atif["schema_version"].startswith("ATIF") and atif["agent"]["name"] == "openhands"
    assert any(call["function_name"] == "execute_bash" for step in atif["steps"]
               for call in step.get("tool_calls") or []), atif
    # the key: in no container's configured environment, not in what OpenHands' shell had,
    # in no file of the job; the per-trial token went to the agent's process only
    assert "ORCHESTRA_MODEL_TOKEN=" in seen and "LLM_API_KEY=" in seen and FAKE_KEY not in seen
    assert any(e.startswith("ORCHESTRA_MODEL_URL=") for env in watch.envs.values() for e in env)
    assert not any(FAKE_KEY in e for env in watch.envs.values() for e in env)
    assert not any(e.startswith("ORCHESTRA_MODEL_TOKEN=") for env in watch.envs.values() for e in env)
    holding = [str(p) for p in (tmp_path / "jobs").rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert holding == []


def test_openhands_stopped_by_its_own_iteration_limit_is_a_step_limit_on_an_image_without_python(
        tmp_path: Path) -> None:
    # an image with no Python at all and an older glibc (Debian 11's 2.31; trixie's Python
    # needs 2.38 from the image's loader): OpenHands runs all the same, on its own loader.
    # One iteration: the bash call runs (the file is written), then its limit stops it
    # before finish; OpenHands exits 0 either way, its log says why
    # (and a PYTHONPATH of its own, which the agent's shell keeps as the image set it)
    image = ("FROM debian:bullseye-slim\nRUN rm -f /usr/bin/python3* /usr/local/bin/python3*\n"
             "ENV PYTHONPATH=/app/src\nWORKDIR /app\n")
    result, folder, upstream, _ = run_openhands(tmp_path, hello_file_copy(tmp_path, image), max_turns=1)
    stderr = (folder / "agent/stderr.txt").read_text(errors="replace")
    seen = (folder / "agent/env-seen.txt").read_text()
    assert result["build_failure"] is None and "PATH=" in seen, stderr[-3000:]
    assert (folder / "agent/python3-seen.txt").read_text() == ""  # no python3 in this image
    assert [line for line in seen.splitlines() if line.startswith("PYTHONPATH=")] == ["PYTHONPATH=/app/src"]
    assert result["agent_outcome"] == "step_limit" and result["agent_exit_code"] == 5, stderr[-3000:]
    assert "Agent reached maximum iteration" in stderr
    assert result["model"]["calls"] == 1 and result["reward"] == {"reward": 1.0}


def test_openhands_is_refused_with_the_reason_where_the_task_gives_it_too_little_memory(tmp_path: Path) -> None:
    result, folder, upstream, _ = run_openhands(tmp_path, hello_file_copy(tmp_path, memory_mb=512))
    stderr = (folder / "agent/stderr.txt").read_text()
    assert result["agent_exit_code"] == 127 and result["agent_outcome"] == "crashed", stderr
    assert "openhands needs at least 1024 MB of memory (the task gives 512 MB" in stderr
    assert upstream.requests == [] and result["model"]["calls"] == 0  # before any model call
    assert result["reward"] == {"reward": 0.0}


def test_orchestra_agents_lists_openhands_with_its_version_and_what_the_image_needs() -> None:
    proc = subprocess.run([ORCHESTRA, "agents", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (row,) = [a for a in json.loads(proc.stdout) if a["name"] == "openhands"]
    assert row["version"] == "1.6.0" and row["api"] == "chat" and row["installed"] is True
    assert "x86-64 Linux" in row["needs"] and "none of the image's used" in row["needs"]
    assert "1024 MB" in row["needs"]
