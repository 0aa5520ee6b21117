"""The agent CLIs' own logs converted to orchestra's trajectory (DESIGN 3.6), from samples
each CLI really wrote (tests/fixtures/agent_logs: Claude Code 2.1.332's stream-json, Codex
0.171.0's `exec --json`, Gemini CLI 0.61.0's and Qwen Code 0.15.10's stream-json, each run
on the host against tests/integration/scripted_apis.py), and their run scripts' wiring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.agents.installed import INSTALLED
from orchestrator.models.manifest import RosterMember
from orchestrator.models.trajectory import records

SAMPLES = Path(__file__).resolve().parent.parent / "fixtures/agent_logs"
NEW = ("claude-code", "codex", "gemini-cli", "qwen-code")
SHELL = {"claude-code": "Bash", "codex": "shell", "gemini-cli": "run_shell_command",
         "qwen-code": "run_shell_command"}


def agent(name: str, **generation: object):
    member = RosterMember(id="lead", kind="orchestrator", agent=name, endpoint="e", generation=generation)
    return INSTALLED[name](member)


def sample(name: str) -> list[dict]:
    return [r for _, r in records(SAMPLES / f"{name}.jsonl") if r is not None]


@pytest.mark.parametrize("name", NEW)
def test_a_cli_log_becomes_its_shell_call_the_result_paired_to_it_and_the_closing_text(name):
    events = [r["event"] for r in agent(name).convert(sample(name))]
    kinds = [e["kind"] for e in events if e["kind"] != "text"]
    assert kinds == ["tool_dispatch", "tool_result", "message"]
    call, result, message = (e for e in events if e["kind"] != "text")
    assert call["tool"]["name"] == SHELL[name] and "hello.txt" in json.dumps(call["tool"]["args"])
    # the result carries its call's id, name and arguments (the leak audit reads them there)
    assert {k: result["tool"][k] for k in ("id", "name", "args")} == call["tool"]
    assert "err" not in result["tool"]
    assert message["text"] == "Done: the file is written."


def test_codex_gives_the_exit_code_and_output_of_each_command():
    events = [r["event"] for r in agent("codex").convert([
        {"type": "item.started", "item": {"id": "i1", "type": "command_execution", "command": "ls"}},
        {"type": "item.completed", "item": {"id": "i1", "type": "command_execution", "command": "ls",
                                            "aggregated_output": "nope\n", "exit_code": 2, "status": "failed"}},
        {"type": "item.completed", "item": {"id": "i2", "type": "file_change",
                                            "changes": [{"path": "/app/a", "kind": "add"}], "status": "completed"}}])]
    assert [e["kind"] for e in events] == ["tool_dispatch", "tool_result", "tool_dispatch", "tool_result"]
    assert events[1]["tool"]["exit_code"] == 2 and events[1]["tool"]["err"] == "failed"
    assert events[1]["tool"]["output"] == "nope\n" and events[3]["tool"]["name"] == "apply_patch"


def test_gemini_joins_a_streamed_answer_and_marks_a_failed_tool():
    events = [r["event"] for r in agent("gemini-cli").convert([
        {"type": "message", "role": "assistant", "content": "Hel", "delta": True},
        {"type": "message", "role": "assistant", "content": "lo", "delta": True},
        {"type": "tool_use", "tool_name": "read_file", "tool_id": "t1", "parameters": {"path": "x"}},
        {"type": "tool_result", "tool_id": "t1", "status": "error", "error": {"message": "no such file"}}])]
    assert events[0] == {"kind": "message", "text": "Hello"}
    assert events[2]["tool"]["err"] == "no such file" and events[2]["tool"]["name"] == "read_file"


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("hostile", [
    [1, "x", None, [], {"type": "assistant", "message": "not a message"}],
    [{"type": "assistant", "message": {"content": [{"type": "tool_use", "id": [], "input": 10**30}]}},
     {"type": "item.completed", "item": {"type": "command_execution", "id": {}, "exit_code": True}},
     {"type": "tool_result", "tool_id": None, "status": 5, "output": {"a": 1}}],
])
def test_a_hostile_log_never_raises(name, hostile):
    out = agent(name).convert(hostile)
    assert isinstance(out, list) and all(set(r) == {"seq", "event"} for r in out)
    json.dumps(out)


@pytest.mark.parametrize("name", NEW)
def test_without_its_own_log_the_trajectory_comes_from_the_exchanges_and_the_audit_says_so(tmp_path, name):
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / INSTALLED[name].own_log).write_text("not json\n[1]\n")
    reason = agent(name).finish(tmp_path / "agent", tmp_path / "missing.jsonl")
    assert reason is not None and "was missing, empty or unreadable" in reason
    assert (tmp_path / "agent/trajectory.jsonl").read_text() == ""
    (tmp_path / "agent" / INSTALLED[name].own_log).write_text(
        "".join(json.dumps(r) + "\n" for r in sample(name)))
    assert agent(name).finish(tmp_path / "agent", tmp_path / "missing.jsonl") is None
    assert len((tmp_path / "agent/trajectory.jsonl").read_text().splitlines()) >= 3


def test_claude_code_pins_every_model_alias_to_the_proxy_and_turns_its_traffic_off():
    script = agent("claude-code", max_turns=7).script()
    for name in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL",
                 "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
        assert f"{name}=orchestra-model" in script
    for name in ("DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
                 "IS_SANDBOX=1", "--dangerously-skip-permissions", "--output-format stream-json --verbose",
                 "--max-turns 7", 'ANTHROPIC_API_KEY="$ORCHESTRA_MODEL_TOKEN"',
                 'ANTHROPIC_BASE_URL="${ORCHESTRA_MODEL_URL%/v1}"'):
        assert name in script


def test_codex_and_gemini_point_at_the_proxy_with_the_trial_token():
    codex = agent("codex").script()
    assert 'wire_api = "responses"' in codex and 'env_key = "ORCHESTRA_MODEL_TOKEN"' in codex
    assert 'base_url = "$ORCHESTRA_MODEL_URL"' in codex and "--dangerously-bypass-approvals-and-sandbox" in codex
    gemini = agent("gemini-cli", max_turns=4)
    script = gemini.script()
    assert 'GEMINI_API_KEY="$ORCHESTRA_MODEL_TOKEN"' in script and "--yolo" in script
    assert 'GOOGLE_GEMINI_BASE_URL="${ORCHESTRA_MODEL_URL%/v1}"' in script
    assert '[ "$code" = 53 ] && exit 5' in script  # its own turn limit is a step_limit
    settings = json.loads(gemini.files(None)[gemini.SETTINGS])  # type: ignore[arg-type]
    assert settings["telemetry"] == {"enabled": False} and settings["model"]["maxSessionTurns"] == 4


@pytest.mark.parametrize("name", ["gemini-cli", "qwen-code"])
def test_a_node_cli_mounts_node_beside_it_and_refuses_an_image_it_cannot_run_in(name):
    cls = INSTALLED[name]
    assert [r.name for r in cls.recipes()] == [name, "node"]
    script = agent(name).script()
    assert script.startswith("if ! /opt/orchestra-agents/node/pkg/package/bin/node --version")
    assert "glibc >= 2.28" in script and "exit 127" in script


def test_a_cli_that_cannot_start_in_the_image_exits_127_saying_what_it_needs(tmp_path):
    import subprocess

    from orchestrator.agents.cli import NODE_NEEDS, refuse_unless_runs

    fake = tmp_path / "node"  # a binary whose loader is not in the image: exec fails as it would
    fake.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    fake.chmod(0o755)
    done = subprocess.run(["sh", "-c", refuse_unless_runs(str(fake), "gemini-cli", NODE_NEEDS) + "echo ran\n"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 127 and "ran" not in done.stdout
    assert "gemini-cli cannot run in this task image: it needs glibc >= 2.28 and libstdc++6" in done.stderr
