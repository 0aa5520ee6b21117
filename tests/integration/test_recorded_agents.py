"""Every agent orchestra runs, replayed from what it exchanged with a real llama.cpp server
(tests/fixtures/llamacpp-agents, recorded by `make test-models`; see its README): the
proxy serves each recorded answer back (`--replay-from`), through the agent's own API
(Messages, Responses, Gemini translated from the recorded Chat Completions), so every
`make test` drives each CLI over real-server shapes. Each replayed trial must end as the
live one did: the same reward, outcome, failure mode, calls and tokens (live.json holds
what the live trial ended with, measured), no call the recording lacks, and an ATIF that
Harbor's own models accept; the trials whose live run was an upstream fault are not
replayed (see ANSWERED). The CLIs come from npm/PyPI on a machine's first run; without
the registry and the cache they skip (the network-host part)."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import ROOT
from test_atif_harbor import harbor_judges

from orchestrator.job.runner import JobOptions, run_job
from orchestrator.models.endpoint import load_endpoints
from orchestrator.models.manifest import load_manifest
from orchestrator.models.result import TrialResult
from orchestrator.tasks.load import load_tasks

FIXTURES = ROOT / "tests/fixtures/llamacpp-agents"
RECORDED = sorted(p.name for p in FIXTURES.iterdir() if (p / "live.json").is_file())
TASKS = {"hello-file": ROOT / "tasks/examples/hello-file", "mb-exact": ROOT / "tasks/memorybench/mb-exact"}
# Nothing listens there: every answer comes from the recording.
ENDPOINTS = {"local": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                       "model": "qwen2.5-coder-0.5b-instruct", "env": {}}}
INSTALL_OF = {"acp-opencode": "opencode", "acp-qwen-code": "qwen-code"}

pytestmark = pytest.mark.part("network-host")


def live(agent: str) -> dict:
    return json.loads((FIXTURES / agent / "live.json").read_text())


def installable(agent: str, host_network: bool) -> None:
    if agent == "reference":
        return
    from orchestrator.agents.installed import INSTALLED

    if not host_network and not INSTALLED[INSTALL_OF.get(agent, agent)].is_installed():
        pytest.skip(f"needs PyPI or npm from the host to install {agent} (network-host)")


def dataset(root: Path, task: str) -> Path:
    """The task as `make test-models` ran it (scripts/test-models.py `dataset`): in a folder
    named `ds` (a replayed trial is matched by its task's name), mb-exact at 1024 MB."""
    ds = root / "ds"
    shutil.copytree(TASKS[task], ds / task)
    toml = ds / task / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 512", "memory_mb = 1024"))
    return ds


def dated_today(agent: str, into: Path) -> Path:
    """The recording with the day each trial was made written as today, in the forms the
    CLIs put it in their prompts (Claude Code's "Today's date is 2026-12-07.", Codex's
    `<current_date>`, Gemini CLI's and Qwen Code's "Monday, December 7, 2026"): a replay
    matches a call by its task message and the head of its system prompt, which hold it."""
    shutil.copytree(FIXTURES / agent, into)
    today = datetime.now(UTC)
    for trial in live(agent)["trials"]:
        day = datetime.strptime(trial["recorded"], "%Y-%m-%d").replace(tzinfo=UTC)
        forms = [(f"{day:%Y-%m-%d}", f"{today:%Y-%m-%d}"),
                 (f"{day:%A, %B} {day.day}, {day:%Y}", f"{today:%A, %B} {today.day}, {today:%Y}")]
        path = into / "trials" / trial["task"] / "model/exchanges.jsonl"
        text = path.read_text()
        for old, new in forms:
            text = text.replace(old, new)
        path.write_text(text)
    return into


def replay(runtime, tmp_path: Path, agent: str, task: str) -> tuple[TrialResult, Path]:
    recording = dated_today(agent, tmp_path / "recorded")
    endpoints = tmp_path / "endpoints.json"  # with the dialect the live trial's endpoint had
    dialect = next(t for t in live(agent)["trials"] if t["task"] == task).get("endpoint", {})
    endpoints.write_text(json.dumps({"local": {**ENDPOINTS["local"], **dialect}}))
    options = JobOptions(job_name=f"rec-{agent}-{uuid.uuid4().hex[:6]}", jobs_dir=tmp_path / "jobs",
                         n_concurrent=1, endpoints=load_endpoints([endpoints]),
                         replay_from=recording, max_retries=0)
    run_job(runtime, load_tasks(dataset(tmp_path, task)), load_manifest(FIXTURES / agent / "manifest.yaml"),
            options)
    (folder,) = (tmp_path / "jobs" / options.job_name / "trials").iterdir()
    return TrialResult.model_validate_json((folder / "result.json").read_text()), folder


# The trials the server answered (whatever the agent then did). A trial whose live run was
# an upstream fault is left out of the replay: its exchange holds the proxy's verdict (a 502
# it made of a stream the server ended with `[DONE]` and no finish_reason, or of a 200 with
# no body), not the server's stream, so a replay would serve the agent a 502 the server
# never sent (README: opencode, acp-opencode, claude-code, qwen-code).
ANSWERED = [(agent, t["task"]) for agent in RECORDED for t in live(agent)["trials"]
            if t["failure_mode"] == "none"]


@pytest.mark.parametrize(("agent", "task"), ANSWERED)
def test_a_replayed_agent_ends_as_it_did_on_the_real_server(runtime, tmp_path, host_network, agent, task):
    installable(agent, host_network)
    want = next(t for t in live(agent)["trials"] if t["task"] == task)
    result, folder = replay(runtime, tmp_path, agent, task)
    model = result.model
    assert model is not None, result.error
    assert "replay_diverged" not in (model.last_error or ""), model.last_error
    got = {"reward": (result.reward or {}).get("reward"), "agent_outcome": result.agent_outcome,
           "failure_mode": str(result.failure_mode), "agent_exit_code": result.agent_exit_code,
           "calls": model.calls, "prompt_tokens": model.prompt_tokens,
           "completion_tokens": model.completion_tokens}
    assert got == {k: want[k] for k in got}, (result.error, model.last_error)
    verdict = harbor_judges([folder / "agent/trajectory.atif.json"])
    assert not verdict["invalid"], verdict["invalid"]


@pytest.mark.parametrize("agent", RECORDED)
def test_every_recording_is_the_real_servers(agent):
    """What the fixture holds came from the server: each exchange the proxy recorded has a
    line the meter wrote as the server answered it (scripts/test-models.py); the server
    reported usage on every whole answer and on no stream; where no call streamed,
    orchestra recorded exactly the server's tokens."""
    recorded = live(agent)
    assert recorded["server"].startswith("llama-cpp-python "), recorded["server"]
    for want in recorded["trials"]:
        folder = FIXTURES / agent / "trials" / want["task"]
        exchanges = [json.loads(x) for x in (folder / "model/exchanges.jsonl").read_text().splitlines()]
        upstream = [json.loads(x) for x in (folder / "upstream.jsonl").read_text().splitlines()]
        assert len(exchanges) == want["upstream_calls"] == len(
            [u for u in upstream if "chat/completions" in u["path"]])
        # a call still waiting at the deadline is counted, and neither recorded nor answered
        assert want["calls"] == len(exchanges) + (want["agent_outcome"] == "timeout")
        streamed = [u for u in upstream if u["stream"]]
        # llama-cpp-python 0.3.36 reports usage on whole answers only, though the proxy asks
        # for it on every stream (`stream_options.include_usage`)
        assert all(u["include_usage_asked"] and u["usage"] is None for u in streamed)
        assert all(u["usage"] for u in upstream if not u["stream"] and u["status"] == 200)
        if not streamed:  # every call's usage reported: orchestra recorded exactly the server's
            assert (want["prompt_tokens"], want["completion_tokens"]) == (
                want["upstream_prompt_tokens"], want["upstream_completion_tokens"])
