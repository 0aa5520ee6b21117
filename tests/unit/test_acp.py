"""orchestra's ACP client against a tiny ACP agent (tests/fixtures/acp_agent.py) over a
pipe: the session's messages, permissions by policy, the fs capability served or
declined, session updates as the trajectory, the deadline's cancel, and an agent that
breaks the protocol. No Docker."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from orchestrator.agents import acp_client
from orchestrator.agents.acp import exit_code
from orchestrator.agents.acp_client import AcpClient
from orchestrator.agents.acp_trajectory import Recorder

FIXTURE = ROOT / "tests/fixtures/acp_agent.py"


class Pipe:
    """A local process as the client's channel (what Runtime.attach is in a trial)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([sys.executable, str(FIXTURE), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={**os.environ, **(env or {})})

    def send(self, data: bytes, timeout: float) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, timeout: float) -> bytes | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return os.read(self.proc.stdout.fileno(), 65536) if ready else None

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def end(self) -> int:
        self.close_stdin()
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class Folder:
    """The client's fs, on a folder standing for the container's /."""

    def __init__(self, root: Path):
        self.root = root

    def read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text()

    def write(self, path: str, content: str) -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


def session(tmp_path: Path, *args: str, seconds: float = 10, permission: str = "allow", fs: bool = True,
            env: dict[str, str] | None = None) -> tuple[AcpClient, acp_client.Outcome, int, list[bytes]]:
    pipe = Pipe("--path", str(tmp_path / "app/hello.txt") if not fs else "/app/hello.txt", *args, env=env)
    (tmp_path / "app").mkdir(exist_ok=True)
    wire: list[bytes] = []
    client = AcpClient(pipe, permission, Folder(tmp_path) if fs else None, wire)  # type: ignore[arg-type]
    outcome = client.run("Create /app/hello.txt", "/app", time.time() + seconds, grace=2)
    return client, outcome, pipe.end(), wire


def events(client: AcpClient) -> list[dict]:
    return [r["event"] for r in client.recorder.records()]


def test_a_session_solves_through_the_clients_fs_and_is_recorded_as_the_trajectory(tmp_path):
    client, outcome, code, wire = session(tmp_path, env={"BUZZ_ACP_NO_MEMORY": "true"})
    assert outcome.stop_reason == "end_turn" and outcome.error is None and not outcome.timed_out
    assert exit_code(outcome, code) == 0 and code == 0  # it ended at its stdin's end
    assert (tmp_path / "app/hello.txt").read_text() == "Hello, world!\n"  # fs/write_text_file
    assert outcome.agent == {"name": "fixture", "version": "1"}
    counts = outcome.counts
    assert (counts["permissions_allowed"], counts["fs_writes"], counts["fs_reads"], counts["malformed"]) == (1, 1, 1, 0)
    kinds = [(e["kind"], e.get("acp")) for e in events(client)]
    assert kinds == [("text", "thought"), ("message", None), ("text", "plan"), ("text", "permission"),
                     ("tool_dispatch", None), ("tool_result", None), ("message", None)]
    evs = events(client)
    assert evs[1]["text"] == "I will create the file."  # three chunks, one message
    assert evs[3]["text"] == "permission for write: allow_once"
    assert evs[4]["tool"] == {"id": "call-1", "name": "write",
                              "args": {"path": "/app/hello.txt", "content": "Hello, world!\n"}}
    assert evs[5]["tool"]["output"] == "wrote /app/hello.txt" and "err" not in evs[5]["tool"]
    # read back with line 1, limit 1; the policy flag as the seeds' harness passes it
    assert evs[6]["text"] == "read back: 'Hello, world!\\n'; flags: ORCHESTRA_NO_MEMORY=- BUZZ_ACP_NO_MEMORY=true"
    assert client.recorder.ignored == {"available_commands_update": 1}
    first = json.loads(wire[0][1:])
    assert wire[0][:1] == b">" and first["method"] == "initialize"
    assert first["params"]["clientCapabilities"] == {"fs": {"readTextFile": True, "writeTextFile": True},
                                                     "terminal": False}
    sent = [json.loads(line[1:]).get("method") for line in wire if line[:1] == b">"]
    assert sent[:3] == ["initialize", "session/new", "session/prompt"]


@pytest.mark.parametrize("permission, option, allowed", [
    ("allow", "yes", True), ("allow_always", "always", True), ("reject", "no", False)])
def test_permission_requests_are_answered_by_policy(tmp_path, permission, option, allowed):
    client, outcome, _, wire = session(tmp_path, permission=permission)
    answers = [json.loads(line[1:]) for line in wire if line[:1] == b">" and b'"outcome"' in line]
    assert answers[0]["result"] == {"outcome": {"outcome": "selected", "optionId": option}}
    assert (tmp_path / "app/hello.txt").exists() is allowed
    result = [e for e in events(client) if e["kind"] == "tool_result"][0]
    assert ("err" in result["tool"]) is not allowed
    assert outcome.counts["permissions_rejected"] == (0 if allowed else 1)


def test_without_fs_the_capability_is_declined_and_the_agent_writes_itself(tmp_path):
    client, outcome, _, wire = session(tmp_path, fs=False)
    first = json.loads(wire[0][1:])
    assert first["params"]["clientCapabilities"]["fs"] == {"readTextFile": False, "writeTextFile": False}
    assert (tmp_path / "app/hello.txt").read_text() == "Hello, world!\n"
    assert outcome.counts["fs_writes"] == 0 and events(client)[-1]["text"].startswith("read back: '(no fs)'")


def test_at_the_deadline_the_client_cancels_and_the_agent_ends_its_turn(tmp_path):
    started = time.monotonic()
    client, outcome, code, wire = session(tmp_path, "--mode", "hang", seconds=1.0)
    assert outcome.timed_out and outcome.stop_reason == "cancelled"
    assert exit_code(outcome, code) is None  # run_agent classifies it as the agent's timeout
    sent = [json.loads(line[1:]) for line in wire if line[:1] == b">"]
    assert sent[-1] == {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "sess-1"}}
    assert time.monotonic() - started < 3  # the cancel answered at once, not the grace's end
    assert events(client)[-1] == {"kind": "message", "text": "thinking forever"}


def test_an_agent_deaf_to_cancel_is_waited_for_only_the_grace(tmp_path):
    pipe = Pipe("--mode", "deaf")
    client = AcpClient(pipe)  # type: ignore[arg-type]
    started = time.monotonic()
    outcome = client.run("x", "/app", time.time() + 0.5, grace=0.5)
    assert outcome.timed_out and outcome.stop_reason is None
    assert 0.9 <= time.monotonic() - started < 2.5
    pipe.proc.kill()
    pipe.proc.wait()


def test_an_agent_that_dies_mid_session_is_a_crash_with_its_exit_code(tmp_path):
    client, outcome, code, _ = session(tmp_path, "--mode", "crash")
    assert outcome.ended and outcome.error == "session/new: the agent's stream ended"
    assert code == 3 and exit_code(outcome, code) == 3 and not outcome.timed_out


def test_lines_that_are_not_json_rpc_are_skipped_and_bad_params_get_the_protocol_error(tmp_path):
    client, outcome, _, _ = session(tmp_path, "--mode", "garbage")
    assert outcome.stop_reason == "end_turn" and outcome.counts["malformed"] == 3
    assert events(client)[0] == {"kind": "message", "text": "bad params got -32602"}
    assert (tmp_path / "app/hello.txt").read_text() == "Hello, world!\n"


def test_a_line_past_the_cap_ends_the_session_as_a_protocol_error(tmp_path, monkeypatch):
    monkeypatch.setattr(acp_client, "MAX_LINE", 1000)

    class Flood(Pipe):
        def recv(self, timeout: float) -> bytes | None:
            return b"x" * 4096

    pipe = Flood()
    outcome = AcpClient(pipe).run("x", "/app", time.time() + 5, grace=1)  # type: ignore[arg-type]
    assert outcome.error == "the agent sent a line over 1000 bytes"
    assert exit_code(outcome, None) == 1
    pipe.end()


def test_updates_are_agent_data_nothing_malformed_raises():
    recorder = Recorder()
    for update in (None, [], {"sessionUpdate": 5}, {"sessionUpdate": "tool_call"},
                   {"sessionUpdate": "tool_call_update", "toolCallId": {"x": 1}},
                   {"sessionUpdate": "plan", "entries": "no"}, {"sessionUpdate": "agent_message_chunk"},
                   {"sessionUpdate": "tool_call", "toolCallId": "a", "title": 7, "content": "x"},
                   {"sessionUpdate": "tool_call_update", "toolCallId": "a", "status": "completed",
                    "content": [None, {"type": "diff", "path": "/f", "newText": "new"}], "rawOutput": [1]},
                   {"sessionUpdate": "tool_call", "toolCallId": "b", "rawInput": {"command": "ls"}}):
        recorder.update(update)
    recorder.flush()
    got = [r["event"] for r in recorder.records()]
    assert [e["kind"] for e in got] == ["text", "tool_dispatch", "tool_result", "tool_dispatch"]
    assert got[2]["tool"]["output"] == "diff /f:\nnew"
    assert got[3]["tool"] == {"id": "b", "name": "", "args": {"command": "ls"}}  # open at the end
    assert recorder.ignored["malformed"] == 5


@pytest.mark.parametrize("member, said", [
    ("agent: acp", "field 'roster.lead.command': required for agent: acp"),
    ("agent: acp\n    command: x\n  - id: w\n    agent: acp-opencode",
     "field 'roster.w.agent': acp-opencode runs as the orchestrator only"),
    ("agent: acp\n    command: x\n    acp: {permission: maybe}", "roster.0.acp.permission")])
def test_a_manifest_that_cannot_run_an_acp_agent_is_refused_naming_the_field(tmp_path, member, said):
    from orchestrator.errors import InputError
    from orchestrator.models.manifest import load_manifest

    path = tmp_path / "m.yaml"
    path.write_text(f"roster:\n  - id: lead\n    kind: orchestrator\n    {member}\n")
    with pytest.raises(InputError) as caught:
        load_manifest(path)
    assert said in " ".join(str(caught.value).split())


def test_acp_opencode_needs_an_endpoint_and_acp_takes_the_members_options():
    from orchestrator.agents import agent_for
    from orchestrator.errors import InputError
    from orchestrator.models.manifest import RosterMember

    with pytest.raises(InputError, match="calls a model"):
        agent_for(RosterMember(id="lead", kind="orchestrator", agent="acp-opencode"))
    agent = agent_for(RosterMember(id="lead", kind="orchestrator", agent="acp", command="goose acp",
                                   acp={"permission": "reject", "fs": False}))
    assert agent.name == "acp" and agent.command(None) == "goose acp"  # type: ignore[arg-type]
    assert agent.member.acp.permission == "reject" and agent.binds() == {}  # type: ignore[attr-defined]
