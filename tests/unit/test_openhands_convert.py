"""OpenHands' saved trajectory (its event list, openhands.events.serialization's shape)
converted to DESIGN 3.6 events: tool calls with the model's arguments, their observations
with exit codes and errors, thoughts and messages, finish as the closing message; agent
data of the wrong shape skipped, never trusted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.agents.installed import INSTALLED
from orchestrator.agents.openhands import OpenHands, openhands_events
from orchestrator.models.manifest import RosterMember


def _meta(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"function_name": name, "tool_call_id": call_id, "total_calls_in_response": 1,
            "model_response": {"choices": [{"message": {"role": "assistant", "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}]}}]}}


RUN = {"command": "printf 'hi\\n' > /app/hello.txt", "security_risk": "LOW"}
LOG: list[Any] = [
    {"id": 0, "source": "agent", "action": "system", "args": {"content": "You are OpenHands agent"}},
    {"id": 1, "source": "user", "action": "message", "args": {"content": "write the file"}},
    {"id": 2, "source": "user", "action": "recall", "args": {"query": "write the file"}},
    {"id": 3, "source": "environment", "observation": "recall", "cause": 2, "content": "Added workspace context"},
    {"id": 4, "source": "agent", "action": "run", "message": "Running command",
     "args": {"command": RUN["command"], "thought": "I will write it.", "security_risk": 0},
     "tool_call_metadata": _meta("call_a", "execute_bash", RUN)},
    {"id": 5, "source": "agent", "observation": "run", "cause": 4, "content": "",
     "extras": {"command": RUN["command"], "metadata": {"exit_code": 0}},
     "tool_call_metadata": _meta("call_a", "execute_bash", RUN)},
    {"id": 6, "source": "agent", "action": "run", "args": {"command": "false"},
     "tool_call_metadata": _meta("call_b", "execute_bash", {"command": "false"})},
    {"id": 7, "source": "agent", "observation": "run", "cause": 6, "content": "",
     "extras": {"metadata": {"exit_code": 1}}, "tool_call_metadata": _meta("call_b", "execute_bash", {})},
    {"id": 8, "source": "agent", "action": "edit", "args": {"path": "/app/x", "command": "create"},
     "tool_call_metadata": {"function_name": "str_replace_editor", "tool_call_id": "call_c"}},
    {"id": 9, "source": "agent", "observation": "error", "cause": 8, "content": "ERROR: no such dir",
     "tool_call_metadata": {"function_name": "str_replace_editor", "tool_call_id": "call_c"}},
    {"id": 10, "source": "environment", "observation": "agent_state_changed", "content": "",
     "extras": {"agent_state": "running"}},
    {"id": 11, "source": "agent", "action": "message", "args": {"content": "Working on it."}},
    {"id": 12, "source": "agent", "action": "finish", "message": "All done!",
     "args": {"final_thought": "The file is written.", "outputs": {}}},
]


def test_openhands_events_become_calls_results_and_messages_in_order() -> None:
    events = [r["event"] for r in openhands_events(LOG)]
    assert [e["kind"] for e in events] == ["message", "tool_dispatch", "tool_result", "tool_dispatch",
                                           "tool_result", "tool_dispatch", "tool_result", "message",
                                           "message"]
    assert events[0] == {"kind": "message", "text": "I will write it."}
    # the arguments are the model's own (from the kept model response), not OpenHands' args
    assert events[1]["tool"] == {"id": "call_a", "name": "execute_bash", "args": RUN}
    assert events[2]["tool"] == {"id": "call_a", "name": "execute_bash", "args": RUN, "output": "",
                                 "exit_code": 0}
    assert events[4]["tool"]["exit_code"] == 1 and events[4]["tool"]["err"] == "run"
    # no model response kept: the action's args; an error observation is the call's error
    assert events[5]["tool"] == {"id": "call_c", "name": "str_replace_editor",
                                 "args": {"path": "/app/x", "command": "create"}}
    assert events[6]["tool"]["err"] == "ERROR: no such dir" and events[6]["text"] == "ERROR: no such dir"
    assert events[-2:] == [{"kind": "message", "text": "Working on it."},
                           {"kind": "message", "text": "The file is written."}]
    assert [r["seq"] for r in openhands_events(LOG)] == list(range(9))


def test_an_observation_of_no_known_call_is_text_and_bad_shapes_are_skipped() -> None:
    log = [{"id": 1, "source": "agent", "observation": "error", "content": "LLM error: 429"},
           "not an event", {"source": "agent", "action": 7}, {"source": "agent", "action": "run",
                                                              "args": "junk", "tool_call_metadata": []},
           {"source": "agent", "observation": "run", "cause": 99, "content": "orphan"}]
    events = [r["event"] for r in openhands_events(log)]
    assert events[0] == {"kind": "text", "text": "LLM error: 429"}
    # an action with no tool-call metadata is a call by its own id, its args as they are (none)
    assert events[1] == {"kind": "tool_dispatch", "tool": {"id": "openhands-None", "name": "run", "args": {}}}
    assert events[2] == {"kind": "text", "text": "orphan"}
    assert openhands_events({"not": "a list"}) == [] and openhands_events(None) == []


def test_finish_writes_the_converted_trajectory_and_falls_back_to_the_exchanges(tmp_path: Path) -> None:
    agent = OpenHands(RosterMember(id="lead", kind="orchestrator", agent="openhands", endpoint="e"))
    (tmp_path / "openhands.trajectory.json").write_text(json.dumps(LOG))
    assert agent.finish(tmp_path, tmp_path / "exchanges.jsonl") is None
    lines = (tmp_path / "trajectory.jsonl").read_text().splitlines()
    assert len(lines) == 9 and json.loads(lines[1])["event"]["tool"]["name"] == "execute_bash"
    (tmp_path / "openhands.trajectory.json").write_text("{truncated")
    said = agent.finish(tmp_path, tmp_path / "exchanges.jsonl")
    assert said is not None and "openhands.trajectory.json" in said and "0 calls" in said


def test_openhands_is_registered_and_its_script_wires_the_proxy_on_its_own_python() -> None:
    assert INSTALLED["openhands"] is OpenHands
    assert [r.name for r in OpenHands.recipes()] == ["openhands", "openhands-runtime"]
    member = RosterMember(id="lead", kind="orchestrator", agent="openhands", endpoint="e",
                          generation={"max_turns": 7, "temperature": 0.2})
    script = OpenHands(member).script()
    # trixie's Python, mounted, whatever the image has; refused with its error where it cannot start
    assert "py=/opt/orchestra-agents/openhands-runtime/root/usr/bin/orchestra-python3.13" in script
    assert 'if ! "$py" -c pass' in script and "exit 127" in script and "python3 -c" not in script
    assert 'export PATH="/opt/orchestra-agents/openhands-runtime/root/usr/bin:$PATH" ' \
        "ORCHESTRA_PYTHON_PATH=/opt/orchestra-agents/openhands/lib" in script
    # its packages never on PYTHONPATH (its shell's python3 would import them): the image's kept aside
    assert "unset PYTHONPATH" in script and "PYTHONPATH=/opt" not in script
    assert 'LLM_API_KEY="$ORCHESTRA_MODEL_TOKEN"' in script and 'LLM_BASE_URL="$ORCHESTRA_MODEL_URL"' in script
    assert "LLM_MODEL=openai/orchestra-model" in script and "RUNTIME=local" in script
    assert "MAX_ITERATIONS=7" in script and "LLM_TEMPERATURE=0.2" in script
    # native tool calls unless the member's env says otherwise (servers without tool_calls)
    assert 'LLM_NATIVE_TOOL_CALLING="${LLM_NATIVE_TOOL_CALLING:-true}"' in script
    # OpenHands exits 0 however it stopped: its limit and stuck detector are read from its log
    assert 'grep -qE "Agent reached maximum iteration|AgentStuckInLoopError"' in script
    assert "&& exit 5" in script
    assert 'runpy.run_module("openhands.core.main", run_name="__main__"' in script
    assert """"$py" -c 'import os, runpy""" in script and '-f "$1"' in script
    assert 'if os.environ.get("ORCHESTRA_STREAM") == "1"' in script  # streamed calls, when asked
    assert "'" not in script.split(""""$py" -c '""")[1].split("' -f")[0]  # its code sits in single quotes
