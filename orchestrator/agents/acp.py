"""acp: any agent that speaks the Agent Client Protocol over stdio (DESIGN 3.8).

The host is the ACP client (acp_client.py, our own code): `converse` starts the agent's
command in the trial's agent container with its stdin and stdout attached to this process
(`Runtime.attach`: the exec's hijacked socket, the same one every exec with stdin uses;
no relay in the container and no extra port, so it needs nothing of the image, not even
python3), stderr to /logs/agent/stderr.txt, under `timeout -k` at the deadline plus the
cancel grace. It sends the task's instruction as the one prompt; at the deadline it sends
`session/cancel`, gives the agent GRACE_SEC to end its turn, then closes its stdin,
SIGTERMs it (its pid is written to PIDFILE by the wrapper) and SIGKILLs it KILL_AFTER_SEC
later; run_agent kills the container after that as for any agent. The agent reaches
models only through the trial's proxy (ORCHESTRA_MODEL_URL / ORCHESTRA_MODEL_TOKEN, the
per-trial token, in its process's environment only), and policy flags reach it in its environment as for every agent (the
roster member's `flags`, e.g. `no_memory: {BUZZ_ACP_NO_MEMORY: "true"}` as the seeds'
harness passes memory-off to its ACP stack; ORCHESTRA_NO_MEMORY=1 by default).

Left in /logs/agent: trajectory.jsonl (its session updates, acp_trajectory.py),
acp.jsonl (the messages both ways, `>` ours and `<` the agent's, up to WIRE_LOG_MAX) and
acp.json (the agent's name, how the turn ended, counts). Exit code: 0 for stopReason
end_turn, EXIT_STEP_LIMIT for max_tokens / max_turn_requests, else the process's own
non-zero code or 1.

`acp` runs the roster member's `command` (an agent in the image); `acp-opencode` runs
opencode's ACP server (`opencode acp`, npm opencode-linux-x64, the same install as the
`opencode` agent) and `acp-qwen-code` Qwen Code's (`--acp`, npm @qwen-code/qwen-code on
the mounted Node, the `qwen-code` install), both wired to the proxy's Chat Completions with
their edits and shell commands set to ask, so the member's `acp.permission` decides them.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from orchestrator.agents.acp_client import AcpClient, Outcome
from orchestrator.agents.base import EXIT_STEP_LIMIT, KILL_AFTER_SEC, AgentRun, under_timeout
from orchestrator.archive import tar_files
from orchestrator.errors import InputError
from orchestrator.log import get_logger
from orchestrator.models import RosterMember
from orchestrator.paths import AGENT_LOGS
from orchestrator.runtime import Attached, ExecResult, Runtime
from orchestrator.tasks import Task

log = get_logger()
PIDFILE = "/tmp/.orchestra-acp.pid"
GRACE_SEC = float(KILL_AFTER_SEC)  # after session/cancel, for the agent to end its turn
WIRE_LOG_MAX = 8 * 1024 * 1024
MAX_READ = 4 * 1024 * 1024  # fs/read_text_file
STEP_LIMIT_REASONS = ("max_tokens", "max_turn_requests")


class AcpAgent:
    """`acp`: the roster member's command, an ACP agent present in the task image."""

    name = "acp"

    def __init__(self, member: RosterMember, ca_bundle: Path | None = None):
        self.member, self.ca_bundle = member, ca_bundle

    def files(self, task: Task) -> dict[str, bytes]:
        return {}

    def env(self, task: Task) -> dict[str, str]:
        return {}

    def command(self, task: Task) -> str | None:
        return self.member.command

    def binds(self) -> dict[str, str]:
        return {}

    def finish(self, agent_dir: Path, exchanges: Path) -> str | None:
        """The trajectory was written during the run; without it (the session never
        started), the proxy's exchanges stand in, and the audit says so."""
        if (agent_dir / "trajectory.jsonl").is_file():
            return None
        from orchestrator.services import read_exchanges, trajectory_from_exchanges

        recorded = read_exchanges(exchanges) if exchanges.is_file() else []
        events = trajectory_from_exchanges(recorded)
        agent_dir.mkdir(parents=True, exist_ok=True)
        (agent_dir / "trajectory.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        return (f"{self.name} left no ACP session record; built from the model exchanges the "
                f"proxy recorded ({len(recorded)} calls)")

    # ---- the run ---------------------------------------------------------------------------
    def converse(self, run: AgentRun) -> ExecResult:
        line = (f"echo $$ >{PIDFILE}; "
                f"{under_timeout(f'sh -c {shlex.quote(run.command)}', run.timeout + GRACE_SEC)} "
                f"2>{AGENT_LOGS}/stderr.txt")
        attached = run.runtime.attach(run.container, ["sh", "-c", line], env=run.env,
                                      workdir=run.workdir, user=run.user)
        wire: list[bytes] = []
        files = ContainerFiles(run.runtime, run.container, run.user) if self.member.acp.fs else None
        client = AcpClient(attached, self.member.acp.permission, files, wire, WIRE_LOG_MAX)
        started = time.time()
        try:
            outcome = client.run(run.task.instruction, run.workdir, run.deadline, GRACE_SEC, run.stop)
        finally:
            code = _end_process(run, attached)
        log.info("acp.session", agent=self.name, stop_reason=outcome.stop_reason,
                 timed_out=outcome.timed_out, error=outcome.error, exit_code=code,
                 seconds=round(time.time() - started, 2), **outcome.counts)
        record(run, client, outcome, code, wire)
        if outcome.stopped:
            return ExecResult(None, False)
        return ExecResult(exit_code(outcome, code), outcome.timed_out)


def exit_code(outcome: Outcome, process_code: int | None) -> int | None:
    if outcome.timed_out:
        return None
    if outcome.stop_reason == "end_turn":
        return 0
    if outcome.stop_reason in STEP_LIMIT_REASONS:
        return EXIT_STEP_LIMIT
    return process_code if process_code not in (0, None) else 1


def _end_process(run: AgentRun, attached: Attached) -> int | None:
    """Close its stdin (an ACP agent ends at EOF), then SIGTERM, then SIGKILL; how it ended."""
    attached.close_stdin()
    try:
        code = _wait_end(attached, 2.0)
        for signal, wait in (("TERM", float(KILL_AFTER_SEC)), ("KILL", 2.0)):
            if code is not None:
                break
            try:
                run.runtime.exec(run.container, ["sh", "-c", f'p=$(cat {PIDFILE}) && kill -{signal} '
                                 f'-- "-$p" "$p" 2>/dev/null'], user=run.user, deadline=time.time() + 10)
            except Exception as exc:  # the container is gone: so is the agent
                log.info("acp.kill_failed", signal=signal, error=str(exc)[:300])
                break
            code = _wait_end(attached, wait)
        return code
    finally:
        attached.close()


def _wait_end(attached: Attached, seconds: float) -> int | None:
    """Read (and drop) what it still says until its stream ends; its exit code."""
    until = time.time() + seconds
    while time.time() < until:
        if attached.recv(min(0.2, max(0.01, until - time.time()))) == b"":
            for _ in range(25):  # the exec's state follows its stream
                code = attached.exit_code()
                if code is not None:
                    return code
                time.sleep(0.02)
            return None
    return attached.exit_code()


def record(run: AgentRun, client: AcpClient, outcome: Outcome, code: int | None,
           wire: list[bytes]) -> None:
    """trajectory.jsonl, acp.jsonl and acp.json into the container's /logs/agent (collected
    with the rest of it)."""
    recorder = client.recorder
    summary = {"agent": outcome.agent, "session_id": client.session_id,
               "stop_reason": outcome.stop_reason, "timed_out": outcome.timed_out,
               "stopped": outcome.stopped, "stream_ended": outcome.ended, "error": outcome.error,
               "process_exit_code": code, "permission_policy": client.permission,
               "fs": client.files is not None, "counts": outcome.counts,
               "updates_not_recorded": recorder.ignored, "events_dropped": recorder.dropped}
    files = {
        "logs/agent/trajectory.jsonl": "".join(json.dumps(r) + "\n" for r in recorder.records()).encode(),
        "logs/agent/acp.jsonl": b"".join(line + b"\n" for line in wire),
        "logs/agent/acp.json": json.dumps(summary, indent=2).encode()}
    try:
        run.runtime.put_archive(run.container, "/", tar_files(files))
    except Exception as exc:  # a container the engine lost: the trial says so elsewhere
        log.warning("acp.record_failed", error=str(exc)[:300])


class ContainerFiles:
    """fs/read_text_file and fs/write_text_file, served in the agent's container as the
    agent's user (so the client reads and writes no more than the agent itself could)."""

    def __init__(self, runtime: Runtime, container: str, user: str | None):
        self.runtime, self.container, self.user = runtime, container, user

    def read(self, path: str) -> str:
        done = self.runtime.exec(self.container, ["cat", "--", path], user=self.user,
                                 capture=MAX_READ + 1, deadline=time.time() + 30)
        if done.exit_code != 0:
            raise OSError(done.output.decode(errors="replace").strip()[-300:] or f"{path}: not readable")
        if len(done.output) > MAX_READ:
            raise OSError(f"{path}: over {MAX_READ} bytes")
        return done.output.decode("utf-8", errors="replace")

    def write(self, path: str, content: str) -> None:
        done = self.runtime.exec(
            self.container, ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat >"$1"', "sh", path],
            user=self.user, stdin=content.encode(), capture=4096, deadline=time.time() + 30)
        if done.exit_code != 0:
            raise OSError(done.output.decode(errors="replace").strip()[-300:] or f"{path}: not written")


class OpenCodeAcp(AcpAgent):
    """`acp-opencode`: `opencode acp` against the proxy's Chat Completions."""

    name = "acp-opencode"
    CONFIG = "/opt/orchestra-agent-run/opencode-acp.json"
    MODEL = "orchestra-model"  # what it asks for; the proxy sends the endpoint's model

    def __init__(self, member: RosterMember, ca_bundle: Path | None = None):
        super().__init__(member, ca_bundle)
        from orchestrator.agents.installed import MOUNT, OpenCode

        self.recipe, self.home = OpenCode.recipe, f"{MOUNT}/{OpenCode.recipe.name}"

    def binds(self) -> dict[str, str]:
        from orchestrator.agents.install import ensure_installed, warm_binary

        binds = {str(ensure_installed(self.recipe, self.ca_bundle)): self.home}
        warm_binary(self.recipe)  # charged to the host, not the task (install.warm_binary)
        return binds

    def files(self, task: Task) -> dict[str, bytes]:
        from orchestrator.agents.installed import opencode_config

        # edits and commands asked, so the ACP client's permission policy decides
        return {self.CONFIG: opencode_config("ORCHESTRA_MODEL_URL", "ORCHESTRA_MODEL_TOKEN", ask=True)}

    def env(self, task: Task) -> dict[str, str]:
        return {"OPENCODE_CONFIG": self.CONFIG, "HOME": "/tmp/opencode-home",
                "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_SHARE": "1"}

    def command(self, task: Task) -> str | None:
        return (f'mkdir -p "$HOME" && exec {self.home}/pkg/package/{self.recipe.binary} acp '
                "--print-logs --log-level INFO")


class QwenCodeAcp(AcpAgent):
    """`acp-qwen-code`: Qwen Code's ACP mode (`--acp`, npm @qwen-code/qwen-code, the
    `qwen-code` install, on the Node orchestra mounts beside it) against the proxy's Chat
    Completions, in its `default` approval mode: edits and shell commands are asked, and
    the member's `acp.permission` decides them. Its ACP mode needs more than 512 MB: in a
    512 MB container its heap (Node sizes it from the cgroup: 256 MB) runs out before its
    first tool call, and a larger heap is the container's OOM."""

    name = "acp-qwen-code"
    SETTINGS = "/opt/orchestra-agent-run/qwen-acp-settings.json"

    def __init__(self, member: RosterMember, ca_bundle: Path | None = None):
        super().__init__(member, ca_bundle)
        from orchestrator.agents.cli import MOUNT, NODE
        from orchestrator.agents.gemini import QwenCode

        self.recipe, self.node = QwenCode.recipe, NODE
        self.home, self.node_home = f"{MOUNT}/{self.recipe.name}", f"{MOUNT}/{NODE.name}"
        self.needs = QwenCode.needs

    def binds(self) -> dict[str, str]:
        from orchestrator.agents.install import ensure_installed

        return {str(ensure_installed(self.node, self.ca_bundle)): self.node_home,
                str(ensure_installed(self.recipe, self.ca_bundle)): self.home}

    def files(self, task: Task) -> dict[str, bytes]:
        settings = {"general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                    "telemetry": {"enabled": False}, "privacy": {"usageStatisticsEnabled": False}}
        return {self.SETTINGS: json.dumps(settings, indent=2).encode()}

    def env(self, task: Task) -> dict[str, str]:
        return {"OPENAI_MODEL": OpenCodeAcp.MODEL, "QWEN_CODE_SYSTEM_SETTINGS_PATH": self.SETTINGS,
                "QWEN_HOME": "/tmp/orchestra-qwen"}

    def command(self, task: Task) -> str | None:
        from orchestrator.agents.cli import refuse_unless_runs

        node = f"{self.node_home}/pkg/package/{self.node.binary}"
        return (refuse_unless_runs(node, self.name, self.needs)
                + 'export OPENAI_BASE_URL="$ORCHESTRA_MODEL_URL" OPENAI_API_KEY="$ORCHESTRA_MODEL_TOKEN"\n'
                + f'mkdir -p "$QWEN_HOME" && exec {node} {self.home}/pkg/package/{self.recipe.binary} '
                + f"--acp --auth-type openai -m {OpenCodeAcp.MODEL} --approval-mode default")


PRESETS: dict[str, type[AcpAgent]] = {cls.name: cls for cls in (AcpAgent, OpenCodeAcp, QwenCodeAcp)}


def acp_agent(member: RosterMember, ca_bundle: Path | None = None) -> AcpAgent:
    """The ACP agent for a roster member (`acp`, or a preset `acp-NAME`)."""
    if member.agent not in PRESETS:
        raise InputError(f"agent {member.agent!r}: no such ACP agent (use {', '.join(PRESETS)})")
    if member.agent == "acp" and not member.command:
        raise InputError(f"roster.{member.id}.command: required for agent: acp (the command "
                         "that starts the ACP agent in the task image)")
    if member.agent != "acp" and not member.endpoint:
        raise InputError(f"roster.{member.id}.endpoint: agent {member.agent} calls a model; name "
                         "an endpoint (`endpoint:` in the manifest, or -m ENDPOINT)")
    return PRESETS[member.agent](member, ca_bundle)
